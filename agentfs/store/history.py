"""What a trace's messages mean as a history, with no file or Git access.

The main path, which tool calls still wait for results and where a tool step
ends are read from a mapping of sequence to message. The trace, the runner
and rewind all ask here; nobody re-derives them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agentfs.errors import AgentfsError
from agentfs.store.messages import Message, ToolCall

__all__ = [
    "BrokenPath",
    "answered_ids",
    "last_assistant",
    "parent_of",
    "path_to",
    "step_end",
    "unanswered_calls",
]


class BrokenPath(AgentfsError):
    """The main path cannot be followed: a missing parent, or a cycle."""


def parent_of(message: Message, ordered: Sequence[int]) -> int | None:
    """The message's parent; without `parent_sequence`, the file before it."""
    if message.parent_sequence is not None:
        return message.parent_sequence
    earlier = [s for s in ordered if s < message.sequence]
    return earlier[-1] if earlier else None


def path_to(messages: Mapping[int, Message], sequence: int | None, *, where: str = "") -> list[Message]:
    """Messages from the first one to `sequence`, following parents.

    Raises:
      BrokenPath: a parent is missing or the parents make a cycle; `where`
        (the messages directory) names where.
    """
    ordered = list(messages)
    prefix = f"{where}: " if where else ""
    path: list[Message] = []
    seen: set[int] = set()
    current = sequence
    while current is not None:
        message = messages.get(current)
        if message is None:
            child = path[-1].file_name() if path else "trace.json"
            raise BrokenPath(
                f"{prefix}the main path needs message #{current} "
                f"(parent of {child}) but there is no such file",
                hint="restore it with `git checkout -- <file>`, or `agentfs rewind` to an "
                "existing message",
            )
        if current in seen:
            raise BrokenPath(
                f"{where}/{message.file_name()}: parent_sequence makes a cycle",
                hint="fix parent_sequence so it points at an earlier message",
            )
        seen.add(current)
        path.append(message)
        current = parent_of(message, ordered)
    path.reverse()
    return path


def is_final_answer(message: Message) -> bool:
    """An assistant message without tool calls: the run it ends is over."""
    return message.role == "assistant" and not message.tool_calls


def last_assistant(path: Sequence[Message]) -> int:
    """Index of the last assistant message on `path`, or -1."""
    return max((i for i, m in enumerate(path) if m.role == "assistant"), default=-1)


def answered_ids(path: Sequence[Message], at: int) -> set[str]:
    """Tool call ids answered by results after position `at` of `path`."""
    return {m.tool_call_id for m in path[at + 1 :] if m.role == "tool" and m.tool_call_id}


def unanswered_calls(path: Sequence[Message]) -> list[ToolCall]:
    """The last assistant turn's tool calls without a result, when the path ends in
    that turn or in some of its results (the tool step was cut short)."""
    at = last_assistant(path)
    if at < 0 or not path[at].tool_calls or any(m.role != "tool" for m in path[at + 1 :]):
        return []
    answered = answered_ids(path, at)
    return [c for c in path[at].tool_calls or [] if c.id not in answered]


def step_end(path: Sequence[Message], messages: Mapping[int, Message]) -> int | None:
    """Sequence at which the path's last tool step has all its results, if such
    results exist off the path (e.g. after a rewind into the step)."""
    at = last_assistant(path)
    calls = {c.id for c in path[at].tool_calls or []}
    answered = answered_ids(path, at)
    current = path[-1].sequence
    while not calls <= answered:
        child = next(
            (
                m
                for m in messages.values()
                if m.parent_sequence == current and m.role == "tool" and m.tool_call_id in calls
            ),
            None,
        )
        if child is None:
            return None
        answered.add(child.tool_call_id or "")
        current = child.sequence
    return current
