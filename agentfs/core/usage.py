"""What model calls used: per message, per run and per trace, with their cost.

Each assistant message stores the provider's token counts (`usage`) and how long
the turn took (`timing`); a trace's `trace.json` keeps their sums by model
(`agentfs/store/meta.py:Spending`), so every view reads totals without reading a
message. Cost is worked out when shown, from the price table
(`agentfs/prices.py:PriceTable`). Imports nothing heavy: `agentfs status` uses it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from agentfs.prices import Cost, PriceTable
from agentfs.store.spent import Spent

if TYPE_CHECKING:
    from agentfs.models.base import ModelResponse
    from agentfs.store.messages import Message, Timing
    from agentfs.store.meta import TraceMeta
    from agentfs.store.steplog import LoggedStep

__all__ = ["Totals", "trace_totals", "turn_timing"]


def turn_timing(response: ModelResponse, started: float) -> Timing | None:
    """The timing of a turn that began at `started` (monotonic clock) and ends now;
    None when the call was not timed."""
    from agentfs.store.messages import Timing

    if response.elapsed_ms is None:
        return None
    wall = round((time.monotonic() - started) * 1000)
    return Timing(model_ms=response.elapsed_ms, wall_ms=max(wall, response.elapsed_ms))


@dataclass(frozen=True)
class Totals:
    """Sums of calls, over models, with their cost."""

    calls: int
    input_tokens: int  # all input: uncached, read from and written to the cache
    cached_tokens: int  # of those, read from the cache
    output_tokens: int
    model_ms: int
    wall_ms: int
    cost: Cost
    #: For a fork's trace total: the trace and message it was forked from. Its sums
    #: start there; the calls of the turns it copied count in that trace.
    forked_from: tuple[str, int] | None = None

    @classmethod
    def of(cls, spent: Mapping[str, Spent], prices: PriceTable) -> Totals:
        """The sums of `spent` (by model), priced."""
        rows: Iterable[Spent] = spent.values()
        return cls(
            calls=sum(s.calls for s in rows),
            input_tokens=sum(s.input_tokens + s.cache_read_input_tokens
                             + s.cache_creation_input_tokens for s in rows),
            cached_tokens=sum(s.cache_read_input_tokens for s in rows),
            output_tokens=sum(s.output_tokens for s in rows),
            model_ms=sum(s.model_ms for s in rows),
            wall_ms=sum(s.wall_ms for s in rows),
            cost=prices.cost(spent),
        )

    @classmethod
    def of_message(cls, message: Message, prices: PriceTable) -> Totals | None:
        """One model turn's, or None for a message no call wrote or that recorded
        nothing (written by hand, by an older agentfs or a synthetic turn)."""
        if message.role != "assistant" or (message.usage is None and message.timing is None):
            return None
        spent = Spent()
        spent.add(message.usage, message.timing)
        return cls.of({message.model or "unknown": spent}, prices)

    @classmethod
    def of_step(cls, step: LoggedStep, prices: PriceTable) -> Totals | None:
        """A logged step's, from its commit's `Agentfs-Usage`; None without one."""
        if step.usage is None:
            return None
        model, spent = step.usage
        return cls.of({model: spent}, prices)

    def text(self) -> str:
        """`12 calls · 48,210 in, 40,100 cached · 2,304 out · model 31.2 s · wall 33.0 s
        · ~$0.0712` (one call's without the count; without tokens and cost when the
        calls reported no tokens); a fork's total says where its sums start."""
        return self._sums_text() + (
            f" (since the fork from {self.forked_from[0]} at #{self.forked_from[1]}; its "
            f"copied turns count in {self.forked_from[0]})" if self.forked_from else "")

    def _sums_text(self) -> str:
        if not self.calls:
            return "no model calls"
        parts = [f"{self.calls} calls"] if self.calls != 1 else []
        if self.counted:
            parts += [f"{self.input_tokens:,} in, {self.cached_tokens:,} cached",
                      f"{self.output_tokens:,} out"]
        parts.append(f"model {self.model_ms / 1000:.1f} s")
        if self.wall_ms:
            parts.append(f"wall {self.wall_ms / 1000:.1f} s")
        if self.cost_text is not None:
            parts.append(self.cost_text)
        return " · ".join(parts)

    @property
    def counted(self) -> bool:
        """Whether the calls reported any tokens (a replay model reports none: its
        turns show their time alone, not a row of zeros)."""
        return bool(self.input_tokens or self.output_tokens)

    @property
    def cost_text(self) -> str | None:
        """The cost as every view shows it (`agentfs/prices.py:Cost.text`); None for
        calls that reported no tokens and have no price (a replay model has no cost,
        not `$0.0000`)."""
        if self.counted or self.cost.amount or self.cost.unpriced:
            return self.cost.text()
        return None

    def record(self) -> dict[str, object]:
        """The JSON form (`--json` outputs, the HTTP API)."""
        return {"calls": self.calls, "input_tokens": self.input_tokens,
                "cached_tokens": self.cached_tokens, "output_tokens": self.output_tokens,
                "model_ms": self.model_ms, "wall_ms": self.wall_ms, "cost": self.cost.record(),
                "text": self.text()}


def trace_totals(meta: TraceMeta, prices: PriceTable) -> Totals:
    """What the trace's model calls used so far (`trace.json`'s `usage`; zero for a
    trace no counting agentfs has committed to). A fork's are those made since the
    fork: the turns it copied were its source's calls, counted there once."""
    totals = Totals.of(meta.usage.models if meta.usage is not None else {}, prices)
    origin = meta.forked_from
    return replace(totals, forked_from=(origin.trace, origin.sequence)) if origin else totals
