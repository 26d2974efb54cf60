"""What a step did to the workspace's files (`agentfs log -p`), putting them back with a
rewind (`agentfs rewind --files`), and forking a trace (`agentfs fork`), end to end on
real workspaces, checked with the real `git` binary."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import assert_git_clean, git, replay_workspace, run_cli

SCRIPT = {
    "turns": [
        {"text": "Writing.", "tool_calls": [
            {"name": "write_file", "input": {"path": "notes/a.md", "content": "one\n"}},
            {"name": "write_file", "input": {"path": "b.md", "content": "bee\n"}}]},
        {"text": "Done 1."},
        {"text": "Again.", "tool_calls": [
            {"name": "edit_file", "input": {"path": "notes/a.md", "old_text": "one", "new_text": "two"}},
            {"name": "write_file", "input": {"path": "notes/new.md", "content": "new\n"}},
            {"name": "bash", "input": {"command": "rm gone.md"}}]},
        {"text": "Done 2."},
        {"text": "Done 3."},
        {"text": "Done 4."},
    ]
}

#: What a person keeps in the workspace besides what the agent touches.
OTHER = {"mine.md": "my own notes\n", "gone.md": "the agent removes this\n"}

@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """Trace t: #1 system, #2 user, #3 two writes, #4-#5 results, #6 "Done 1.", #7 user,
    #8 an edit, a new file and `rm gone.md`, #9-#11 results, #12 "Done 2."."""
    root = replay_workspace(tmp_path / "ws", SCRIPT, OTHER)
    config = root / "agentfs.toml"
    config.write_text(config.read_text() + '\n[tools]\nbash = true\nbash_sandbox = "none"\n')
    git(root, "commit", "-qam", "bash on")
    run_cli("run", "t", "-m", "write them", cwd=root)
    run_cli("run", "t", "-m", "again", cwd=root)
    assert (root / "notes/a.md").read_text() == "two\n"
    assert not (root / "gone.md").exists()
    assert_git_clean(root)
    return root


def _commit_of(root: Path, subject_start: str) -> str:
    for line in git(root, "log", "--format=%H %s").splitlines():
        sha, subject = line.split(" ", 1)
        if subject.startswith(subject_start):
            return sha
    raise AssertionError(f"no commit {subject_start!r}")


def _workspace_files(root: Path) -> dict[str, bytes]:
    """Every file outside .git and traces/, by path."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".git" not in p.parts and p.parts[len(root.parts)] != "traces"}


# --- agentfs log -p ------------------------------------------------------------------


def test_log_p_shows_each_tool_steps_workspace_diff_as_git_show_prints_it(ws):
    shown = run_cli("log", "t", "-p", cwd=ws).stdout
    second = _commit_of(ws, "t: tool #11")
    paths = ["gone.md", "notes/a.md", "notes/new.md"]
    by_git = git(ws, "show", "--format=", second, "--", *paths)
    assert by_git in shown
    first = git(ws, "show", "--format=", _commit_of(ws, "t: tool #5"), "--", "b.md", "notes/a.md")
    assert first in shown
    assert "traces/t/" not in shown  # message files and trace.json are left out
    assert shown.index(by_git) < shown.index(first)  # newest first, each under its step
    steps = json.loads(run_cli("log", "t", "-p", "--json", cwd=ws).stdout)["steps"]
    tool = next(s for s in steps if s["commit"] == second)
    assert tool["files"] == [{"path": "gone.md", "status": "deleted"},
                             {"path": "notes/a.md", "status": "modified"},
                             {"path": "notes/new.md", "status": "added"}]
    assert tool["diff"] == by_git
    assistant = next(s for s in steps if s["kind"] == "assistant")
    assert assistant["files"] == [] and assistant["diff"] == ""
    plain = json.loads(run_cli("log", "t", "--json", cwd=ws).stdout)["steps"]
    assert set(plain[0]) == {"commit", "kind", "sequence", "summary", "usage"}  # unchanged without -p


# --- agentfs rewind --files ------------------------------------------------------------


def test_rewind_files_puts_back_what_the_agent_changed_after_the_step_and_nothing_else(ws):
    (ws / "mine.md").write_text("changed by me, not committed\n")
    (ws / "untracked.md").write_text("never committed\n")
    before = _workspace_files(ws)
    done = run_cli("rewind", "t", "6", "--files", cwd=ws)
    assert done.stdout.splitlines() == [
        "t: head moved from #12 to #6",
        "t: restored 3 files:", "  gone.md", "  notes/a.md", "  notes/new.md"]
    assert (ws / "notes/a.md").read_text() == "one\n"  # edited after #6: as it was
    assert not (ws / "notes/new.md").exists()  # created after #6: deleted
    assert (ws / "gone.md").read_text() == "the agent removes this\n"  # deleted: back
    after = _workspace_files(ws)
    untouched = set(before) - {"notes/a.md", "notes/new.md"}
    assert {p: after[p] for p in untouched} == {p: before[p] for p in untouched}
    assert git(ws, "log", "-1", "--format=%s").strip() == (
        "t: rewind #6 head moved to #6 (assistant), 3 files restored")
    assert "Files restored as they were at #6:\n  gone.md\n  notes/a.md\n  notes/new.md" in (
        git(ws, "log", "-1", "--format=%B"))
    assert git(ws, "show", "--name-status", "--format=", "HEAD").splitlines() == [
        "A\tgone.md", "M\tnotes/a.md", "D\tnotes/new.md", "M\ttraces/t/trace.json"]
    assert git(ws, "status", "--porcelain").splitlines() == [" M mine.md", "?? untracked.md"]
    git(ws, "fsck", "--strict", "--no-dangling")


def test_rewind_files_refuses_naming_the_files_the_user_changed_since_and_changes_nothing(ws):
    (ws / "notes/a.md").write_text("the user's version\n")
    (ws / "notes/new.md").write_text("new\nand a line of mine\n")
    head = git(ws, "rev-parse", "HEAD")
    files = _workspace_files(ws)
    trace_json = (ws / "traces/t/trace.json").read_bytes()
    done = run_cli("rewind", "t", "6", "--files", cwd=ws, check=False)
    assert done.returncode == 1
    assert "notes/a.md, notes/new.md changed since the agent last wrote them" in done.stderr
    assert "gone.md" not in done.stderr
    assert git(ws, "rev-parse", "HEAD") == head
    assert _workspace_files(ws) == files
    assert (ws / "traces/t/trace.json").read_bytes() == trace_json
    # without --files the conversation alone moves, the files stay as the user left them
    run_cli("rewind", "t", "6", cwd=ws)
    assert (ws / "notes/a.md").read_text() == "the user's version\n"


def test_rewind_files_never_reads_or_writes_through_a_linked_folder(ws, tmp_path):
    """A clone can make `notes/` a link: the rewind is refused before any file through
    it is read (a huge or endless one would exhaust memory) or written."""
    outside = tmp_path / "outside"
    shutil.copytree(ws / "notes", outside)
    shutil.rmtree(ws / "notes")
    (ws / "notes").symlink_to(outside)
    git(ws, "add", "-A")
    git(ws, "commit", "-qm", "a link, as a clone brings it")
    (outside / "a.md").write_text("not the agent's: judged only by reading it\n")
    before = {p.name: p.read_bytes() for p in outside.iterdir()}
    head = git(ws, "rev-parse", "HEAD")
    done = run_cli("rewind", "t", "6", "--files", cwd=ws, check=False)
    assert done.returncode == 1
    assert f"{ws / 'notes'}: is a symlink, not a folder" in done.stderr
    assert {p.name: p.read_bytes() for p in outside.iterdir()} == before
    assert git(ws, "rev-parse", "HEAD") == head


def test_a_user_commit_of_a_file_since_the_agent_wrote_it_also_refuses(ws):
    (ws / "b.md").write_text("reworded and committed by the user\n")
    git(ws, "commit", "-qam", "my wording")
    done = run_cli("rewind", "t", "2", "--files", cwd=ws, check=False)
    assert done.returncode == 1 and "b.md changed since the agent last wrote it" in done.stderr


def test_rewinding_with_files_to_a_later_message_again_brings_the_agents_versions_back(ws):
    run_cli("rewind", "t", "2", "--files", cwd=ws)
    assert not (ws / "notes/a.md").exists() and not (ws / "b.md").exists()
    done = run_cli("rewind", "t", "12", "--files", cwd=ws)
    assert "restored 4 files:\n  b.md\n  gone.md\n  notes/a.md\n  notes/new.md\n" in done.stdout
    assert (ws / "notes/a.md").read_text() == "two\n"
    assert (ws / "notes/new.md").read_text() == "new\n"
    assert not (ws / "gone.md").exists()
    assert_git_clean(ws)


def test_rewind_files_at_the_head_already_restores_the_files_only(ws):
    run_cli("rewind", "t", "6", cwd=ws)  # the conversation only
    assert (ws / "notes/a.md").read_text() == "two\n"
    done = run_cli("rewind", "t", "6", "--files", cwd=ws)
    assert done.stdout.splitlines() == [
        "t: already at #6", "t: restored 3 files:", "  gone.md", "  notes/a.md", "  notes/new.md"]
    assert (ws / "notes/a.md").read_text() == "one\n"
    assert run_cli("rewind", "t", "6", "--files", cwd=ws).stdout == (
        "t: already at #6; nothing to do\n")
    assert_git_clean(ws)


def test_a_rewind_with_files_cut_short_loses_nothing_and_the_same_command_finishes_it(
        ws, monkeypatch):
    from agentfs.core.actions import rewind
    from agentfs.core.project import Project
    from agentfs.store import filerewind

    written: list[Path] = []
    real = filerewind.atomic_write

    def dies_after_the_first(path: Path, data: bytes, **kw) -> None:
        if written:
            raise KeyboardInterrupt  # killed here: nothing below this point runs
        real(path, data, **kw)
        written.append(path)

    monkeypatch.setattr(filerewind, "atomic_write", dies_after_the_first)
    head = git(ws, "rev-parse", "HEAD")
    with pytest.raises(KeyboardInterrupt):
        rewind(Project.open(ws).trace("t"), 6, files=True)
    monkeypatch.undo()
    # the user sees exactly where it stopped: one file back, nothing committed
    assert git(ws, "rev-parse", "HEAD") == head
    assert git(ws, "status", "--porcelain").splitlines() == ["?? gone.md"]
    assert json.loads((ws / "traces/t/trace.json").read_text())["head"] == 12
    done = run_cli("rewind", "t", "6", "--files", cwd=ws)
    assert "restored 3 files:\n  gone.md\n  notes/a.md\n  notes/new.md\n" in done.stdout
    assert (ws / "notes/a.md").read_text() == "one\n" and not (ws / "notes/new.md").exists()
    assert_git_clean(ws)


# --- agentfs fork ------------------------------------------------------------------------


def test_fork_copies_the_main_path_up_to_a_message_and_runs_on_from_there(ws):
    original = git(ws, "rev-parse", "HEAD:traces/t")
    files = {p: p.read_bytes() for p in (ws / "traces/t").rglob("*") if p.is_file()}
    done = run_cli("fork", "t", "--at", "6", "retry", cwd=ws)
    assert done.stdout == "retry: forked from t at #6\n"
    assert git(ws, "log", "-1", "--format=%s").strip() == "retry: create #6 forked from t at #6"
    body = git(ws, "log", "-1", "--format=%B")
    meta = json.loads((ws / "traces/retry/trace.json").read_text())
    assert meta["forked_from"] == {"trace": "t", "sequence": 6,
                                   "commit": _commit_of(ws, "t: assistant #6")}
    assert f"Forked from trace t at #6 (commit {meta['forked_from']['commit']})." in body
    assert meta["head"] == 6 and meta["model"] is None
    assert meta["usage"] == {"through": 6, "models": {}}  # the source's calls, not the fork's
    copied = json.loads(run_cli("show", "retry", "--json", cwd=ws).stdout)["messages"]
    source = json.loads(run_cli("show", "t", "--json", cwd=ws).stdout)["messages"]
    assert [(m["sequence"], m["text"]) for m in copied] == [
        (m["sequence"], m["text"]) for m in source if m["sequence"] <= 6]
    for m in copied:  # byte for byte
        name = m["file"]
        assert (ws / "traces/retry/messages/000000-000999" / name).read_bytes() == (
            ws / "traces/t/messages/000000-000999" / name).read_bytes()
    assert_git_clean(ws)

    run_cli("run", "retry", "-m", "again, differently", cwd=ws)  # the script's third turn
    shown = json.loads(run_cli("show", "retry", "--json", cwd=ws).stdout)["messages"]
    assert [m["sequence"] for m in shown] == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
    assert shown[6]["text"] == "again, differently" and shown[7]["text"] == "Again."
    assert shown[-1]["text"] == "Done 2."
    own_calls = sum(m["role"] == "assistant" and not m.get("synthetic") for m in shown[6:])
    spent = json.loads((ws / "traces/retry/trace.json").read_text())["usage"]["models"]
    assert sum(model["calls"] for model in spent.values()) == own_calls > 0
    assert git(ws, "rev-parse", "HEAD:traces/t") == original  # the original is untouched
    assert {p: p.read_bytes() for p in (ws / "traces/t").rglob("*") if p.is_file()} == files
    assert_git_clean(ws)


def test_a_fork_s_total_counts_from_the_fork_and_says_its_copied_turns_count_in_the_source(ws):
    run_cli("fork", "t", "--at", "6", "retry", cwd=ws)
    shown = run_cli("show", "retry", cwd=ws).stdout
    assert "assistant  · model " in shown  # the copied turns keep what their calls used
    assert shown.rstrip().splitlines()[-1] == (
        "retry: no model calls (since the fork from t at #6; its copied turns count in t)")
    usage = json.loads(run_cli("show", "retry", "--json", cwd=ws).stdout)["usage"]
    assert usage["calls"] == 0 and usage["text"].endswith("its copied turns count in t)")
    run_cli("run", "retry", "-m", "again, differently", cwd=ws)
    last = run_cli("show", "retry", cwd=ws).stdout.rstrip().splitlines()[-1]
    assert last.startswith("retry: 2 calls · ") and "(since the fork from t at #6;" in last


def test_fork_without_at_or_a_name_takes_the_head_and_numbers_the_copy(ws):
    assert run_cli("fork", "t", cwd=ws).stdout == "t-fork-1: forked from t at #12\n"
    assert run_cli("fork", "t", cwd=ws).stdout == "t-fork-2: forked from t at #12\n"
    assert json.loads(run_cli("show", "t-fork-2", "--json", cwd=ws).stdout)["head"] == 12


@pytest.mark.parametrize(("args", "error"), [
    (["--at", "4", "x"], "at message #4 the tool call(s) write_file have no result"),
    (["--at", "99", "x"], "trace 't' has no message #99"),
    (["t"], "trace 't' already exists"),
    (["--at", "6", "no/slash"], "invalid trace id 'no/slash'"),
])
def test_fork_refuses_a_point_or_a_name_it_cannot_use_and_writes_nothing(ws, args, error):
    head = git(ws, "rev-parse", "HEAD")
    done = run_cli("fork", "t", *args, cwd=ws, check=False)
    assert done.returncode != 0 and error in done.stderr, done.stderr
    assert git(ws, "rev-parse", "HEAD") == head
    assert sorted(p.name for p in (ws / "traces").iterdir()) == [".gitkeep", "t"]
    assert_git_clean(ws)


def test_rewind_files_in_a_fork_puts_back_what_the_steps_it_copied_changed(ws):
    """The fork's messages were made by t's steps: those commits say which files to
    put back and what they held; t itself is not changed."""
    run_cli("fork", "t", "retry", cwd=ws)
    original = git(ws, "rev-parse", "HEAD:traces/t")
    done = run_cli("rewind", "retry", "6", "--files", cwd=ws)
    assert done.stdout.splitlines() == [
        "retry: head moved from #12 to #6",
        "retry: restored 3 files:", "  gone.md", "  notes/a.md", "  notes/new.md"]
    assert (ws / "notes/a.md").read_text() == "one\n" and not (ws / "notes/new.md").exists()
    assert (ws / "gone.md").read_text() == "the agent removes this\n"
    assert "Files restored as they were at #6:\n  gone.md\n  notes/a.md\n  notes/new.md" in (
        git(ws, "log", "-1", "--format=%B"))
    assert git(ws, "rev-parse", "HEAD:traces/t") == original
    assert json.loads((ws / "traces/t/trace.json").read_text())["head"] == 12
    assert_git_clean(ws)
    # a fork of the fork follows both: retry's own rewind, then t's steps before #6
    run_cli("fork", "retry", "again", cwd=ws)
    done = run_cli("rewind", "again", "2", "--files", cwd=ws)
    assert "again: restored 2 files:\n  b.md\n  notes/a.md\n" in done.stdout
    assert not (ws / "notes/a.md").exists() and not (ws / "b.md").exists()
    done = run_cli("rewind", "again", "6", "--files", cwd=ws)
    assert "again: restored 2 files:\n  b.md\n  notes/a.md\n" in done.stdout
    assert (ws / "notes/a.md").read_text() == "one\n"
    assert_git_clean(ws)
    git(ws, "fsck", "--strict", "--no-dangling")


def test_rewind_files_in_a_fork_works_after_its_origin_trace_is_deleted(ws):
    run_cli("fork", "t", "retry", cwd=ws)
    git(ws, "rm", "-rq", "traces/t")
    git(ws, "commit", "-qm", "t is done with")
    done = run_cli("rewind", "retry", "6", "--files", cwd=ws)
    assert "retry: restored 3 files:\n  gone.md\n  notes/a.md\n  notes/new.md\n" in done.stdout
    assert_git_clean(ws)


def test_a_fork_made_at_an_earlier_message_gets_its_files_by_rewinding_there_with_files(ws):
    """A fork, like a rewind without --files, leaves the files as they are (as t's #12
    left them): t's steps up to the fork count as the fork's, so a file rewind to its
    head puts back what t changed after #6, as `agentfs rewind t 6 --files` would."""
    run_cli("fork", "t", "--at", "6", "retry", cwd=ws)
    assert (ws / "notes/a.md").read_text() == "two\n"
    done = run_cli("rewind", "retry", "6", "--files", cwd=ws)
    assert done.stdout.splitlines() == [
        "retry: already at #6", "retry: restored 3 files:",
        "  gone.md", "  notes/a.md", "  notes/new.md"]
    assert (ws / "notes/a.md").read_text() == "one\n" and not (ws / "notes/new.md").exists()
    assert_git_clean(ws)


def test_rewind_files_in_a_fork_refuses_a_file_its_origin_changed_after_the_fork(ws):
    run_cli("fork", "t", "retry", cwd=ws)
    run_cli("rewind", "t", "6", "--files", cwd=ws)  # t puts notes/a.md back to "one"
    head = git(ws, "rev-parse", "HEAD")
    files = _workspace_files(ws)
    done = run_cli("rewind", "retry", "2", "--files", cwd=ws, check=False)
    assert done.returncode == 1
    assert ("trace 'retry': not rewinding the files: notes/a.md changed since the agent "
            "last wrote it") in done.stderr
    assert git(ws, "rev-parse", "HEAD") == head and _workspace_files(ws) == files


def test_rewind_files_leaves_the_files_another_traces_steps_wrote(ws):
    other = {"turns": [{"text": "Mine.", "tool_calls": [
        {"name": "write_file", "input": {"path": "u.md", "content": "u's file\n"}}]},
        {"text": "Done."}]}
    (ws / "other.json").write_text(json.dumps(other))
    run_cli("run", "u", "-m", "write yours", "--model", "replay:other.json", cwd=ws)
    git(ws, "add", "other.json")
    git(ws, "commit", "-qm", "the other script")
    done = run_cli("rewind", "t", "2", "--files", cwd=ws)
    assert "restored 4 files:\n  b.md\n  gone.md\n  notes/a.md\n  notes/new.md\n" in done.stdout
    assert (ws / "u.md").read_text() == "u's file\n"  # written by u, after t's #2
    assert_git_clean(ws)


BIG = {
    "turns": [
        {"text": "Making data.", "tool_calls": [{"name": "bash", "input": {
            "command": "head -c 20000000 /dev/zero > big.bin && seq 1 400000 > big.txt"}}]},
        {"text": "Made."},
        {"text": "Changing it.", "tool_calls": [{"name": "bash", "input": {
            "command": "echo 400001 >> big.txt && rm big.bin"}}]},
        {"text": "Changed."},
    ]
}


def test_big_files_a_step_wrote_are_committed_named_in_its_diff_and_rewound(tmp_path):
    """A bash command writes a 20 MB file and a 2.7 MB text file, then changes them:
    the steps commit them (a chunk at a time), `log -p` names them with their sizes
    instead of printing megabytes of diff, and `rewind --files` puts them back."""
    root = replay_workspace(tmp_path / "ws", BIG)
    config = root / "agentfs.toml"
    config.write_text(config.read_text() + '\n[tools]\nbash = true\nbash_sandbox = "none"\n')
    git(root, "commit", "-qam", "bash on")
    run_cli("run", "t", "-m", "make the data", cwd=root)
    text = (root / "big.txt").read_bytes()
    run_cli("run", "t", "-m", "change it", cwd=root)
    assert_git_clean(root)
    assert git(root, "cat-file", "-s", "main:big.txt").strip() == str(len(text) + 7)
    shown = run_cli("log", "t", "-p", cwd=root).stdout
    assert len(shown) < 20_000
    assert (f"diff --git a/big.txt b/big.txt\nLarge file ({len(text):,} bytes before, "
            f"{len(text) + 7:,} bytes after), not shown: git diff ") in shown
    assert ("diff --git a/big.bin b/big.bin\nLarge file (20,000,000 bytes before, none "
            "after), not shown: git cat-file -p ") in shown
    run_cli("rewind", "t", "6", "--files", cwd=root)
    assert (root / "big.txt").read_bytes() == text
    assert (root / "big.bin").stat().st_size == 20_000_000
    assert_git_clean(root)
