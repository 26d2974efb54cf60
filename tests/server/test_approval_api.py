"""Asking before acting through the API: a run started with `approve` stops at a call
that may change something; the trace shows the waiting call; POST .../approval
answers it and the run goes on."""

from __future__ import annotations

import time

from tests.conftest import assert_git_clean, replay_workspace, run_cli
from tests.server.conftest import start_server, stop_server

SCRIPT = {"turns": [
    {"text": "Writing.", "tool_calls": [
        {"name": "write_file", "input": {"path": "out.txt", "content": "hi\n"}}]},
    {"text": "Written."},
    {"text": "Again.", "tool_calls": [
        {"name": "write_file", "input": {"path": "again.txt", "content": "no\n"}}]},
    {"text": "Fine, not written."},
]}


def wait_until_idle(client, trace: str) -> dict:
    """The trace's state once the server's run of it has ended (a deadline, no sleep
    to wait for a fixed time)."""
    deadline = time.monotonic() + 60
    while True:
        state = client.get(f"/api/traces/{trace}").json()
        if not state["server_run"]:
            return state
        assert time.monotonic() < deadline, state
        time.sleep(0.02)


def test_a_run_waits_for_approval_and_the_api_answers_it(tmp_path):
    root = replay_workspace(tmp_path / "ws", SCRIPT)
    run_cli("new", "t", "-m", "write it", cwd=root)
    served = start_server(root, log=tmp_path / "serve.log")
    try:
        with served.client() as client:
            client.post("/api/traces/t/run", json={"approve": True})
            state = wait_until_idle(client, "t")
            assert state["approval"]["tool"] == "write_file"
            assert state["approval"]["input"] == {"path": "out.txt", "content": "hi\n"}
            assert state["approval"]["answer"] is None
            listed = client.get("/api/traces").json()["traces"][0]
            assert listed["approval"] == "write_file"
            assert not (root / "out.txt").exists()

            answered = client.post("/api/traces/t/approval", json={"answer": "yes"})
            assert answered.status_code in (200, 202), answered.text
            assert answered.json()["approval"]["answer"] == "yes"
            assert wait_until_idle(client, "t")["approval"] is None
            assert (root / "out.txt").read_text() == "hi\n"

            again = client.post("/api/traces/t/approval", json={"answer": "no"})
            assert again.status_code == 409  # nothing waits
            client.post("/api/traces/t/messages", json={"text": "once more", "run": True})
            wait_until_idle(client, "t")  # the server's default: agentfs.toml's none
            assert (root / "again.txt").exists()
            bad = client.post("/api/traces/t/approval", json={"answer": "perhaps"})
            assert bad.status_code == 422
    finally:
        assert stop_server(served) == 0
    assert_git_clean(root)


def test_approval_turned_on_in_agentfs_toml_applies_to_a_running_server(tmp_path):
    """A server started with approval off (agentfs.toml's "none") reads agentfs.toml
    again when a run starts: once it says "acting", the next run asks first."""
    root = replay_workspace(tmp_path / "ws", SCRIPT)
    run_cli("new", "t", "-m", "write it", cwd=root)
    served = start_server(root, log=tmp_path / "serve.log")
    try:
        with served.client() as client:
            config = root / "agentfs.toml"
            config.write_text(config.read_text() + '\n[tools]\napprove = "acting"\n')
            client.post("/api/traces/t/run", json={})
            state = wait_until_idle(client, "t")
            assert state["approval"]["tool"] == "write_file"
            assert not (root / "out.txt").exists()
    finally:
        assert stop_server(served) == 0
    assert "agentfs.toml or its trust changed" in (tmp_path / "serve.log").read_text()


def test_a_model_named_in_agentfs_toml_after_the_start_is_the_next_runs(tmp_path):
    """The server reads agentfs.toml again before it chooses a run's model, not after."""
    import json

    root = replay_workspace(tmp_path / "ws", SCRIPT)
    (root / "other.json").write_text(json.dumps({"turns": [{"text": "From the other."}]}))
    run_cli("new", "t", "-m", "write it", cwd=root)
    served = start_server(root, log=tmp_path / "serve.log")
    try:
        with served.client() as client:
            config = root / "agentfs.toml"
            config.write_text(config.read_text().replace("replay:script.json",
                                                         "replay:other.json"))
            client.post("/api/traces/t/run", json={})
            wait_until_idle(client, "t")
            shown = client.get("/api/traces/t/messages").json()["messages"]
            assert shown[-1]["text"] == "From the other."
    finally:
        assert stop_server(served) == 0
