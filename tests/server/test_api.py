"""The trace API over real HTTP, against `agentfs serve` in its own process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from tests.conftest import assert_git_clean, git, run_cli, side_branches
from tests.server.conftest import (
    Served,
    compressed_and_rewound,
    events,
    start_server,
    stop_server,
)

pytestmark = pytest.mark.timeout(180)


def user_texts(client, trace: str) -> list[str]:
    shown = client.get(f"/api/traces/{trace}/messages", params={"all": "true"}).json()
    return [m["text"] for m in shown["messages"] if m["role"] == "user"]


def test_list_read_post_rewind_compress(served: Served):
    root = served.root
    run_cli("new", "t", "-m", "Read notes.md please", cwd=root)
    with served.client() as client:
        listed = client.get("/api/traces").json()
        assert [(t["trace"], t["head"], t["running"]) for t in listed["traces"]] == [("t", 2, False)]
        row = listed["traces"][0]  # from the trace's summary (agentfs/store/summary.py)
        assert (row["status"], row["messages"], row["title"]) == ("idle", 2, "Read notes.md please")
        assert row["last_activity"] is not None

        ran = client.post("/api/traces/t/run", json={})
        assert ran.status_code in (200, 202)
        posted = client.post("/api/traces/t/messages", json={"text": "and *then*?"})
        if posted.status_code == 202:  # the run still held the trace: it took the message
            pytest.fail(f"a finished run should not hold the trace: {posted.json()}")
        assert posted.status_code == 201 and posted.json()["status"] == "committed"
        sequence = posted.json()["sequence"]

        shown = client.get("/api/traces/t/messages").json()
        assert shown["head"] == sequence
        assert [m["role"] for m in shown["messages"]] == [
            "system", "user", "assistant", "tool", "assistant", "user"]
        assert shown["messages"][-1]["text"] == "and *then*?"
        # the same records as the command line's `show --json`
        cli = json.loads(run_cli("show", "t", "--json", cwd=root).stdout)
        assert cli == shown

        rewound = client.post("/api/traces/t/rewind", json={"sequence": 5}).json()
        assert rewound == {"trace": "t", "previous": sequence, "head": 5, "moved": True,
                           "files": []}
        everything = client.get("/api/traces/t/messages", params={"all": "true"}).json()
        assert [m["on_path"] for m in everything["messages"]][-1] is False
        again = client.post("/api/traces/t/messages", json={"text": "again", "run": True}).json()
        assert again["sequence"] == sequence + 1 and again["run"]["stop"] == "end_turn"

        compressed = client.post("/api/traces/t/compress", json={})
        assert compressed.status_code == 201, compressed.text
        [merged] = compressed.json()["branches"]  # the same record as `compress --json`
        summary = {"sequence": merged["messages"][-1], "branch": merged["branch"]}
        assert [summary["branch"]] == side_branches(root, "t", "compression")
        tree = client.get("/api/traces/t/tree").json()
        assert tree["path"] == [1, 2, summary["sequence"]]
        replaced = [m["sequence"] for m in tree["messages"]
                    if m["replaced_by"] == summary["sequence"]]
        assert replaced == [3, 4, 5, sequence + 1, sequence + 2]
        [branch] = tree["branches"]
        assert branch["type"] == "compression" and branch["from_sequence"] == sequence + 2
        assert branch["summary"] == summary["sequence"]
        assert [m["role"] for m in branch["messages"]] == ["user", "assistant"]

        goals = client.get("/api/traces/t/goals").json()
        assert goals["goals"] == [] and "text" in goals
        assert client.get("/api/knowledge").json() == {"items": []}
        log = client.get("/api/traces/t/log", params={"limit": 3}).json()["steps"]
        assert [s["kind"] for s in log] == ["summary", "queue", "assistant"]

        refused = client.post("/api/traces/t/evaluate-knowledge", json={})
        assert refused.status_code == 409 and refused.json()["hint"]  # nothing pending
        reflected = client.post("/api/traces/t/reflect", json={})
        assert reflected.status_code == 201, reflected.text
        [lesson] = reflected.json()["branches"][0]["items"]
        assert lesson["status"] == "pending" and lesson["title"] == "Read the notes first"
        judged = client.post("/api/traces/t/evaluate-knowledge", json={})
        assert judged.status_code == 201, judged.text
        [verdict] = judged.json()["branches"][-1]["items"]
        assert verdict["id"] == lesson["id"] and verdict["status"] == "accepted"
        [item] = client.get("/api/knowledge").json()["items"]
        assert item["status"] == "accepted"
    assert_git_clean(root)


def test_the_tree_shows_a_compression_its_originals_and_rewinds(served: Served):
    compressed_and_rewound(served.root)
    with served.client() as client:
        tree = client.get("/api/traces/t/tree").json()
    by_seq = {m["sequence"]: m for m in tree["messages"]}
    assert tree["path"] == [1, 2, 12]
    assert by_seq[12]["synthetic"] == "summary" and by_seq[12]["parent"] == 2
    assert sorted(s for s, m in by_seq.items() if m["replaced_by"] == 12) == [3, 4, 5, 8, 9]
    off = sorted(s for s, m in by_seq.items() if not m["on_path"] and m["replaced_by"] is None)
    assert off == [6, 7, 13, 14]  # left off by the two rewinds
    assert by_seq[6]["parent"] == 5 and by_seq[13]["parent"] == 12
    [branch] = tree["branches"]
    assert branch["from_sequence"] == 9 and [m["sequence"] for m in branch["messages"]] == [10, 11]
    assert 10 not in by_seq  # side-branch messages are never in main's work tree


def test_errors_are_json_with_the_right_status(served: Served):
    run_cli("new", "t", "-m", "hi", cwd=served.root)
    with served.client() as client:
        def check(response, status: int, words: str) -> None:
            assert response.status_code == status, response.text
            body = response.json()
            assert set(body) >= {"error", "hint"} and words in body["error"], body

        check(client.get("/api/traces/nope"), 404, "no trace 'nope'")
        check(client.get("/api/traces/..%2F..%2Fetc/messages"), 404, "")
        check(client.post("/api/traces/nope/messages", json={"text": "x"}), 404, "nope")
        check(client.post("/api/traces/t/rewind", json={"sequence": 99}), 404, "#99")
        check(client.get("/api/nothing-here"), 404, "Not Found")
        headers = {"content-type": "application/json"}
        check(client.post("/api/traces/t/messages", content=b"{not json", headers=headers),
              422, "body: not valid JSON")
        check(client.post("/api/traces/t/messages", json={"text": 5}), 422, "text")
        for body in (b'{"text": "caf\xe9"}', b"[" * 50_000 + b"]" * 50_000):  # latin-1; deep
            check(client.post("/api/traces/t/messages", content=body, headers=headers),
                  422, "body: not JSON in UTF-8")
        check(client.post("/api/traces", json={"id": "p", "text": "hi", "preset": "nope"}),
              422, "unknown preset 'nope'")
        check(client.post("/api/traces/t/run", json={"inject_skills": ["nope"]}), 422,
              "unknown skill 'nope'")
        check(client.post("/api/traces/t/messages", json={"text": ""}), 422, "text")
        check(client.post("/api/traces/t/messages", json={"text": "x", "extra": 1}), 422,
              "extra")
        check(client.post("/api/traces/t/messages", json=["text"]), 422, "")
        check(client.post("/api/traces/t/rewind", json={"sequence": "2"}), 422, "sequence")
        check(client.post("/api/traces/t/rewind", json={"sequence": -1}), 422, "sequence")
        check(client.post("/api/traces/t/run", json={"max_iterations": 0}), 422,
              "max_iterations")
        check(client.post("/api/traces/t/run", json={"model": "nosuch:model"}), 422, "nosuch")
        check(client.post("/api/traces", json={"id": "../x", "text": "hi"}), 422, "body.id")
        check(client.post("/api/traces", json={"id": "u", "text": "hi", "model": "nope"}), 422,
              "model")
        check(client.post("/api/traces", json={"id": "t", "text": "hi"}), 409, "exists")
        check(client.post("/api/traces/t/compress", json={}), 409, "summary would not")
        check(client.post("/api/traces/t/stop"), 409, "not running")
        check(client.post("/api/traces/t/messages", content=b'{"text": "x"}',
                          headers={"content-type": "text/plain"}), 415, "JSON")
        huge = json.dumps({"text": "x" * (2 * 1024 * 1024)}).encode()
        check(client.post("/api/traces/t/messages", content=huge, headers=headers), 413, "limit")
        chunked = iter([huge[i:i + 65536] for i in range(0, len(huge), 65536)])
        check(client.post("/api/traces/t/messages", content=chunked, headers=headers), 413,
              "limit")
        check(client.get("/api/traces", headers={"host": "evil.example:80"}), 421, "evil")
        # DNS rebinding: a name that merely starts like a loopback address is a name
        check(client.get("/api/traces", headers={"host": "127.0.0.1.evil.example:80"}), 421,
              "evil")
        check(client.post("/api/traces/t/messages", json={"text": "x"},
                          headers={"origin": "http://127.0.0.1.evil.example"}), 403, "evil")
        check(client.post("/api/traces/t/messages", json={"text": "x"},
                          headers={"origin": "http://evil.example"}), 403, "evil")
        check(client.post("/api/traces/t/messages", headers=headers,
                          json={"text": "x", "run": True, "model": "replay:nope.json"}),
              422, "nope.json")  # refused before the message is committed
        check(client.post("/api/traces/t/run", headers=headers,
                          json={"model": "replay:../../../etc/passwd"}), 422, "workspace")
        assert user_texts(client, "t") == ["hi"]  # nothing refused was committed
        schema = client.get("/openapi.json").json()
        assert "/api/traces/{trace_id}/messages" in schema["paths"]
    assert_git_clean(served.root)


def test_concurrent_posts_are_each_taken_exactly_once(served: Served):
    for trace in ("a", "b", "c"):
        run_cli("new", trace, "-m", f"start {trace}", cwd=served.root)
    jobs = [("a", f"one trace, message {n}") for n in range(20)]
    jobs += [(trace, f"{trace}: message {n}") for n in range(7) for trace in ("a", "b", "c")]
    answers: list = [None] * len(jobs)
    go = threading.Barrier(len(jobs))

    def post(i: int) -> None:
        trace, text = jobs[i]
        with served.client() as client:
            go.wait()
            answers[i] = client.post(f"/api/traces/{trace}/messages", json={"text": text})

    threads = [threading.Thread(target=post, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [a.status_code for a in answers] == [201] * len(jobs), [a.text for a in answers]
    with served.client() as client:
        for trace in ("a", "b", "c"):
            texts = user_texts(client, trace)
            expected = [t for tr, t in jobs if tr == trace]
            assert sorted(texts) == sorted([f"start {trace}", *expected])  # each exactly once
            state = client.get(f"/api/traces/{trace}").json()
            assert state["pending_inbox"] == []
            sequences = [a.json()["sequence"]
                         for a, (tr, _) in zip(answers, jobs, strict=True) if tr == trace]
            assert len(set(sequences)) == len(sequences)
            assert state["head"] == max(sequences)
    assert_git_clean(served.root)


def test_a_run_streams_its_events(served: Served):
    run_cli("new", "t", "-m", "Read notes.md please", cwd=served.root)
    with served.client() as client, client.stream("GET", "/api/traces/t/events") as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        seen = events(stream)
        assert next(seen)[0] == "ready"  # subscribed: nothing from now on is missed
        started = client.post("/api/traces/t/run", json={})
        assert started.status_code in (200, 202)
        kinds, texts = [], []
        for kind, data in seen:
            kinds.append(kind)
            if kind == "text":
                texts.append(data["text"])
            if kind in ("run_finished", "run_failed"):
                break
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished", kinds
    assert kinds.count("assistant") == 2 and "tool_call" in kinds and "tool_result" in kinds
    assert "".join(texts) == "Looking at **notes.md**.Answer 1: `done`."
    assert data["stop"] == "end_turn" and data["iterations"] == 2
    assert_git_clean(served.root)


def served_on(fake, root, tmp_path):
    """`agentfs serve` over `root`, its model the fake Anthropic server's."""
    env = {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": fake.base_url}
    return start_server(root, "--model", "anthropic:claude-test", log=tmp_path / "serve.log",
                        env=env)


def test_stop_ends_the_run_after_its_step_and_a_post_waits_for_it(tmp_path, workspace_root):
    """The fake Anthropic server holds the run inside its second model call: a post
    then goes to the inbox for the run, which takes it after that step; stop lets
    the step finish and ends the run before another model call."""
    from agentfs.testing import FakeAnthropicServer

    config = workspace_root / "agentfs.toml"
    config.write_text(config.read_text() + "\nsettle = 0\n")
    git(workspace_root, "commit", "-qam", "take inbox files at once")
    gate = threading.Event()

    def held(body: dict) -> dict:
        assert gate.wait(60), "the test never let the model answer"
        return {"text": "Reading again.",
                "tool_calls": [{"name": "read_file", "input": {"path": "notes.md"}}]}

    with FakeAnthropicServer() as fake:
        fake.enqueue({"text": "Reading.", "tool_calls": [{"name": "read_file",
                                                          "input": {"path": "notes.md"}}]},
                     held, {"text": "never asked for"})
        served = served_on(fake, workspace_root, tmp_path)
        try:
            with served.client() as client:
                made = client.post("/api/traces", json={"id": "t", "text": "Read notes.md"})
                assert made.status_code == 201, made.text
                with client.stream("GET", "/api/traces/t/events") as stream:
                    seen = events(stream)
                    assert next(seen)[0] == "ready"
                    started = client.post("/api/traces/t/run", json={})
                    assert started.status_code == 202 and started.json()["status"] == "running"
                    fake.wait_for_requests(2, timeout=60)  # inside the held model call
                    assert client.post("/api/traces/t/run", json={}).status_code == 409
                    held = client.post("/api/traces/t/rewind", json={"sequence": 2})
                    assert held.status_code == 409  # the hint fits the API, not a terminal
                    assert "POST /api/traces/t/stop" in held.json()["hint"], held.text
                    posted = client.post("/api/traces/t/messages", json={"text": "meanwhile"})
                    assert posted.status_code == 202 and posted.json()["status"] == "queued"
                    assert client.post("/api/traces/t/stop").status_code == 202
                    gate.set()
                    ends = ((k, d) for k, d in seen if k in ("run_finished", "run_failed"))
                    kind, data = next(ends, (None, None))
                assert kind == "run_finished" and data["stop"] == "stopped", data
                assert data["iterations"] == 2 and len(fake.requests) == 2
                shown = client.get("/api/traces/t/messages").json()["messages"]
                roles = [m["role"] for m in shown]  # (+ a context injection: a user waits)
                assert roles[:6] == ["system", "user", "assistant", "tool", "assistant", "tool"]
                assert roles[-1] == "user" and shown[-1]["text"] == "meanwhile"
                assert [m["text"] for m in shown].count("meanwhile") == 1
                assert client.get("/api/traces/t").json()["pending_inbox"] == []
        finally:
            gate.set()
            assert stop_server(served) == 0, (tmp_path / "serve.log").read_text()
    assert_git_clean(workspace_root)


def test_a_run_whose_model_fails_is_shown_failed_with_its_error(tmp_path, workspace_root):
    """The model answers 400: the run's answer says so, and so do the trace's
    `last_error` and the trace list afterwards (a refusal of the request records
    nothing: the run did not start)."""
    from agentfs.testing import FakeAnthropicServer

    with FakeAnthropicServer() as fake:
        fake.fail_next(400, count=5)
        served = served_on(fake, workspace_root, tmp_path)
        try:
            with served.client() as client:
                made = client.post("/api/traces", json={"id": "t", "text": "hi"})
                assert made.status_code == 201, made.text
                started = client.post("/api/traces/t/run", json={})
                assert started.status_code in (200, 202), started.text  # over, or running
                deadline = time.monotonic() + 60
                while (state := client.get("/api/traces/t").json())["server_run"]:
                    assert time.monotonic() < deadline, state
                    time.sleep(0.02)
                assert "400" in state["last_error"]["error"], state
                [row] = client.get("/api/traces").json()["traces"]
                assert row["status"] == "failed" and row["last_error"], row
        finally:
            assert stop_server(served) == 0, (tmp_path / "serve.log").read_text()
    assert_git_clean(workspace_root)


def test_serve_without_the_extra_says_what_to_install(workspace_root, tmp_path):
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "uvicorn.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'uvicorn'\", name='uvicorn')\n")
    done = subprocess.run(
        [sys.executable, "-m", "agentfs", "serve", "--port", "0"], cwd=workspace_root,
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "PYTHONPATH": str(blocker)})
    assert done.returncode == 1
    assert "pip install 'agentfs-workspace[serve]'" in done.stderr


def test_only_loopback_addresses_and_localhost_count_as_loopback():
    from agentfs.server.guard import is_loopback

    assert all(map(is_loopback, ["127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost",
                                 "LOCALHOST"]))
    assert not any(map(is_loopback, ["127.0.0.1.evil.example", "127.evil", "0.0.0.0",
                                     "192.168.1.2", "localhost.evil.example", "", "::"]))
