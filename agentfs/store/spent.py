"""What model calls used, summed: the unit of `trace.json`'s `usage` and of the
`Agentfs-Usage` commit trailer. Plain data with no import cost, so that
`agentfs status` reads it straight from the JSON (`agentfs/core/status.py`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Protocol

__all__ = ["Spent"]


class _Usage(Protocol):  # `agentfs/store/messages.py:Usage`
    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int
    cache_creation_input_tokens: int


class _Timing(Protocol):  # `agentfs/store/messages.py:Timing`
    model_ms: int
    wall_ms: int


@dataclass
class Spent:
    """Sums of model calls' `usage` and `timing` (of one model, or of a run)."""

    __pydantic_config__: ClassVar[dict[str, Any]] = {"extra": "forbid"}  # in trace.json

    calls: int = 0
    input_tokens: int = 0  # not read from the cache
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    model_ms: int = 0
    wall_ms: int = 0

    def add(self, usage: _Usage | None, timing: _Timing | None = None) -> None:
        """Add one model call's usage and timing (an assistant message's)."""
        self.calls += 1
        if usage is not None:
            self.input_tokens += usage.input_tokens
            self.output_tokens += usage.output_tokens
            self.cache_read_input_tokens += usage.cache_read_input_tokens
            self.cache_creation_input_tokens += usage.cache_creation_input_tokens
        if timing is not None:
            self.model_ms += timing.model_ms
            self.wall_ms += timing.wall_ms

    @property
    def tokens(self) -> int:
        """Every token counted: a price is needed only when there are some."""
        return (self.input_tokens + self.output_tokens + self.cache_read_input_tokens
                + self.cache_creation_input_tokens)

    @classmethod
    def from_json(cls, data: object) -> Spent | None:
        """From the JSON of one entry, or None if it is not one (a file edited by
        hand; `agentfs doctor` says what is wrong with it)."""
        if not isinstance(data, Mapping):
            return None
        names = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        if set(data) - names or any(type(v) is not int for v in values.values()):
            return None
        return cls(**values)
