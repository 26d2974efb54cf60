"""Workspaces with long traces, built fast for benchmarking.

A trace of N messages is written as N message files and committed in one
commit with `git fast-import`, which writes a pack instead of N loose
objects (making N agentfs steps, or `git add` of 10,000 files, takes
minutes on a slow filesystem). The
messages cycle through a realistic turn: a user request, an assistant turn
with a tool call, the tool's result, an assistant answer. With `kept`, the
trace looks like one that Level 2 compression has shortened: all N files
exist, but the main path is system, first user message, a summary and the
last `kept` messages.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from agentfs.core.project import Project, init_workspace
from agentfs.core.sidebranch import SUMMARY_HEADER
from agentfs.store.history import is_model_turn
from agentfs.store.ingest import parse_dropped_text
from agentfs.store.messages import Message, ToolCall, render_message

TRACE = "long"
GIT_ENV = {
    "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@localhost",
    "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@localhost",
    "GIT_CONFIG_NOSYSTEM": "1",
}
PARAGRAPH = (
    "The quarterly notes mention three follow-ups: migrate the build to the new runners, "
    "write down who owns the release checklist, and archive the old dashboards. "
)


def git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=root, capture_output=True, text=True, check=True,
        env={**os.environ, **GIT_ENV},
    )
    return done.stdout


def tree_bytes(path: Path) -> int:
    """The bytes of all files below `path` (their sizes, not the blocks they use)."""
    return sum(os.lstat(os.path.join(folder, name)).st_size
               for folder, _, names in os.walk(path) for name in names)


def objects_after_gc(root: Path, scratch: Path) -> int:
    """What `git gc` makes of `root`'s objects: the bytes of `.git/objects` in a copy
    after it ran (the rest of `.git`, such as the index, it leaves as it is)."""
    copy = scratch / f"gc-{root.name}"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(root / ".git", copy / ".git", symlinks=True)
    git(copy, "gc", "-q")
    size = tree_bytes(copy / ".git" / "objects")
    shutil.rmtree(copy)
    return size


def message(sequence: int) -> Message:
    """The message at `sequence` (2 and up) of a synthetic long trace."""
    parent = sequence - 1
    step = (sequence - 2) % 4
    if step == 0:
        return Message(id=f"msg-{sequence:06d}", sequence=sequence, parent_sequence=parent,
                       role="user", content=f"Request {sequence}: summarise notes/{sequence}.md")
    if step == 1:
        return Message(
            id=f"msg-{sequence:06d}", sequence=sequence, parent_sequence=parent,
            role="assistant", content="Let me read that file.", model="replay",
            stop_reason="tool_use",
            tool_calls=[ToolCall(id=f"toolu_{sequence}", name="read_file",
                                 input={"path": f"notes/{sequence - 1}.md"})],
        )
    if step == 2:
        return Message(id=f"msg-{sequence:06d}", sequence=sequence, parent_sequence=parent,
                       role="tool", tool_call_id=f"toolu_{sequence - 1}",
                       content=PARAGRAPH * 4)
    return Message(id=f"msg-{sequence:06d}", sequence=sequence, parent_sequence=parent,
                   role="assistant", content=PARAGRAPH * 2, model="replay",
                   stop_reason="end_turn")


def clone_workspace(template: Path, target: Path) -> Path:
    """A copy of a workspace in a fraction of the time: message files and Git objects,
    which nobody changes in place (agentfs and git replace them), are hard links."""

    def place(src: str, dst: str) -> None:
        shared = "/messages/" in src or "/.git/objects/" in src
        (os.link if shared else shutil.copy2)(src, dst)

    shutil.copytree(template, target, symlinks=True, copy_function=place)
    return target


def shared_long_trace(scratch: Path, count: int, *, kept: int | None = None) -> Path:
    """A `long_trace` workspace built once per benchmark run, beside the suites'
    folders, for suites that only read it (lock and cache files aside)."""
    root = scratch.parent / "shared" / f"long-{count}-{kept}"
    if not root.exists():
        long_trace(root, count, kept=kept)
    return root


def long_trace(root: Path, count: int, *, kept: int | None = None) -> Project:
    """A workspace at `root` whose trace `long` has `count` messages, all committed."""
    init_workspace(root)
    project = Project.open(root)
    first = parse_dropped_text("<bench>", b"Start of a long trace.")
    trace = project.new_trace(TRACE, first)  # messages 1 (system) and 2 (user)
    summary_at = None if kept is None else count - kept
    files: dict[Path, bytes] = {}
    turns = 0
    for sequence in range(3, count + 1):
        if sequence == summary_at:
            m = Message(id=f"msg-{sequence:06d}", sequence=sequence, parent_sequence=2,
                        role="user", synthetic="summary", content=f"{SUMMARY_HEADER}\n\n{PARAGRAPH}")
        else:
            m = message(sequence)
        turns += is_model_turn(m)
        files[trace.message_path(m)] = render_message(m)
    trace.meta.head = count
    trace.meta.next_sequence = count + 1
    trace.meta.iterations = turns  # as the runs that wrote them would have kept it
    trace.save_meta()
    files[trace.meta_path] = trace.meta_path.read_bytes()
    for path, data in files.items():
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(data)
    _commit_with_fast_import(root, files, f"bench: {count} messages")
    return Project.open(root)


def _commit_with_fast_import(root: Path, files: dict[Path, bytes], message: str) -> None:
    """Commit `files` on main in one pack, then bring the index up to date."""
    parent = git(root, "rev-parse", "HEAD").strip()
    chunks = [
        b"commit refs/heads/main\n",
        b"committer bench <bench@localhost> 1767225600 +0000\n",
        b"data %d\n%s\n" % (len(message.encode()), message.encode()),
        b"from %s\n" % parent.encode(),
    ]
    for path, data in files.items():
        name = path.relative_to(root.resolve()).as_posix().encode()
        chunks.append(b"M 100644 inline %s\ndata %d\n%s\n" % (name, len(data), data))
    subprocess.run(["git", "fast-import", "--quiet"], cwd=root, input=b"".join(chunks),
                   check=True, env={**os.environ, **GIT_ENV})
    git(root, "read-tree", "HEAD")
    git(root, "update-index", "-q", "--refresh")
    # A workspace that has been used has all 256 loose-object folders; a pack alone
    # has none, and making them would be measured as part of the first steps.
    for n in range(256):
        (root / ".git" / "objects" / f"{n:02x}").mkdir(exist_ok=True)
