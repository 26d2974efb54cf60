"""Fewer lost races at many workers, nothing lost for it: a worker that lost a take
looks again before trying another job, workers take jobs in orders of their own, a
job's release folds the backlog of unclaimed trace refs along, and an idle worker
leaves another's leftover steps to that worker (or to the next release) for a lease
before folding them itself. Against a real git daemon."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from agentfs.remote import publish
from agentfs.remote.claims import Claims
from agentfs.store.git.remote import GitRemote
from agentfs.testing.gitserver import GitServer
from tests.conftest import assert_git_clean, git
from tests.remote.fleet import person_clone, wait_for, worker_clone
from tests.remote.test_partition import GatedModel, check_remote, worker
from tests.remote.test_tracerefs import remote_refs


@pytest.fixture
def server(tmp_path: Path):
    with GitServer(tmp_path / "server") as served:
        yield served


def two_traces(tmp_path: Path, server: GitServer) -> tuple[Path, str]:
    """The person's clone with traces `a` and `b` pushed, each waiting for an answer."""
    url = server.create("ws")
    return person_clone(tmp_path, url, ("a", "b")), url


def left_on_its_ref(tmp_path: Path, url: str, person: Path) -> tuple[list, str]:
    """One job run by worker `w1` whose release never folds: (its events, the trace)."""
    events: list = []
    w1 = worker(worker_clone(tmp_path, url, "w1"), GatedModel(person / "script.json",
                                                              lambda: None), events, lease=30)
    folds = publish.FOLDS
    publish.FOLDS = 0
    try:
        assert w1.take_one()
    finally:
        publish.FOLDS = folds
    (trace,) = [d["claims"][0] for e, d in events if e == "released"]
    return events, trace


def test_after_a_lost_take_a_worker_looks_again_before_trying_another_job(tmp_path, server):
    person, url = two_traces(tmp_path, server)
    rival = Claims(GitRemote(worker_clone(tmp_path, url, "rival"), "origin"), "rival", 30)
    events: list = []
    w = worker(worker_clone(tmp_path, url, "w1"), GatedModel(person / "script.json",
                                                             lambda: None), events, lease=30)
    tried: list[str] = []
    take = w.claims.take

    def raced(name, expect):  # another worker takes the claim just before this one
        if not tried:
            assert rival.take(name, None) is not None
        tried.append(name)
        return take(name, expect)

    w.claims.take = raced
    assert w.take_one()  # lost: no other job tried on the look that showed it free
    assert len(tried) == 1 and events == []
    assert w.take_one()  # a new look: the job claimed is not tried again
    assert tried[1] != tried[0]
    assert ("claimed", {"claim": tried[1], "took_over": False}) in events
    assert not w.take_one()  # the rival's job is its own
    assert remote_refs(server, "refs/agentfs/claims/") == f"refs/agentfs/claims/{tried[0]}"


def test_workers_take_jobs_in_orders_of_their_own(tmp_path, server):
    person, url = two_traces(tmp_path, server)
    clone = worker_clone(tmp_path, url, "w1")
    orders = set()
    for name in (f"w{i}" for i in range(8)):
        w = worker(clone, GatedModel(person / "script.json", lambda: None), [], lease=30)
        w.name = name
        w.mirror()
        orders.add(tuple(job for job, _ in w.jobs()))
        assert tuple(job for job, _ in w.jobs()) in orders  # the same worker, the same order
    assert orders == {("a", "b"), ("b", "a")}


def test_a_jobs_release_folds_the_unclaimed_backlog_along(tmp_path, server):
    person, url = two_traces(tmp_path, server)
    _, left = left_on_its_ref(tmp_path, url, person)
    assert remote_refs(server, "refs/agentfs/traces/") == f"refs/agentfs/traces/{left}"
    events: list = []
    w2 = worker(worker_clone(tmp_path, url, "w2"), GatedModel(person / "script.json",
                                                              lambda: None), events, lease=30)
    assert w2.take_one()  # the other trace: its release folds both
    assert [e for e, _ in events if e == "folded"] == []  # no fold of its own for it
    assert remote_refs(server, "refs/agentfs/") == ""
    check_remote(person, server, ["a: hello", "b: hello"])
    assert_git_clean(w2.root)


def test_an_idle_worker_folds_anothers_leftover_steps_only_after_a_lease(tmp_path, server):
    url = server.create("ws")
    person = person_clone(tmp_path, url, ("a",))
    owner_events, _ = left_on_its_ref(tmp_path, url, person)
    events: list = []
    w2 = worker(worker_clone(tmp_path, url, "w2"), GatedModel(person / "script.json",
                                                              lambda: None), events, lease=30)
    assert not w2.take_one()  # no job, and the leftover is fresh: left to its worker
    assert events == [] and remote_refs(server, "refs/agentfs/traces/") != ""
    waits = [w2.fold_after(sha) for sha in ("1" * 40, "2" * 40, "3" * 40)]
    assert all(30 <= s < 60 for s in waits) and len(set(waits)) == 3
    w2.lease = 0.0  # the leftover has now waited longer than its bound
    assert not w2.take_one()
    assert [e for e, _ in events] == ["folded"]
    assert remote_refs(server, "refs/agentfs/") == ""
    assert [e for e, _ in owner_events if e == "folded"] == []
    check_remote(person, server, ["a: hello"])


def test_a_failed_git_command_is_named_by_its_verb_not_an_option(tmp_path: Path) -> None:
    """Options and `-c` values (agentfs's identity) come before the command."""
    from agentfs.errors import GitStateError
    from agentfs.store.git.remote import git

    with pytest.raises(GitStateError, match=r"^git commit failed in "):
        git(tmp_path, "-c", "user.name=agentfs", f"--git-dir={tmp_path}/none", "commit")


def test_a_trace_no_run_can_read_is_taken_once_not_at_every_look(tmp_path, server):
    """Two message files with one sequence number (pushed by hand): the run cannot
    read the trace. The worker says so once and leaves the trace until its folder
    changes, instead of claiming and releasing it at every look."""
    person, url = two_traces(tmp_path, server)
    messages = person / "traces" / "a" / "messages" / "000000-000999"
    clash = messages / "000002-assistant.md"
    clash.write_text((messages / "000002-user.md").read_text().replace("user", "assistant"))
    git(person, "add", "-A")
    git(person, "commit", "-qm", "a second message numbered 2")
    git(person, "push", "-q", "origin", "main")
    events: list = []
    runner = worker(worker_clone(tmp_path, url, "w1"), GatedModel(person / "script.json",
                                                                  lambda: None), events, lease=30)
    looks = []
    jobs = runner.jobs
    runner.jobs = lambda: looks.append(1) or jobs()  # type: ignore[method-assign]
    thread = threading.Thread(target=runner.run_forever)
    thread.start()
    try:
        wait_for(lambda: len(looks) >= 8, 60, "eight looks")
    finally:
        runner.stopping.set()
        thread.join(timeout=30)
    claims = [d["claim"] for e, d in events if e == "claimed"]
    assert sorted(claims) == ["a", "b"], events
    errors = [d for e, d in events if e == "error"]
    assert len(errors) == 1 and "sequence 2" in errors[0]["error"], errors
