"""`agentfs run` killed with SIGKILL at random instants, then resumed."""

from __future__ import annotations

import json
from pathlib import Path

from agentfs.core.runner import INTERRUPTED
from agentfs.store.message_dir import message_relpath
from agentfs.store.messages import load_message
from tests.conftest import (
    assert_git_clean,
    git,
    kill_runs_at_random,
    message_paths,
    replay_workspace,
    run_cli,
    without_clock,
)

TURNS = 200  # long enough that the kills land inside runs on a fast machine
KILLS = 12


def make_workspace(root: Path) -> None:
    turns = [
        {"text": f"step {i}", "tool_calls": [
            {"name": "write_file", "input": {"path": f"out/{i}.txt", "content": f"{i}\n"}},
            {"name": "read_file", "input": {"path": f"out/{i}.txt"}}]}
        for i in range(TURNS)
    ] + [{"text": "finished"}]
    replay_workspace(root, {"turns": turns},
                     config={"max_iterations = 50": "max_iterations = 500"})
    run_cli("new", "t", "-m", "write the files", cwd=root)


def message_files(root: Path) -> dict[str, bytes]:
    """Message files by name; the clock (of context injections, of model turns' timing)
    is the one thing that may differ between two runs of the same script."""
    folder = root / "traces" / "t" / "messages"
    return {p.name: without_clock(p.read_bytes()) for p in message_paths(folder)}


def test_killed_runs_resume_without_loss_or_duplicates(tmp_path):
    reference, crashed = tmp_path / "reference", tmp_path / "crashed"
    reference.mkdir()
    crashed.mkdir()
    make_workspace(reference)
    make_workspace(crashed)
    run_cli("run", "t", cwd=reference)

    kills = kill_runs_at_random(["run", "t", "-q"], cwd=crashed, times=KILLS, seed=20261202,
                                delay=(0.5, 1.2))
    assert kills >= 3, "the kills never landed inside a run; adjust the timing"
    run_cli("run", "t", "-q", cwd=crashed)

    expected, got = message_files(reference), message_files(crashed)
    assert sorted(got) == sorted(expected), "a message was lost or duplicated"
    crashed_messages = {
        m.sequence: m for m in (load_message(crashed / "traces/t/messages" / message_relpath(n)) for n in got)
    }
    interrupted_steps = {
        step_of(crashed_messages, m) for m in crashed_messages.values() if m.text == INTERRUPTED
    }
    for name in (n for n in expected if got[n] != expected[n]):
        message = load_message(crashed / "traces/t/messages" / message_relpath(name))
        # only a step cut short may differ: its interrupted results, and calls after them
        # that now see the world without the interrupted call's effect
        assert message.role == "tool" and step_of(crashed_messages, message) in interrupted_steps, name
    for i in range(TURNS):
        produced = crashed / "out" / f"{i}.txt"
        assert not produced.exists() or produced.read_text() == f"{i}\n"
    assert_git_clean(crashed)
    on_path = json.loads(run_cli("show", "t", "--json", cwd=crashed).stdout)["messages"]
    assert on_path[-1]["text"] == "finished"
    assert [m["sequence"] for m in on_path] == list(range(1, len(expected) + 1))


def step_of(messages: dict, message) -> int:
    """Sequence of the assistant message whose tool step `message` belongs to."""
    while message.role == "tool":
        message = messages[message.parent_sequence]
    return message.sequence


def test_a_full_disk_at_the_index_write_moves_nothing_and_keeps_the_message(
    tmp_path: Path, monkeypatch
) -> None:
    """The index is written before main moves: a failed write leaves both where they
    were, the error names the file and what to do, and the -m text is committed by
    the next run."""
    import errno

    from agentfs.store.git.lockfiles import GitLockFile

    ws = replay_workspace(tmp_path / "ws", {"turns": [{"text": "Got it."}]})
    run_cli("new", "t", "-m", "first", cwd=ws)
    before = git(ws, "rev-parse", "HEAD").strip()
    real_write = GitLockFile.write

    def disk_full_at_the_index(self: GitLockFile, data: bytes) -> None:
        if self.target.name == "index":
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(self, data)

    monkeypatch.setattr(GitLockFile, "write", disk_full_at_the_index)
    failed = run_cli("run", "t", "-m", "my precious words", cwd=ws, check=False)
    assert failed.returncode == 1
    assert str(ws / ".git" / "index.lock") in failed.stderr
    assert "is kept in traces/t/messages/" in failed.stderr
    assert "free disk space" in failed.stderr
    assert git(ws, "rev-parse", "HEAD").strip() == before  # main did not move
    assert git(ws, "diff", "--cached", "--name-status") == ""  # nor the index
    monkeypatch.undo()
    run_cli("run", "t", cwd=ws)
    texts = [m["text"] for m in json.loads(run_cli("show", "t", "--json", cwd=ws).stdout)["messages"]]
    assert texts.count("my precious words") == 1
    assert texts[-1] == "Got it."
    assert_git_clean(ws)


def test_a_message_file_a_full_disk_refused_leaves_the_text_in_the_inbox(
    tmp_path: Path, monkeypatch
) -> None:
    import errno

    from agentfs.store.trace import Trace

    ws = replay_workspace(tmp_path / "ws", {"turns": [{"text": "Got it."}]})
    run_cli("new", "t", "-m", "first", cwd=ws)

    def disk_full(self: Trace, message: object) -> Path:
        raise OSError(errno.ENOSPC, "No space left on device", str(self.messages_dir / "x.md"))

    monkeypatch.setattr(Trace, "write_message", disk_full)
    failed = run_cli("run", "t", "-m", "my precious words", "-m", "and more", cwd=ws,
                     check=False)
    assert failed.returncode == 1 and "is kept in traces/t/inbox/" in failed.stderr
    assert sorted(p.read_text() for p in (ws / "traces" / "t" / "inbox").glob("*.md")) == [
        "and more", "my precious words"]
    monkeypatch.undo()
    run_cli("run", "t", cwd=ws)
    texts = [m["text"] for m in json.loads(run_cli("show", "t", "--json", cwd=ws).stdout)["messages"]]
    assert texts[-3:] == ["my precious words", "and more", "Got it."]
    assert_git_clean(ws)


def test_a_text_that_can_be_kept_nowhere_is_printed_to_copy(tmp_path: Path, monkeypatch) -> None:
    """Neither the message file nor a file in the inbox can be written (a full disk):
    the error itself holds the text."""
    import errno

    from agentfs.core import runner
    from agentfs.store.trace import Trace

    ws = replay_workspace(tmp_path / "ws", {"turns": [{"text": "Got it."}]})
    run_cli("new", "t", "-m", "first", cwd=ws)

    def disk_full(*args: object, **kwargs: object) -> Path:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Trace, "write_message", disk_full)
    monkeypatch.setattr(runner, "save_in_inbox", disk_full)
    failed = run_cli("run", "t", "-m", "my precious words", cwd=ws, check=False)
    assert failed.returncode == 1
    assert "--- not saved, copy it: ---\nmy precious words" in failed.stderr
    assert list((ws / "traces" / "t" / "inbox").glob("*.md")) == []
