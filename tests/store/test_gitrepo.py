"""Commits agentfs makes, checked with the real `git` binary (compat tier)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from dulwich.objects import Blob

from agentfs.core.project import Project
from agentfs.errors import GitStateError
from agentfs.store.commits import Step
from agentfs.store.git.repo import Change
from agentfs.store.messages import Message, ToolCall, render_message
from agentfs.store.trace import Trace
from tests.conftest import assert_git_clean, git, user


def wait_for(condition, timeout: float = 10.0, what: str = "condition") -> None:
    """Poll `condition` until it is true; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def head(root: Path, rev: str = "HEAD") -> str:
    return git(root, "rev-parse", rev).strip()


def tree_files(root: Path, rev: str = "HEAD") -> set[str]:
    return set(git(root, "ls-tree", "-r", "--name-only", rev).splitlines())


@pytest.fixture
def trace(project: Project) -> Trace:
    return project.new_trace("demo", user("Summarise notes.md please"))


def test_steps_leave_status_and_fsck_clean(project: Project, trace: Trace) -> None:
    root = project.workspace.root
    assert_git_clean(root)

    call = trace.new_message(
        "assistant", "", tool_calls=[ToolCall(id="c1", name="write", input={"path": "a/b/out.md"})]
    )
    trace.commit_step("assistant", [call])
    assert_git_clean(root)

    # A tool step also commits the workspace files the tools changed: a new file in a
    # new directory, an executable script, a symlink, and a deleted file.
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "out.md").write_text("# out\n")
    script = root / "run.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o755)
    (root / "link").symlink_to("a/b/out.md")
    result = trace.new_message("tool", "wrote it", tool_call_id="c1")
    trace.commit_step("tool", [result], extra_paths=["a/b/out.md", "run.sh", "link"])
    assert_git_clean(root)
    assert git(root, "ls-files", "-s", "run.sh").startswith("100755 ")
    assert git(root, "ls-files", "-s", "link").startswith("120000 ")
    assert git(root, "cat-file", "-p", "HEAD:link") == "a/b/out.md"

    (root / "a" / "b" / "out.md").unlink()
    result = trace.new_message("tool", "deleted it", tool_call_id="c1")
    trace.commit_step("tool", [result], extra_paths=["a/b/out.md"])
    assert_git_clean(root)
    assert "a/b/out.md" not in tree_files(root)
    assert "a" not in git(root, "ls-tree", "--name-only", "HEAD").split(), "no empty tree is left"
    # `git show` of the tool step shows exactly what the step did.
    shown = git(root, "show", "--name-status", "--format=", "HEAD").splitlines()
    assert sorted(shown) == sorted(
        ["D\ta/b/out.md", "A\ttraces/demo/messages/000000-000999/000005-tool.md", "M\ttraces/demo/trace.json"]
    )


def test_commit_worktree_of_a_missing_untracked_path_is_harmless(project: Project) -> None:
    root = project.workspace.root
    before = head(root)
    project.repo.commit_worktree(["never-existed.txt"], Step("", "edit", summary="x").message())
    assert_git_clean(root)
    assert head(root, "HEAD~1") == before


def test_a_file_replaced_by_a_folder_is_committed_as_the_folder(project: Project) -> None:
    """As `git add -A` does: the file is gone from the commit, the folder's file is in."""
    root = project.workspace.root
    (root / "a").write_text("a file\n")
    project.repo.commit_worktree(["a"], Step("", "edit", summary="file").message())
    (root / "a").unlink()
    (root / "a").mkdir()
    (root / "a" / "inside.txt").write_text("now a folder\n")
    project.repo.commit_worktree(["a", "a/inside.txt"],
                                 Step("", "edit", summary="folder").message())
    assert git(root, "ls-tree", "-r", "--name-only", "HEAD", "a").split() == ["a/inside.txt"]
    assert_git_clean(root)
    git(root, "fsck", "--strict")


def test_a_folder_replaced_by_a_file_leaves_no_entry_of_the_folder_in_the_index(
    project: Project,
) -> None:
    """Only the new file is committed; Git refuses an index holding both `data/n` and
    `data/n/sub/f`, so the folder's entries go with it (and the other way round)."""
    root = project.workspace.root
    (root / "data" / "n" / "sub").mkdir(parents=True)
    (root / "data" / "n" / "sub" / "f").write_text("in the folder\n")
    project.repo.commit_worktree(["data/n/sub/f"], Step("", "edit", summary="folder").message())
    shutil.rmtree(root / "data" / "n")
    (root / "data" / "n").write_text("x\n")
    project.repo.commit_worktree(["data/n"], Step("", "edit", summary="file").message())
    assert git(root, "ls-files", "data").split() == ["data/n"]
    assert_git_clean(root)

    (root / "data" / "n").unlink()
    (root / "data" / "n").mkdir()
    (root / "data" / "n" / "g").write_text("a folder again\n")
    project.repo.commit_worktree(["data/n/g"], Step("", "edit", summary="again").message())
    assert git(root, "ls-files", "data").split() == ["data/n/g"]
    assert_git_clean(root)
    (root / "mine.txt").write_text("the user's own commit works\n")
    git(root, "add", "mine.txt")
    git(root, "commit", "-q", "-m", "mine")


def test_commit_message_subject_and_trailers(project: Project, trace: Trace) -> None:
    root = project.workspace.root
    reply = trace.new_message(
        "assistant", "\n  I read the notes   and\twrote a summary.\nSecond line.", goal_id="g-1"
    )
    trace.commit_step("assistant", [reply])
    message = git(root, "log", "-1", "--format=%B")
    assert message.splitlines()[0] == "demo: assistant #3 I read the notes and wrote a summary."
    trailers = subprocess.run(
        ["git", "interpret-trailers", "--parse"],
        input=message,
        capture_output=True,
        text=True,
        check=True,
        cwd=root,
    ).stdout
    assert trailers.splitlines() == [
        "Agentfs-Trace: demo",
        "Agentfs-Sequence: 3",
        "Agentfs-Kind: assistant",
        "Agentfs-Goal: g-1",
    ]
    kinds = git(root, "log", "--format=%(trailers:key=Agentfs-Kind,valueonly)%x00").split("\x00")
    assert [k.strip() for k in kinds if k.strip()] == ["assistant", "user", "create", "init"]
    grep = git(root, "log", "--grep", "^Agentfs-Trace: demo$", "--format=%s").splitlines()
    assert [s.split(" #")[0] for s in grep] == ["demo: assistant", "demo: user", "demo: create"]
    assert git(root, "log", "--grep", "Agentfs-Sequence: 3", "--format=%s").startswith(
        "demo: assistant #3"
    )

    # Long texts are cut to a 72-character subject; tool calls without text name the tools.
    long = trace.new_message("user", "word " * 40)
    trace.commit_step("user", [long])
    subject = git(root, "log", "-1", "--format=%s").rstrip("\n")
    assert len(subject) <= 72 and subject.endswith("…")
    assert subject.startswith("demo: user #4 word word")
    calls = trace.new_message(
        "assistant", "", tool_calls=[ToolCall(id="a", name="read"), ToolCall(id="b", name="grep")]
    )
    trace.commit_step("assistant", [calls])
    assert git(root, "log", "-1", "--format=%s").strip() == "demo: assistant #5 calls read, grep"


# Each child process creates its own trace and commits to it as fast as it can.
# With `same` every trace writes byte-identical files (the same system prompt,
# the same replies), so the processes also race on writing the same Git objects.
CHILD = r"""
import sys
from pathlib import Path
from agentfs.core.project import Project
from agentfs.store.ingest import parse_dropped_text

root, trace_id, count, same = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
tag = "" if same else trace_id + " "
project = Project.open(root)
print("ready", flush=True)
assert sys.stdin.readline() == "go\n"
trace = project.new_trace(
    trace_id,
    parse_dropped_text("<test>", f"{tag}first message".encode()),
    system_prompt=None if same else f"You are {trace_id}.",
)
with trace.lock():
    for i in range(count):
        role = "assistant" if i % 2 == 0 else "user"
        message = trace.new_message(role, f"{tag}step {i}")
        trace.commit_step(role, [message])
print("done", flush=True)
"""


@pytest.mark.parametrize("same", [False, True], ids=["distinct-files", "identical-files"])
def test_concurrent_traces_lose_no_commit(project: Project, same: bool) -> None:
    root = project.workspace.root
    processes, commits = 4, 30
    base = head(root)
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(root), f"t{n}", str(commits), "1" if same else "0"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=root,
        )
        for n in range(processes)
    ]
    try:
        for child in children:
            assert child.stdout is not None and child.stdout.readline() == "ready\n"
        for child in children:  # start them together
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        outcomes = [child.communicate(timeout=90) for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    for child, (out, err) in zip(children, outcomes, strict=True):
        assert child.returncode == 0, f"child failed:\n{out}\n{err}"

    assert_git_clean(root)
    files = tree_files(root)
    for n in range(processes):
        prefix = f"traces/t{n}/messages/000000-000999/"
        names = sorted(f[len(prefix) :] for f in files if f.startswith(prefix))
        # system #1, first user message #2, then the children's steps
        assert len(names) == 2 + commits
        assert names[0] == "000001-system.md" and names[-1] == f"{2 + commits:06d}-user.md"
        assert (
            git(root, "show", f"HEAD:traces/t{n}/trace.json")
            == (root / f"traces/t{n}/trace.json").read_text()
        )
        subjects = git(root, "log", "--grep", f"^Agentfs-Trace: t{n}$", "--format=%s").splitlines()
        assert len(subjects) == 2 + commits
    assert int(git(root, "rev-list", "--count", f"{base}..HEAD")) == processes * (2 + commits)
    # History is linear: each commit was rebuilt on the head it found (compare-and-swap).
    assert git(root, "rev-list", "--merges", "HEAD") == ""


def test_side_branch_commit_leaves_worktree_and_index_alone(project: Project, trace: Trace) -> None:
    root, repo = project.workspace.root, project.repo
    main_head = repo.head()
    assert main_head is not None
    branch = "agentfs/demo/compression-1"
    repo.create_branch(branch, main_head)
    with pytest.raises(GitStateError, match="already exists"):
        repo.create_branch(branch, main_head)

    side_file = "traces/demo/messages/000000-000999/000003-assistant.md"
    side = Message(
        id="msg-000003",
        sequence=3,
        parent_sequence=2,
        role="assistant",
        content="Summary of the work so far.",
        branch_type="compression",
        branch_id="compression-1",
    )
    side_head = repo.commit_changes(
        b"refs/heads/" + branch.encode(),
        [Change(side_file, render_message(side))],
        Step("demo", "branch", 3, summary="summary").message(),
    )
    assert repo.head() == main_head
    assert not (root / side_file).exists()
    assert_git_clean(root)
    assert side_file in tree_files(root, branch)
    assert side_file not in tree_files(root, "main")
    assert head(root, f"{branch}^") == main_head.decode()
    assert repo.branches("agentfs/demo/") == [branch]

    # A branch that does not exist yet can be started from a commit.
    other = repo.commit_changes(
        b"refs/heads/agentfs/demo/reflection-1",
        [Change("knowledge/k1.md", b"k\n")],
        Step("demo", "branch", 3, summary="reflect").message(),
        start=main_head,
    )
    assert head(root, "agentfs/demo/reflection-1") == other.decode()
    assert head(root, "agentfs/demo/reflection-1^") == main_head.decode()
    assert_git_clean(root)

    # The outcome lands on main in a merge commit whose second parent is the side head.
    outcome = trace.new_message("assistant", "Summary of the work so far.")
    trace.write_message(outcome)
    trace.meta.head = outcome.sequence
    trace.save_meta()
    merged = repo.commit_worktree(
        [trace.rel(trace.message_path(outcome)), trace.rel(trace.meta_path)],
        Step("demo", "outcome", outcome.sequence, summary="compression").message(),
        extra_parents=[side_head],
    )
    assert head(root) == merged.decode()
    assert head(root, "HEAD^1") == main_head.decode()
    assert head(root, "HEAD^2") == side_head.decode()
    graph = git(root, "log", "--graph", "--format=%s", "main")
    assert "demo: branch #3 summary" in graph
    assert re.search(r"^\|\\", graph, re.MULTILINE), graph  # the merge shows as a fork
    assert_git_clean(root)


def test_head_on_another_branch_is_refused(project: Project, trace: Trace) -> None:
    root = project.workspace.root
    git(root, "checkout", "-q", "-b", "experiment")
    before = head(root, "main")
    message = trace.new_message("assistant", "hello")
    with pytest.raises(GitStateError) as info:
        trace.commit_step("assistant", [message])
    assert "experiment" in info.value.message and "main" in info.value.message
    assert "git checkout main" in (info.value.hint or "")
    assert head(root, "main") == before

    git(root, "checkout", "-q", "--detach", "main")
    with pytest.raises(GitStateError) as info:
        project.repo.commit_worktree(["x"], b"x\n")
    assert "main" in info.value.message
    assert "git checkout" in (info.value.hint or "")
    assert head(root, "main") == before


def test_stale_index_lock_is_waited_for(project: Project, trace: Trace) -> None:
    root, repo = project.workspace.root, project.repo
    lock = root / ".git" / "index.lock"
    lock.write_bytes(b"")  # someone else's git is "running"
    before = repo.head()
    message = trace.new_message("assistant", "written while index.lock was held")
    errors: list[BaseException] = []

    def commit() -> None:
        try:
            trace.commit_step("assistant", [message])
        except BaseException as exc:  # noqa: BLE001 - reported to the test below
            errors.append(exc)

    worker = threading.Thread(target=commit)
    worker.start()
    # Like `git commit`, agentfs takes index.lock before it moves main: while someone
    # else holds it, the commit waits and main does not move.
    worker.join(timeout=0.5)  # a bounded look at "still waiting", not a synchronisation
    assert not errors
    assert worker.is_alive(), "the commit should wait while index.lock exists"
    assert repo.head() == before
    lock.unlink()
    worker.join(timeout=20)
    assert not worker.is_alive()
    assert not errors, errors
    assert repo.head() != before
    assert_git_clean(root)


def test_users_own_git_commit_after_agentfs_commits(project: Project, trace: Trace) -> None:
    root = project.workspace.root
    # The user stages a file of their own while the agent works.
    (root / "notes.md").write_text("my notes\n")
    git(root, "add", "notes.md")
    reply = trace.new_message("assistant", "done")
    trace.commit_step("assistant", [reply])
    assert "notes.md" not in tree_files(root)
    assert git(root, "status", "--porcelain", "--untracked-files=all") == "A  notes.md\n"
    assert git(root, "diff", "--cached", "--name-only") == "notes.md\n"

    git(root, "commit", "-q", "-m", "my notes")
    assert git(root, "show", "--name-status", "--format=", "HEAD") == "A\tnotes.md\n"
    assert_git_clean(root)

    # agentfs continues on top of the user's commit.
    user_commit = head(root)
    more = trace.new_message("user", "thanks")
    trace.commit_step("user", [more])
    assert head(root, "HEAD^") == user_commit
    assert "notes.md" in tree_files(root)
    assert_git_clean(root)
    # The index still works for git: e.g. `git stash` and `git diff` see no changes.
    assert git(root, "diff", "HEAD", "--stat") == ""
    git(root, "commit", "-q", "--allow-empty", "-m", "empty")
    assert git(root, "show", "--name-only", "--format=", "HEAD") == ""


def test_objects_written_by_another_process_at_the_same_time(project: Project) -> None:
    """Another agentfs process writing the same object (e.g. the same system prompt blob
    for two traces) holds `<object>.lock` for a moment; a commit must not fail on it."""
    root, repo = project.workspace.root, project.repo
    data = b"identical content written by two traces\n"
    blob = Blob.from_string(data)
    hexsha = blob.id.decode()
    obj_dir = root / ".git" / "objects" / hexsha[:2]
    obj_dir.mkdir(exist_ok=True)
    lock = obj_dir / f"{hexsha[2:]}.lock"
    lock.write_bytes(blob.as_legacy_object())  # the other writer is half-way through

    def other_writer_finishes() -> None:
        os.replace(lock, obj_dir / hexsha[2:])

    (root / "same.txt").write_bytes(data)
    finisher = threading.Timer(0.3, other_writer_finishes)
    finisher.start()
    try:
        repo.commit_worktree(["same.txt"], Step("", "edit", summary="same").message())
    finally:
        finisher.join()
    assert_git_clean(root)
    assert git(root, "show", "HEAD:same.txt").encode() == data


def test_split_index_is_handled_or_refused_cleanly(project: Project, trace: Trace) -> None:
    # `git update-index --split-index` (or core.splitIndex=true) stores most entries in a
    # shared file and only a "link" extension in .git/index. agentfs must either keep
    # such an index consistent or refuse clearly *before* it moves main.
    root = project.workspace.root
    git(root, "config", "core.splitIndex", "true")
    git(root, "update-index", "--split-index")
    before = head(root, "main")
    message = trace.new_message("assistant", "hello")
    try:
        trace.commit_step("assistant", [message])
    except GitStateError as exc:
        assert "index" in str(exc)
        assert head(root, "main") == before
    else:
        assert_git_clean(root)
        (root / "mine.md").write_text("mine\n")
        git(root, "add", "mine.md")
        git(root, "commit", "-q", "-m", "mine")
        assert git(root, "show", "--name-status", "--format=", "HEAD") == "A\tmine.md\n"
        assert_git_clean(root)


def test_an_index_of_version_4_is_kept_in_step_with_each_commit(
    project: Project, trace: Trace
) -> None:
    # Git writes version 4 (path-compressed entries) under `feature.manyFiles`.
    root = project.workspace.root
    (root / "notes.md").write_text("mine\n")
    git(root, "add", "notes.md")
    git(root, "update-index", "--index-version", "4")
    trace.commit_step("assistant", [trace.new_message("assistant", "hello")])
    assert git(root, "diff", "--cached", "--name-status") == "A\tnotes.md\n"  # still staged
    git(root, "commit", "-q", "-m", "mine")
    trace.commit_step("assistant", [trace.new_message("assistant", "again")])
    assert_git_clean(root)
    assert trace.repo.staged_changes(f"traces/{trace.id}") == []


def test_an_index_nobody_can_read_is_refused_before_main_moves(
    project: Project, trace: Trace
) -> None:
    root = project.workspace.root
    index = root / ".git" / "index"
    data = index.read_bytes()
    index.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))  # its checksum no longer matches
    before = head(root, "main")
    with pytest.raises(GitStateError, match="index") as caught:
        trace.commit_step("assistant", [trace.new_message("assistant", "hello")])
    assert caught.value.hint and "git" in caught.value.hint
    assert head(root, "main") == before


def test_a_git_am_or_rebase_stopped_halfway_is_named_with_its_own_abort(project: Project) -> None:
    """Both leave `.git/rebase-apply/`; `git rebase --abort` is refused during `git am`."""
    root = project.workspace.root
    (root / "a.txt").write_text("one\n")
    git(root, "add", "a.txt")
    git(root, "commit", "-qm", "one")
    patch = git(root, "format-patch", "-1", "--stdout")
    (root / "a.txt").write_text("two\n")
    git(root, "commit", "-qam", "two")
    git(root, "reset", "-q", "--hard", "HEAD~2")
    (root / "a.txt").write_text("other\n")
    git(root, "add", "a.txt")
    git(root, "commit", "-qm", "other")
    assert project.repo.unfinished() is None
    stopped = subprocess.run(["git", "am"], cwd=root, input=patch, text=True,
                             capture_output=True, check=False)
    assert stopped.returncode != 0
    assert project.repo.unfinished() == "git am --abort"
    git(root, "am", "--abort")
    assert project.repo.unfinished() is None
