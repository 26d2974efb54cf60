"""The one door for dropped files: taken once, in name order, put aside when unusable,
and finished exactly once after a crash at any point."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from agentfs.core.project import Project
from agentfs.errors import AgentfsError, MessageFileError
from agentfs.store.inbox import EMPTY_GRACE, SettleClock, save_in_inbox, stage, staged_in
from agentfs.store.ingest import (
    Rejected,
    claim_new,
    finish_staged,
    pending_new,
    read_dropped,
    take_waiting,
)
from agentfs.store.trace import Trace
from tests.conftest import assert_git_clean, git, user
from tests.store.test_trace import commit_count, fresh, last_commit, sequences


@pytest.fixture
def trace(project: Project) -> Trace:
    """A trace holding #1 system and #2 user ("hello"), both committed."""
    return project.new_trace("demo", user("hello"))


def drop(trace: Trace, name: str, text: str | bytes) -> Path:
    trace.inbox_dir.mkdir(parents=True, exist_ok=True)
    path = trace.inbox_dir / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def take(trace: Trace):
    """Take what waits, with no settle window (the files here are written whole)."""
    with trace.lock():
        return take_waiting(trace, SettleClock(0))


def test_an_inbox_file_becomes_the_next_user_message_in_one_commit(project, trace):
    root = project.workspace.root
    dropped = drop(trace, "note.md", "Please also check the tests.\n")
    before = commit_count(root)

    report = take(trace)
    [(name, message)] = report.taken
    assert name == "note.md"
    assert (message.sequence, message.parent_sequence, message.role) == (3, 2, "user")
    assert not dropped.exists()
    assert (trace.messages_dir / "000000-000999/000003-user.md").is_file()
    assert commit_count(root) == before + 1
    subject, trailers = last_commit(root)
    assert subject == "demo: user #3 Please also check the tests."
    assert trailers["Agentfs-Kind"] == "user"
    assert_git_clean(root)
    assert fresh(project).main_path()[-1].content == "Please also check the tests."
    assert fresh(project).pending_inbox() == []
    assert staged_in(project.workspace.ingest_dir / "demo") == []


def test_a_committed_inbox_file_is_removed_in_the_same_commit(project, trace):
    # Files can arrive through git (a push or pull), already committed.
    root = project.workspace.root
    drop(trace, "from-ci.md", "Run the nightly checks.\n")
    git(root, "add", "traces/demo/inbox/from-ci.md")
    git(root, "commit", "-q", "-m", "drop a message")
    take(trace)
    assert "traces/demo/inbox/from-ci.md" not in git(root, "ls-tree", "-r", "--name-only", "HEAD")
    assert_git_clean(root)


def test_a_bad_file_is_put_aside_once_and_does_not_block_the_next(project, trace):
    root = project.workspace.root
    drop(trace, "a-binary.md", b"\x89PNG\x00\x00")
    drop(trace, "b-good.md", "the good one\n")
    before = commit_count(root)
    report = take(trace)
    assert [m.content for _, m in report.taken] == ["the good one"]
    [rejected] = report.rejected
    assert "binary" in rejected.reason
    assert rejected.moved_to == trace.inbox_dir / ".rejected/a-binary.md"
    assert rejected.moved_to.read_bytes() == b"\x89PNG\x00\x00"
    note = (trace.inbox_dir / ".rejected/a-binary.md.reason.txt").read_text()
    assert "a-binary.md was not taken" in note and "binary" in note
    assert commit_count(root) == before + 1  # only the good file's step
    assert take(trace).rejected == []  # never reported again
    assert_git_clean(root)  # .rejected/ ignores itself


def test_putting_aside_never_writes_through_a_link(project, trace, tmp_path):
    """A clone can bring links in `.rejected/`: a note's name linked to a file of the
    person's is replaced, not written through; a `.rejected` that is a link is refused
    and the file stays in the inbox."""
    victim = tmp_path / "victim.txt"
    victim.write_text("mine\n")
    rejected = trace.inbox_dir / ".rejected"
    rejected.mkdir(parents=True)
    (rejected / "bad.md.reason.txt").symlink_to(victim)
    (rejected / ".gitignore").symlink_to(tmp_path / "made-outside")  # dangling
    drop(trace, "bad.md", b"\x89PNG\x00")
    [put_aside] = take(trace).rejected
    assert victim.read_text() == "mine\n" and not (tmp_path / "made-outside").exists()
    note = put_aside.moved_to.with_name(put_aside.moved_to.name + ".reason.txt")
    assert not note.is_symlink() and "bad.md was not taken" in note.read_text()

    outside = tmp_path / "outside"
    outside.mkdir()
    for entry in rejected.iterdir():
        entry.unlink()
    rejected.rmdir()
    rejected.symlink_to(outside)
    drop(trace, "worse.md", b"\x89PNG\x01")
    with pytest.raises(AgentfsError, match="is a symlink, not a folder"):
        take(trace)
    assert list(outside.iterdir()) == []
    rejected.unlink()  # as the error says; the claimed file was kept meanwhile
    with trace.lock():
        [put_aside] = finish_staged(trace).rejected  # as the next run finishes claims
    assert put_aside.moved_to.read_bytes() == b"\x89PNG\x01"


def test_a_rejected_that_is_a_file_is_named_with_the_fix(trace):
    trace.inbox_dir.mkdir(parents=True, exist_ok=True)
    (trace.inbox_dir / ".rejected").write_text("mine\n")
    drop(trace, "bad.md", b"\x89PNG\x00")
    with pytest.raises(AgentfsError, match=r"\.rejected: is a file, not a folder") as info:
        take(trace)
    assert "move the file away" in (info.value.hint or "")
    assert (trace.inbox_dir / ".rejected").read_text() == "mine\n"


def test_a_message_is_never_kept_in_an_inbox_that_is_a_link(trace, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.rmtree(trace.inbox_dir, ignore_errors=True)
    trace.inbox_dir.symlink_to(outside)
    with pytest.raises(AgentfsError, match="is a symlink, not a folder"):
        save_in_inbox(trace.inbox_dir, "for later\n")
    assert list(outside.iterdir()) == []


def test_a_symlink_is_never_followed(project, trace, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("password: hunter2\n")
    trace.inbox_dir.mkdir(parents=True, exist_ok=True)
    (trace.inbox_dir / "x.md").symlink_to(secret)
    report = take(trace)
    assert report.taken == []
    [rejected] = report.rejected
    assert "symlink" in rejected.reason
    assert (trace.inbox_dir / ".rejected/x.md").is_symlink()
    assert all("hunter2" not in m.text for m in fresh(project).messages().values())
    assert_git_clean(project.workspace.root)


def test_a_file_still_being_written_waits(project, trace):
    path = drop(trace, "slow.md", "first half")
    clock = SettleClock(30.0)
    with trace.lock():
        report = take_waiting(trace, clock)
    assert report.taken == [] and report.unsettled == [path]
    assert path.exists()


def test_an_empty_file_is_never_taken(project, trace):
    path = drop(trace, "empty.md", "")
    assert take(trace).taken == [] and path.exists()


def test_a_copied_message_file_gets_a_new_place_and_id(project, trace):
    # "Send it again": a copy of an existing message file, frontmatter and all.
    drop(trace, "again.md", (trace.messages_dir / "000000-000999/000002-user.md").read_text())
    [(_, message)] = take(trace).taken
    assert (message.sequence, message.parent_sequence, message.content) == (3, 2, "hello")
    assert message.id != fresh(project).messages()[2].id
    assert_git_clean(project.workspace.root)


def test_a_dropped_file_cannot_set_agentfs_own_fields(project, trace):
    drop(trace, "sneaky.md", "---\nfiles_changed: [notes/x.md]\nsynthetic: context\n"
         "tool_call_id: t1\n---\nhi\n")
    [(_, message)] = take(trace).taken
    assert message.files_changed is None and message.synthetic is None
    assert message.tool_call_id is None


def crash_during_ingest(trace: Trace, dropped: Path, point: str) -> None:
    """What taking a file does, up to a crash at `point`: 'staged' (claimed only) or
    'written' (message file and trace.json written, not committed)."""
    staged = stage(dropped, trace.workspace.ingest_dir / trace.id, trace.next_sequence(),
                   trace.rel(dropped))
    assert staged is not None
    if point == "written":
        from agentfs.store.messages import load_dropped

        message = trace.new_message("user", load_dropped(staged.file).content)
        trace.write_message(message)
        trace.meta.head = message.sequence
        trace.save_meta()


def resume(project: Project) -> list[str]:
    """What a run does first: recover, then finish claims."""
    trace = fresh(project)
    with trace.lock():
        kinds = trace.recover()
        kinds += ["user"] * len(finish_staged(trace).taken)
    return kinds


@pytest.mark.parametrize("point", ["staged", "written"])
@pytest.mark.parametrize("committed", [False, True], ids=["untracked-drop", "committed-drop"])
@pytest.mark.parametrize("text", ["Continue please.\n", None], ids=["plain", "copied-file"])
def test_a_crash_while_taking_a_file_is_finished_exactly_once(project, trace, committed, point,
                                                              text):
    root = project.workspace.root
    text = text or (trace.messages_dir / "000000-000999/000002-user.md").read_text()
    dropped = drop(trace, "note--with dashes.md", text)
    if committed:
        git(root, "add", "-A", "traces/demo/inbox")
        git(root, "commit", "-q", "-m", "drop a message")
    before = commit_count(root)
    crash_during_ingest(fresh(project), dropped, point)

    assert fresh(project).pending_inbox() == []
    assert resume(project) == (["recover"] if point == "written" else ["user"])
    assert resume(project) == []
    assert commit_count(root) == before + 1
    reopened = fresh(project)
    assert sequences(reopened.main_path()) == [1, 2, 3]
    contents = [m.content for m in reopened.main_path()]
    assert contents[-1] == ("hello" if "hello" in text else "Continue please.")
    assert len({m.id for m in reopened.messages().values()}) == 3
    assert reopened.new_message("assistant", "ok").sequence == 4
    assert "inbox/note" not in git(root, "ls-tree", "-r", "--name-only", "HEAD")
    assert staged_in(project.workspace.ingest_dir / "demo") == []
    assert_git_clean(root)


def test_names_with_double_dashes_start_the_trace_they_name(project):
    inbox = project.workspace.inbox_dir
    (inbox / "a--b.md").write_text("first\n")
    trace_id, staged = claim_new(project.workspace, inbox / "a--b.md")
    assert trace_id == "a--b" and staged.origin == "inbox/a--b.md"
    assert project.create_from_claim(trace_id, staged) == "a--b"
    assert [m.content for m in project.trace("a--b").main_path()][1] == "first"
    assert_git_clean(project.workspace.root)


@pytest.mark.parametrize(("name", "trace"), [
    ("résumé.md", "resume"), ("Über Straße.md", "Uber-Stra-e"), ("日本.md", "trace"),
    ("notes (v2).md", "notes-v2")])
def test_a_dropped_file_s_name_becomes_a_trace_id_without_its_accents(project, name, trace):
    inbox = project.workspace.inbox_dir
    (inbox / name).write_text("first\n")
    assert claim_new(project.workspace, inbox / name)[0] == trace


@pytest.mark.parametrize("point", ["claimed", "created"])
def test_a_crash_while_starting_a_trace_is_finished_exactly_once(project, point, monkeypatch):
    root = project.workspace.root
    (project.workspace.inbox_dir / "job.md").write_text("do the job\n")
    trace_id, staged = claim_new(project.workspace, project.workspace.inbox_dir / "job.md")
    if point == "created":  # killed after the `create` commit, before the user message
        import agentfs.core.project as workspace_module

        monkeypatch.setattr(workspace_module, "finish_staged", lambda trace, check=None: None)
        assert project.create_from_claim(trace_id, staged) == trace_id
        monkeypatch.undo()
        assert sequences(project.trace(trace_id).main_path()) == [1]
        assert project.trace(trace_id).unfinished()  # a restarted watcher runs it
        assert pending_new(project.workspace) == []
    else:
        assert pending_new(project.workspace) == [(trace_id, staged)]
        assert project.create_from_claim(*pending_new(project.workspace)[0]) == trace_id
    trace = project.trace(trace_id)
    with trace.lock():
        trace.recover()
        finish_staged(trace)
    contents = [m.content for m in project.trace(trace_id).main_path()]
    assert contents[1:] == ["do the job"]
    assert pending_new(project.workspace) == []
    assert not os.path.exists(project.workspace.inbox_dir / "job.md")
    assert_git_clean(root)


def test_a_crash_before_a_new_traces_first_commit_leaves_nothing_untracked(project, monkeypatch):
    from agentfs.store.trace import Trace as TraceClass

    real = TraceClass.commit_step

    def crash_after_writing(self, kind, *args, **kwargs):
        if kind == "create":
            self.save_meta()  # trace.json, messages/ and inbox/.gitkeep are on disk
            raise SystemExit("killed")
        return real(self, kind, *args, **kwargs)

    monkeypatch.setattr(TraceClass, "commit_step", crash_after_writing)
    with pytest.raises(SystemExit):
        project.new_trace("n", user("first"))
    monkeypatch.undo()
    trace = project.trace("n")
    with trace.lock():
        trace.recover()
    assert_git_clean(project.workspace.root)  # .gitkeep committed, not left untracked


# --- new-trace claims: leftovers and concurrent claimers ---------------------------


def test_an_empty_reservation_left_by_a_killed_claimer_does_not_rename_the_trace(project):
    # Killed between reserving the id and moving the file in (the reporter's repro).
    (project.workspace.ingest_dir / "n1").mkdir(parents=True)
    (project.workspace.inbox_dir / "n1.md").write_text("first\n")
    trace_id, staged = claim_new(project.workspace, project.workspace.inbox_dir / "n1.md")
    assert trace_id == "n1"
    assert project.create_from_claim(trace_id, staged) == "n1"
    assert [m.content for m in project.trace("n1").main_path()][1:] == ["first"]
    assert_git_clean(project.workspace.root)


def test_concurrent_claimers_give_each_file_the_trace_its_name_says(project):
    inbox = project.workspace.inbox_dir
    names = [f"n{i}" for i in range(40)]
    for name in names:
        (inbox / f"{name}.md").write_text(f"{name}\n")
    claims: list[tuple[str, str]] = []
    lock = threading.Lock()

    def claimer() -> None:  # two watchers looking at the same files
        for name in names:
            claim = claim_new(project.workspace, inbox / f"{name}.md")
            if claim is not None:
                with lock:
                    claims.append((claim[0], claim[1].origin))

    threads = [threading.Thread(target=claimer) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(claims) == sorted((n, f"inbox/{n}.md") for n in names)


def test_a_claim_in_the_making_is_not_finished_by_another_process(project):
    # `pending_new` waits for the claim lock, so it never sees half a claim.
    from agentfs.store.ingest import NEW_TRACES_LOCK
    from agentfs.store.tracelock import TraceLock

    (project.workspace.ingest_dir / "n1" / "000002").mkdir(parents=True)  # origin not yet in
    with TraceLock(project.workspace.lock_dir, NEW_TRACES_LOCK):
        found: list = []
        thread = threading.Thread(target=lambda: found.append(pending_new(project.workspace)))
        thread.start()
        thread.join(0.5)
        assert thread.is_alive()  # waiting for the claimer
        assert (project.workspace.ingest_dir / "n1" / "000002").is_dir()
    thread.join()
    assert found == [[]]


def test_a_claim_in_the_making_is_left_alone_by_those_asking_whether_a_run_has_work(
        project, trace):
    # `stage` makes the folder, writes the origin, then moves the file in, under the
    # trace's lock; the page's tree and the watcher ask `waits_for_user` without it.
    trace.commit_step("assistant", [trace.new_message("assistant", "an answer")])  # #3
    claim = project.workspace.ingest_dir / trace.id / "000004"
    claim.mkdir(parents=True)
    (claim / "origin.json").write_text('{"origin": "traces/demo/inbox/x.md"}')
    assert fresh(project).waits_for_user() is True  # no file yet: not a claim
    assert claim.is_dir() and (claim / "origin.json").exists()  # and nothing removed
    drop(trace, "x.md", "the claimed text\n").rename(claim / "file.md")  # moved in
    assert fresh(project).waits_for_user() is False  # a claimed file: a run has work


# --- one rule for a dropped file, at every door -------------------------------------

BAD_DROPS = {
    "unknown preset": "---\npreset: nope\n---\nhi\n",
    "bad preset": "---\npreset: {a: 1}\n---\nhi\n",
    "unknown skill": "---\ninject_skills: [nope]\n---\nhi\n",
    "bad skills": "---\ninject_skills: 7\n---\nhi\n",
    "unknown keys": "---\n" + "".join(f"k{i}: {i}\n" for i in range(10_000)) + "---\nhi\n",
}


@pytest.mark.parametrize("problem", BAD_DROPS)
def test_a_bad_dropped_file_is_refused_alike_by_every_door(project, trace, tmp_path, problem):
    from agentfs.core.actions import post_message
    from agentfs.models.replay import ReplayModel

    root = project.workspace.root
    text = BAD_DROPS[problem]
    before = git(root, "rev-parse", "HEAD")
    # the new-trace inbox
    (project.workspace.inbox_dir / "new.md").write_text(text)
    outcome = project.start_trace(project.workspace.inbox_dir / "new.md")
    assert isinstance(outcome, Rejected)
    # a trace's inbox
    drop(trace, "more.md", text)
    with trace.lock():
        report = take_waiting(trace, SettleClock(0), check=project.drop_check())
    assert report.taken == [] and len(report.rejected) == 1
    # the API's post: refused before it is written, so nothing is put aside either
    inbox = sorted(trace.inbox_dir.rglob("*"))
    with pytest.raises(MessageFileError, match="<message>"):
        post_message(fresh(project), text, check=project.drop_check())
    assert sorted(trace.inbox_dir.rglob("*")) == inbox
    # `agentfs run -m` and `agentfs new -f`
    script = tmp_path / "script.json"
    script.write_text('{"turns": [{"text": "ok"}]}')
    runner = project.runner(ReplayModel(script))
    with pytest.raises(AgentfsError):
        runner.run("demo", [text])
    (tmp_path / "f.md").write_text(text)
    with pytest.raises(AgentfsError, match="f.md"):  # as `agentfs new -f` reads it
        project.new_trace("other", read_dropped(tmp_path / "f.md"))
    assert git(root, "rev-parse", "HEAD") == before  # nothing committed by any door
    assert "other" not in project.workspace.trace_ids()
    assert_git_clean(root)


def test_a_hard_link_is_refused(project, trace, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("password: hunter2\n")
    trace.inbox_dir.mkdir(parents=True, exist_ok=True)
    os.link(secret, trace.inbox_dir / "x.md")
    [rejected] = take(trace).rejected
    assert "hard link" in rejected.reason
    assert all("hunter2" not in m.text for m in fresh(project).messages().values())
    assert_git_clean(project.workspace.root)


@pytest.mark.parametrize("kind", ["fifo", "folder", "hidden name", "left empty"])
def test_what_cannot_be_a_message_is_put_aside_once_with_a_note(project, trace, kind):
    trace.inbox_dir.mkdir(parents=True, exist_ok=True)
    name = {"fifo": "pipe.md", "folder": "x.md", "hidden name": "..md",
            "left empty": "empty.md"}[kind]
    path = trace.inbox_dir / name
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
        (path / "inside.md").write_text("inside\n")
    else:
        path.write_text("" if kind == "left empty" else "hidden\n")
        if kind == "left empty":
            old = time.time() - 2 * EMPTY_GRACE
            os.utime(path, (old, old))
    assert len(take(trace).rejected) == 1
    assert not os.path.lexists(path)
    assert os.path.lexists(trace.inbox_dir / ".rejected" / name)
    assert (trace.inbox_dir / ".rejected" / f"{name}.reason.txt").is_file()
    assert take(trace).rejected == []  # once
    assert_git_clean(project.workspace.root)


def test_editor_temp_files_in_inboxes_do_not_show_as_untracked(project, trace):
    trace.inbox_dir.mkdir(parents=True, exist_ok=True)
    for name in ("x.md~", ".x.md.swp", "#x.md#", "4913", "y.tmp"):
        (trace.inbox_dir / name).write_text("temp")
        (project.workspace.inbox_dir / name).write_text("temp")
    assert take(trace).taken == []
    assert git(project.workspace.root, "status", "--porcelain") == ""
