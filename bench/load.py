"""Trace load: opening a 10,000-message trace and building the next request.

What `agentfs run` does before its first model call, timed in a fresh
process (cold) and again in the same process (warm):

- open the workspace and the trace, take its lock, `recover()` (which
  compares every file of the trace with the last commit), and build the
  request the model would get (`Runner.preview`: main path, Level 1,
  token estimate, tools).

Also in the first and the next process of a fresh `git clone` (nothing under
`.git/agentfs/`), for the trace above and for one with 200 messages after its
summary.

The trace has 10,000 message files but, like any trace that long, has been
compressed: its main path is the system prompt, the first user message, a
summary and the last 38 messages. Cold is measured twice: on the very first
open (every file parsed) and on later opens (parsed messages come from the
parse cache, `agentfs/store/parsecache.py`). Interpreter start and imports
are reported on their own line. Warm is the same work again in the same
process: with the same `Trace` (the next request of a run) and with a new
one (a new run in a long-lived process such as the watcher).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.fixtures import TRACE, shared_long_trace
from bench.report import Results, median

SIZE = 10_000
KEPT = 38  # main path after the summary; SIZE - KEPT lands on a user turn
#: A path that has run on for a while since its summary: more than a walk's first
#: windows (`agentfs/store/message_dir.py:MessageLookup`).
KEPT_LONG = 200


def run(results: Results, quick: bool, scratch: Path) -> None:
    root = shared_long_trace(scratch, SIZE, kept=KEPT)
    rounds = 3 if quick else 7
    first = [probe(root, fresh=True) for _ in range(2 if quick else 3)]
    later = [probe(root, fresh=False) for _ in range(rounds)]
    group, label = "load", f"{SIZE:,} msgs"
    results.add(group, "import agentfs (new process)", median([p["import_ms"] for p in later]), "ms")
    results.add(group, f"cold, first open, no parse cache ({label})",
                median([p["cold_ms"] for p in first]), "ms")
    results.add(group, f"cold, with parse cache ({label})",
                median([p["cold_ms"] for p in later]), "ms", "budget <= 300")
    results.add(group, f"warm, next request of the same run ({label})",
                median([p["warm_same_ms"] for p in later]), "ms", "budget <= 20")
    results.add(group, f"warm, new run in the same process ({label})",
                median([p["warm_new_ms"] for p in later]), "ms", "budget <= 20")
    results.add(group, "messages in the request", later[0]["request_messages"], "msgs")
    for kept in (KEPT, KEPT_LONG):
        source = shared_long_trace(scratch, SIZE, kept=kept)
        clones = [cloned_probes(source, scratch / f"clone-{kept}-{n}") for n in range(rounds)]
        results.add(group, f"cold, first process in a fresh clone, {kept} after the summary "
                    f"({label})", median([first for first, _ in clones]), "ms")
        results.add(group, f"cold, next process in that clone, {kept} after the summary "
                    f"({label})", median([second for _, second in clones]), "ms")


def cloned_probes(source: Path, clone: Path) -> tuple[float, float]:
    """The cold load in the first process of a `git clone` of `source` (no parse
    cache, no summary, no saved names: nothing under `.git/agentfs/`), then in the
    next process (with what the first one saved); in ms."""
    subprocess.run(["git", "clone", "-q", str(source), str(clone)], check=True)
    try:
        return probe(clone, fresh=False)["cold_ms"], probe(clone, fresh=False)["cold_ms"]
    finally:
        shutil.rmtree(clone, ignore_errors=True)


def probe(root: Path, *, fresh: bool, memory: bool = False) -> dict[str, float]:
    """Time the load in a new Python process; `fresh` deletes the parse cache first."""
    if fresh:
        shutil.rmtree(root / ".git" / "agentfs" / "cache", ignore_errors=True)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(root), "memory" if memory else "time"],
        capture_output=True, text=True, check=True, cwd=Path(__file__).parent.parent,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


PROBE = """
import sys, time
started = time.perf_counter()
import agentfs.core.runner  # what a run imports, timed
import agentfs.testing  # the bench's stand-in model (not timed below)
from bench.load import measure
measure(sys.argv[1], sys.argv[2], time.perf_counter() - started)
"""


def _open_and_build(root: Path, trace_id: str):
    """What a run does before its first model call; returns the trace and the request."""
    from agentfs.core.project import Project
    from agentfs.testing import ScriptedModel

    project = Project.open(root)
    trace = project.trace(trace_id)
    runner = project.runner(ScriptedModel())
    with trace.lock():
        trace.recover()
        request = runner.preview(trace)
    return runner, trace, request


def peak_rss_kb() -> int:
    """This process's peak resident set size in KB.

    Linux's VmHWM, not `ru_maxrss`: the latter survives `exec` and so also
    counts the (large) benchmark process that started this one.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def measure(root: str, mode: str, import_seconds: float) -> None:
    """The probe's side: time (or measure the memory of) a cold load, print JSON."""
    rss_before = peak_rss_kb()
    started = time.perf_counter()
    runner, trace, request = _open_and_build(Path(root), TRACE)
    report = {
        "import_ms": import_seconds * 1000,
        "cold_ms": (time.perf_counter() - started) * 1000,
        "request_messages": len(request.messages),
        "messages": len(trace.messages()),
        "rss_before_kb": rss_before,
        "peak_rss_kb": peak_rss_kb(),
    }
    if mode == "time":
        t0 = time.perf_counter()
        runner.preview(trace)
        report["warm_same_ms"] = (time.perf_counter() - t0) * 1000
        t0 = time.perf_counter()
        _open_and_build(Path(root), TRACE)
        report["warm_new_ms"] = (time.perf_counter() - t0) * 1000
    print(json.dumps(report))
