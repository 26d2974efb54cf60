"""A post with an Idempotency-Key is made once, however often a client retries it:
after a lost answer, a killed server, a crash at any point of the post, or two
retries at once."""

from __future__ import annotations

import contextlib
import json
import random
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from agentfs.core import actions
from agentfs.core.project import Project
from agentfs.errors import AgentfsError
from agentfs.store import ingest
from agentfs.store.inbox import save_in_inbox
from agentfs.store.meta import POSTED_KEYS, TraceMeta, remember_post
from agentfs.store.trace import Trace
from agentfs.testing import ScriptedModel
from tests.conftest import assert_git_clean, run_cli, user
from tests.server.conftest import Served, read_lines, start_server, stop_server
from tests.server.test_api import user_texts

KEY = "6f1c2a9e-3b7d-4e58-9a21-0c4d5e6f7a8b"


def post(client: httpx.Client, text: str, key: str | None = KEY, trace: str = "t",
         **body) -> httpx.Response:
    headers = {"Idempotency-Key": key} if key is not None else {}
    return client.post(f"/api/traces/{trace}/messages", json={"text": text, **body},
                       headers=headers)


def test_a_retry_is_answered_with_the_first_post_and_posts_nothing(served: Served):
    run_cli("new", "t", "-m", "start", cwd=served.root)
    run_cli("new", "u", "-m", "start", cwd=served.root)
    with served.client() as client:
        first = post(client, "Write the summary")
        assert first.status_code == 201, first.text
        answer = first.json()
        assert answer["status"] == "committed" and "repeated" not in answer
        assert answer["file"].startswith("traces/t/inbox/") and f"-key-{KEY}.md" in answer["file"]
        again = post(client, "Write the summary")
        assert again.status_code == 201
        assert again.json() == {"trace": "t", "status": "committed", "file": None,
                                "sequence": answer["sequence"], "repeated": True}
        assert user_texts(client, "t") == ["start", "Write the summary"]
        assert post(client, "Write the summary", key="another").json()["sequence"] \
            == answer["sequence"] + 1  # another key: another post
        assert post(client, "Write the summary", trace="u").json()["status"] == "committed"
        assert user_texts(client, "u") == ["start", "Write the summary"]  # keys are per trace
        assert "run" in post(client, "Write the summary", run=True).json()  # as asked
    meta = json.loads((served.root / "traces/t/trace.json").read_text())
    assert meta["posted"] == {KEY: answer["sequence"], "another": answer["sequence"] + 1}


@pytest.mark.parametrize("key", ["", "a" * 65, "has space", "dot.dot", "../x", "é"])
def test_a_bad_key_is_a_422_and_nothing_is_written(served: Served, key: str):
    run_cli("new", "t", "-m", "start", cwd=served.root)
    with served.client() as client:
        refused = client.post("/api/traces/t/messages", json={"text": "hello"},
                              headers={"Idempotency-Key": key.encode()})
        assert refused.status_code == 422, refused.text
        assert "Idempotency-Key" in refused.json()["error"]
        assert user_texts(client, "t") == ["start"]
    assert [p.name for p in (served.root / "traces/t/inbox").iterdir()] == [".gitkeep"]


def test_retries_at_once_post_one_message(served: Served):
    run_cli("new", "t", "-m", "start", cwd=served.root)
    answers: list = [None] * 12
    go = threading.Barrier(len(answers))

    def send(i: int) -> None:
        with served.client() as client:
            go.wait()
            answers[i] = post(client, "Only once")

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(answers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert {a.status_code for a in answers} == {201}, [a.text for a in answers]
    assert len({a.json()["sequence"] for a in answers}) == 1
    assert sum(not a.json().get("repeated") for a in answers) == 1
    with served.client() as client:
        assert user_texts(client, "t") == ["start", "Only once"]
    assert_git_clean(served.root)


def test_a_server_killed_during_a_post_is_retried_into_one_message(served: Served,
                                                                   tmp_path: Path):
    """SIGKILL at a random instant of a post, a new server, the same post again until
    it is answered: every message is there once."""
    root = served.root
    run_cli("new", "t", "-m", "start", cwd=root)
    rng = random.Random(2026)
    server = served
    texts = [f"message {n}" for n in range(5)]
    for n, text in enumerate(texts):
        key = f"kill-{n}"
        sender = threading.Thread(target=_post_ignoring_errors, args=(server, text, key))
        sender.start()
        time.sleep(rng.uniform(0.005, 0.15))
        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait()
        read_lines(server, 100, deadline=10)  # to the end of what it printed
        server.proc.stdout.close()
        sender.join()
        server = start_server(root, log=tmp_path / f"serve-{n}.log")
        with server.client() as client:
            retried = post(client, text, key=key)
        assert retried.status_code == 201, retried.text
    with server.client() as client:
        assert user_texts(client, "t") == ["start", *texts]
    assert stop_server(server) == 0
    assert_git_clean(root)


def _post_ignoring_errors(server: Served, text: str, key: str) -> None:
    """Post; the server's death (no answer, whatever the error) is what is tested."""
    with contextlib.suppress(Exception), server.client() as client:
        post(client, text, key=key)


# --- a crash at each point of a post, in process -------------------------------------


class Killed(BaseException):
    """The process dies here: nothing catches it, no clean-up runs but `finally`s."""


def _dies_after(monkeypatch, owner, name: str) -> None:
    real = getattr(owner, name)

    def dying(*args, **kwargs):
        real(*args, **kwargs)
        raise Killed(name)

    monkeypatch.setattr(owner, name, dying)


POINTS = [
    (actions, "_save"),  # written into the inbox, not taken
    (ingest, "stage"),  # claimed: the file left the inbox
    (Trace, "write_message"),  # the message file written, trace.json not (helper-45)
    (Trace, "save_meta"),  # trace.json names the key, nothing committed (helper-45)
    (Trace, "commit_step"),  # committed, the claim not yet dropped
    (ingest, "unstage"),  # all done but the answer
]


@pytest.mark.parametrize("point", POINTS, ids=[name for _, name in POINTS])
def test_a_post_cut_short_anywhere_is_made_once_by_its_retry(project: Project, monkeypatch,
                                                             point):
    project.new_trace("t", user("start"))
    owner, name = point
    with monkeypatch.context() as dying:
        _dies_after(dying, owner, name)
        with pytest.raises(Killed):
            actions.post_message(project.trace("t"), "Only once", key=KEY)
    retried = actions.post_message(project.trace("t"), "Only once", key=KEY)
    assert retried.repeated and retried.status == "committed"
    again = actions.post_message(project.trace("t"), "Only once", key=KEY)
    assert (again.status, again.sequence) == ("committed", retried.sequence)
    texts = [m.text for m in project.trace("t").main_path() if m.role == "user"]
    assert texts.count("Only once") == 1
    assert project.trace("t").messages()[retried.sequence].text == "Only once"
    assert not list((project.workspace.ingest_dir / "t").glob("*"))  # no claim left
    assert_git_clean(project.workspace.root)


def test_a_queued_post_stays_when_its_retry_is_refused_and_is_taken_once_later(
        project: Project) -> None:
    """A post answered `queued` is the client's: a retry refused because of a broken
    hand edit must not remove its file (helper-45)."""
    trace = project.new_trace("t", user("start"))
    with trace.lock():  # a run holds the trace: the post is queued
        queued = actions.post_message(project.trace("t"), "Only once", key=KEY, patience=0.1)
    assert queued.status == "queued"
    first = next(trace.messages_dir.rglob("000002-user.md"))
    good = first.read_text()
    first.write_text(good.replace("role: user", "role: assistant"))  # refused by recovery
    with pytest.raises(AgentfsError):
        actions.post_message(project.trace("t"), "Only once", key=KEY)
    assert [p.name for p in trace.inbox_dir.glob("*.md")] == [queued.file.rpartition("/")[2]]
    first.write_text(good)
    retried = actions.post_message(project.trace("t"), "Only once", key=KEY)
    assert retried.status == "committed" and retried.repeated
    texts = [m.text for m in project.trace("t").main_path() if m.role == "user"]
    assert texts == ["start", "Only once"]
    assert_git_clean(project.workspace.root)


def test_a_file_left_waiting_by_a_killed_server_is_taken_by_a_run_and_found_by_the_retry(
        project: Project):
    trace = project.new_trace("t", user("start"))
    save_in_inbox(trace.inbox_dir, "Only once", key=KEY)  # the server died after this
    project.runner(ScriptedModel("An answer.")).run("t", [])  # takes it, answers it
    retried = actions.post_message(project.trace("t"), "Only once", key=KEY)
    assert (retried.status, retried.repeated, retried.file) == ("committed", True, None)
    texts = [m.text for m in project.trace("t").main_path() if m.role == "user"]
    assert texts == ["start", "Only once"]
    assert_git_clean(project.workspace.root)


def test_trace_json_keeps_the_latest_keys_only():
    meta = TraceMeta(id="t")
    for n in range(POSTED_KEYS + 5):
        remember_post(meta, f"k{n}", n)
    remember_post(meta, "k10", 1000)  # an old key used again is the newest
    assert meta.posted is not None and len(meta.posted) == POSTED_KEYS
    assert "k0" not in meta.posted and list(meta.posted)[-1] == "k10"


def test_a_post_a_run_adopted_after_a_crash_is_found_by_its_retry(project: Project,
                                                                   monkeypatch) -> None:
    """Killed after the message file was written: the next run's recovery adopts it,
    and records its key as the ingest would have (helper-45)."""
    project.new_trace("t", user("start"))
    with monkeypatch.context() as dying:
        _dies_after(dying, Trace, "write_message")
        with pytest.raises(Killed):
            actions.post_message(project.trace("t"), "Only once", key=KEY)
    project.runner(ScriptedModel("An answer.")).run("t", [])
    retried = actions.post_message(project.trace("t"), "Only once", key=KEY)
    assert (retried.status, retried.repeated) == ("committed", True)
    texts = [m.text for m in project.trace("t").main_path() if m.role == "user"]
    assert texts == ["start", "Only once"]
    assert_git_clean(project.workspace.root)
