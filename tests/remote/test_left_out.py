"""A trace ref a fold leaves out: its job wrote a file outside the trace that `main`
changed too (a tool wrote a shared file on two machines). The worker says so, never
takes the trace (nor the inbox file it was made from) again, and never replaces the
ref's steps; `agentfs sync` folds the ref with its merge, stopping for the person on
a real conflict, and never says "up to date" while the ref holds steps main lacks."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from agentfs.remote.publish import fetch
from agentfs.testing.gitserver import GitServer
from agentfs.watch import worker as worker_module
from tests.conftest import git, run_cli
from tests.remote.fleet import person_clone, worker_clone
from tests.remote.test_partition import GatedModel, check_remote, worker


@pytest.fixture
def server(tmp_path: Path):
    with GitServer(tmp_path / "server") as served:
        yield served


def bare(server: GitServer) -> Path:
    return server.base / "ws.git"


def remote_refs(server: GitServer, prefix: str) -> list[str]:
    return git(bare(server), "for-each-ref", "--format=%(refname)", prefix).split()


def script(root: Path, name: str, path: str, content: str) -> Path:
    """A replay script: write `content` to `path`, then answer."""
    turns = [{"tool_calls": [{"name": "write_file", "input": {"path": path, "content": content}}]},
             {"text": f"{name} done"}]
    target = root / f"{name}.json"
    target.write_text(json.dumps({"turns": turns}))
    return target


def commit_and_push(person: Path, path: str, content: str, message: str = "") -> None:
    """A change of a workspace file pushed to main straight (a person, or another
    trace's fold)."""
    (person / path).write_text(content)
    git(person, "add", path)
    git(person, "commit", "-qm", message or f"{path} changed")
    git(person, "push", "-q", "origin", "main")


def run_job(clone: Path, script_path: Path, person: Path, path: str, content: str) -> list:
    """One worker's `run_once` on the replay `script_path`: once the job's write_file
    step is committed, `path` changes on main too. A second run of the same job stops
    the worker (the defect this file is about). Returns the worker's events."""
    events: list = []
    calls: list[int] = []

    def gate() -> None:
        calls.append(1)
        if len(calls) == 2:  # the job's step wrote `path`: main changes it too
            commit_and_push(person, path, content, f"{path} changed during the job")
        elif len(calls) > 2:
            runner.stopping.set()

    runner = worker(clone, GatedModel(script_path, gate), events, lease=30)
    thread = threading.Thread(target=runner.run_once)
    thread.start()
    thread.join(timeout=120)
    assert not thread.is_alive()
    return events


def resolve_with(person: Path, path: str, content: str) -> None:
    """The person keeps `content` at `path` and deletes the conflict copies."""
    (person / path).write_text(content)
    for copy in person.glob(f"{path}.conflict-*"):
        copy.unlink()


def new_trace_left_out(tmp_path: Path, server: GitServer) -> tuple[str, Path, list]:
    """A person's file for new trace p2, whose job writes shared.md while main changes it
    too: (the remote's URL, the person's clone, the worker's events)."""
    url = server.create("ws")
    person = person_clone(tmp_path, url, ())
    commit_and_push(person, "shared.md", "start\n")
    p2 = script(tmp_path, "p2", "shared.md", "from p2\n")
    (person / "inbox" / "p2.md").write_text("write the shared file\n")
    run_cli("sync", cwd=person)
    events = run_job(worker_clone(tmp_path, url, "w1"), p2, person, "shared.md",
                     "from the person\n")
    return url, person, events


def test_a_new_trace_whose_release_leaves_its_ref_out_runs_once_and_sync_folds_it(
        tmp_path, server):
    url, person, events = new_trace_left_out(tmp_path, server)

    assert [d["file"] for e, d in events if e == "new_trace"] == ["p2.md"]  # run once
    assert [d for e, d in events if e == "not_folded"] == [
        {"trace": "p2", "paths": ["shared.md"]}]
    assert any(e == "released" for e, _ in events)
    assert remote_refs(server, "refs/agentfs/claims/") == []
    # the run's steps wait on its ref, whole; main still has the inbox file
    assert remote_refs(server, "refs/agentfs/traces/") == ["refs/agentfs/traces/p2"]
    steps = git(bare(server), "log", "--format=%s", "main..refs/agentfs/traces/p2").splitlines()
    assert any("assistant" in s for s in steps) and len(steps) >= 4, steps
    assert git(bare(server), "ls-tree", "--name-only", "main", "inbox/p2.md") == "inbox/p2.md\n"

    # sync merges the ref: a real conflict on shared.md stops it, nothing pushed
    main = git(bare(server), "rev-parse", "main")
    stopped = run_cli("sync", cwd=person, check=False)
    assert stopped.returncode == 1, stopped.stdout
    assert "shared.md" in stopped.stderr and "p2" in stopped.stderr
    assert git(bare(server), "rev-parse", "main") == main
    assert (person / "shared.md").read_text() == "from the person\n"
    [copy] = person.glob("shared.md.conflict-*")
    assert copy.read_text() == "from p2\n"
    assert not (person / "inbox" / "p2.md").exists()

    # main moves before the person has chosen: the next sync still only deletes the ref
    other = worker_clone(tmp_path, url, "other")
    commit_and_push(other, "unrelated.md", "meanwhile\n")
    resolve_with(person, "shared.md", "from both\n")
    assert "pushed" in run_cli("sync", cwd=person).stdout
    assert git(bare(server), "show", "main:unrelated.md") == "meanwhile\n"
    assert not list(person.glob("*.conflict-*"))
    assert remote_refs(server, "refs/agentfs/") == []
    assert git(bare(server), "show", "main:shared.md") == "from both\n"
    check_remote(person, server, ["p2: write the shared file"])
    assert run_cli("sync", cwd=person).stdout.strip() == "up to date"


def test_sync_folds_a_finished_traces_ref_left_out_instead_of_saying_up_to_date(
        tmp_path, server):
    url = server.create("ws")
    person = person_clone(tmp_path, url, ("x",))
    commit_and_push(person, "log.txt", "start\n")
    x = script(tmp_path, "x", "log.txt", "start\nfrom x\n")
    (person / "traces" / "x" / "inbox" / "q.md").write_text("append to the log\n")
    run_cli("sync", cwd=person)
    clone = worker_clone(tmp_path, url, "w1")

    events = run_job(clone, x, person, "log.txt", "start\nfrom another job\n")

    assert [d["trace"] for e, d in events if e == "run_started"] == ["x"]
    assert remote_refs(server, "refs/agentfs/traces/") == ["refs/agentfs/traces/x"]
    assert [d for e, d in events if e == "not_folded"] == [{"trace": "x", "paths": ["log.txt"]}]
    # another worker's view finds the ref left out: it says so once, and takes nothing
    seen: list = []
    other = worker(worker_clone(tmp_path, url, "w2"), GatedModel(x, lambda: None), seen, lease=30)
    other.run_once()
    other.run_once()
    assert [d for e, d in seen if e == "not_folded"] == [{"trace": "x", "paths": ["log.txt"]}]
    assert not any(e == "claimed" for e, _ in seen), seen
    # the person's clone is the remote's main, but trace x's steps are not on it
    assert git(person, "rev-parse", "HEAD") == git(bare(server), "rev-parse", "main")
    stopped = run_cli("sync", cwd=person, check=False)
    assert stopped.returncode == 1 and "up to date" not in stopped.stdout
    assert "log.txt" in stopped.stderr
    assert (person / "traces" / "x" / "inbox" / "q.md").exists() is False

    resolve_with(person, "log.txt", "start\nfrom another job\nfrom x\n")
    done = run_cli("sync", cwd=person)
    assert "pushed" in done.stdout
    assert remote_refs(server, "refs/agentfs/") == []
    check_remote(person, server, ["x: hello", "x: append to the log"])
    # carried in line: what reached main meanwhile and x's own steps stay on the
    # first-parent line, which `agentfs log` and the step lookups follow
    line = git(bare(server), "log", "--first-parent", "--format=%s", "main").splitlines()
    assert "log.txt changed during the job" in line, line
    logged = run_cli("log", "x", cwd=person).stdout
    assert "overwrote log.txt" in logged and "x done" in logged, logged
    # a worker looking now finds nothing to do: x is answered
    more: list = []
    worker(clone, GatedModel(x, lambda: None), more, lease=30).run_once()
    assert not any(e == "claimed" for e, _ in more), more


def test_a_sync_stopped_then_abandoned_carries_the_ref_again_and_deletes_nothing(
        tmp_path, server):
    """The ref is only deleted while this clone holds the copy a stopped sync made:
    a person who threw that away (`git reset --hard`) is asked again."""
    _, person, _ = new_trace_left_out(tmp_path, server)
    before = git(person, "rev-parse", "HEAD").strip()
    assert run_cli("sync", cwd=person, check=False).returncode == 1
    git(person, "reset", "-q", "--hard", before)  # the stop thrown away
    for copy in person.glob("shared.md.conflict-*"):
        copy.unlink()
    again = run_cli("sync", cwd=person, check=False)
    assert again.returncode == 1 and "shared.md" in again.stderr
    assert remote_refs(server, "refs/agentfs/traces/") == ["refs/agentfs/traces/p2"]
    resolve_with(person, "shared.md", "from both\n")
    assert "pushed" in run_cli("sync", cwd=person).stdout
    assert remote_refs(server, "refs/agentfs/") == []
    check_remote(person, server, ["p2: write the shared file"])


def test_a_ref_fetched_beside_the_main_that_folded_it_is_looked_at_again_not_left_out(
        tmp_path, server, monkeypatch):
    """A fold's push moves main before the remote deletes the refs it folded, so a
    fetch in between sees main holding a ref's steps (re-made) and the ref still
    there: its older step meets its newer one on main, as a ref left out would. The
    worker fetches once more before it believes that: no `not_folded`."""
    url = server.create("ws")
    person = person_clone(tmp_path, url, ("a",))
    start = git(person, "rev-parse", "HEAD").strip()
    for line, target in (("ref", "refs/agentfs/traces/a"), ("fold", "main")):
        git(person, "reset", "-q", "--hard", start)
        for n in (1, 2):  # two steps of trace a that change one file
            (person / "traces" / "a" / "notes.md").write_text(f"v{n}\n")
            git(person, "add", "traces/a/notes.md")
            git(person, "commit", "-qm", f"a: step {n} ({line})")
        git(person, "push", "-q", "-f", "origin", f"HEAD:{target}")
    clone = worker_clone(tmp_path, url, "w1")
    events: list = []
    looks: list[str | None] = []

    def fetch_while_the_fold_lands(remote):
        looks.append(fetch(remote))
        if len(looks) == 1:  # the remote deletes the folded ref right after this fetch
            git(bare(server), "update-ref", "-d", "refs/agentfs/traces/a")
        return looks[-1]

    monkeypatch.setattr(worker_module, "fetch", fetch_while_the_fold_lands)
    runner = worker(clone, None, events, lease=30)
    assert runner.mirror() == git(bare(server), "rev-parse", "main").strip()
    assert len(looks) == 2 and runner.left_out == {}
    assert [event for event, _ in events if event == "not_folded"] == []
