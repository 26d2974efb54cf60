"""The commit path alone: one message file, `trace.json`, the commit, the index refresh.

`python -m bench.commitpath [--steps N] [--sizes 100,1000,...]` times
`Trace.commit_step` for one new message in traces of each size and counts
the bytes the process wrote per step (`wchar` of `/proc/self/io`: every
byte handed to `write`, objects, index, trace.json, the message file and
temp files alike), and the CPU time of each step beside its wall time (the
disk of a shared machine makes wall times swing). Besides 100, 1,000 and
10,000 messages it measures the last 150 steps of a `messages/` folder
(from 1,849 and 10,849 messages), the worst case of the folder split
(docs/trace-format.md).

It also has `run(results, quick, scratch)` like the suites of `python -m bench`.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench.fixtures import TRACE, long_trace, message
from bench.report import Results, median, p95

SIZES = (100, 1_000, 1_849, 10_000, 10_849)


def written_bytes() -> int:
    """Bytes this process has passed to write() so far (Linux)."""
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    raise RuntimeError("no wchar in /proc/self/io")


def measure(root: Path, size: int, steps: int) -> tuple[list[float], list[float], list[int]]:
    """Wall and CPU milliseconds and bytes written of `steps` commit steps on the trace
    at `root`."""
    from agentfs.core.project import Project

    trace = Project.open(root).trace(TRACE)
    times: list[float] = []
    cpu: list[float] = []
    sizes: list[int] = []
    with trace.lock():
        trace.recover()  # what a run does first (and any upgrade); not part of a step
        for sequence in range(size + 1, size + 1 + steps):
            template = message(sequence)
            m = trace.new_message(template.role, template.content,
                                  tool_calls=template.tool_calls,
                                  tool_call_id=template.tool_call_id)
            before = written_bytes()
            began, began_cpu = time.perf_counter(), time.process_time()
            trace.commit_step(m.role, [m])
            times.append((time.perf_counter() - began) * 1000)
            cpu.append((time.process_time() - began_cpu) * 1000)
            sizes.append(written_bytes() - before)
    return times, cpu, sizes


def run(results: Results, quick: bool, scratch: Path, sizes: Sequence[int] = SIZES) -> None:
    steps = 40 if quick else 150
    for size in sizes:
        root = scratch / f"commit-{size}"
        long_trace(root, size)
        times, cpu, written = measure(root, size, steps)
        label = f"{size:,} msgs"
        results.add("commitpath", f"commit step, median ({label})", median(times), "ms")
        results.add("commitpath", f"commit step, p95 ({label})", p95(times), "ms")
        results.add("commitpath", f"commit step CPU time, median ({label})", median(cpu), "ms")
        results.add("commitpath", f"bytes written per step, median ({label})",
                    median([float(b) for b in written]), "bytes", "wchar")
        results.add("commitpath", f"bytes written per step, max ({label})",
                    float(max(written)), "bytes", "wchar; packing steps included")
        shutil.rmtree(root)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.commitpath", description=__doc__)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--sizes", default=",".join(str(s) for s in SIZES))
    parser.add_argument("--scratch", type=Path, default=Path(__file__).parent / ".scratch")
    args = parser.parse_args(argv)
    results = Results(quick=args.steps < 100)
    args.scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="commitpath-", dir=args.scratch) as session:
        run(results, args.steps < 100, Path(session),
            [int(s) for s in args.sizes.split(",")])
    print()
    print(results.table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
