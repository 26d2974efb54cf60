"""The main path and counts carried from step to step equal the ones found from scratch."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentfs.store.history import BrokenPath, PathMemo, Tally, path_to
from agentfs.store.messages import Message


def msg(sequence: int, parent: int | None, role: str = "user") -> Message:
    return Message(id=f"msg-{sequence:06d}", sequence=sequence, parent_sequence=parent,
                   role=role, content=f"message {sequence}")  # type: ignore[arg-type]


def from_scratch(messages, head):
    try:
        return path_to(messages, head)
    except BrokenPath as exc:
        return type(exc)


def memoized(memo, messages, head):
    try:
        return memo.path(messages, head)
    except BrokenPath as exc:
        return type(exc)


# Operations on a trace's messages, as a run, a rewind, compression and edits make them:
#   append N: N new messages, each the child of the head, and the head moves to the last
#   branch K: a new message whose parent is an earlier one (a summary), head moves to it
#   rewind K: the head moves to an existing message
#   rescan: the same messages in a new mapping (the folder was listed again)
#   edit K: a new mapping in which message K has another parent (a hand edit)
#   delete K: a new mapping without message K (a deleted file)
operation = st.one_of(
    st.tuples(st.just("append"), st.integers(1, 3)),
    st.tuples(st.just("branch"), st.integers(0, 10_000)),
    st.tuples(st.just("rewind"), st.integers(0, 10_000)),
    st.tuples(st.just("rescan"), st.just(0)),
    st.tuples(st.just("edit"), st.integers(0, 10_000)),
    st.tuples(st.just("delete"), st.integers(0, 10_000)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(operation, min_size=1, max_size=40))
def test_carried_main_path_and_counts_equal_those_found_from_scratch(ops):
    messages: dict[int, Message] = {1: msg(1, None, "system"), 2: msg(2, 1)}
    head: int | None = 2
    memo = PathMemo()
    turns = Tally(lambda m: m.role == "assistant")
    for op, arg in ops:
        sequences = list(messages)
        newest = sequences[-1] if sequences else 0
        if op == "append":
            for _ in range(arg):
                newest += 1
                messages[newest] = msg(newest, head, "assistant" if newest % 2 else "tool")
                head = newest
        elif op == "branch" and sequences:
            parent = sequences[arg % len(sequences)]
            messages[newest + 1] = msg(newest + 1, parent)
            head = newest + 1
        elif op == "rewind" and sequences:
            head = sequences[arg % len(sequences)]
        elif op == "rescan":
            messages = dict(messages)
        elif op == "edit" and sequences:
            target = sequences[arg % len(sequences)]
            parent = sequences[(arg // 7) % len(sequences)]  # may make a cycle
            messages = dict(messages)
            messages[target] = msg(target, parent, messages[target].role)
        elif op == "delete" and len(sequences) > 1:
            messages = {s: m for s, m in messages.items() if s != sequences[arg % len(sequences)]}
        assert memoized(memo, messages, head) == from_scratch(messages, head)
        assert turns.count(messages) == sum(m.role == "assistant" for m in messages.values())


class Counting(dict):
    """A mapping that counts the messages looked up in it."""

    gets = 0

    def get(self, key, default=None):
        self.gets += 1
        return super().get(key, default)


def test_a_step_walks_only_the_messages_it_added():
    messages = Counting({1: msg(1, None, "system")})
    messages.update({s: msg(s, s - 1) for s in range(2, 1001)})
    memo = PathMemo()
    assert len(memo.path(messages, 1000)) == 1000
    messages[1001] = msg(1001, 1000)
    messages[1002] = msg(1002, 1001)
    messages.gets = 0
    assert [m.sequence for m in memo.path(messages, 1002)[-3:]] == [1000, 1001, 1002]
    assert messages.gets == 2
    messages.gets = 0
    assert len(memo.path(messages, 500)) == 500  # a rewind onto the path found last time
    assert messages.gets == 0
    summary = 1003  # Level 2: a summary whose parent is the first user message
    messages[summary] = msg(summary, 2)
    assert [m.sequence for m in memo.path(messages, summary)] == [1, 2, summary]
    assert messages.gets == 1


def test_a_broken_path_is_reported_as_from_scratch():
    messages = {1: msg(1, None, "system"), 2: msg(2, 1), 3: msg(3, 7)}
    memo = PathMemo()
    memo.path(messages, 2)
    with pytest.raises(BrokenPath, match="needs message #7"):
        memo.path(messages, 3)
    assert [m.sequence for m in memo.path(messages, 2)] == [1, 2]


def test_a_system_message_starts_the_path_whatever_file_comes_before_it():
    """Without `parent_sequence` a message follows the file before it, but a system
    message starts the trace: a `000000-user.md` someone adds does not become its
    parent (and push the system prompt off the path)."""
    from agentfs.store.history import follows_previous, parent_of

    system, first, sneaky = msg(1, None, "system"), msg(2, None), msg(0, None)
    messages = {0: sneaky, 1: system, 2: first}
    assert not follows_previous(system) and follows_previous(first)
    assert parent_of(system, list(messages)) is None
    assert [m.sequence for m in path_to(messages, 2)] == [1, 2]
