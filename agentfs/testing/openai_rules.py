"""The OpenAI Chat Completions rules for a request body, checked without the network.

OpenAI and the servers that copy its API (vLLM, Ollama, LiteLLM) answer a
request that breaks these with a 400, or worse, quietly misread it:

- `model` is set and `messages` is a non-empty list;
- roles are `system`, `developer`, `user`, `assistant` or `tool`; system and
  developer messages only before the first user message;
- an assistant message has text content, or tool calls (then its content may
  be null); each call has a non-empty id unique in the request, `type`
  `function`, a name, and `arguments` that are a JSON object written as a string;
- the tool calls of an assistant message are answered by `tool` messages right
  after it, one per call, before any other message; a `tool` message answers a
  call of that assistant message, once;
- `tools` are function tools with distinct names of letters, digits, `_` and `-`
  (at most 64) and an object schema in `parameters`;
- `stream_options` only with `stream: true`.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["assert_valid_chat_request", "check_chat_request"]

ROLES = ("system", "developer", "user", "assistant", "tool")
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}\Z")  # not `$`: it lets a final line break through


def check_chat_request(body: dict[str, Any]) -> list[str]:
    """Human-readable violations of the Chat Completions rules in `body`; empty if valid."""
    problems: list[str] = []
    if not body.get("model"):
        problems.append("missing required field 'model'")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        problems.append("messages: must be a non-empty list")
        messages = []
    problems += _check_messages(messages)
    problems += _check_tools(body.get("tools"))
    if "stream_options" in body and body.get("stream") is not True:
        problems.append("stream_options: only allowed when stream is true")
    return problems


def assert_valid_chat_request(body: dict[str, Any]) -> None:
    """Raise AssertionError listing every violation if `body` breaks the rules."""
    problems = check_chat_request(body)
    if problems:
        raise AssertionError("invalid Chat Completions request:\n- " + "\n- ".join(problems))


def _check_messages(messages: list[Any]) -> list[str]:
    problems: list[str] = []
    seen_ids: set[str] = set()
    open_calls: list[str] = []  # calls of the last assistant message still unanswered
    answering = False  # inside the run of tool messages after an assistant's calls
    seen_user = False
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ROLES:
            problems.append(f"{where}: role must be one of {', '.join(ROLES)}, not {role!r}")
            continue
        assert isinstance(message, dict)
        if role != "tool" and open_calls:
            problems.append(f"{where}: tool call(s) {', '.join(open_calls)} of the assistant "
                            "message before have no tool message")
            open_calls = []
        if role == "tool":
            problems += _check_result(where, message, open_calls, answering)
            continue
        answering = False
        if role in ("system", "developer") and seen_user:
            problems.append(f"{where}: a {role} message after the conversation started")
        seen_user = seen_user or role == "user"
        if role == "assistant":
            calls, found = _check_assistant(where, message, seen_ids)
            problems += found
            open_calls, answering = calls, bool(calls)
        elif not isinstance(message.get("content"), (str, list)):
            problems.append(f"{where}: content must be a string or a list of parts")
    if open_calls:
        problems.append(f"tool call(s) {', '.join(open_calls)} have no tool message")
    return problems


def _check_assistant(where: str, message: dict[str, Any],
                     seen_ids: set[str]) -> tuple[list[str], list[str]]:
    """(the ids of its calls, its problems)."""
    problems: list[str] = []
    calls = message.get("tool_calls")
    content = message.get("content")
    if calls is None and not isinstance(content, (str, list)):
        problems.append(f"{where}: an assistant message without tool_calls needs content")
    if calls is None:
        return [], problems
    if not isinstance(calls, list) or not calls:
        return [], [*problems, f"{where}: tool_calls must be a non-empty list"]
    ids: list[str] = []
    for j, call in enumerate(calls):
        at = f"{where}.tool_calls[{j}]"
        if not isinstance(call, dict):
            problems.append(f"{at}: must be an object")
            continue
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            problems.append(f"{at}: id must be a non-empty string")
        elif call_id in seen_ids:
            problems.append(f"{at}: id {call_id!r} is used twice")
        else:
            seen_ids.add(call_id)
            ids.append(call_id)
        if call.get("type") != "function":
            problems.append(f"{at}: type must be 'function'")
        function = call.get("function")
        if not isinstance(function, dict) or not function.get("name"):
            problems.append(f"{at}: function.name is missing")
        elif not _is_json_object(function.get("arguments")):
            problems.append(f"{at}: function.arguments must be a JSON object as a string")
    return ids, problems


def _check_result(where: str, message: dict[str, Any], open_calls: list[str],
                  answering: bool) -> list[str]:
    call_id = message.get("tool_call_id")
    problems = []
    if not answering:
        problems.append(f"{where}: a tool message must follow an assistant message's "
                        "tool calls (or the other results of them)")
    elif call_id not in open_calls:
        problems.append(f"{where}: tool_call_id {call_id!r} answers no open call of the "
                        "assistant message before")
    else:
        open_calls.remove(call_id)
    if not isinstance(message.get("content"), (str, list)):
        problems.append(f"{where}: content must be a string or a list of parts")
    return problems


def _check_tools(tools: Any) -> list[str]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        return ["tools: must be a list"]
    problems: list[str] = []
    names: set[str] = set()
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" \
                or not isinstance(function, dict):
            problems.append(f"tools[{i}]: must be {{type: function, function: {{...}}}}")
            continue
        name = function.get("name")
        if not isinstance(name, str) or not TOOL_NAME.match(name):
            problems.append(f"tools[{i}]: name {name!r} is not 1-64 letters, digits, _ or -")
        elif name in names:
            problems.append(f"tools[{i}]: name {name!r} is used twice")
        else:
            names.add(name)
        parameters = function.get("parameters")
        if parameters is not None and (not isinstance(parameters, dict)
                                       or parameters.get("type") != "object"):
            problems.append(f"tools[{i}]: parameters must be a JSON schema of type object")
    return problems


def _is_json_object(text: Any) -> bool:
    if not isinstance(text, str):
        return False
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False
