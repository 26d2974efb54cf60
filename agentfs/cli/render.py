"""Turning traces, logs and statuses into terminal text or JSON (no I/O here)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from agentfs.core.usage import Totals
from agentfs.prices import PriceTable
from agentfs.store.messages import Message
from agentfs.store.wording import counted

if TYPE_CHECKING:
    from agentfs.core.runner import RunResult
    from agentfs.store.steplog import LoggedStep

__all__ = ["log_text", "run_text", "show_text"]

PREVIEW_LINES = 12


def show_text(messages: list[tuple[Message, bool]], prices: PriceTable, *,
              full: bool = False) -> str:
    """Readable listing; each message is a header line and an indented body. A
    model's turn adds what its call used to its header."""
    blocks = []
    for message, on_path in messages:
        header = f"#{message.sequence} {message.role}"
        totals = Totals.of_message(message, prices)
        if totals is not None:
            header += f"  · {totals.text()}"
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


def log_text(step: LoggedStep, prices: PriceTable) -> str:
    """One line of `agentfs log`."""
    seq_text = f"#{step.sequence}" if step.sequence is not None else ""
    line = f"{step.commit[:10]} {step.kind:<9} {seq_text:<6} {step.summary}".rstrip()
    totals = Totals.of_step(step, prices)
    return f"{line}  · {totals.text()}" if totals is not None else line


def run_text(result: RunResult, prices: PriceTable) -> str:
    """What a run did and used: `3 model calls, 1,234 input tokens (1,000 from the
    cache), 56 output tokens, model 4.2 s, wall 5.0 s, ~$0.0123`; without tokens and
    cost when the calls reported no tokens, as `show` and `status` do."""
    totals = Totals.of(result.spent, prices)
    parts = [counted(result.iterations, "model call")]
    if totals.counted:
        cached = f"{totals.cached_tokens:,} from the cache"
        parts += [f"{totals.input_tokens:,} input tokens ({cached})",
                  f"{totals.output_tokens:,} output tokens"]
    parts += [f"model {totals.model_ms / 1000:.1f} s", f"wall {result.wall_ms / 1000:.1f} s"]
    if totals.cost_text is not None:
        parts.append(totals.cost_text)
    return ", ".join(parts)
