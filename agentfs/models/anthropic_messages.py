"""Stored messages → Anthropic Messages API `messages` (a valid request body part).

Rules kept here: roles alternate (consecutive same-role messages merge);
tool results go first in the user message right after their `tool_use`, all
parallel results together; thinking blocks are sent back verbatim.

An assistant turn goes back block by block, in the order it came. A stored
assistant message keeps its text blocks joined into one body, its tool calls
in `tool_calls` and its thinking blocks in `thinking`. The default order is
thinking blocks, the text, the tool calls; a turn that came in any other
order (text after a tool call, thinking between calls) also stores `blocks`,
one entry per block it received (`block_layout`):

    blocks:
    - text: 14            # a text block: the next 14 characters of the body
    - tool_use: toolu_01  # the tool call with this id
    - thinking: 0         # the first entry of `thinking`
    - text: 22

A `blocks` list that no longer fits the message (its text lengths do not add
up to the body, it names a call or a thinking block that is not there, e.g.
after a person's edit) is ignored and the default order used: the edit wins.
Calls the layout does not name (agentfs' synthetic calls) follow it in order.
Whitespace-only text blocks are never sent (the API refuses them).
"""

from __future__ import annotations

import json
from typing import Any

from agentfs.store.messages import Message, ToolCall

__all__ = ["EMPTY_TEXT", "assistant_blocks", "block_layout", "to_api_messages"]

EMPTY_TEXT = "(empty)"
LAYOUT_KINDS = ("text", "tool_use", "thinking")


def to_api_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """API messages for `messages` (the system message, if present, is skipped)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            continue
        role, blocks = _blocks(message)
        if out and out[-1]["role"] == role:
            previous = out[-1]["content"]
            if role == "user" and blocks and blocks[0]["type"] == "tool_result":
                # results must come first: put them before earlier plain text
                results = [b for b in previous if b["type"] == "tool_result"]
                others = [b for b in previous if b["type"] != "tool_result"]
                out[-1]["content"] = results + blocks + others
            else:
                previous.extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return out


def assistant_blocks(message: Message) -> list[dict[str, Any]]:
    """An assistant message's content blocks, in the order the model sent them."""
    thinking = [dict(b) for b in message.thinking or []]
    calls = list(message.tool_calls or [])
    layout = _valid_layout(getattr(message, "blocks", None), message.text, calls, thinking)
    blocks = (_default_blocks(message.text, calls, thinking) if layout is None
              else _layout_blocks(layout, message.text, calls, thinking))
    return blocks or [{"type": "text", "text": EMPTY_TEXT}]


def block_layout(
    received: list[dict[str, Any]], text: str, calls: list[ToolCall],
    thinking: list[dict[str, Any]],
) -> list[dict[str, Any]] | None:
    """The `blocks` entry for a turn received as `received` (API blocks) and stored as
    `text` (its text blocks joined), `calls` and `thinking`; None when the default
    order sends the same blocks."""
    layout: list[dict[str, Any]] = []
    thought = 0
    for block in received:
        kind = block.get("type")
        if kind == "text":
            layout.append({"text": len(block.get("text", ""))})
        elif kind == "tool_use":
            layout.append({"tool_use": block.get("id", "")})
        elif kind in ("thinking", "redacted_thinking"):
            layout.append({"thinking": thought})
            thought += 1
    thinking = [dict(b) for b in thinking]
    if _valid_layout(layout, text, calls, thinking) is None:
        return None
    if _layout_blocks(layout, text, calls, thinking) == _default_blocks(text, calls, thinking):
        return None
    return layout


def _default_blocks(text: str, calls: list[ToolCall],
                    thinking: list[dict[str, Any]]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = list(thinking)
    if text.strip():
        blocks.append({"type": "text", "text": text})
    blocks += [_tool_use(c) for c in calls]
    return blocks


def _layout_blocks(layout: list[dict[str, Any]], text: str, calls: list[ToolCall],
                   thinking: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_id = {c.id: c for c in calls}
    blocks: list[dict[str, Any]] = []
    start = 0
    for entry in layout:
        ((kind, value),) = entry.items()
        if kind == "text":
            part, start = text[start : start + value], start + value
            if part.strip():
                blocks.append({"type": "text", "text": part})
        elif kind == "tool_use":
            blocks.append(_tool_use(by_id[value]))
        else:
            blocks.append(thinking[value])
    named = {e["tool_use"] for e in layout if "tool_use" in e}
    blocks += [_tool_use(c) for c in calls if c.id not in named]  # synthetic calls last
    return blocks


def _valid_layout(layout: Any, text: str, calls: list[ToolCall],
                  thinking: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """`layout` if it describes this message exactly (see the module docstring), else None."""
    if not isinstance(layout, list) or not layout:
        return None
    ids = {c.id for c in calls}
    length = 0
    seen_calls: set[str] = set()
    seen_thinking: set[int] = set()
    for entry in layout:
        if not isinstance(entry, dict) or len(entry) != 1:
            return None
        ((kind, value),) = entry.items()
        if kind == "text" and _is_count(value):
            length += value
        elif kind == "tool_use" and value in ids and value not in seen_calls:
            seen_calls.add(value)
        elif (kind == "thinking" and _is_count(value) and value < len(thinking)
              and value not in seen_thinking):
            seen_thinking.add(value)
        else:
            return None
    if length != len(text) or len(seen_thinking) != len(thinking):
        return None
    return layout


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _tool_use(call: ToolCall) -> dict[str, Any]:
    return {"type": "tool_use", "id": call.id, "name": call.name, "input": call.input}


def _blocks(message: Message) -> tuple[str, list[dict[str, Any]]]:
    if message.role == "tool":
        content = message.content if isinstance(message.content, str) else json.dumps(
            message.content, ensure_ascii=False
        )
        block: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": message.tool_call_id or "",
            "content": content or EMPTY_TEXT,
        }
        if message.is_error:
            block["is_error"] = True
        return "user", [block]
    if message.role == "assistant":
        return "assistant", assistant_blocks(message)
    return "user", [{"type": "text", "text": message.text if message.text.strip() else EMPTY_TEXT}]
