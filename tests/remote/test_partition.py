"""A worker cut off from the remote: its run goes on and is pushed when the remote is
back (the git server stopped, then started again on the same port); cut off past its
lease (its remote pointed at a closed port), another worker takes the trace over and
the returning one pushes nothing."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import pytest

from agentfs.models.replay import ReplayModel
from agentfs.testing.gitserver import GitServer
from agentfs.watch.worker import Worker
from tests.conftest import assert_git_clean, git, run_cli
from tests.remote.fleet import answers, person_clone, pull, steps_twice, wait_for, worker_clone


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class GatedModel:
    """The replay model, with `before` called ahead of every call (to cut the network)."""

    def __init__(self, script: Path, before) -> None:
        self.inner = ReplayModel(script)
        self.name = self.inner.name
        self.before = before

    def complete(self, request, on_text=None):
        self.before()
        return self.inner.complete(request, on_text)


@pytest.fixture
def server(tmp_path: Path):
    with GitServer(tmp_path / "server") as served:
        yield served


def worker(clone: Path, model, events: list, lease: float) -> Worker:
    return Worker(clone, "origin", lambda m, p: model, lambda e, d: events.append((e, d)),
                  lease=lease, poll=0.1, name=f"test-{clone.name}")


def check_remote(person: Path, server: GitServer, expected: list[str]) -> None:
    pull(person)
    counts, stuck = answers(person)
    assert [counts[key] for key in expected] == [1] * len(expected), counts
    assert [k for k, n in counts.items() if n > 1] == [] and stuck == []
    assert steps_twice(person) == []
    assert_git_clean(person)
    git(server.base / "ws.git", "fsck", "--strict", "--no-dangling")


def test_a_worker_cut_off_mid_run_pushes_its_steps_when_the_remote_is_back(tmp_path, server):
    url = server.create("ws")
    person = person_clone(tmp_path, url, ("a",))
    clone = worker_clone(tmp_path, url, "w1")
    cut = threading.Event()

    def partition() -> None:
        if not cut.is_set():
            server.stop()
            cut.set()

    events: list = []
    w = worker(clone, GatedModel(person / "script.json", partition), events, lease=30)
    thread = threading.Thread(target=w.run_once)
    thread.start()
    try:
        wait_for(lambda: any(e == "unreachable" for e, _ in events), 60, "the push to fail")
        server.start()
    finally:
        thread.join(timeout=120)
    assert ("released", {"claims": ["a"]}) in events
    check_remote(person, server, ["a: hello"])
    assert w.mirror() is not None
    assert_git_clean(clone)


def test_a_worker_cut_off_past_its_lease_loses_the_trace_and_pushes_nothing(tmp_path, server):
    url = server.create("ws")
    person = person_clone(tmp_path, url, ("a",))
    first, second = worker_clone(tmp_path, url, "w1"), worker_clone(tmp_path, url, "w2")
    called, resume = threading.Event(), threading.Event()

    def cut_and_hang() -> None:  # only this worker is cut off: its remote, a closed port
        if not called.is_set():
            git(first, "remote", "set-url", "origin", f"git://127.0.0.1:{closed_port()}/ws.git")
            called.set()
            resume.wait(120)

    events: list = []
    w = worker(first, GatedModel(person / "script.json", cut_and_hang), events, lease=2)
    thread = threading.Thread(target=w.run_once)
    thread.start()
    try:
        assert called.wait(60)
        claim = git(server.base / "ws.git", "log", "-1", "--format=%B", "refs/agentfs/claims/a")
        seconds = json.loads(claim)["seconds"]
        # The second worker judges the lease on its own clock: its first look finds the
        # claim live; once it has seen the claim unchanged for the lease (and up to half
        # as long again, its own point), it takes over.
        run_cli("watch", "--remote", "origin", "--once", "--lease", "2", cwd=second,
                isolated=True)
        assert git(server.base / "ws.git", "log", "-1", "--format=%B",
                   "refs/agentfs/claims/a") == claim
        first_look = time.monotonic()
        wait_for(lambda: time.monotonic() - first_look > 1.5 * seconds, 30,
                 "the lease to run out")
        run_cli("watch", "--remote", "origin", "--once", "--lease", "2", cwd=second,
                isolated=True)  # takes the trace over and answers it
    finally:
        git(first, "remote", "set-url", "origin", url)
        resume.set()
        thread.join(timeout=120)
    assert any(e == "claim_lost" for e, _ in events), events
    assert not any(e == "released" for e, _ in events)
    check_remote(person, server, ["a: hello"])
    assert w.mirror() is not None  # the lost work is dropped; the clone is the remote's
    assert_git_clean(first)
    assert git(first, "rev-parse", "HEAD") == git(person, "rev-parse", "HEAD")
