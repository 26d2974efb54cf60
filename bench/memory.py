"""Peak memory (RSS) of a process that opens a 10,000-message trace.

The same work as the cold load in `bench/load.py` (open, recover, build the
request) in a new process, which then reports its peak resident set size
(`ru_maxrss`): once parsing every file (no parse cache) and once with the
parse cache. "After imports" is the peak before the trace is opened, so the
difference is what the trace itself costs.
"""

from __future__ import annotations

from pathlib import Path

from bench.fixtures import shared_long_trace
from bench.load import KEPT, SIZE, probe
from bench.report import Results


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
