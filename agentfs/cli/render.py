"""Turning traces, logs and statuses into terminal text or JSON (no I/O here)."""

from __future__ import annotations

import json
from typing import Any

from agentfs.core.tracetree import message_record
from agentfs.store.messages import Message

__all__ = ["message_record", "show_text"]  # message_record: `show --json` uses it

PREVIEW_LINES = 12


def show_text(messages: list[tuple[Message, bool]], *, full: bool = False) -> str:
    """Readable listing; each message is a header line and an indented body."""
    blocks = []
    for message, on_path in messages:
        header = f"#{message.sequence} {message.role}"
        if message.synthetic:
            header += f" ({message.synthetic})"
        if message.role == "tool":
            header += " error" if message.is_error else ""
        if not on_path:
            header += "  [off path]"
        lines = [header]
        body = message.text.rstrip("\n")
        if message.role == "system" and not full:
            body = body.split("\n", 1)[0] + (" …" if "\n" in body else "")
        body_lines = body.splitlines()
        if not full and len(body_lines) > PREVIEW_LINES:
            body_lines = body_lines[:PREVIEW_LINES] + [f"… ({len(body_lines) - PREVIEW_LINES} more lines)"]
        lines += [f"    {line}" for line in body_lines]
        for call in message.tool_calls or []:
            lines.append(f"    → {call.name}({_args(call.input)})")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _args(arguments: dict[str, Any]) -> str:
    parts = []
    for key, value in arguments.items():
        text = json.dumps(value, ensure_ascii=False)
        if len(text) > 60:
            text = text[:57] + "…\""
        parts.append(f"{key}={text}")
    return ", ".join(parts)
