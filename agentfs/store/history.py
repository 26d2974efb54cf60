"""What a trace's messages mean as a history, with no file or Git access.

The main path, which tool calls still wait for results and where a tool step
ends are read from a mapping of sequence to message. The trace, the runner
and rewind all ask here; nobody re-derives them.

A run asks for the main path at every step, and its trace only grows at the
end between two asks: `PathMemo` and `Tally` keep what they found and look
only at the messages added since, so a step costs the same at message 10,000
as at message 100 (docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping, Sequence
from typing import Protocol

from agentfs.errors import AgentfsError
from agentfs.store.messages import Message, Synthetic, ToolCall

__all__ = [
    "BrokenPath",
    "Lookup",
    "PathMemo",
    "Tally",
    "answered_ids",
    "follows_previous",
    "is_final_answer",
    "is_model_turn",
    "last_assistant",
    "parent_of",
    "path_to",
    "step_end",
    "unanswered_calls",
    "walk_back",
]


class BrokenPath(AgentfsError):
    """The main path cannot be followed: a missing parent, or a cycle."""


def follows_previous(message: Message) -> bool:
    """Whether the message's parent is the file before it: it has no `parent_sequence`
    and is not a system message, which starts a trace (a file someone puts before it,
    `000000-user.md`, does not push the system prompt off the path)."""
    return message.parent_sequence is None and message.role != "system"


def parent_of(message: Message, ordered: Sequence[int]) -> int | None:
    """The message's parent; without `parent_sequence`, the file before it
    (`follows_previous`)."""
    if not follows_previous(message):
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
    path, _ = walk_back(messages.get, lambda m: parent_of(m, ordered), sequence, where=where)
    return path


def walk_back(
    get: Callable[[int], Message | None], parent: Callable[[Message], int | None],
    sequence: int | None, *, limit: int | None = None, since: int = 0,
    until: Container[int] = (), where: str = "",
) -> tuple[list[Message], int | None]:
    """The path to `sequence` from its end back, message by message: at most its
    last `limit` messages (all without), none below sequence `since` and none from
    a sequence in `until` back; and where
    the path goes on before the first one returned (None: that one is its first
    message). `get` reads one message (None if it is missing), `parent` tells a
    message's parent. What `path_to` does over a whole mapping, and what a view of
    the last messages does reading only those (`agentfs/store/trace.py:Trace.path_slice`).

    Raises:
      BrokenPath: as `path_to`.
    """
    prefix = f"{where}: " if where else ""
    path: list[Message] = []
    seen: set[int] = set()
    current = sequence
    while (current is not None and (limit is None or len(path) < limit) and current >= since
           and current not in until):
        message = get(current)
        if message is None:
            child = path[-1].file_name() if path else "trace.json"
            listed = f" {where}" if where else ""
            raise BrokenPath(
                f"{prefix}the main path needs message #{current} "
                f"(parent of {child}) but there is no such file",
                hint=f"`git ls-files --deleted{listed}` names it if it was committed: restore "
                "it with `git checkout -- FILE`; or `agentfs rewind` to an existing message",
            )
        if current in seen:
            raise BrokenPath(
                f"{where}/{message.file_name()}: parent_sequence makes a cycle",
                hint="fix parent_sequence so it points at an earlier message",
            )
        seen.add(current)
        path.append(message)
        current = parent(message)
    path.reverse()
    return path, current


def is_final_answer(message: Message) -> bool:
    """An assistant message without tool calls, or the summary of a conversation that
    ended in one (`Message.answered`): the run it ends is over."""
    if message.role == "assistant":
        return not message.tool_calls
    return message.synthetic == Synthetic.SUMMARY and message.answered is True


def is_model_turn(message: Message) -> bool:
    """A turn of the model on the main history: what a request's `call_index` counts."""
    return message.role == "assistant" and message.synthetic is None and message.branch_type is None


def last_assistant(path: Sequence[Message]) -> int:
    """Index of the last assistant message on `path`, or -1."""
    return next((i for i in range(len(path) - 1, -1, -1) if path[i].role == "assistant"), -1)


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


class Lookup(Protocol):
    """Messages by sequence: a mapping, or one that reads each file when asked
    (`agentfs/store/message_dir.py:MessageLookup`)."""

    def get(self, sequence: int, /) -> Message | None: ...


class PathMemo:
    """The main path of growing messages, found again by walking only what changed.

    The messages (a mapping, or a lookup that reads files as asked) must follow
    one rule, which `agentfs/store/message_dir.py:MessageDir.current` and
    `MessageDir.lookup` do: while they are the same object, they only gain
    messages newer than all they held, and the messages in them never change. Any
    other change comes as a new object, and the path is then walked from scratch,
    asking only for the messages on it. Between two calls with the same object,
    the new head is walked back only until it meets the path found last time: a
    step that appended messages costs those messages, a rewind to a message on
    the path costs nothing, and Level 2 compression (a summary whose parent is the
    first user message) costs one message.
    """

    def __init__(self) -> None:
        self._messages: Lookup | None = None
        self._path: list[Message] = []
        self._position: dict[int, int] = {}  # sequence -> index on _path

    def path(self, messages: Lookup, head: int | None, *,
             parent: Callable[[Message], int | None] | None = None,
             where: str = "") -> list[Message]:
        """`path_to(messages, head)` (a new list each call). `parent` tells the parent
        of a message without `parent_sequence`; without it, `messages` must be a
        mapping holding every message (`parent_of`)."""
        if messages is self._messages and self._extend(messages, head):
            return list(self._path)
        self._messages = None  # if the walk below raises, nothing half-known is kept
        if parent is None:
            assert isinstance(messages, Mapping)
            path = path_to(messages, head, where=where)
        else:
            path, _ = walk_back(messages.get, parent, head, where=where)
        self._messages = messages
        self._path = path
        self._position = {m.sequence: i for i, m in enumerate(path)}
        return list(path)

    def _extend(self, messages: Lookup, head: int | None) -> bool:
        """Bring the path to `head` from the last one; False when it must be walked anew."""
        walked: list[Message] = []
        seen: set[int] = set()
        current = head
        while current not in self._position:
            message = messages.get(current) if current is not None else None
            if message is None or message.parent_sequence is None or current in seen:
                return False  # not back to the known path (or a cycle): walk it all
            seen.add(message.sequence)
            walked.append(message)
            current = message.parent_sequence
        at = self._position[current]
        for message in self._path[at + 1:]:  # a rewind: the path ends earlier now
            del self._position[message.sequence]
        del self._path[at + 1:]
        for message in reversed(walked):  # none is on the path: the walk stopped there
            self._position[message.sequence] = len(self._path)
            self._path.append(message)
        return True


class Tally:
    """How many messages of a growing mapping pass `test`, counting only new ones.

    The mapping follows the rule of `PathMemo`: the same object only gains
    messages newer than all it held; anything else comes as a new mapping, which
    is counted whole.
    """

    def __init__(self, test: Callable[[Message], bool]) -> None:
        self.test = test
        self._messages: dict[int, Message] | None = None
        self._newest = 0
        self._count = 0

    def count(self, messages: dict[int, Message]) -> int:
        """The count for `messages` (in sequence order, newest last)."""
        if messages is not self._messages:
            self._messages, self._newest, self._count = messages, 0, 0
        added = 0
        for sequence in reversed(messages):
            if sequence <= self._newest:
                break
            added += self.test(messages[sequence])
        self._count += added
        self._newest = next(reversed(messages), 0)
        return self._count
