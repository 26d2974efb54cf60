"""A whole run's cost per message, at 100, 1,000 and 10,000 messages.

`python -m bench.iteration [--quick] [--profile] [--sizes 100,1000,10000]`

Each size gets a linear trace built by `bench/fixtures.py:long_trace` (its main
path holds every message, as a long trace before any compression). A run then
continues it with the replay model for `ITERATIONS` model calls, each calling
`read_file` once, so a call adds an assistant message and a tool result (and,
every few calls, the synthetic context injection). What is timed is
`Runner.run` in this process, the whole of it: bringing the trace up to date,
building each request, the model call, the tool step, the commits. The context
window is set high so the trace is never compressed: this measures the work a
run does per iteration as the trace grows, which design §8 wants independent of
its length (`whole run per message at 10,000 ≤ 1.5× at 100`).

Per size: the whole run divided by the messages it added; the marginal cost
per message (a longer run minus a shorter one, so the fixed cost of opening
the trace cancels out); the CPU time per message (less sensitive to a busy
disk); and the split between `Trace.commit_step` (the commit path: files,
trace.json, Git objects, the index) and everything else the run does, whole
and marginal (the latter is the per-iteration work of the run loop itself:
requests, tool steps, injections). Every round runs on a fresh copy of the
template workspace. `--profile` prints the top of a cProfile of the largest
size's run, sorted by cumulative and by own time.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agentfs.core.project import Project
from agentfs.models.replay import ReplayModel
from agentfs.store import dirmemory
from agentfs.store.trace import Trace
from bench.fixtures import TRACE, clone_workspace, git, long_trace

SIZES = (100, 1_000, 10_000)
ITERATIONS = 40  # model calls of the timed run
SHORT = 10  # model calls of the shorter run the marginal cost subtracts
WINDOW = 1_000_000_000  # tokens: never compress


def run(results, quick: bool, scratch: Path) -> None:
    """`python -m bench` entry: the figures into `results`."""
    figures = measure(scratch, SIZES, 1 if quick else 3)
    for size in SIZES:
        f = figures[size]
        label = f"({size:,} msgs)"
        results.add("iteration", f"whole run per message {label}", f["per_message_ms"], "ms")
        results.add("iteration", f"marginal per message {label}", f["marginal_ms"], "ms")
        results.add("iteration", f"outside commit_step, per message {label}", f["rest_ms"], "ms")
        results.add("iteration", f"outside commit_step, marginal {label}",
                    f["rest_marginal_ms"], "ms")
        results.add("iteration", f"outside commit_step, marginal CPU {label}",
                    f["rest_cpu_marginal_ms"], "ms")
    growth = figures[SIZES[-1]]["per_message_ms"] / figures[SIZES[0]]["per_message_ms"]
    results.add("iteration", f"growth {SIZES[0]:,} → {SIZES[-1]:,}", growth, "×", "budget <= 1.5")


def measure(scratch: Path, sizes: tuple[int, ...], rounds: int) -> dict[int, dict[str, float]]:
    """Per size, medians over `rounds` of: whole-run ms per message, the marginal ms per
    message, CPU ms per message, and the share of the run spent in commits."""
    figures: dict[int, dict[str, float]] = {}
    for size in sizes:
        template = _template(scratch, size)
        runs: list[dict[str, float]] = []
        for n in range(rounds):
            long = _timed_run(template, scratch / f"run-{size}-{n}-l", ITERATIONS)
            short = _timed_run(template, scratch / f"run-{size}-{n}-s", SHORT)
            added = long["added"]
            runs.append({
                "per_message_ms": long["ms"] / added,
                "marginal_ms": (long["ms"] - short["ms"]) / (added - short["added"]),
                "cpu_ms": long["cpu_ms"] / added,
                "commit_ms": long["commit_ms"] / added,
                "rest_ms": (long["ms"] - long["commit_ms"]) / added,
                "rest_marginal_ms": ((long["ms"] - long["commit_ms"])
                                     - (short["ms"] - short["commit_ms"]))
                / (added - short["added"]),
                "rest_cpu_marginal_ms": ((long["cpu_ms"] - long["commit_cpu_ms"])
                                         - (short["cpu_ms"] - short["commit_cpu_ms"]))
                / (added - short["added"]),
            })
        figures[size] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        f = figures[size]
        print(f"  {size:>6,} messages: {f['per_message_ms']:6.2f} ms per message "
              f"(marginal {f['marginal_ms']:6.2f}, CPU {f['cpu_ms']:6.2f}; "
              f"in commit_step {f['commit_ms']:6.2f}, the rest {f['rest_ms']:6.2f}, "
              f"marginal {f['rest_marginal_ms']:6.2f}, CPU marginal "
              f"{f['rest_cpu_marginal_ms']:6.2f})",
              flush=True)
    return figures


def profile(scratch: Path, size: int, top: int = 25) -> None:
    """Print the top of a cProfile of one run on a `size`-message trace."""
    template = _template(scratch, size)
    profiler = cProfile.Profile()
    _timed_run(template, scratch / f"profile-{size}", ITERATIONS, profiler)
    for order in ("cumulative", "tottime"):
        print(f"\n--- profile of a {ITERATIONS}-call run at {size:,} messages, by {order}")
        pstats.Stats(profiler).sort_stats(order).print_stats(top)


def _template(scratch: Path, size: int) -> Path:
    """A workspace with a linear `size`-message trace and a replay script with enough
    turns, opened once so its parse cache is on disk (as in a trace that has run)."""
    root = scratch / f"template-{size}"
    if root.exists():
        return root
    project = long_trace(root, size)
    trace = project.trace(TRACE)
    calls_so_far = sum(1 for m in trace.messages().values() if m.role == "assistant")
    (root / "notes.md").write_text(PARAGRAPH)
    turn = {"text": "Reading the notes again.",
            "tool_calls": [{"name": "read_file", "input": {"path": "notes.md"}}]}
    script = {"turns": [{"text": "(earlier turn)"}] * calls_so_far + [turn] * (ITERATIONS + 5)}
    (root.parent / f"script-{size}.json").write_text(json.dumps(script))
    with trace.lock():
        trace.recover()
    return root


def _timed_run(template: Path, target: Path, iterations: int,
               profiler: cProfile.Profile | None = None) -> dict[str, float]:
    """Run a copy of `template` for `iterations` model calls: wall and CPU ms, ms in
    `Trace.commit_step` (the commit path), messages added."""
    shutil.rmtree(target, ignore_errors=True)
    root = clone_workspace(template, target)
    size = int(template.name.split("-")[1])
    model = ReplayModel(template.parent / f"script-{size}.json")
    project = Project.open(root)
    config = project.config.model_copy(update={"context_window": WINDOW})
    runner = project.runner(model, config=config)
    # Hard links changed the files' ctime: refresh the index's stat data and parse
    # the files once, untimed, so both caches are current, then forget the parsed
    # files in this process. The run then opens the trace as `agentfs run` would in
    # a new process, from the on-disk caches.
    git(root, "update-index", "-q", "--refresh")
    before = len(project.trace(TRACE).messages())
    dirmemory.forget()
    in_commits = [0.0, 0.0]  # wall, CPU
    commit_step = Trace.commit_step

    def timed_commit(self: Trace, *args: Any, **kwargs: Any) -> bytes:
        started, cpu = time.perf_counter(), time.process_time()
        try:
            return commit_step(self, *args, **kwargs)
        finally:
            in_commits[0] += time.perf_counter() - started
            in_commits[1] += time.process_time() - cpu

    Trace.commit_step = timed_commit  # type: ignore[method-assign]
    try:
        cpu, started = time.process_time(), time.perf_counter()
        if profiler is not None:
            profiler.enable()
        result = runner.run(TRACE, max_iterations=iterations)
        if profiler is not None:
            profiler.disable()
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    finally:
        Trace.commit_step = commit_step  # type: ignore[method-assign]
    assert result.iterations == iterations, result
    added = len(project.trace(TRACE).messages(refresh=True)) - before
    shutil.rmtree(target)
    return {"ms": elapsed * 1000, "cpu_ms": cpu * 1000, "commit_ms": in_commits[0] * 1000,
            "commit_cpu_ms": in_commits[1] * 1000, "added": added}


PARAGRAPH = "Notes to read on every call: a short file, so the tool itself costs little.\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.iteration", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one round per size")
    parser.add_argument("--profile", action="store_true",
                        help="also print the top of a profile at the largest size")
    parser.add_argument("--sizes", default=",".join(str(s) for s in SIZES))
    parser.add_argument("--scratch", type=Path, default=Path(__file__).parent / ".scratch")
    args = parser.parse_args(argv)
    sizes = tuple(int(s) for s in args.sizes.split(","))
    args.scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="iteration-", dir=args.scratch) as folder:
        scratch = Path(folder)
        figures = measure(scratch, sizes, 1 if args.quick else 3)
        growth = figures[sizes[-1]]["per_message_ms"] / figures[sizes[0]]["per_message_ms"]
        print(f"  growth {sizes[0]:,} → {sizes[-1]:,}: {growth:.2f}× (budget ≤ 1.5×)")
        if args.profile:
            profile(scratch, sizes[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
