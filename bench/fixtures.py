"""Workspaces with long traces, built fast for benchmarking.

A trace of N messages is written as N message files and committed with the
`git` CLI in one commit (making N agentfs steps would take minutes). The
messages cycle through a realistic turn: a user request, an assistant turn
with a tool call, the tool's result, an assistant answer. With `kept`, the
trace looks like one that Level 2 compression has shortened: all N files
exist, but the main path is system, first user message, a summary and the
last `kept` messages.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from agentfs.core.sidebranch import SUMMARY_HEADER
from agentfs.core.workspace import Project, init_workspace
from agentfs.store.messages import Message, ToolCall, parse_dropped, render_message

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


def long_trace(root: Path, count: int, *, kept: int | None = None) -> Project:
    """A workspace at `root` whose trace `long` has `count` messages, all committed."""
    init_workspace(root)
    project = Project.open(root)
    first = parse_dropped(Path("<bench>"), b"Start of a long trace.")
    trace = project.new_trace(TRACE, first)  # messages 1 (system) and 2 (user)
    messages_dir = trace.messages_dir
    summary_at = None if kept is None else count - kept
    for sequence in range(3, count + 1):
        if sequence == summary_at:
            m = Message(id=f"msg-{sequence:06d}", sequence=sequence, parent_sequence=2,
                        role="user", synthetic="summary", content=f"{SUMMARY_HEADER}\n\n{PARAGRAPH}")
        else:
            m = message(sequence)
        (messages_dir / m.file_name()).write_bytes(render_message(m))
    trace.meta.head = count
    trace.meta.next_sequence = count + 1
    trace.save_meta()
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", f"bench: {count} messages")
    return Project.open(root)
