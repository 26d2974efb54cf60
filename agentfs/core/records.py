"""The JSON records of one message and one logged step: what `agentfs show --json`,
`agentfs log --json` and the HTTP API print for them, in one place.

Apart from the tree (`agentfs/core/tracetree.py`), which needs the goals and the
side branches, so that `show` and `log` load only what a record holds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentfs.core.usage import Totals
from agentfs.prices import NO_PRICES, PriceTable

if TYPE_CHECKING:
    from agentfs.store.messages import Message
    from agentfs.store.steplog import LoggedStep

__all__ = ["message_record", "step_record"]


def message_record(message: Message, on_path: bool,
                   prices: PriceTable = NO_PRICES) -> dict[str, Any]:
    """The JSON shape of one message (`agentfs show --json`, the HTTP API); `usage`
    is a model turn's tokens, time and cost (`agentfs/core/usage.py:Totals`), or None."""
    totals = Totals.of_message(message, prices)
    return {
        "id": message.id,
        "sequence": message.sequence,
        "parent_sequence": message.parent_sequence,
        "role": message.role,
        "text": message.text,
        "tool_calls": [c.model_dump() for c in message.tool_calls or []],
        "tool_call_id": message.tool_call_id,
        "is_error": bool(message.is_error),
        "files_changed": list(message.files_changed or []),
        "synthetic": message.synthetic,
        "goal_id": message.goal_id,
        "model": message.model,
        "file": message.file_name(),
        "on_path": on_path,
        "usage": totals.record() if totals is not None else None,
    }


def step_record(step: LoggedStep, prices: PriceTable = NO_PRICES) -> dict[str, Any]:
    """The JSON shape of one logged step (`agentfs log --json`, the HTTP API)."""
    totals = Totals.of_step(step, prices)
    return {"commit": step.commit, "kind": step.kind, "sequence": step.sequence,
            "summary": step.summary, "usage": totals.record() if totals is not None else None}
