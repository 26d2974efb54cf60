"""Per-trace refs: a worker's steps go to `refs/agentfs/traces/<id>`, `main` moves only
by folds, and a fold that takes a running trace's steps (`agentfs sync`) leaves its
worker able to go on; a fleet of twenty workers loses and doubles nothing."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from agentfs.testing.gitserver import GitServer
from bench.fleetsim import simulate
from tests.conftest import assert_git_clean, git, run_cli
from tests.remote.fleet import person_clone, pull, wait_for, worker_clone
from tests.remote.test_partition import GatedModel, check_remote, worker


@pytest.fixture
def server(tmp_path: Path):
    with GitServer(tmp_path / "server") as served:
        yield served


def remote_refs(server: GitServer, prefix: str) -> str:
    return git(server.base / "ws.git", "for-each-ref", "--format=%(refname)", prefix).strip()


def test_a_running_traces_steps_go_to_its_ref_and_a_sync_that_folds_them_loses_nothing(
        tmp_path, server):
    """While the model is called, the ingested message is on the trace's ref and main
    has not moved; `agentfs sync` folds it into main (deleting the ref) and the worker's
    next step, carried onto the new main, is folded at the end of the job."""
    url = server.create("ws")
    person = person_clone(tmp_path, url, ("a",))
    (person / "traces" / "a" / "inbox" / "q.md").write_text("question\n")
    run_cli("sync", cwd=person)
    main_before = git(server.base / "ws.git", "rev-parse", "main")
    clone = worker_clone(tmp_path, url, "w1")
    seen: dict[str, str] = {}

    def at_the_model() -> None:
        if seen:
            return
        wait_for(lambda: remote_refs(server, "refs/agentfs/traces/") != "", 60,
                 "the ingest step on the trace ref")
        seen["refs"] = remote_refs(server, "refs/agentfs/traces/")
        seen["main"] = git(server.base / "ws.git", "rev-parse", "main")
        seen["sync"] = subprocess.run([sys.executable, "-m", "agentfs", "sync"], cwd=person,
                                      capture_output=True, text=True, check=True).stdout
        seen["after"] = remote_refs(server, "refs/agentfs/traces/")

    events: list = []
    w = worker(clone, GatedModel(person / "script.json", at_the_model), events, lease=30)
    thread = threading.Thread(target=w.run_once)
    thread.start()
    thread.join(timeout=120)
    assert seen["refs"] == "refs/agentfs/traces/a"
    assert seen["main"] == main_before  # the step did not move main
    assert seen["after"] == ""  # the sync folded the ref and deleted it
    assert not (person / "traces" / "a" / "inbox" / "q.md").exists()  # the sync saw the step
    assert ("released", {"claims": ["a"]}) in events
    assert remote_refs(server, "refs/agentfs/") == ""  # no ref and no claim left
    check_remote(person, server, ["a: hello", "a: question"])
    assert_git_clean(clone)


def test_a_trace_ref_left_by_a_job_is_folded_by_an_idle_worker(tmp_path, server):
    """A job whose fold gave up on main leaves its steps on the trace's ref, unclaimed:
    the next idle look of any worker folds them, and the person's pull sees them."""
    url = server.create("ws")
    person = person_clone(tmp_path, url, ("a",))
    (person / "traces" / "a" / "inbox" / "q.md").write_text("question\n")
    run_cli("sync", cwd=person)
    clone = worker_clone(tmp_path, url, "w1")
    events: list = []
    w = worker(clone, GatedModel(person / "script.json", lambda: None), events, lease=30)
    from agentfs.remote import publish
    folds = publish.FOLDS
    publish.FOLDS = 0  # the job's release never folds
    try:
        w.run_once()
    finally:
        publish.FOLDS = folds
    assert ("released", {"claims": ["a"]}) in events
    assert any(e == "folded" for e, _ in events), events  # the same worker, once idle
    assert remote_refs(server, "refs/agentfs/") == ""
    pull(person)
    check_remote(person, server, ["a: hello", "a: question"])


@pytest.mark.slow
def test_twenty_workers_on_forty_new_trace_files_lose_and_double_nothing(tmp_path):
    outcome = simulate(tmp_path / "fleet", workers=20, jobs=40, delay=(0.0, 0.3), lease=10,
                       poll=0.3, timeout=600)
    assert outcome.problems == []
    assert outcome.answered == 40
