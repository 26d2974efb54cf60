"""The trace list (`agentfs status`) from each trace's summary, and `agentfs run` with
nothing to do deciding so from the head's file alone."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from agentfs.store import dirmemory, message_dir
from tests.conftest import git, long_trace, replay_workspace, run_cli

SCRIPT = {"turns": [
    {"text": "Looking.", "tool_calls": [{"name": "read_file", "input": {"path": "notes.md"}}]},
    {"text": "Done."},
    {"text": "Again."},
]}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return replay_workspace(tmp_path / "ws", SCRIPT, {"notes.md": "some notes\n"})


def rows(root: Path) -> dict[str, dict]:
    listed = json.loads(run_cli("status", "--json", cwd=root).stdout)["traces"]
    return {row["trace"]: row for row in listed}


def listed(row: dict) -> tuple:
    return row["status"], row["messages"], row["title"], row["head"]


def message_files(root: Path, trace: str) -> list[Path]:
    return sorted((root / "traces" / trace / "messages").rglob("*.md"))


def test_status_lists_state_title_messages_and_last_activity_kept_by_each_step(ws):
    run_cli("new", "t", "-m", "Summarize notes.md\n\nin two lines", cwd=ws)
    run_cli("new", "u", "-m", "Another task", cwd=ws)
    row = rows(ws)["t"]
    assert listed(row) == ("idle", 2, "Summarize notes.md", 2)  # a run has work: the user's turn
    assert row["last_activity"] is not None

    run_cli("run", "t", cwd=ws)
    (ws / "traces" / "u" / "inbox" / "more.md").write_text("more\n")
    now = rows(ws)
    assert listed(now["t"]) == ("waiting", 5, "Summarize notes.md", 5)
    assert listed(now["u"]) == ("idle", 2, "Another task", 2)
    assert now["t"]["last_activity"] >= row["last_activity"]
    assert now["t"]["usage"]["calls"] == 2  # today's fields are kept beside the new ones
    text = run_cli("status", cwd=ws).stdout
    assert "t " in text and "waits for a user message, 5 messages" in text
    assert "'Summarize notes.md'" in text

    # no message file is read: with every one of them unreadable the list is the same
    for path in message_files(ws, "t"):
        path.write_bytes(b"\xff\xfe not a message")
    assert listed(rows(ws)["t"]) == ("waiting", 5, "Summarize notes.md", 5)


def test_a_missing_or_stale_summary_is_built_again_from_the_files(ws):
    run_cli("new", "t", "-m", "Summarize notes.md", cwd=ws)
    run_cli("run", "t", cwd=ws)
    before = rows(ws)["t"]
    shutil.rmtree(ws / ".git" / "agentfs" / "summaries")
    assert listed(rows(ws)["t"]) == listed(before)
    (kept,) = (ws / ".git" / "agentfs" / "summaries" / "t").iterdir()  # kept again
    kept.write_bytes(b'{"version": 1, "messages": "cut short')  # as a crash may leave it
    assert listed(rows(ws)["t"]) == listed(before)

    # trace.json changed outside agentfs (git brings back the one of the user's step)
    step = git(ws, "log", "--format=%H", "--grep", "^t: user #2").strip()
    git(ws, "checkout", step, "--", "traces/t/trace.json")
    assert listed(rows(ws)["t"]) == ("idle", 5, "Summarize notes.md", 2)


def test_an_edited_first_message_is_listed_once_the_edit_is_committed(ws):
    run_cli("new", "t", "-m", "Summarize notes.md", cwd=ws)
    first_user = message_files(ws, "t")[1]
    first_user.write_text(first_user.read_text().replace("Summarize", "Shorten"))
    run_cli("run", "t", cwd=ws)  # commits the edit, then runs
    assert "t: edit" in git(ws, "log", "--format=%s")
    assert rows(ws)["t"]["title"] == "Shorten notes.md"


def test_run_with_nothing_to_do_reads_the_head_message_alone(ws, monkeypatch):
    run_cli("new", "t", "-m", "Summarize notes.md", cwd=ws)
    run_cli("run", "t", cwd=ws)
    head = git(ws, "rev-parse", "HEAD")
    read: list[Path] = []

    def counting(path: Path):
        read.append(path)
        return load(path)

    load = message_dir.load_message
    monkeypatch.setattr(message_dir, "load_message", counting)
    waiting = run_cli("run", "t", cwd=ws)
    assert "is waiting for a user message" in waiting.stderr
    assert [p.name for p in read] == ["000005-assistant.md"]
    assert git(ws, "rev-parse", "HEAD") == head  # nothing committed

    # a run with something to do still starts: a file in the inbox
    (ws / "traces" / "t" / "inbox" / "next.md").write_text("Once more.\n")
    done = run_cli("run", "t", cwd=ws)
    assert "Again." in done.stdout
    assert listed(rows(ws)["t"]) == ("waiting", 7, "Summarize notes.md", 7)


def test_message_dir_one_reads_one_file_by_sequence(ws):
    from agentfs.core.project import Project

    run_cli("new", "t", "-m", "Summarize notes.md", cwd=ws)
    trace = Project.open(ws).trace("t")
    assert trace.message_dir.one(2).text == "Summarize notes.md"
    assert trace.message_dir.one(3) is None
    loose = trace.messages_dir / "000003-user.md"  # a file put directly in messages/
    loose.write_text("by hand\n")
    assert trace.message_dir.one(3).text == "by hand"
    assert trace.message_dir.roles() == {1: "system", 2: "user", 3: "user"}


def test_a_resumed_run_on_a_long_trace_reads_only_the_files_the_last_run_added(
    tmp_path: Path, monkeypatch
):
    """A run with a file in the inbox, in a new process after an earlier run: the
    folders of messages/ found clean last time are known by their stamps, so no
    message file is read or parsed but the ones the last run wrote (and the last
    few of the uncompressed path, walked back before it is read whole), and the index
    is not loaded to compare them; the run answers as usual."""
    from agentfs.core.project import Project
    from agentfs.store import recovery
    from agentfs.store.git.repo import GitRepo

    monkeypatch.setattr(recovery, "RACY_NS", 0)  # the files written moments ago count as settled
    ws = replay_workspace(tmp_path / "ws", {"turns": [{"text": "Noted."}] * 600})
    long_trace(Project.open(ws), "long", 1_010, commit=True)  # two folders of messages/
    inbox = ws / "traces" / "long" / "inbox"
    (inbox / "first.md").write_text("A first question.\n")
    before = set(message_files(ws, "long"))
    assert "Noted." in run_cli("run", "long", cwd=ws).stdout
    added = {p.name for p in set(message_files(ws, "long")) - before}
    assert len(added) == 2  # the question and the answer
    # besides those, only the path's last files (windows of 1, 2, 4, ... up to
    # LOOKUP_RUN), read before the walk back shows the path is not compressed and
    # takes every message from the parse cache (agentfs/store/message_dir.py:MessageLookup)
    walked = {p.name for p in message_files(ws, "long")[-(2 * message_dir.LOOKUP_RUN - 1):]}

    dirmemory.forget()  # a new process: nothing parsed in memory
    parsed: list[str] = []
    load = message_dir.load_message
    monkeypatch.setattr(message_dir, "load_message",
                        lambda path: (parsed.append(Path(path).name), load(path))[1])
    opened: list[str] = []
    real_open = open
    messages = str(ws / "traces" / "long" / "messages")

    def tracking_open(file, *args, **kwargs):
        if str(file).startswith(messages):
            opened.append(Path(file).name)
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", tracking_open)
    index_loads: list[GitRepo] = []
    stat_cache = GitRepo.stat_cache
    monkeypatch.setattr(GitRepo, "stat_cache",
                        lambda self: (index_loads.append(self), stat_cache(self))[1])
    (inbox / "second.md").write_text("A second question.\n")
    assert "Noted." in run_cli("run", "long", cwd=ws).stdout
    assert set(opened) <= added | walked and set(parsed) <= added | walked
    assert index_loads == []
    assert listed(rows(ws)["long"])[1] == 1_014


def test_a_next_message_written_by_hand_makes_the_list_say_a_run_has_work(ws):
    """The list's state follows the runner's rule (`Trace.waits_for_user`): a message
    file written by hand past those agentfs numbered is work for the next run, so the
    trace no longer waits; a kept row sees it through the folder it lands in."""
    from agentfs.core.project import Project
    from agentfs.store.stamps import RACY_NS

    def settle() -> None:  # what was just written can be kept
        time.sleep(RACY_NS / 1e9 + 0.05)

    def agree() -> str:
        state = rows(ws)["t"]["status"]
        waits = Project.open(ws).trace("t").waits_for_user()
        assert (state == "waiting") == waits, (state, waits)
        return state

    run_cli("new", "t", "-m", "Summarize notes.md", cwd=ws)
    run_cli("run", "t", cwd=ws)
    settle()
    assert agree() == "waiting"  # and the row is kept, with the folders it watches
    meta = json.loads((ws / "traces/t/trace.json").read_text())
    folder = ws / "traces/t/messages/000000-000999"
    name = f"{meta['next_sequence']:06d}-user.md"
    (folder / name).mkdir()  # a folder named like a message file is none
    settle()
    assert agree() == "waiting"
    (folder / name).rmdir()
    os.mkfifo(folder / name)  # nor a FIFO
    settle()
    assert agree() == "waiting"
    (folder / name).unlink()
    (folder / name).write_text("And now in one line.\n")  # as a person writes it
    settle()
    assert agree() == "idle"
    run_cli("run", "t", cwd=ws)  # the run takes it, and answers
    settle()
    assert agree() == "waiting"
    assert listed(rows(ws)["t"])[1] == 7

    later = ws / "traces/t/messages/001000-001999"  # a later folder already there
    later.mkdir()
    settle()
    assert agree() == "waiting"  # kept, watching that folder too
    (later / "001000-user.md").write_text("Far ahead.\n")
    settle()
    assert agree() == "idle"
