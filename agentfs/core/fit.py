"""Fitting a model's turn into a message file agentfs can read back.

The store refuses to write a message over its size or depth limits
(`agentfs/store/messages.py:render_message`). A model's turn is stored before
any of its tool calls run, so an oversized turn (a 20 MB `write_file`, a tool
input nested hundreds deep) is made to fit here instead: each offending tool
call's input is replaced by a note, and that call is answered with an error
instead of being run (`refused_reason`), so the model can try again in parts.
Text is cut with a visible marker; thinking blocks go last, and only if
nothing else makes the turn fit.

Text that is not valid Unicode (a lone surrogate, which a JSON escape such as
`\\ud800` gives and no UTF-8 file can hold) is dealt with first, the same way: a
tool call whose input holds one is not run, its input replaced by a note; the
text holds U+FFFD in its place; a thinking block holding one is dropped (its
signature would no longer match it). So is a tool input holding a number
JSON cannot write (infinity or NaN: `1e999` reads as infinity): stored, it
would become `null`, and the call run or shown for approval would not be the
call in the file.
"""

from __future__ import annotations

import json
import math
from typing import Any

from agentfs.store.messages import MAX_MESSAGE_BYTES, Message, UnwritableMessage, render_message
from agentfs.store.unicode import valid_unicode
from agentfs.tools.base import NOT_IN_TOOL_NAME, cut_text

__all__ = ["REFUSED_INPUT_KEY", "fit_turn", "refused_reason"]

#: Stored in place of a tool call's input that could not be stored.
REFUSED_INPUT_KEY = "agentfs_refused_input"


def fit_turn(message: Message) -> Message:
    """`message` if it can be written, else a copy that can (see the module docstring)."""
    message = _valid_unicode(message)  # first: a key holding one would be stored changed
    if _fits(message):
        return message
    calls = [
        call.model_copy(update={"input": {REFUSED_INPUT_KEY: _refusal(call.input)}})
        for call in message.tool_calls or []
    ]
    fitted = message.model_copy(update={"tool_calls": calls or None})
    if _fits(fitted):
        return fitted
    fitted = fitted.model_copy(update={"content": cut_text(message.text, MAX_MESSAGE_BYTES // 8)})
    if _fits(fitted):
        return fitted
    return fitted.model_copy(update={"thinking": None})


def refused_reason(arguments: dict[str, Any]) -> str | None:
    """Why a stored tool call must not run (its input was replaced), or None."""
    reason = arguments.get(REFUSED_INPUT_KEY) if len(arguments) == 1 else None
    return reason if isinstance(reason, str) else None


def _refusal(arguments: dict[str, Any]) -> str:
    try:
        size = f"{len(json.dumps(arguments).encode()):,} bytes"
    except (ValueError, RecursionError):
        size = "nested too deeply"
    return (f"not run: this call's input ({size}) was too large or too deep for agentfs to "
            "store, so it was replaced by this note. Call the tool again with smaller input, "
            "for example writing a file in parts with append.")


#: The note stored in place of a tool input that is not valid Unicode.
NOT_UNICODE = ("not run: this call holds text that is not valid Unicode (a lone "
               "surrogate escape such as \\ud800), which agentfs cannot store, so it was "
               "replaced by this note. Call the tool again with the text as plain characters.")


#: The note stored in place of a tool input holding infinity or NaN.
NOT_FINITE = ("not run: this call's input holds a number too large for JSON (infinity or "
              "NaN, as 1e999 reads), which agentfs cannot store, so it was replaced by this "
              "note. Call the tool again with the number in range, or written as a string.")


def _is_finite(data: object) -> bool:
    """False if JSON data `data` holds a float that is infinite or NaN (looked at
    without recursion: the depth limit is checked later, by the writer)."""
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return False
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True


def _valid_unicode(message: Message) -> Message:
    """`message` without lone surrogates (see the module docstring); itself if it holds
    none. A call whose id or name holds one gets an id of agentfs's: the APIs' patterns
    for them would refuse U+FFFD."""
    calls, changed = [], False
    for number, call in enumerate(message.tool_calls or []):
        update: dict[str, Any] = {}
        if not _is_unicode([call.id, call.name]):
            update = {"id": f"toolu_agentfs_{message.sequence}_{number}",
                      "name": NOT_IN_TOOL_NAME.sub("_", valid_unicode(call.name))[:64] or "_"}
        if update or not _is_unicode(call.input):
            update["input"] = {REFUSED_INPUT_KEY: NOT_UNICODE}
        elif not _is_finite(call.input):
            update["input"] = {REFUSED_INPUT_KEY: NOT_FINITE}
        calls.append(call.model_copy(update=update) if update else call)
        changed |= bool(update)
    thinking = [block for block in message.thinking or [] if _is_unicode(block)]
    texts = {name: valid_unicode(getattr(message, name)) for name in _TEXTS}
    changed |= len(thinking) != len(message.thinking or []) or any(
        value is not getattr(message, name) for name, value in texts.items())
    if not changed:
        return message
    return message.model_copy(update={**texts, "tool_calls": calls or None,
                                      "thinking": thinking or None})


#: The fields of a turn that hold text from the provider, besides its calls and thinking.
_TEXTS = ("content", "blocks", "model", "stop_reason", "provider_data")


def _is_unicode(data: object) -> bool:
    """False if `data` (text or JSON data) holds a lone surrogate."""
    return valid_unicode(data) is data


def _fits(message: Message) -> bool:
    try:
        render_message(message)
    except UnwritableMessage:
        return False
    except RecursionError:
        return False
    return True
