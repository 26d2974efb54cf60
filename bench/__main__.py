"""`python -m bench [--quick] [--only NAMES] [--out PATH]`: run the benchmarks."""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
import time
import traceback
from pathlib import Path

from bench.report import Results

#: Benchmark modules, in the order they run; each has `run(results, quick, scratch)`.
SUITES = ["startup", "wholerun", "iteration", "persistence", "load", "memory", "cache", "watcher",
          "listing", "remote", "fleet", "views"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes: about 9 minutes on 2 cores, against more than half an "
                        "hour for the full run")
    parser.add_argument(
        "--only", default="", help=f"comma-separated subset of: {', '.join(SUITES)}"
    )
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results.json",
        help="where to write the figures as JSON (default: bench/results.json)",
    )
    parser.add_argument(
        "--scratch", type=Path, default=Path(__file__).parent / ".scratch",
        help="where to build the benchmark workspaces (default: bench/.scratch; "
        "use a directory on the filesystem your workspaces live on)",
    )
    args = parser.parse_args(argv)
    chosen = [s.strip() for s in args.only.split(",") if s.strip()] or SUITES
    unknown = sorted(set(chosen) - set(SUITES))
    if unknown:
        parser.error(f"unknown benchmark {', '.join(unknown)}; choose from {', '.join(SUITES)}")
    results = Results(quick=args.quick)
    failed: list[str] = []
    started = time.perf_counter()
    args.scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="run-", dir=args.scratch) as session:
        for name in chosen:
            print(f"== {name}", flush=True)
            module = importlib.import_module(f"bench.{name}")
            suite_started = time.perf_counter()
            scratch = Path(session) / name  # fixtures shared between suites go beside
            scratch.mkdir()
            try:
                module.run(results, args.quick, scratch)
            except Exception:  # noqa: BLE001 -- the other suites' figures are still worth having
                traceback.print_exc()
                failed.append(name)
            print(f"   ({time.perf_counter() - suite_started:.0f} s)", flush=True)
    seconds = time.perf_counter() - started
    print()
    print(results.table())
    results.save(args.out, seconds, args.scratch)
    print(f"\n{len(results.figures)} figures in {seconds:.0f} s, written to {args.out}")
    if failed:
        print(f"failed (see the tracebacks above): {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
