"""The Anthropic Messages API's rules for a request body, checked without the network.

The real API answers a request that breaks these rules with a 400; checking
them here lets tests (and the fake server) catch a bad request the moment it
is built. The rules follow the API's documentation and its error messages:

- `messages` is non-empty, starts with `user` and alternates user/assistant;
- every `tool_use` id of an assistant message is answered by `tool_result`
  blocks placed first in the very next user message, all parallel results
  together; no result without a matching `tool_use`, no id twice;
- a request that holds `tool_use` or `tool_result` blocks defines `tools`;
- at most 4 `cache_control` breakpoints (system + tools + messages);
- no empty text blocks; thinking blocks only in assistant messages, each with
  its signature (they must be sent back verbatim), and an assistant message
  that holds thinking blocks starts with one;
- with `thinking` enabled: `budget_tokens` is at least 1024 and less than
  `max_tokens`, and when the request ends with tool results (a tool-use loop,
  one assistant turn) the assistant message before them starts with a
  thinking block: the thinking configuration cannot change within a turn.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

MAX_CACHE_BREAKPOINTS = 4
THINKING_TYPES = ("thinking", "redacted_thinking")
MIN_THINKING_BUDGET = 1024


def check_request(body: dict[str, Any]) -> list[str]:
    """Human-readable violations of the Messages API rules in `body`; empty if valid."""
    problems: list[str] = []
    for key in ("model", "max_tokens", "messages"):
        if key not in body:
            problems.append(f"missing required field {key!r}")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        problems.append("messages: must be a non-empty list")
        messages = []
    problems += _check_roles(messages)
    problems += _check_blocks(messages)
    problems += _check_tool_pairing(messages)
    problems += _check_tools(body, messages)
    problems += _check_system(body.get("system"))
    problems += _check_thinking(body, messages)
    breakpoints = _count_cache_breakpoints(body, messages)
    if breakpoints > MAX_CACHE_BREAKPOINTS:
        problems.append(
            f"{breakpoints} cache_control breakpoints; at most {MAX_CACHE_BREAKPOINTS} are allowed "
            "(system + tools + messages)"
        )
    return problems


def assert_valid_request(body: dict[str, Any]) -> None:
    """Raise AssertionError listing every violation if `body` breaks the API rules."""
    problems = check_request(body)
    if problems:
        raise AssertionError("invalid Messages API request:\n- " + "\n- ".join(problems))


def content_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    """A message's content as blocks (a string content is one text block)."""
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    return []


def _check_roles(messages: list[Any]) -> list[str]:
    problems: list[str] = []
    previous = None
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("user", "assistant"):
            problems.append(f"messages[{i}]: role must be 'user' or 'assistant', not {role!r}")
        elif i == 0 and role != "user":
            problems.append("messages[0]: the first message must have role 'user'")
        elif role == previous:
            problems.append(f"messages[{i}]: two {role!r} messages in a row (roles must alternate)")
        previous = role
    return problems


def _check_blocks(messages: list[Any]) -> list[str]:
    problems: list[str] = []
    last = len(messages) - 1
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            problems.append(f"messages[{i}]: must be an object with role and content")
            continue
        role = message.get("role")
        content = message.get("content")
        if not isinstance(content, (str, list)):
            problems.append(f"messages[{i}]: content must be a string or a list of blocks")
            continue
        if not content:
            if not (i == last and role == "assistant"):  # an empty prefill is allowed
                problems.append(f"messages[{i}]: content is empty")
            continue
        if isinstance(content, list) and any(not isinstance(b, dict) for b in content):
            problems.append(f"messages[{i}]: every content block must be an object")
        for j, block in enumerate(content_blocks(message)):
            where = f"messages[{i}].content[{j}]"
            problems += _check_block(where, role, block)
    return problems


def _check_block(where: str, role: Any, block: dict[str, Any]) -> list[str]:
    kind = block.get("type")
    if not isinstance(kind, str):
        return [f"{where}: block without a type"]
    check = _BLOCK_CHECKS.get(kind)
    return check(where, role, block) if check is not None else []


def _check_text(where: str, role: Any, block: dict[str, Any]) -> list[str]:
    text = block.get("text")
    if not isinstance(text, str) or not text.strip():
        return [f"{where}: text blocks must contain non-whitespace text"]
    return []


def _check_thinking_block(where: str, role: Any, block: dict[str, Any]) -> list[str]:
    kind = block["type"]
    if role != "assistant":
        return [f"{where}: {kind} blocks may only appear in assistant messages"]
    if kind == "thinking" and not block.get("signature"):
        return [f"{where}: thinking block without its signature (send it back verbatim)"]
    if kind == "redacted_thinking" and not block.get("data"):
        return [f"{where}: redacted_thinking block without its data"]
    return []


def _check_tool_use(where: str, role: Any, block: dict[str, Any]) -> list[str]:
    if role != "assistant":
        return [f"{where}: tool_use blocks may only appear in assistant messages"]
    if not block.get("id") or not block.get("name"):
        return [f"{where}: tool_use blocks need an id and a name"]
    if not isinstance(block.get("input"), dict):
        return [f"{where}: tool_use input must be an object"]
    return []


def _check_tool_result(where: str, role: Any, block: dict[str, Any]) -> list[str]:
    if role != "user":
        return [f"{where}: tool_result blocks may only appear in user messages"]
    if not block.get("tool_use_id"):
        return [f"{where}: tool_result without tool_use_id"]
    nested = block.get("content")
    if not isinstance(nested, list):
        return []
    return [
        p
        for k, inner in enumerate(nested)
        if isinstance(inner, dict)
        for p in _check_block(f"{where}.content[{k}]", "tool_result", inner)
    ]


#: The rules of each kind of content block (other kinds pass as they are).
_BLOCK_CHECKS: dict[str, Callable[[str, Any, dict[str, Any]], list[str]]] = {
    "text": _check_text,
    "tool_use": _check_tool_use,
    "tool_result": _check_tool_result,
    **dict.fromkeys(THINKING_TYPES, _check_thinking_block),
}


def _check_thinking(body: dict[str, Any], messages: list[Any]) -> list[str]:
    problems: list[str] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        blocks = content_blocks(message)
        if any(b.get("type") in THINKING_TYPES for b in blocks) and (
            blocks[0].get("type") not in THINKING_TYPES
        ):
            problems.append(f"messages[{i}].content[0]: an assistant message that holds "
                            "thinking blocks must start with one")
    thinking = body.get("thinking")
    if not isinstance(thinking, dict) or thinking.get("type") != "enabled":
        return problems
    budget, max_tokens = thinking.get("budget_tokens"), body.get("max_tokens")
    if not isinstance(budget, int) or budget < MIN_THINKING_BUDGET:
        problems.append(f"thinking.budget_tokens: must be an integer >= {MIN_THINKING_BUDGET}")
    elif isinstance(max_tokens, int) and budget >= max_tokens:
        problems.append("thinking.budget_tokens: must be less than max_tokens")
    if len(messages) >= 2 and all(isinstance(m, dict) for m in messages[-2:]):
        last, before = messages[-1], messages[-2]
        results = any(b.get("type") == "tool_result" for b in content_blocks(last))
        blocks = content_blocks(before)
        if (last.get("role") == "user" and before.get("role") == "assistant" and results
                and (not blocks or blocks[0].get("type") not in THINKING_TYPES)):
            problems.append(
                f"messages[{len(messages) - 2}].content[0]: with thinking enabled, the final "
                "assistant message must start with a thinking block (before the last set of "
                "tool_use and tool_result blocks); disable thinking for this turn instead"
            )
    return problems


def _check_tool_pairing(messages: list[Any]) -> list[str]:
    use_ids: list[list[str]] = [_tool_use_ids(m) for m in messages]
    return [*_reused_use_ids(use_ids), *_misplaced_results(messages, use_ids),
            *_unanswered_uses(messages, use_ids)]


def _reused_use_ids(use_ids: list[list[str]]) -> list[str]:
    problems: list[str] = []
    seen: set[str] = set()
    for i, ids in enumerate(use_ids):
        for use_id in ids:
            if use_id in seen:
                problems.append(f"messages[{i}]: tool_use id {use_id!r} is used twice")
            seen.add(use_id)
    return problems


def _misplaced_results(messages: list[Any], use_ids: list[list[str]]) -> list[str]:
    """tool_result blocks answered twice, with no tool_use right before, or not first."""
    problems: list[str] = []
    answered: set[str] = set()
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        expected = use_ids[i - 1] if i > 0 else []
        here: set[str] = set()
        leading = True
        for j, block in enumerate(content_blocks(message)):
            if block.get("type") != "tool_result":
                leading = False
                continue
            result_id = block.get("tool_use_id")
            where = f"messages[{i}].content[{j}]"
            if result_id in here or result_id in answered:
                problems.append(f"{where}: duplicate tool_result for {result_id!r}")
            elif result_id not in expected:
                problems.append(
                    f"{where}: tool_result for {result_id!r} has no matching tool_use "
                    "in the assistant message right before it"
                )
            elif not leading:
                problems.append(
                    f"{where}: tool_result for {result_id!r} must come before any other block "
                    "(all results first, together)"
                )
            if isinstance(result_id, str):
                here.add(result_id)
        answered |= here
    return problems


def _unanswered_uses(messages: list[Any], use_ids: list[list[str]]) -> list[str]:
    problems: list[str] = []
    for i, ids in enumerate(use_ids):
        following = messages[i + 1] if i + 1 < len(messages) else None
        results = set() if following is None else _tool_result_ids(following)
        missing = ", ".join(repr(u) for u in ids if u not in results)
        if missing and following is None:
            problems.append(
                f"messages[{i}]: tool_use {missing} not answered: no user message follows"
            )
        elif missing:
            problems.append(
                f"messages[{i}]: tool_use {missing} not answered by tool_result blocks "
                f"at the start of messages[{i + 1}]"
            )
    return problems


def _tool_use_ids(message: Any) -> list[str]:
    if not isinstance(message, dict) or message.get("role") != "assistant":
        return []
    return [b["id"] for b in content_blocks(message) if b.get("type") == "tool_use" and b.get("id")]


def _tool_result_ids(message: Any) -> set[str]:
    if not isinstance(message, dict) or message.get("role") != "user":
        return set()
    return {
        b["tool_use_id"]
        for b in content_blocks(message)
        if b.get("type") == "tool_result" and isinstance(b.get("tool_use_id"), str)
    }


def _check_tools(body: dict[str, Any], messages: list[Any]) -> list[str]:
    problems: list[str] = []
    tools = body.get("tools")
    uses_tools = any(
        block.get("type") in ("tool_use", "tool_result")
        for message in messages
        if isinstance(message, dict)
        for block in content_blocks(message)
    )
    if uses_tools and not tools:
        problems.append("the messages hold tool_use/tool_result blocks but no tools are defined")
    if tools is not None and not isinstance(tools, list):
        problems.append("tools: must be a list")
        return problems
    names: set[str] = set()
    for k, tool in enumerate(tools or []):
        name = tool.get("name") if isinstance(tool, dict) else None
        if not name:
            problems.append(f"tools[{k}]: tool without a name")
        elif name in names:
            problems.append(f"tools[{k}]: tool name {name!r} is defined twice")
        names.add(name or "")
    return problems


def _check_system(system: Any) -> list[str]:
    if system is None or isinstance(system, str):
        return []
    if not isinstance(system, list):
        return ["system: must be a string or a list of text blocks"]
    problems: list[str] = []
    for k, block in enumerate(system):
        if not isinstance(block, dict) or block.get("type") != "text":
            problems.append(f"system[{k}]: system blocks must be text blocks")
        elif not isinstance(block.get("text"), str) or not block["text"].strip():
            problems.append(f"system[{k}]: text blocks must contain non-whitespace text")
    return problems


def _count_cache_breakpoints(body: dict[str, Any], messages: list[Any]) -> int:
    return sum(1 for block in _all_blocks(body, messages) if block.get("cache_control"))


def _all_blocks(body: dict[str, Any], messages: list[Any]) -> Iterator[dict[str, Any]]:
    for part in (body.get("system"), body.get("tools")):
        if isinstance(part, list):
            yield from (b for b in part if isinstance(b, dict))
    for message in messages:
        if not isinstance(message, dict):
            continue
        for block in content_blocks(message):
            yield block
            nested = block.get("content")
            if block.get("type") == "tool_result" and isinstance(nested, list):
                yield from (b for b in nested if isinstance(b, dict))
