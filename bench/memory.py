"""Peak memory (RSS) of a process that opens a 10,000-message trace, and of one
that reads many.

The same work as the cold load in `bench/load.py` (open, recover, build the
request) in a new process, which then reports its peak resident set size
(`ru_maxrss`): once parsing every file (no parse cache) and once with the
parse cache. "After imports" is the peak before the trace is opened, so the
difference is what the trace itself costs.

A long-lived process (a server, a watcher) reads many traces: one process reads
`TRACES` copies of a 10,000-message trace whole, one after another, and reports
its peak after the first and after the last. What it keeps of them is bounded
(`agentfs/store/dirmemory.py:KEEP_MESSAGES`), so the second figure stops growing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.fixtures import clone_workspace, shared_long_trace
from bench.load import KEPT, SIZE, probe
from bench.report import Results

#: How many traces the long-lived process reads.
TRACES = 6


def run(results: Results, quick: bool, scratch: Path) -> None:
    root = shared_long_trace(scratch, SIZE, kept=KEPT)
    parsing = probe(root, fresh=True, memory=True)
    cached = probe(root, fresh=False, memory=True)
    label = f"{SIZE:,} msgs"
    results.add("memory", "peak RSS after imports", parsing["rss_before_kb"] / 1024, "MB")
    results.add("memory", f"peak RSS, parsing every file ({label})",
                parsing["peak_rss_kb"] / 1024, "MB", "budget <= 250")
    results.add("memory", f"peak RSS, with the parse cache ({label})",
                cached["peak_rss_kb"] / 1024, "MB", "budget <= 250")
    rss = many_traces(scratch, TRACES)
    results.add("memory", f"peak RSS, one process reading 1 trace of {label} whole",
                rss[0] / 1024, "MB")
    results.add("memory", f"peak RSS, one process reading {TRACES} traces of {label} whole",
                rss[-1] / 1024, "MB", "grows no more once the bound is reached")


def many_traces(scratch: Path, count: int) -> list[int]:
    """Peak RSS (KB) of one new process after each of `count` traces of `SIZE`
    messages it reads whole (copies of one, each in its own workspace)."""
    template = shared_long_trace(scratch, SIZE)
    roots = [clone_workspace(template, scratch / f"many-{n}") for n in range(count)]
    done = subprocess.run([sys.executable, "-c", MANY, *map(str, roots)],
                          capture_output=True, text=True, check=True,
                          cwd=Path(__file__).parent.parent)
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


MANY = """
import json, sys
from agentfs.core.project import Project
from bench.fixtures import TRACE
from bench.load import peak_rss_kb
peaks = []
for root in sys.argv[1:]:
    Project.open(root).trace(TRACE).messages()
    peaks.append(peak_rss_kb())
print(json.dumps(peaks))
"""
