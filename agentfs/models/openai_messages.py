"""Stored messages → OpenAI Chat Completions `messages` and `tools` (a valid request body part).

Rules kept here (checked by `agentfs/testing/openai_rules.py`):

- the system prompt is the first message, role `system`;
- an assistant message's tool calls go out as `tool_calls` (`type: function`,
  the input as a JSON string in `arguments`); consecutive assistant messages
  (a turn and agentfs' synthetic calls after it) merge into one;
- each call's result is a `tool` message naming its `tool_call_id`, all of them
  right after the assistant message that made the calls: a user message that
  arrived while the tools ran goes after the results;
- a failed tool's result is its text after "Error: " (the API has no error flag).

Thinking blocks and `provider_data` of other providers stay behind: they mean
nothing to this API. Messages hold text, or JSON data sent as JSON text.
"""

from __future__ import annotations

import json
from typing import Any

from agentfs.models.base import ToolSpec
from agentfs.store.messages import Message, ToolCall

__all__ = ["ERROR_PREFIX", "to_api_messages", "to_api_tools"]

ERROR_PREFIX = "Error: "


def to_api_tools(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    """Chat Completions function tools for agentfs' tool specs."""
    return [{"type": "function", "function": {"name": t.name, "description": t.description,
                                              "parameters": t.input_schema}}
            for t in tools]


def to_api_messages(system: str, messages: list[Message]) -> list[dict[str, Any]]:
    """API messages for the system prompt and `messages` (a stored system message is
    skipped: `system` is the one sent)."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    results_end = None  # where the next tool result goes: after the calls and earlier results
    for message in messages:
        if message.role == "system":
            continue
        if message.role == "tool" and results_end is not None:
            out.insert(results_end, _tool_result(message))
            results_end += 1
        elif message.role == "tool":  # a result without calls before it: sent where it is
            out.append(_tool_result(message))
        elif message.role == "assistant":
            if out and out[-1]["role"] == "assistant":
                _merge(out[-1], _assistant(message))
            else:
                out.append(_assistant(message))
            results_end = len(out) if out[-1].get("tool_calls") else None
        else:
            out.append({"role": "user", "content": message.text})
    return out


def _assistant(message: Message) -> dict[str, Any]:
    calls = [_tool_call(c) for c in message.tool_calls or []]
    entry: dict[str, Any] = {"role": "assistant", "content": message.text or None}
    if calls:
        entry["tool_calls"] = calls
    elif entry["content"] is None:
        entry["content"] = ""
    return entry


def _merge(into: dict[str, Any], later: dict[str, Any]) -> None:
    texts = [t for t in (into.get("content"), later.get("content")) if t]
    into["content"] = "\n\n".join(texts) or (None if "tool_calls" in into or
                                             "tool_calls" in later else "")
    calls = into.get("tool_calls", []) + later.get("tool_calls", [])
    if calls:
        into["tool_calls"] = calls


def _tool_call(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "type": "function",
            "function": {"name": call.name,
                         "arguments": json.dumps(call.input, ensure_ascii=False)}}


def _tool_result(message: Message) -> dict[str, Any]:
    content = message.content if isinstance(message.content, str) else json.dumps(
        message.content, ensure_ascii=False)
    if message.is_error:
        content = ERROR_PREFIX + content
    return {"role": "tool", "tool_call_id": message.tool_call_id or "", "content": content}
