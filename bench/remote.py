"""A worker fleet sharing one Git remote: messages answered per second with 1, 2 and 4
workers on the replay model.

The remote is a real `git daemon` on loopback serving a bare repository
(`agentfs/testing/gitserver.py:GitServer`). A person's clone holds T traces
(each answered once already); each worker is a real `python -m agentfs watch
--remote origin` process on a clone of its own. The workers are started and
left idle until each has logged its `worker` line (Python's start-up is not
counted); then one message is dropped into every trace and pushed with
`agentfs sync`, and the clock runs from the end of that sync until the
person's clone, pulling every 0.2 s, sees every message answered (T jobs: a
claim, a run, its pushes, a release each). Rate = T / seconds. Verified at
the end of each run: every message answered once, no waiting inbox file,
`git fsck --strict` clean on the remote.

Run alone: `python -m bench.remote [--quick]`, or with the others:
`python -m bench --only remote`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agentfs.store.message_dir import message_relpath
from agentfs.testing.gitserver import GitServer
from bench.fixtures import GIT_ENV, git
from bench.report import Results

WORKERS = (1, 2, 4)


def run(results: Results, quick: bool, scratch: Path) -> None:
    traces = 12 if quick else 40
    for workers in WORKERS:
        seconds = fleet(scratch / f"fleet-{workers}", workers, traces)
        results.add("remote", f"{workers} worker(s), {traces} messages over {traces} traces",
                    seconds, "s")
        results.add("remote", f"{workers} worker(s), throughput", traces / seconds,
                    "messages/s")


def fleet(folder: Path, workers: int, traces: int) -> float:
    """Seconds from the push of one message into each of `traces` traces until the
    person sees them all answered, with `workers` workers."""
    folder.mkdir(parents=True)
    env = {**os.environ, **GIT_ENV}
    with GitServer(folder / "server") as server:
        url = server.create("ws")
        person = _workspace(folder / "person", traces, url, env)
        procs, logs = [], []
        for i in range(workers):
            clone = folder / f"w{i}"
            git(folder, "clone", "-q", url, str(clone))
            log = folder / f"w{i}.log"
            logs.append(log)
            with open(log, "wb") as out:
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "agentfs", "watch", "--remote", "origin", "--json"],
                    cwd=clone, stdout=out, stderr=subprocess.STDOUT, env=env))
        try:
            _until(lambda: all(b'"worker"' in log.read_bytes() for log in logs), 120)
            _until(lambda: _unanswered(person) == [], 600, pull=person)  # the "hello"s
            for i in range(traces):
                (person / "traces" / f"t{i:03d}" / "inbox" / "q.md").write_text(f"q{i}\n")
            _cli(person, env, "sync")
            started = time.monotonic()
            _until(lambda: _unanswered(person) == [], 600, pull=person)
            seconds = time.monotonic() - started
        finally:
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
            for proc in procs:
                proc.wait(timeout=120)
        _verify(person, server.base / "ws.git", traces)
    return seconds


def _workspace(root: Path, traces: int, url: str, env: dict) -> Path:
    _cli(root.parent, env, "init", str(root))
    (root / "script.json").write_text(json.dumps({"turns": [{"text": f"answer {i}"}
                                                            for i in range(10)]}))
    config = root / "agentfs.toml"
    config.write_text(config.read_text().replace(
        'model = "anthropic:claude-sonnet-4-5"', 'model = "replay:script.json"'))
    for i in range(traces):
        _cli(root, env, "new", f"t{i:03d}", "-m", "hello")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "setup")
    git(root, "remote", "add", "origin", url)
    git(root, "push", "-q", "origin", "main")
    return root


def _cli(cwd: Path, env: dict, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "agentfs", *args], cwd=cwd, env=env, check=True,
                   capture_output=True)


def _unanswered(root: Path) -> list[str]:
    """Traces whose head is not an assistant message, and waiting inbox files."""
    left = []
    for trace in sorted(p for p in (root / "traces").iterdir() if p.is_dir()):
        head = json.loads((trace / "trace.json").read_text())["head"]
        if not (trace / "messages" / message_relpath(f"{head:06d}-assistant.md")).exists():
            left.append(trace.name)
        left += [str(p) for p in (trace / "inbox").glob("*.md")]
    return left


def _until(condition, timeout: float, pull: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pull is not None:
            git(pull, "pull", "-q", "--ff-only", "origin", "main")
        if condition():
            return
        time.sleep(0.2)
    raise RuntimeError(f"not done after {timeout} s")


def _verify(person: Path, bare: Path, traces: int) -> None:
    assert _unanswered(person) == []
    subjects = git(person, "log", "--first-parent", "--format=%s").splitlines()
    answered = [s for s in subjects if " assistant #" in s]
    assert len(answered) == len(set(answered)) == 2 * traces, "an answer committed twice"
    git(bare, "fsck", "--strict", "--no-dangling")


def main() -> None:
    quick = "--quick" in sys.argv
    results = Results(quick=quick)
    with tempfile.TemporaryDirectory(prefix="bench-remote-") as scratch:
        run(results, quick, Path(scratch))
    print(results.table())


if __name__ == "__main__":
    main()
