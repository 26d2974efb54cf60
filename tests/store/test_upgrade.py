"""Message files live in folders of 1,000 (format 2); a format 1 trace (every file directly
in messages/) is upgraded in place by the next run, in one `upgrade` commit, even if
that run is killed halfway; files a person puts directly in messages/ still work.
A format 2 trace.json (which counted side branches) is rewritten the same way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentfs.errors import MessageFileError
from agentfs.store.history import is_model_turn
from agentfs.store.message_dir import (
    SHARD_SIZE,
    is_shard_name,
    message_relpath,
    parse_message_relpath,
    shard_name,
)
from agentfs.store.meta import FORMAT_VERSION
from agentfs.store.trace import Trace
from tests.conftest import assert_git_clean, git, message_paths, user

FOLDER = "000000-000999"


def test_folder_names_sort_and_say_which_sequences_they_hold() -> None:
    assert shard_name(1) == FOLDER and shard_name(999) == FOLDER
    assert shard_name(1000) == "001000-001999" and shard_name(12_345) == "012000-012999"
    names = [shard_name(n * SHARD_SIZE) for n in range(0, 200, 7)]
    assert names == sorted(names)
    assert message_relpath("000042-assistant.md") == f"{FOLDER}/000042-assistant.md"
    assert parse_message_relpath(f"{FOLDER}/000042-tool.json") == (42, "tool", "json")
    assert parse_message_relpath("000042-tool.json") == (42, "tool", "json")  # directly in messages/
    assert parse_message_relpath("001000-001999/000042-tool.json") is None  # wrong folder
    assert not is_shard_name("000000-000099") and is_shard_name("001000-001999")
    with pytest.raises(ValueError):
        message_relpath("notes.txt")


@pytest.fixture
def trace(project) -> Trace:
    trace = project.new_trace("demo", user("hello"))
    for n in range(6):
        role = "assistant" if n % 2 == 0 else "user"
        trace.commit_step(role, [trace.new_message(role, f"{role} {n}")])
    return trace


def as_format_1(trace: Trace) -> list[str]:
    """Turn the trace into what agentfs 1 wrote, committed with git; returns the names."""
    root = trace.workspace.root
    names = []
    for path in message_paths(trace.messages_dir):
        path.rename(trace.messages_dir / path.name)
        names.append(path.name)
    (trace.messages_dir / FOLDER).rmdir()
    meta = json.loads(trace.meta_path.read_text())
    meta["format_version"] = 1
    trace.meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    git(root, "add", "-A", "traces")
    git(root, "commit", "-q", "-m", "as agentfs 1 left it")
    assert_git_clean(root)
    return names


def reopened(trace: Trace) -> Trace:
    from agentfs.core.project import Project

    return Project.open(trace.workspace.root).trace(trace.id)


def assert_upgraded_once(root: Path, trace: Trace, before: dict[int, str]) -> Trace:
    """The upgraded trace holds the same messages, git is clean and fsck-clean, and
    recovering once more finds nothing to do; returns the trace opened anew."""
    again = reopened(trace)
    assert {s: m.text for s, m in again.messages().items()} == before
    assert_git_clean(root)
    git(root, "fsck", "--strict")
    with again.lock():
        assert again.recover() == []  # idempotent
    return again


def test_new_traces_keep_their_messages_in_folders(trace: Trace) -> None:
    root = trace.workspace.root
    files = git(root, "ls-files", "traces/demo/messages").split()
    assert files and all(f.startswith(f"traces/demo/messages/{FOLDER}/") for f in files)
    assert json.loads(trace.meta_path.read_text())["format_version"] == FORMAT_VERSION == 4


def test_a_format_1_trace_is_upgraded_in_one_commit_of_renames(trace: Trace) -> None:
    root = trace.workspace.root
    names = as_format_1(trace)
    before = {s: m.text for s, m in reopened(trace).messages().items()}  # readable as it is
    fresh = reopened(trace)
    with fresh.lock():
        assert fresh.recover() == ["upgrade"]
    subject = git(root, "log", "-1", "--format=%s")
    assert subject.startswith("demo: upgrade #8 8 message files moved into folders of 1000")
    renames = git(root, "show", "-M", "--name-status", "--format=", "HEAD").splitlines()
    assert sorted(renames) == sorted(
        [f"R100\ttraces/demo/messages/{n}\ttraces/demo/messages/{FOLDER}/{n}" for n in names]
        + ["M\ttraces/demo/trace.json"]
    )
    assert json.loads(trace.meta_path.read_text())["format_version"] == FORMAT_VERSION
    assert sorted(p.name for p in message_paths(trace.messages_dir)) == sorted(names)
    again = assert_upgraded_once(root, trace, before)
    again.commit_step("user", [again.new_message("user", "and on it goes")])
    assert (trace.messages_dir / FOLDER / "000009-user.md").is_file()
    assert_git_clean(root)


@pytest.mark.parametrize("moved_before_the_kill", [0, 3, 8])
def test_an_upgrade_killed_halfway_is_finished_by_the_next_run(
    trace: Trace, monkeypatch, moved_before_the_kill: int
) -> None:
    root = trace.workspace.root
    names = as_format_1(trace)
    (trace.messages_dir / FOLDER).mkdir()
    for name in names[:moved_before_the_kill]:  # renames done, then the process died
        (trace.messages_dir / name).rename(trace.messages_dir / FOLDER / name)
    if moved_before_the_kill == len(names):  # ... or died inside the commit itself
        from agentfs.store.git.repo import GitRepo

        def killed(*args, **kwargs):
            raise KeyboardInterrupt

        monkeypatch.setattr(GitRepo, "commit_worktree", killed)
        with pytest.raises(KeyboardInterrupt), trace.lock():
            reopened(trace).recover()
        monkeypatch.undo()
    fresh = reopened(trace)
    with fresh.lock():
        assert fresh.recover() == ["upgrade"]
    assert sorted(p.name for p in message_paths(trace.messages_dir)) == sorted(names)
    assert git(root, "ls-files", "traces/demo/messages").split() == [
        f"traces/demo/messages/{FOLDER}/{n}" for n in sorted(names)
    ]
    assert git(root, "log", "--format=%s").count("upgrade") == 1
    assert_git_clean(root)
    git(root, "fsck", "--strict")


def test_an_edit_made_before_the_upgrade_is_committed_as_an_edit(trace: Trace) -> None:
    root = trace.workspace.root
    as_format_1(trace)
    (trace.messages_dir / "000003-assistant.md").write_text("my better answer\n")
    fresh = reopened(trace)
    with fresh.lock():
        assert fresh.recover() == ["upgrade", "edit"]
    assert git(root, "show", f"HEAD:traces/demo/messages/{FOLDER}/000003-assistant.md") == (
        "my better answer\n"
    )
    assert "000003" not in git(root, "show", "--name-only", "--format=", "HEAD~1")  # not in the upgrade
    assert reopened(trace).messages()[3].text == "my better answer"
    assert_git_clean(root)


@pytest.mark.parametrize("where", ["messages", "folder"])
def test_a_file_a_person_adds_by_hand_is_adopted_from_its_folder(trace: Trace, where: str) -> None:
    root = trace.workspace.root
    folder = trace.messages_dir if where == "messages" else trace.messages_dir / FOLDER
    (folder / "000009-user.md").write_text("one more question\n")
    fresh = reopened(trace)
    assert fresh.messages()[9].text == "one more question"  # read before any run, too
    with fresh.lock():
        kinds = fresh.recover()
    assert kinds == ["recover"]  # moved into its folder: no upgrade commit for it
    assert not (trace.messages_dir / "000009-user.md").exists()
    adopted = git(root, "show", f"HEAD:traces/demo/messages/{FOLDER}/000009-user.md")
    assert adopted.endswith("parent_sequence: 8\nrole: user\n---\none more question\n")
    assert reopened(trace).meta.head == 9
    assert_git_clean(root)


def test_a_file_in_the_wrong_folder_names_the_right_one(trace: Trace) -> None:
    wrong = trace.messages_dir / "001000-001999"
    wrong.mkdir()
    (wrong / "000009-user.md").write_text("lost\n")
    with pytest.raises(MessageFileError) as info:
        reopened(trace).messages()
    assert "001000-001999/000009-user.md" in str(info.value)
    assert f"move it to messages/{FOLDER}/" in str(info.value)


def test_a_file_whose_name_is_taken_in_its_folder_stays_and_is_reported(trace: Trace) -> None:
    root = trace.workspace.root
    (trace.messages_dir / "000003-assistant.md").write_text("a second #3\n")
    fresh = reopened(trace)
    with pytest.raises(MessageFileError) as info, fresh.lock():
        fresh.recover()
    assert "sequence 3 is also used by" in str(info.value)
    assert (trace.messages_dir / "000003-assistant.md").read_text() == "a second #3\n"
    assert "a second" not in git(root, "show", f"HEAD:traces/demo/messages/{FOLDER}/000003-assistant.md")


def test_the_example_workspace_is_in_the_current_format() -> None:
    from agentfs.resources import example_workspace_dir

    trace_dir = Path(example_workspace_dir()) / "traces" / "demo"
    assert json.loads((trace_dir / "trace.json").read_text())["format_version"] == FORMAT_VERSION
    files = [p.relative_to(trace_dir / "messages").as_posix()
             for p in message_paths(trace_dir / "messages")]
    assert files and all(parse_message_relpath(f) and "/" in f for f in files)


KILLED_UPGRADE = """
import os, signal, sys
from pathlib import Path
from agentfs.core.project import Project

n = int(sys.argv[2])
calls = [0]
for name in ("rename", "replace"):
    real = getattr(os, name)
    def counted(*args, _real=real, **kwargs):
        calls[0] += 1
        if calls[0] == n:
            os.kill(os.getpid(), signal.SIGKILL)
        return _real(*args, **kwargs)
    setattr(os, name, counted)
trace = Project.open(Path(sys.argv[1])).trace("demo")
with trace.lock():
    print(trace.recover(), flush=True)
"""


@pytest.mark.parametrize("killed_at", [1, 2, 5, 8, 9, 10, 11, 12, 13])
def test_an_upgrade_killed_at_any_rename_is_finished_by_the_next_run(
    trace: Trace, killed_at: int
) -> None:
    """SIGKILL at the n-th rename of the upgrade (the file moves, then trace.json, the
    objects, the ref and the index): the next run ends with one upgrade, nothing lost."""
    import subprocess
    import sys

    root = trace.workspace.root
    names = as_format_1(trace)
    done = subprocess.run([sys.executable, "-c", KILLED_UPGRADE, str(root), str(killed_at)],
                          capture_output=True, text=True, check=False)
    assert done.returncode in (0, -9), done.stderr
    fresh = reopened(trace)
    with fresh.lock():
        fresh.recover()
    assert git(root, "ls-files", "traces/demo/messages").split() == [
        f"traces/demo/messages/{FOLDER}/{n}" for n in sorted(names)
    ]
    assert git(root, "log", "--format=%s").count(": upgrade #") == 1
    assert sorted(p.name for p in message_paths(trace.messages_dir)) == sorted(names)
    assert json.loads(trace.meta_path.read_text())["format_version"] == FORMAT_VERSION
    assert_git_clean(root)
    git(root, "fsck", "--strict")


def test_a_merge_cut_short_in_a_format_1_trace_is_undone_before_the_upgrade(
        trace: Trace) -> None:
    """agentfs 1 was killed while merging a compression: the summary file it copied from
    the branch is on disk, trace.json marks the step done, nothing committed. The
    next run rolls that back (the queue redoes the merge) and upgrades: no summary is
    committed as an edit or adopted without its merge parent."""
    from agentfs.store.messages import render_message

    root = trace.workspace.root
    branch = "agentfs/demo/compression-1"
    first = trace.meta.next_sequence
    ask = trace.new_message("user", "summarize", branch_type="compression", branch_id=branch)
    summary = trace.new_message("user", "The summary.", synthetic="summary",
                                source_branch=branch)
    summary.parent_sequence = 1
    meta = json.loads(trace.meta_path.read_text())
    meta["side_queue"] = {"reason": "compress", "head": meta["head"], "steps": [
        {"type": "compression", "state": "running", "branch": branch, "first": first}]}
    trace.meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    as_format_1(trace)
    git(root, "checkout", "-q", "-b", branch)
    for message in (ask, summary):  # agentfs 1 wrote branch files directly in messages/
        (trace.messages_dir / message.file_name()).write_bytes(render_message(message))
        git(root, "add", "-A", "traces")
        git(root, "commit", "-q", "-m", f"branch #{message.sequence}")
    git(root, "checkout", "-q", "main")
    committed_meta = trace.meta_path.read_bytes()
    # the merge, cut short before its commit
    (trace.messages_dir / summary.file_name()).write_bytes(render_message(summary))
    meta = json.loads(committed_meta)
    meta["side_queue"]["steps"][0]["state"] = "done"
    meta["head"], meta["next_sequence"] = summary.sequence, summary.sequence + 1
    trace.meta_path.write_text(json.dumps(meta, indent=2) + "\n")

    assert reopened(trace).recover() == ["upgrade"]
    assert not list(trace.messages_dir.rglob(summary.file_name()))
    on_disk = json.loads(trace.meta_path.read_text())
    assert on_disk["side_queue"]["steps"][0]["state"] == "running"
    assert on_disk["head"] == json.loads(committed_meta)["head"]
    assert_git_clean(root)


# --- format 2: trace.json counted the side branches the trace named -----------------


def as_format_2(trace: Trace) -> dict:
    """Turn trace.json into what agentfs 2 wrote, committed with git; returns its data."""
    meta = json.loads(trace.meta_path.read_text())
    meta["format_version"] = 2
    meta["context"] = {**meta["context"], "side_calls": {"compression": 1},
                       "side_branches": {"compression": 2, "reflection": 1}}
    trace.meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    git(trace.workspace.root, "commit", "-q", "-am", "as agentfs 2 left it")
    return meta


def upgraded(old: dict) -> dict:
    """What the upgrade makes of a format 2 trace.json: the count gone, the rest kept."""
    context = {k: v for k, v in old["context"].items() if k != "side_branches"}
    return {**old, "format_version": FORMAT_VERSION, "context": context}


def test_a_format_2_trace_json_is_upgraded_in_one_commit(trace: Trace) -> None:
    root = trace.workspace.root
    old = as_format_2(trace)
    before = {s: m.text for s, m in reopened(trace).messages().items()}
    fresh = reopened(trace)
    assert fresh.meta.context.side_calls == {"compression": 1}  # readable as it is
    with fresh.lock():
        assert fresh.recover() == ["upgrade"]
    assert git(root, "log", "-1", "--format=%s").strip() == (
        f"demo: upgrade #8 trace.json in format {FORMAT_VERSION}")
    assert git(root, "show", "--name-status", "--format=", "HEAD").splitlines() == [
        "M\ttraces/demo/trace.json"]
    assert json.loads(trace.meta_path.read_text()) == upgraded(old)
    assert_upgraded_once(root, trace, before)


def test_a_format_2_trace_json_a_person_edited_is_committed_as_their_edit(
        trace: Trace) -> None:
    """Only a trace.json as committed is rewritten: an edit is the person's, committed as
    it is; the next step writes the current format."""
    root = trace.workspace.root
    old = as_format_2(trace)
    trace.meta_path.write_text(json.dumps({**old, "model": "replay"}, indent=2) + "\n")
    fresh = reopened(trace)
    with fresh.lock():
        assert fresh.recover() == ["edit"]
    assert json.loads(git(root, "show", "HEAD:traces/demo/trace.json"))["model"] == "replay"
    fresh.commit_step("user", [fresh.new_message("user", "and on it goes")])
    meta = json.loads(trace.meta_path.read_text())
    assert meta["format_version"] == FORMAT_VERSION and "side_branches" not in meta["context"]
    assert_git_clean(root)


@pytest.mark.parametrize("killed_at", range(1, 11))  # 9 renames, then none
def test_a_format_2_upgrade_killed_at_any_rename_is_finished_by_the_next_run(
        trace: Trace, killed_at: int) -> None:
    """SIGKILL at the n-th rename of the upgrade (trace.json, the objects, the ref, the
    index): the next run ends with one upgrade commit and no edit, nothing lost."""
    import subprocess
    import sys

    root = trace.workspace.root
    old = as_format_2(trace)
    before = git(root, "rev-parse", "HEAD").strip()
    done = subprocess.run([sys.executable, "-c", KILLED_UPGRADE, str(root), str(killed_at)],
                          capture_output=True, text=True, check=False)
    assert done.returncode in (0, -9), done.stderr
    fresh = reopened(trace)
    with fresh.lock():
        fresh.recover()
    subjects = git(root, "log", "--format=%s", f"{before}..HEAD").splitlines()
    assert subjects == [f"demo: upgrade #8 trace.json in format {FORMAT_VERSION}"]
    assert json.loads(trace.meta_path.read_text()) == upgraded(old)
    assert json.loads(git(root, "show", "HEAD:traces/demo/trace.json")) == upgraded(old)
    assert_git_clean(root)
    git(root, "fsck", "--strict")


# --- format 3: `iterations` could lag behind the files --------------------------------


def test_a_format_3_trace_json_gets_its_turns_of_the_model_counted_by_the_upgrade(
        trace: Trace) -> None:
    """Before format 4 a crash or a hand edit could leave `iterations` behind the files;
    the upgrade counts them once, and from then on a run reads it."""
    root = trace.workspace.root
    meta = json.loads(trace.meta_path.read_text())
    assert meta["iterations"] == 3  # the fixture's three answers
    trace.meta_path.write_text(json.dumps({**meta, "format_version": 3, "iterations": 1},
                                          indent=2) + "\n")
    git(root, "commit", "-q", "-am", "as agentfs 3 left it")
    before = {s: m.text for s, m in reopened(trace).messages().items()}
    fresh = reopened(trace)
    assert fresh.model_turns() == 3  # counted over the files until the upgrade
    with fresh.lock():
        assert fresh.recover() == ["upgrade"]
    assert git(root, "log", "-1", "--format=%s").strip() == (
        f"demo: upgrade #8 trace.json in format {FORMAT_VERSION}")
    committed = json.loads(git(root, "show", "HEAD:traces/demo/trace.json"))
    assert committed == {**meta, "format_version": FORMAT_VERSION, "iterations": 3}
    assert reopened(trace).model_turns() == 3
    assert_upgraded_once(root, trace, before)


def test_a_format_3_trace_a_crash_left_mid_turn_counts_that_turn_once(trace: Trace) -> None:
    """A turn's file written, then the crash: the upgrade counts the files on disk,
    that one included, and adopting it must not count it again."""
    root = trace.workspace.root
    meta = json.loads(trace.meta_path.read_text())
    trace.meta_path.write_text(json.dumps({**meta, "format_version": 3}, indent=2) + "\n")
    git(root, "commit", "-q", "-am", "as agentfs 3 left it")
    fresh = reopened(trace)
    answer = fresh.new_message("assistant", "cut short before its commit")
    fresh.write_message(answer)  # trace.json not written yet: as a crash leaves it
    fresh = reopened(trace)
    with fresh.lock():
        assert fresh.recover() == ["upgrade", "recover"]
    committed = json.loads(git(root, "show", "HEAD:traces/demo/trace.json"))
    assert committed["iterations"] == 4 == sum(map(is_model_turn, fresh.messages().values()))
    assert_git_clean(root)
