"""What makes a long trace fast to open must never make it wrong: the on-disk parse
cache, the index's stat data in recover(), the fsync setting, folders made on demand."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from agentfs.core.project import Project
from agentfs.store import dirmemory, parsecache
from agentfs.store import message_dir as message_dir_module
from agentfs.store.cleanfolders import CleanFolders
from agentfs.store.trace import Trace
from tests.conftest import assert_git_clean, git, long_trace, user


@pytest.fixture
def trace(project: Project) -> Trace:
    trace = project.new_trace("demo", user("hello"))
    for n in range(parsecache.SAVE_AFTER + 8):
        role = "assistant" if n % 2 == 0 else "user"
        trace.commit_step(role, [trace.new_message(role, f"{role} number {n:04d}")])
    return trace


def age(trace: Trace) -> None:
    """Files written moments ago are parsed again each time ("racily clean"); age them."""
    old = time.time() - 60
    for path in trace.messages_dir.rglob("*.md"):
        os.utime(path, (old, old))


def new_process(project: Project) -> Trace:
    """The trace as a new process opens it: nothing parsed in memory."""
    dirmemory.forget()
    return Project.open(project.workspace.root).trace("demo")


def count_parses(monkeypatch) -> list[Path]:
    parsed: list[Path] = []
    real = message_dir_module.load_message

    def counting(path: Path):
        parsed.append(path)
        return real(path)

    monkeypatch.setattr(message_dir_module, "load_message", counting)
    return parsed


def test_a_new_process_reuses_parsed_messages(project: Project, trace: Trace, monkeypatch) -> None:
    age(trace)
    first = new_process(project)
    expected = {s: m.text for s, m in first.messages(refresh=True).items()}  # parses, saves
    assert (project.workspace.state_dir / "cache" / "demo.parsed" / "000000-000999.pickle").exists()
    parsed = count_parses(monkeypatch)
    second = new_process(project)
    assert {s: m.text for s, m in second.messages(refresh=True).items()} == expected
    assert parsed == []


def test_an_edit_that_keeps_size_and_mtime_is_still_seen(
    project: Project, trace: Trace, monkeypatch
) -> None:
    new_process(project).messages(refresh=True)  # cache written after the files
    path = trace.messages_dir / "000000-000999/000003-assistant.md"
    before = os.stat(path)
    path.write_bytes(path.read_bytes().replace(b"number 0000", b"NUMBER 0000"))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # only ctime tells
    edited = new_process(project)
    assert edited.messages(refresh=True)[3].text == "assistant NUMBER 0000"
    assert edited.recover() == ["edit"]  # and recover() does not trust the index either
    assert "NUMBER" in git(project.workspace.root, "show", "HEAD:traces/demo/messages/000000-000999/000003-assistant.md")
    assert_git_clean(project.workspace.root)


def test_a_file_changed_moments_ago_is_parsed_again(project: Project, trace: Trace) -> None:
    """Two saves in one clock tick can leave the same stamp: a fresh file is not cached."""
    path = trace.messages_dir / "000000-000999/000003-assistant.md"
    path.write_bytes(path.read_bytes().replace(b"number 0000", b"NUMBER 0000"))
    fresh = new_process(project)
    assert fresh.messages(refresh=True)[3].text == "assistant NUMBER 0000"
    stamp = os.stat(path)
    path.write_bytes(path.read_bytes().replace(b"NUMBER 0000", b"NUMBRE 0000"))
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # as if in the same tick
    assert fresh.messages(refresh=True)[3].text == "assistant NUMBRE 0000"


def test_a_damaged_or_foreign_cache_is_ignored(project: Project, trace: Trace) -> None:
    age(trace)  # else files of the cache's own clock tick are left out of it (racily clean)
    new_process(project).messages(refresh=True)
    cache = project.workspace.state_dir / "cache" / "demo.parsed" / "000000-000999.pickle"
    for damage in (b"not a pickle", cache.read_bytes()[:100]):
        cache.write_bytes(damage)
        os.utime(cache, ns=(0, 2**62))  # even a cache that claims to be newest
        assert parsecache.load(cache) == {}
        assert new_process(project).messages(refresh=True)[3].text == "assistant number 0000"
        assert parsecache.load(cache)  # rebuilt by that scan


def files_opened_under(folder: Path, monkeypatch) -> list[str]:
    """The names of the files below `folder` that `open` is called on from now on."""
    read: list[str] = []
    real_open = open

    def tracking_open(file, *args, **kwargs):
        if str(file).startswith(str(folder)):
            read.append(os.path.basename(str(file)))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", tracking_open)
    return read


def test_recover_reads_only_files_whose_stat_changed(
    project: Project, trace: Trace, monkeypatch
) -> None:
    read = files_opened_under(trace.messages_dir, monkeypatch)
    fresh = new_process(project)
    with fresh.lock():
        assert fresh.recover() == []
    assert read == []  # every file matched its index entry (trace.json, small, is read)
    (trace.messages_dir / "000000-000999/000004-user.md").write_text("---\nrole: user\n---\nchanged\n")
    with fresh.lock():
        assert fresh.recover() == ["edit"]
    assert read == ["000004-user.md"]


def test_recover_records_the_new_stat_of_files_that_did_not_change(
    project: Project, trace: Trace, monkeypatch
) -> None:
    """A copy or a `touch` changes every file's stat: they are read once, then the index
    knows them again (`git update-index --refresh`), and an edit is still an edit."""
    age(trace)  # every message file's stat now differs from its index entry
    read = files_opened_under(trace.messages_dir, monkeypatch)
    fresh = new_process(project)
    with fresh.lock():
        assert fresh.recover() == []
    assert len(read) == len(list(trace.messages_dir.rglob("*.md")))
    read.clear()
    with new_process(project).lock():
        assert new_process(project).recover() == []
    assert read == []
    assert git(project.workspace.root, "diff-files", "--name-only") == ""
    path = trace.messages_dir / "000000-000999/000004-user.md"
    path.write_text(path.read_text().replace("user number", "USER number"))
    with fresh.lock():
        assert fresh.recover() == ["edit"]
    assert_git_clean(project.workspace.root)


@pytest.mark.parametrize("files", [2, 40])  # a few read at once; more, through the index
def test_links_under_the_trace_are_committed_as_links_and_an_edit_beside_them_is_seen(
        project: Project, trace: Trace, files: int) -> None:
    """Recovery stats each file through its open folder; a link is read as a link (its
    target's name, as Git stores it), never followed, whichever way its folder is read."""
    notes = trace.dir / "notes"
    notes.mkdir()
    for n in range(files):
        (notes / f"{n:02d}.md").write_text(f"note {n}\n")
    os.symlink("00.md", notes / "latest.md")
    with trace.lock():
        assert trace.recover() == ["edit"]
    root = project.workspace.root
    assert git(root, "ls-tree", "HEAD", "traces/demo/notes/latest.md").startswith("120000 ")
    assert git(root, "cat-file", "-p", "HEAD:traces/demo/notes/latest.md") == "00.md"
    with new_process(project).lock():
        assert new_process(project).recover() == []  # the link is seen as it was committed
    (notes / "latest.md").unlink()
    os.symlink("01.md", notes / "latest.md")
    (notes / "00.md").write_text("note 0, edited\n")
    with new_process(project).lock():
        assert new_process(project).recover() == ["edit"]
    assert git(root, "cat-file", "-p", "HEAD:traces/demo/notes/latest.md") == "01.md"
    assert git(root, "cat-file", "-p", "HEAD:traces/demo/notes/00.md") == "note 0, edited\n"
    assert_git_clean(root)


def _fsyncs_per_step(project: Project, monkeypatch) -> int:
    trace = project.trace("demo")
    calls: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd))[1])
    trace.commit_step("assistant", [trace.new_message("assistant", "counted")])
    monkeypatch.setattr(os, "fsync", real)
    return len(calls)


def test_fsync_files_by_default_and_everything_with_all(workspace: Path, monkeypatch) -> None:
    project = Project.open(workspace)
    project.new_trace("demo", user("hello"))
    assert _fsyncs_per_step(project, monkeypatch) == 2  # the message file and trace.json
    config = workspace / "agentfs.toml"
    config.write_text(config.read_text() + '\nfsync = "all"\n')
    git(workspace, "commit", "-qam", "fsync all")
    durable = Project.open(workspace)
    assert durable.repo.durable
    # + their directories, 2 blobs, 4 trees, the commit (each with its folder), ref, index
    assert _fsyncs_per_step(durable, monkeypatch) > 12
    assert_git_clean(workspace)


def test_folders_under_git_agentfs_are_made_again_when_deleted(
    project: Project, trace: Trace
) -> None:
    for name in ("tmp", "locks", "intents"):
        shutil.rmtree(project.workspace.state_dir / name, ignore_errors=True)
    trace.commit_step("assistant", [trace.new_message("assistant", "still works")])
    assert_git_clean(project.workspace.root)


def test_a_cache_save_cut_short_leaves_nothing_behind(project: Project, trace: Trace) -> None:
    cache_dir = project.workspace.state_dir / "cache"
    cache_dir.mkdir(parents=True, exist_ok=True)
    dead = cache_dir / "999999999-deadbeef.tmp"  # no such process
    dead.write_bytes(b"half a pickle")
    age(trace)
    new_process(project).messages(refresh=True)  # parses everything, saves the cache
    assert not dead.exists()
    assert sorted(p.name for p in cache_dir.iterdir()) == ["demo.parsed"]
    assert [p.name for p in (cache_dir / "demo.parsed").iterdir()] == ["000000-000999.pickle"]


def test_a_folder_found_clean_is_still_checked_for_edits_in_place(
    project: Project, trace: Trace, monkeypatch
) -> None:
    """Recovery remembers folders of messages/ that matched their commit and skips the
    index and the committed tree for them while every file keeps its stamp; an edit in
    place (same size, mtime set back: only ctime tells) or a new file in it is still
    an edit."""
    from agentfs.store import recovery

    monkeypatch.setattr(recovery, "RACY_NS", 0)  # every file counts as settled
    folder = str(trace.messages_dir / "000000-000999")
    root = project.workspace.root
    reopened = Project.open(root)  # remembers through its repository, as a server does
    remembered = reopened.repo.clean_folders

    def recover() -> list[str]:
        """A recovery by a trace opened afresh (nothing parsed in memory)."""
        dirmemory.forget()
        fresh = reopened.trace("demo")
        with fresh.lock():
            return fresh.recover()

    assert recover() == []
    assert remembered.get(str(trace.dir), folder) is not None
    looked_up = files_opened_under(trace.messages_dir, monkeypatch)
    assert recover() == []
    assert looked_up == []
    path = trace.messages_dir / "000000-000999/000005-assistant.md"
    before = os.stat(path)
    path.write_bytes(path.read_bytes().replace(b"number 0002", b"NUMBER 0002"))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(path).st_size == before.st_size
    assert recover() == ["edit"]
    assert "NUMBER 0002" in git(root, "show", "HEAD:traces/demo/messages/000000-000999/000005-assistant.md")
    assert recover() == []  # remembered again, with the edit
    assert remembered.get(str(trace.dir), folder) is not None
    (trace.messages_dir / "000000-000999/extra").mkdir()
    (trace.messages_dir / "000000-000999/extra/notes.txt").write_text("mine\n")
    assert recover() == ["edit"]
    assert "extra/notes.txt" in git(root, "show", "--stat", "HEAD")
    assert_git_clean(root)


def test_clean_folders_keep_their_bound_of_traces_least_recently_used_out_first() -> None:
    clean = CleanFolders(traces=2)
    clean.remember("/w/traces/a", "/w/traces/a/messages/x", (b"tree-a", {}))
    clean.remember("/w/traces/b", "/w/traces/b/messages/x", (b"tree-b", {}))
    assert clean.get("/w/traces/a", "/w/traces/a/messages/x") == (b"tree-a", {})  # a: recent
    clean.remember("/w/traces/c", "/w/traces/c/messages/x", (b"tree-c", {}))
    assert clean.trace_dirs() == ["/w/traces/a", "/w/traces/c"]  # b went first
    assert clean.get("/w/traces/b", "/w/traces/b/messages/x") is None
    clean.forget("/w/traces/a", "/w/traces/a/messages/x")
    assert clean.get("/w/traces/a", "/w/traces/a/messages/x") is None


def test_recovery_remembers_at_most_the_bound_of_traces(project: Project, monkeypatch) -> None:
    """A server recovering many traces keeps the clean folders of the latest only, and a
    trace whose memory went is recovered as well as before, reading its files again."""
    from agentfs.store import recovery

    monkeypatch.setattr(recovery, "RACY_NS", 0)  # every file counts as settled
    project.repo.clean_folders = CleanFolders(traces=2)
    traces = [project.new_trace(name, user(f"hello {name}")) for name in ("a", "b", "c")]
    for trace in traces:
        with trace.lock():
            assert trace.recover() == []
    assert project.repo.clean_folders.trace_dirs() == [str(t.dir) for t in traces[1:]]
    first = traces[0]
    path = next(first.messages_dir.rglob("*-user.md"))
    path.write_text(path.read_text().replace("hello a", "HELLO A"))
    with first.lock():
        assert first.recover() == ["edit"]
        assert first.recover() == []  # clean again: remembered, the oldest other goes
    assert project.repo.clean_folders.trace_dirs() == [str(traces[2].dir), str(first.dir)]
    assert_git_clean(project.workspace.root)


def test_a_new_process_recovers_from_the_clean_folders_the_last_one_saved(
    project: Project, monkeypatch
) -> None:
    """The folders of messages/ found clean are saved beside the parse cache: a new
    process stats every file but reads none and loads no index for a folder that
    kept its stamps, reads only the files a run added to the newest folder, and an
    edit in place in an old folder (same size, mtime put back) is still an edit."""
    from agentfs.store import recovery
    from agentfs.store.git.repo import GitRepo

    monkeypatch.setattr(recovery, "RACY_NS", 0)  # every file counts as settled
    long_trace(project, "long", 1_010, commit=True)  # two folders
    root = project.workspace.root
    messages = project.trace("long").messages_dir

    def recover_in_new_process() -> list[str]:
        dirmemory.forget()
        fresh = Project.open(root).trace("long")
        with fresh.lock():
            return fresh.recover()

    assert recover_in_new_process() == []  # through the index; the marks are saved
    assert sorted(p.name for p in project.workspace.clean_marks("long").iterdir()) == [
        "folders.json", "stamps-000000-000999.json", "stamps-001000-001999.json"]
    index_loads: list[GitRepo] = []
    real_stat_cache = GitRepo.stat_cache
    monkeypatch.setattr(GitRepo, "stat_cache",
                        lambda self: (index_loads.append(self), real_stat_cache(self))[1])
    opened = files_opened_under(messages, monkeypatch)
    assert recover_in_new_process() == []
    assert (opened, index_loads) == ([], [])
    trace = Project.open(root).trace("long")
    with trace.lock():  # a run adds a message to the newest folder
        trace.commit_step("user", [trace.new_message("user", "one more")])
    assert recover_in_new_process() == []
    assert (opened, index_loads) == (["001011-user.md"], [])
    opened.clear()
    path = messages / "000000-000999/000005-assistant.md"
    before = os.stat(path)
    path.write_bytes(path.read_bytes().replace(b"\n#5\n", b"\n#X\n"))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert recover_in_new_process() == ["edit"]
    assert opened == ["000005-assistant.md"]
    assert git(root, "show", "HEAD:traces/long/messages/000000-000999/000005-assistant.md"
               ).endswith("#X\n")
    assert recover_in_new_process() == []
    assert_git_clean(root)


def test_damaged_clean_marks_are_ignored(project: Project, trace: Trace, monkeypatch) -> None:
    """The saved marks are derived data: unreadable ones only cost a check through the index."""
    from agentfs.store import recovery

    monkeypatch.setattr(recovery, "RACY_NS", 0)
    with new_process(project).lock():
        assert new_process(project).recover() == []
    marks = project.workspace.clean_marks("demo")
    for path in marks.iterdir():
        path.write_bytes(b"{not json")
    path = trace.messages_dir / "000000-000999/000004-user.md"
    path.write_text(path.read_text().replace("user number", "USER number"))
    fresh = new_process(project)
    with fresh.lock():
        assert fresh.recover() == ["edit"]
        assert fresh.recover() == []
    assert_git_clean(project.workspace.root)


def test_a_long_lived_process_forgets_the_least_recently_read_traces_first(
        project: Project, monkeypatch) -> None:
    """A server that reads many traces keeps what it parsed of the latest only (about a
    trace's worth here), and a trace it forgot reads back the same, parsing it again."""
    for name in ("a", "b", "c"):
        long_trace(project, name, 10, commit=True)
        for path in project.trace(name).messages_dir.rglob("*.md"):
            os.utime(path, (time.time() - 60,) * 2)  # settled: kept once parsed
    monkeypatch.setattr(dirmemory, "KEEP_MESSAGES", 15)
    dirmemory.forget()
    root = project.workspace.root
    texts = {name: {s: m.text for s, m in Project.open(root).trace(name).messages().items()}
             for name in ("a", "b", "c")}  # read in this order: a is the least recent
    parsed = count_parses(monkeypatch)

    def read_again(name: str) -> int:
        """How many files reading trace `name` again parsed."""
        parsed.clear()
        messages = Project.open(root).trace(name).messages()
        assert {s: m.text for s, m in messages.items()} == texts[name]
        return len(parsed)

    assert read_again("c") == 0  # the last one read
    assert read_again("b") == 0  # b and c weigh less than the bound together
    assert read_again("c") == 0
    monkeypatch.setattr(dirmemory, "KEEP_MESSAGES", 5)
    assert read_again("b") == 0  # the one asked for is kept whatever it weighs
    assert read_again("b") == 0  # and c went: b alone weighs more than the bound
    assert read_again("c") == 10
    monkeypatch.setattr(dirmemory, "KEEP_MESSAGES", 15)
    assert read_again("a") == 10  # forgotten when c was first read: a and b weighed more


def test_folders_read_after_others_were_asked_for_are_weighed_too(project: Project,
                                                                  monkeypatch) -> None:
    """Requests overlap in a server: each trace is opened before the one before it is
    read. What the process keeps stays near the bound all the same."""
    names = [f"t{n}" for n in range(12)]
    for name in names:
        long_trace(project, name, 10, commit=True)
        for path in project.trace(name).messages_dir.rglob("*.md"):
            os.utime(path, (time.time() - 60,) * 2)
    monkeypatch.setattr(dirmemory, "KEEP_MESSAGES", 25)
    dirmemory.forget()
    root = project.workspace.root
    opened = Project.open(root).trace(names[0])
    for name in [*names[1:], names[0]]:
        following = Project.open(root).trace(name)  # asked for before the last is read
        opened.messages()
        opened = following
    parsed = count_parses(monkeypatch)
    for name in names[:-3]:
        Project.open(root).trace(name).messages()
    assert len(parsed) >= 10 * (len(names) - 5)  # all but the latest few were forgotten
