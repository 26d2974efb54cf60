"""Stored messages → Anthropic Messages API `messages` (a valid request body part).

Rules kept here: roles alternate (consecutive same-role messages merge);
tool results go first in the user message right after their `tool_use`, all
parallel results together; thinking blocks are sent back verbatim.
"""

from __future__ import annotations

import json
from typing import Any

from agentfs.store.messages import Message

EMPTY_TEXT = "(empty)"


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
        blocks: list[dict[str, Any]] = [dict(b) for b in message.thinking or []]
        if message.text.strip():
            blocks.append({"type": "text", "text": message.text})
        for call in message.tool_calls or []:
            blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": call.input})
        if not blocks:
            blocks.append({"type": "text", "text": EMPTY_TEXT})
        return "assistant", blocks
    return "user", [{"type": "text", "text": message.text if message.text.strip() else EMPTY_TEXT}]
