"""A step's file diff, a rewind with files and a fork through the API of a real
`agentfs serve`, each answering what the matching command does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import assert_git_clean, git, replay_workspace, run_cli
from tests.server.conftest import Served

pytestmark = pytest.mark.timeout(180)

SCRIPT = {"turns": [
    {"text": "Writing.", "tool_calls": [
        {"name": "write_file", "input": {"path": "a.md", "content": "one\n"}}]},
    {"text": "Done 1."},
    {"text": "Again.", "tool_calls": [
        {"name": "write_file", "input": {"path": "a.md", "content": "two\n"}},
        {"name": "write_file", "input": {"path": "b.md", "content": "bee\n"}}]},
    {"text": "Done 2."},
    {"text": "Done 3."},
]}


@pytest.fixture
def workspace_root(tmp_path: Path) -> Path:
    """Trace t: #3 writes a.md (#4), #5 "Done 1.", #6 user, #7 rewrites a.md and writes
    b.md (#8, #9), #10 "Done 2."."""
    root = replay_workspace(tmp_path / "ws", SCRIPT, {"mine.md": "mine\n"})
    run_cli("run", "t", "-m", "write", cwd=root)
    run_cli("run", "t", "-m", "again", cwd=root)
    return root


def test_a_tool_results_diff_is_the_steps_diff_of_its_own_files(served: Served):
    root = served.root
    with served.client() as client:
        tree = client.get("/api/traces/t/tree").json()
        changed = {m["sequence"]: m["files_changed"] for m in tree["messages"]}
        assert changed[8] == ["a.md"] and changed[9] == ["b.md"] and changed[10] == []
        diff = client.get("/api/traces/t/messages/8/diff").json()
        commit = git(root, "log", "-1", "--format=%H", "--grep", "Agentfs-Sequence: 9").strip()
        assert diff == {"trace": "t", "sequence": 8, "commit": commit,
                        "files": [{"path": "a.md", "status": "modified"}],
                        "diff": git(root, "show", "--format=", commit, "--", "a.md")}
        assert "-one\n+two\n" in diff["diff"]
        steps = json.loads(run_cli("log", "t", "-p", "--json", cwd=root).stdout)["steps"]
        assert diff["diff"] in next(s["diff"] for s in steps if s["commit"] == commit)
        none = client.get("/api/traces/t/messages/10/diff").json()
        assert none == {"trace": "t", "sequence": 10, "commit": None, "files": [], "diff": ""}
        assert client.get("/api/traces/t/messages/99/diff").status_code == 404


def test_a_rewind_refused_for_changed_files_hints_at_the_body_field_not_the_flag(
        served: Served):
    (served.root / "b.md").write_text("the user's b\n")
    with served.client() as client:
        refused = client.post("/api/traces/t/rewind", json={"sequence": 5, "files": True})
    assert refused.status_code == 409
    assert refused.json()["hint"].endswith('or rewind with "files": false')
    cli = run_cli("rewind", "t", "5", "--files", cwd=served.root, check=False)
    assert cli.returncode == 1 and "or rewind without --files" in cli.stderr


def test_rewind_with_files_restores_or_refuses_naming_the_files(served: Served):
    root = served.root
    with served.client() as client:
        (root / "b.md").write_text("the user's b\n")
        refused = client.post("/api/traces/t/rewind", json={"sequence": 5, "files": True})
        assert refused.status_code == 409
        assert "b.md changed since the agent last wrote it" in refused.json()["error"]
        assert json.loads((root / "traces/t/trace.json").read_text())["head"] == 10
        (root / "b.md").write_text("bee\n")
        done = client.post("/api/traces/t/rewind", json={"sequence": 5, "files": True}).json()
        assert done == {"trace": "t", "previous": 10, "head": 5, "moved": True,
                        "files": ["a.md", "b.md"]}
        assert (root / "a.md").read_text() == "one\n" and not (root / "b.md").exists()
        assert (root / "mine.md").read_text() == "mine\n"
    assert_git_clean(root)


def test_fork_through_the_api_is_agentfs_fork(served: Served):
    root = served.root
    with served.client() as client:
        made = client.post("/api/traces/t/fork", json={"at": 5, "id": "t2"})
        assert made.status_code == 201
        commit = git(root, "log", "-1", "--format=%H", "--grep", "Agentfs-Kind: assistant",
                     "--grep", "Agentfs-Sequence: 5", "--all-match").strip()
        assert made.json() == {"trace": "t2", "head": 5, "forked_from": {
            "trace": "t", "sequence": 5, "commit": commit}}
        assert client.get("/api/traces/t2").json()["forked_from"]["trace"] == "t"
        assert client.get("/api/traces/t2/tree").json()["path"] == [1, 2, 3, 4, 5]
        copied = client.get("/api/traces/t2/messages/4/diff").json()  # from t's step
        assert copied["files"] == [{"path": "a.md", "status": "added"}]
        assert copied == {**client.get("/api/traces/t/messages/4/diff").json(), "trace": "t2"}
        assert client.get("/api/traces/t").json()["forked_from"] is None
        default = client.post("/api/traces/t/fork", json={}).json()
        assert default["trace"] == "t-fork-1" and default["head"] == 10
        assert client.post("/api/traces/t/fork", json={"id": "t2"}).status_code == 409
        assert client.post("/api/traces/t/fork", json={"at": 3}).status_code == 409
        assert client.post("/api/traces/t/fork", json={"at": 77}).status_code == 404
        assert client.post("/api/traces/t/fork", json={"id": "a/b"}).status_code == 422
    assert git(root, "log", "-1", "--format=%s").strip() == "t-fork-1: create #10 forked from t at #10"
    assert_git_clean(root)


def test_a_fork_rewinds_its_files_and_shows_its_copied_diffs_through_the_api(served: Served):
    """The steps that made a fork's copied messages are its origin's, through a fork of a
    fork too: the diff of a copied result and the files a rewind puts back come from them."""
    root = served.root
    with served.client() as client:
        assert client.post("/api/traces/t/fork", json={"id": "t2"}).status_code == 201
        assert client.post("/api/traces/t2/fork", json={"id": "t3"}).status_code == 201
        copied = client.get("/api/traces/t3/messages/8/diff").json()
        assert copied == {**client.get("/api/traces/t/messages/8/diff").json(), "trace": "t3"}
        assert copied["files"] == [{"path": "a.md", "status": "modified"}]
        done = client.post("/api/traces/t3/rewind", json={"sequence": 5, "files": True}).json()
        assert done == {"trace": "t3", "previous": 10, "head": 5, "moved": True,
                        "files": ["a.md", "b.md"]}
        assert (root / "a.md").read_text() == "one\n" and not (root / "b.md").exists()
    assert git(root, "log", "-1", "--format=%s").strip() == (
        "t3: rewind #5 head moved to #5 (assistant), 2 files restored")
    assert_git_clean(root)
