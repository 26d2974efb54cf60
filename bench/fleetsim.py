"""A simulated fleet: many workers on threads of one process, each on a clone of its
own, driving the real protocol code (`agentfs/watch/worker.py:Worker`) against a real
`git daemon` on loopback, with a model that waits a given time per call.

Workload: `jobs` files dropped into the workspace `inbox/` and pushed at once; each
becomes a trace answered once (a claim of the file, a new trace, a claim of the trace,
one model call, its steps pushed, the job's release). The clock runs from the start
of the workers until the remote's `main` holds every answer. Every push is counted
(`GitRemote.push` wrapped), and each refused one (a compare and swap lost), split by
whether it moved `main`. Checked at the end: every file made exactly one trace, each
answered exactly once, no file left in `inbox/`, `git fsck --strict` clean.

The same harness runs against an older agentfs (`--agentfs PATH`: a folder holding
an `agentfs` package, which then shadows this one) to compare protocols:

    python -m bench.fleetsim --workers 50 --jobs 100 --delay 1-2
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["Outcome", "simulate"]

GIT_ENV = {"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@localhost",
           "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@localhost"}


@dataclass
class Outcome:
    workers: int
    jobs: int
    seconds: float  # workers started → every answer on main
    pushes: int  # every `git push` the workers made
    refused: int  # pushes refused because a ref had moved (compare and swap lost)
    main_pushes: int  # pushes that moved (or tried to move) main
    main_refused: int
    trace_pushes: int  # pushes that moved a trace ref (per-trace refs only)
    trace_refused: int
    take_pushes: int  # pushes of one claim alone: takes (and renewals between steps)
    take_refused: int
    answered: int  # assistant steps on main
    cpu: float  # CPU seconds of this process and its git subprocesses during the run
    problems: list[str]
    kinds: dict[str, list[int]]  # what each push did (`_kind`) → [pushes, refused]
    events: dict[str, int]  # the workers' log: claimed, took_over, claim_lost, folded, ...

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}, check=True)
    return done.stdout


class _Pushes:
    """Counts the workers' pushes by wrapping `GitRemote.push` (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: Counter = Counter()

    def install(self) -> None:
        from agentfs.store.git.remote import GitRemote

        original = GitRemote.push
        counts, lock = self.counts, self.lock

        def push(remote, updates):
            ok = original(remote, updates)
            kind = _kind(updates)
            main = any(u.ref == "refs/heads/main" for u in updates)
            trace = any(u.ref.startswith("refs/agentfs/traces/") and u.new for u in updates)
            take = len(updates) == 1 and updates[0].ref.startswith("refs/agentfs/claims/") \
                and updates[0].new is not None
            with lock:
                counts["pushes"] += 1
                counts["refused"] += not ok
                counts["main_pushes"] += main
                counts["main_refused"] += main and not ok
                counts["trace_pushes"] += trace
                counts["trace_refused"] += trace and not ok
                counts["take_pushes"] += take
                counts["take_refused"] += take and not ok
                counts[f"{kind} pushes"] += 1
                counts[f"{kind} refused"] += not ok
            return ok

        GitRemote.push = push  # type: ignore[method-assign]


def _kind(updates) -> str:
    """What a push did, by its refs: `fold` (moved main; `release` with it if it also
    deleted claims), `steps` (moved a trace ref, renewing claims), `take` (created or
    took over one claim, or renewed it alone), `reap` (deleted one claim alone: a reap, or
    the release of a job that stopped early), `release` (deleted claims, leaving the
    steps on the ref), else `other`."""
    main = any(u.ref == "refs/heads/main" for u in updates)
    claims = [u for u in updates if u.ref.startswith("refs/agentfs/claims/")]
    deleted = any(u.new is None for u in claims)
    if main:
        return "release+fold" if deleted else "fold"
    if any(u.ref.startswith("refs/agentfs/traces/") and u.new for u in updates) and not deleted:
        return "steps"
    if len(updates) == 1 and claims:
        return "reap" if deleted else "take"
    return "release" if deleted else "other"


def simulate(folder: Path, workers: int, jobs: int, delay: tuple[float, float],
             *, lease: float = 30.0, poll: float = 1.0, timeout: float = 900.0) -> Outcome:
    """Run `workers` workers on `jobs` new-trace files; see the module's docstring."""
    from agentfs.models.base import ModelResponse
    from agentfs.testing.gitserver import GitServer
    from agentfs.testing.models import FunctionModel
    from agentfs.watch.worker import Worker

    rng = random.Random(1)  # the same model delays for every protocol compared
    rng_lock = threading.Lock()

    def respond(request) -> ModelResponse:
        with rng_lock:
            wait = rng.uniform(*delay)
        time.sleep(wait)  # the model's time: the worker waits, as for a real API
        return ModelResponse(text="answer")

    pushes = _Pushes()
    pushes.install()
    events: Counter = Counter()

    def log(event: str, data: dict) -> None:
        with pushes.lock:
            events[event] += 1
            events["took_over"] += bool(data.get("took_over"))
    folder.mkdir(parents=True, exist_ok=True)
    with GitServer(folder / "server") as server:
        url = server.create("ws")
        person = folder / "person"
        subprocess.run([sys.executable, "-m", "agentfs", "init", str(person)], check=True,
                       capture_output=True, env={**os.environ, **GIT_ENV})
        for i in range(jobs):
            (person / "inbox" / f"job{i:04d}.md").write_text(f"question {i}\n")
        _git(person, "add", "-A")
        _git(person, "commit", "-qm", "jobs")
        _git(person, "push", "-q", url, "main")
        fleet = []
        for i in range(workers):
            clone = folder / f"w{i:03d}"
            _git(folder, "clone", "-q", url, str(clone))
            fleet.append(Worker(clone, "origin", lambda m, p: FunctionModel(respond),
                                log, lease=lease, poll=poll, name=f"sim-{i}"))
        bare = server.base / "ws.git"
        threads = [threading.Thread(target=w.run_forever, daemon=True) for w in fleet]
        started, cpu_before = time.monotonic(), _cpu()
        for thread in threads:
            thread.start()
        deadline = started + timeout
        while _answered(bare) < jobs and time.monotonic() < deadline:
            time.sleep(0.2)
        seconds, cpu = time.monotonic() - started, _cpu() - cpu_before
        for w in fleet:
            w.stopping.set()
        for thread in threads:
            thread.join(timeout=120)
        while _answered(bare) < jobs and time.monotonic() < deadline:  # a last fold
            time.sleep(0.2)
        problems = _check(bare, jobs)
        answered = _answered(bare)
    return Outcome(workers, jobs, seconds, pushes.counts["pushes"], pushes.counts["refused"],
                   pushes.counts["main_pushes"], pushes.counts["main_refused"],
                   pushes.counts["trace_pushes"], pushes.counts["trace_refused"],
                   pushes.counts["take_pushes"], pushes.counts["take_refused"], answered,
                   cpu, problems, _kinds(pushes.counts), dict(events))


def _kinds(counts: Counter) -> dict[str, list[int]]:
    kinds = sorted({key.split(" ")[0] for key in counts if " " in key})
    return {kind: [counts[f"{kind} pushes"], counts[f"{kind} refused"]] for kind in kinds}


def _cpu() -> float:
    """CPU seconds used so far by this process and its waited-for children (git)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _answered(bare: Path) -> int:
    subjects = _git(bare, "log", "--first-parent", "--format=%s", "main").splitlines()
    return sum(" assistant #" in s for s in subjects)


def _check(bare: Path, jobs: int) -> list[str]:
    """What is wrong with the remote after the run: lost or doubled work, leftovers."""
    problems = []
    subjects = _git(bare, "log", "--first-parent", "--format=%s", "main").splitlines()
    for kind in ("user", "assistant"):
        steps = Counter(s.split(" ", 3)[:3].__str__() for s in subjects if f" {kind} #" in s)
        twice = [s for s, n in steps.items() if n > 1]
        if twice:
            problems.append(f"{kind} steps committed twice: {twice[:3]}")
        if len(steps) != jobs:
            problems.append(f"{len(steps)} {kind} steps for {jobs} jobs")
    traces = [p for p in _git(bare, "ls-tree", "--name-only", "main", "traces/").split()
              if not p.rsplit("/", 1)[-1].startswith(".")]
    if len(traces) != jobs:
        problems.append(f"{len(traces)} traces for {jobs} files")
    left = [p for p in _git(bare, "ls-tree", "--name-only", "main", "inbox/").split()
            if p.endswith(".md")]
    if left:
        problems.append(f"files still waiting: {left[:3]}")
    try:
        _git(bare, "fsck", "--strict", "--no-dangling")
    except subprocess.CalledProcessError as exc:
        problems.append(f"fsck: {exc.stderr.strip()[:200]}")
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fleetsim", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=50)
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--delay", default="1-2", help="seconds per model call, A-B")
    parser.add_argument("--poll", type=float, default=1.0)
    parser.add_argument("--scratch", type=Path, required=True)
    args = parser.parse_args()
    low, _, high = args.delay.partition("-")
    outcome = simulate(args.scratch, args.workers, args.jobs,
                       (float(low), float(high or low)), poll=args.poll)
    print(json.dumps({**asdict(outcome), "rate": outcome.rate}))


if __name__ == "__main__":
    main()
