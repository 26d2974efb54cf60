"""A whole `agentfs run`, per message, on linear traces of 100, 1,000 and 10,000 messages.

What a user pays for one message of a run, not one internal call: every run
here opens the workspace, brings the trace up to date (`recover`), then makes
model calls on the offline replay model, runs the tools they ask for
(`read_file` of a small file) and commits each step, until `--max-iterations`.
Each iteration adds an assistant message and its tool result, and every fifth
one also a `get_current_context` result: about 2.2 messages.

The traces are linear (no compression: the bench's `context_window` is far
above what 10,000 messages hold), built by `bench/fixtures.py:long_trace` and
opened once by an untimed one-iteration run, so the parse cache exists and any
upgrade a newer agentfs makes of an older workspace is done. Each timed run
works on a fresh copy of that workspace, after one more untimed iteration
there (a copy's files are new to the parse cache and the index's stat data):
what a run finds after an earlier run. Two series, round-robin over the
sizes so they see the same disk:

- *in process*: `Project.open(...)` then `project.runner(model).run(...)`,
  timed around both (the replay script is loaded before, untimed). Besides
  the per-message figure, *steady* is the part after the first model turn was
  committed, per message: what each further iteration costs, without the
  run's fixed start.
- *command*: the real CLI, `python -m agentfs run long -q --max-iterations N`
  in a new process, timed around the process: start, imports, loading the
  replay script (one scripted turn per model turn of the trace, so its size
  grows with the trace: a few ms at 100, about 70 ms at 10,000), the run.

Also the objects one message of a run adds to `.git/objects`, and, at the end,
`.git/objects` against what `git gc` makes of it.

`python -m bench.wholerun --profile SIZE` profiles one in-process run of a
SIZE-message trace (cProfile, the 25 costliest functions by own time).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.fixtures import (
    TRACE,
    clone_workspace,
    git,
    long_trace,
    objects_after_gc,
    tree_bytes,
)
from bench.report import Results, median

SIZES = (100, 1_000, 10_000)
SCRIPT = "script.json"
NOTES = "notes.md"


def run(results: Results, quick: bool, scratch: Path) -> None:
    iterations, reps = (10, 2) if quick else (30, 3)
    templates = {size: prepare(scratch / f"template-{size}", size) for size in SIZES}
    inproc: dict[int, list[dict[str, float]]] = {size: [] for size in SIZES}
    command: dict[int, list[dict[str, float]]] = {size: [] for size in SIZES}
    last: dict[int, Path] = {}
    for rep in range(reps):
        for size in SIZES:
            root = _copy(templates[size], scratch / f"in-{size}-{rep}")
            inproc[size].append(run_in_process(root, iterations))
            _discard(last.get(size))
            last[size] = root
            root = _copy(templates[size], scratch / f"cli-{size}-{rep}")
            command[size].append(run_command(root, iterations))
            _discard(root)
    group = "wholerun"
    per_message = {size: median([r["per_message_ms"] for r in inproc[size]]) for size in SIZES}
    for size in SIZES:
        label = f"{size:,} msgs"
        runs, cli = inproc[size], command[size]
        results.add(group, f"whole run per message, in process ({label})", per_message[size],
                    "ms", f"median of {reps} runs of {iterations} iterations, "
                    f"{median([r['messages'] for r in runs]):.0f} messages each")
        results.add(group, f"  steady: per message after the first turn ({label})",
                    median([r["steady_ms"] for r in runs]), "ms")
        results.add(group, f"  start: open, recover, first turn committed ({label})",
                    median([r["first_turn_ms"] for r in runs]), "ms")
        results.add(group, f"whole `agentfs run` command per message ({label})",
                    median([r["per_message_ms"] for r in cli]), "ms", "new process, real CLI")
        results.add(group, f"  the command, whole ({label})",
                    median([r["wall_ms"] for r in cli]), "ms")
        results.add(group, f".git/objects bytes per message of a run ({label})",
                    median([r["object_bytes_per_message"] for r in runs]), "bytes")
    results.add(group, "whole run per message, 10,000 / 100 msgs",
                per_message[10_000] / per_message[100], "x", "budget <= 1.5")
    results.add(group, "whole run per message, 1,000 / 100 msgs",
                per_message[1_000] / per_message[100], "x")
    for size in SIZES:
        root = last[size]
        results.add(group, f".git/objects / after git gc, end of the runs ({size:,} msgs)",
                    tree_bytes(root / ".git" / "objects") / objects_after_gc(root, scratch),
                    "x", "budget <= 3")
        _discard(root)
    for template in templates.values():
        _discard(template)


def prepare(root: Path, size: int) -> Path:
    """A committed workspace with a linear `size`-message trace, a replay script long
    enough for any run here, and a file for the tool calls; opened once."""
    long_trace(root, size)
    config = root / "agentfs.toml"
    text = config.read_text()
    lines = [line for line in text.splitlines() if not line.startswith(("model =", "max_iter"))]
    lines += [f'model = "replay:{SCRIPT}"', "max_iterations = 1000",
              "context_window = 1000000000  # linear traces: never compressed"]
    config.write_text("\n".join(lines) + "\n")
    turn = {"text": "Reading the notes.",
            "tool_calls": [{"name": "read_file", "input": {"path": NOTES}}]}
    (root / SCRIPT).write_text(json.dumps({"turns": [turn] * (size + 2_000)}))
    (root / NOTES).write_text("Three follow-ups: runners, the release checklist, dashboards.\n")
    git(root, "add", "agentfs.toml", SCRIPT, NOTES)
    git(root, "commit", "-q", "-m", "bench: replay model")
    run_in_process(root, 1)  # parse cache, upgrades: untimed
    return root


def run_in_process(root: Path, iterations: int) -> dict[str, float]:
    """One timed `Project.open` + `Runner.run` of `iterations` model calls."""
    from agentfs.core.project import Project
    from agentfs.models.replay import ReplayModel

    model = ReplayModel(root / SCRIPT)
    before, objects = _next_sequence(root), tree_bytes(root / ".git" / "objects")
    turns: list[float] = []

    def on_event(kind: str, data: dict) -> None:
        if kind == "assistant":
            turns.append(time.perf_counter())
        elif kind in ("compressed", "over_budget"):
            raise RuntimeError(f"the bench trace was to stay linear: {kind} {data}")

    began = time.perf_counter()
    project = Project.open(root)
    result = project.runner(model, on_event=on_event).run(TRACE, max_iterations=iterations)
    ended = time.perf_counter()
    if result.iterations != iterations:
        raise RuntimeError(f"{root}: {result.iterations} of {iterations} iterations ran")
    added = _next_sequence(root) - before
    first_turn_messages = 1
    return {
        "messages": added,
        "per_message_ms": (ended - began) * 1000 / added,
        "first_turn_ms": (turns[0] - began) * 1000,
        "steady_ms": (ended - turns[0]) * 1000 / max(1, added - first_turn_messages),
        "object_bytes_per_message":
            (tree_bytes(root / ".git" / "objects") - objects) / added,
    }


def run_command(root: Path, iterations: int) -> dict[str, float]:
    """One timed `python -m agentfs run` in a new process."""
    before = _next_sequence(root)
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "agentfs", "run", TRACE, "-q", "--max-iterations",
         str(iterations)], cwd=root, capture_output=True, text=True, check=False,
    )
    wall = time.perf_counter() - began
    if done.returncode != 0:
        raise RuntimeError(f"agentfs run failed in {root}:\n{done.stderr[-2000:]}")
    added = _next_sequence(root) - before
    return {"messages": added, "wall_ms": wall * 1000, "per_message_ms": wall * 1000 / added}


def _copy(template: Path, target: Path) -> Path:
    """A copy of `template` as the previous run left it: the copy's files are new to
    the caches (parse cache, index stat data), so one untimed iteration runs first."""
    clone_workspace(template, target)
    run_in_process(target, 1)
    return target


def _next_sequence(root: Path) -> int:
    return int(json.loads((root / "traces" / TRACE / "trace.json").read_text())["next_sequence"])


def _discard(root: Path | None) -> None:
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)


def profile(size: int, scratch: Path) -> None:
    """Print where one in-process run of a `size`-message trace spends its time."""
    import cProfile
    import pstats

    root = _copy(prepare(scratch / f"template-{size}", size), scratch / "profiled")
    profiler = cProfile.Profile()
    profiler.enable()
    figures = run_in_process(root, 20)
    profiler.disable()
    print(json.dumps(figures, indent=2))
    pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(prog="python -m bench.wholerun")
    parser.add_argument("--profile", type=int, metavar="SIZE", required=True,
                        help="profile one run of a SIZE-message trace")
    parser.add_argument("--scratch", type=Path, default=Path(__file__).parent / ".scratch",
                        help="where to build the workspace (default: bench/.scratch)")
    args = parser.parse_args()
    args.scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="profile-", dir=args.scratch) as folder:
        profile(args.profile, Path(folder))
