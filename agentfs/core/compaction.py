"""Level 1 compression: deterministic, free, applied only to what is sent.

For a completed or abandoned goal, its `goal` tool calls and their results
stay (the plan's history), its other assistant turns and their results go,
and the result of the call that finished it reads `CLEARED`. Message files
are never touched: this works on the list about to be sent, and an assistant
turn always goes or stays together with all its results, so the request stays
valid.

With extended thinking on, nothing in front of a thinking block that is sent
back may change, or the API refuses (or drops) the block. It needs back the
thinking blocks of the current tool-use loop (from the last user message
that holds no tool results on, `loop_start`); those of earlier turns may be
left out, and older models drop them themselves. So
(`agentfs/core/request.py:RequestBuilder`): the loop is sent as it is; the
turns before it go without their thinking blocks (`without_thinking`) and
are compressed from themselves alone (`finished_within`), so every request
of the loop sends them alike; and at the next user message, where no
thinking block is sent at all, Level 1 may change what it likes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agentfs.core.goals import GoalTree
from agentfs.store.messages import Message

CLEARED = "Execution details cleared."
GOAL_TOOL = "goal"


def _calls_goal(message: Message) -> bool:
    return any(c.name == GOAL_TOOL for c in message.tool_calls or [])


def _finishing_call(messages: Sequence[Message], goal_id: str) -> str | None:
    """Id of the `goal` call that marked `goal_id` done or abandoned."""
    for message in messages:
        for call in message.tool_calls or []:
            if call.name == GOAL_TOOL and goal_id in (call.input.get("done"), call.input.get("abandon")):
                return call.id
    return None


def compress_goal(messages: Sequence[Message], goal_id: str) -> list[Message]:
    """`messages` with one finished goal's execution details removed."""
    last_turn = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=-1)
    finishing = _finishing_call(messages, goal_id)
    dropped: set[str] = set()
    kept: list[Message] = []
    for index, message in enumerate(messages):
        if (
            message.role == "assistant"
            and message.goal_id == goal_id
            and not _calls_goal(message)
            and index != last_turn  # the latest turn is never cut: the request ends with it
        ):
            dropped.update(c.id for c in message.tool_calls or [])
            continue
        if message.role == "tool" and message.tool_call_id in dropped:
            continue
        if message.role == "tool" and finishing is not None and message.tool_call_id == finishing:
            kept.append(message.model_copy(update={"content": CLEARED}))
            continue
        kept.append(message)
    return kept


def compress_completed_goals(
    messages: Sequence[Message],
    tree: GoalTree,
    *,
    enough: Callable[[list[Message]], bool] | None = None,
    finished_within: bool = False,
) -> list[Message]:
    """Compress finished goals in tree order; with `enough`, stop once it is satisfied.

    With `finished_within`, only goals whose `done` or `abandon` call is among
    `messages`: the result then depends on `messages` alone, not on goals
    finished after them.
    """
    result = list(messages)
    for goal in tree.walk():
        if goal.status == "open":
            continue
        if finished_within and _finishing_call(messages, goal.id) is None:
            continue
        result = compress_goal(result, goal.id)
        if enough is not None and enough(result):
            break
    return result


def loop_start(messages: Sequence[Message]) -> int:
    """Where the current tool-use loop starts: the index after the last user message
    that holds no tool results (with the tool results and user messages around it,
    which the request merges into one); `len(messages)` when the messages end with
    such a user message, so there is no loop yet. Looked for from the end, so it
    costs the loop's length, not the history's."""
    index = len(messages)
    while index > 0:
        if messages[index - 1].role == "assistant":
            index -= 1
            continue
        end = index
        while index > 0 and messages[index - 1].role != "assistant":
            index -= 1
        if not any(m.role == "tool" for m in messages[index:end]):
            return end
    return 0


def without_thinking(message: Message) -> Message:
    """`message` as sent without its thinking blocks (the file is untouched)."""
    if not message.thinking:
        return message
    layout = [e for e in message.blocks or [] if "thinking" not in e] or None
    return message.model_copy(update={"thinking": None, "blocks": layout})
