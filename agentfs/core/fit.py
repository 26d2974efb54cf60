"""Fitting a model's turn into a message file agentfs can read back.

The store refuses to write a message over its size or depth limits
(`agentfs/store/messages.py:render_message`). A model's turn is stored before
any of its tool calls run, so an oversized turn (a 20 MB `write_file`, a tool
input nested hundreds deep) is made to fit here instead: each offending tool
call's input is replaced by a note, and that call is answered with an error
instead of being run (`refused_reason`), so the model can try again in parts.
Text is cut with a visible marker; thinking blocks go last, and only if
nothing else makes the turn fit.
"""

from __future__ import annotations

import json
from typing import Any

from agentfs.store.messages import MAX_MESSAGE_BYTES, Message, UnwritableMessage, render_message
from agentfs.tools.base import cut_text

__all__ = ["REFUSED_INPUT_KEY", "fit_turn", "refused_reason"]

#: Stored in place of a tool call's input that could not be stored.
REFUSED_INPUT_KEY = "agentfs_refused_input"


def fit_turn(message: Message) -> Message:
    """`message` if it can be written, else a copy that can (see the module docstring)."""
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


def _fits(message: Message) -> bool:
    try:
        render_message(message)
    except UnwritableMessage:
        return False
    except RecursionError:
        return False
    return True
