"""Worker fleets simulated on threads (`bench/fleetsim.py`) against a real `git daemon`,
with a model that waits 1–2 s per call:

- throughput: 1, 2, 4 and 8 workers on the same jobs, jobs per second and the
  speed-up over one worker (the model waits, so N workers should be near N×);
- contention: many workers at once, pushes refused because a ref moved (a compare
  and swap lost), by what they did (`bench/fleetsim.py:_kind`): 50 workers on 100
  jobs; and 20 workers on 40 jobs with this protocol and with the one before
  per-trace refs (every step a compare and swap on `main`: agentfs at commit `OLD`,
  exported with `git archive`), which at 50 workers did not finish in 15 minutes.

Each run is a subprocess `python -m bench.fleetsim` and is checked there: every job
answered exactly once, nothing left waiting, `git fsck --strict` clean.

Run alone: `python -m bench.fleet [--quick]`, or `python -m bench --only fleet`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.report import Results

ROOT = Path(__file__).resolve().parent.parent
#: The last commit whose workers pushed every step to main.
OLD = "a153cd9"
THROUGHPUT = (1, 2, 4, 8)


def run(results: Results, quick: bool, scratch: Path) -> None:
    jobs = 8 if quick else 24
    first = None
    for workers in THROUGHPUT:
        out = _simulate(scratch / f"t{workers}", workers, jobs)
        first = first or out["rate"]
        results.add("fleet", f"{workers} worker(s), {jobs} jobs, model 1-2 s", out["rate"],
                    "jobs/s", f"{out['rate'] / first:.2f}x one worker")
        results.add("fleet", f"{workers} worker(s): CPU per job", out["cpu"] / jobs, "s",
                    "agentfs and git, all workers")
    old = _export_old(scratch / "old")
    runs: list[tuple[tuple[int, int], str, Path | None]] = [
        ((10, 20) if quick else (20, 40), "per-trace refs", None)]
    runs += [(runs[0][0], "every step on main", old)] if old else []
    runs += [] if quick else [((50, 100), "per-trace refs", None)]
    for (workers, jobs), label, code in runs:
        out = _simulate(scratch / f"c-{workers}-{bool(code)}", workers, jobs, code,
                        complete=False)
        name = f"{workers} workers, {jobs} jobs, {label}"
        results.add("fleet", f"{name}: jobs answered", out["answered"], "jobs",
                    "; ".join(out["problems"])[:120])
        results.add("fleet", f"{name}: pushes refused", out["refused"], "pushes",
                    f"of {out['pushes']}")
        results.add("fleet", f"{name}: pushes to main refused", out["main_refused"], "pushes",
                    f"of {out['main_pushes']}")
        results.add("fleet", f"{name}: pushes to trace refs refused", out["trace_refused"],
                    "pushes", f"of {out['trace_pushes']}")
        results.add("fleet", f"{name}: claim takes refused", out["take_refused"], "pushes",
                    f"of {out['take_pushes']}")
        results.add("fleet", f"{name}: throughput", out["rate"], "jobs/s")


def _export_old(folder: Path) -> Path | None:
    """agentfs as of `OLD`, in `folder` (None if this checkout has no such commit)."""
    folder.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", OLD, "agentfs"], cwd=ROOT, capture_output=True,
                             check=False)
    if archive.returncode != 0:
        return None
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return folder


def _simulate(folder: Path, workers: int, jobs: int, code: Path | None = None, *,
              complete: bool = True) -> dict:
    """One `python -m bench.fleetsim` run; with `code`, its agentfs shadows this one.
    With `complete`, a run that left a problem (see `bench/fleetsim.py:_check`) is an
    error; else the problems are reported (an old protocol may not finish in time)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "bench.fleetsim", "--workers", str(workers), "--jobs", str(jobs),
         "--delay", "1-2", "--scratch", str(folder)],
        cwd=code or ROOT, env=env, capture_output=True, text=True, check=True, timeout=3600)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    if complete and out["problems"]:
        raise RuntimeError(f"{workers} workers: {out['problems']}")
    return out


def main() -> None:
    quick = "--quick" in sys.argv
    results = Results(quick=quick)
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as scratch:
        run(results, quick, Path(scratch))
    print(results.table())


if __name__ == "__main__":
    main()
