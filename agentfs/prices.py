"""What model tokens cost: the price table and sums of money.

The defaults below, for current Anthropic models, are estimates from the published
list prices (the provider's bill is the authority); `[prices]` in agentfs.toml
replaces or adds entries, and those are taken as given (docs/configuration.md).
Plain data with no import cost: `agentfs status` prices traces without loading
the rest of agentfs.
"""

from __future__ import annotations

import hashlib
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from agentfs.store.regularfile import FileRefused, read_config_file
from agentfs.store.spent import Spent

__all__ = ["DEFAULT_PRICES", "NO_PRICES", "Cost", "Price", "PriceTable"]


@dataclass(frozen=True)
class Price:
    """What a model's tokens cost, in USD per million tokens (`[prices."MODEL"]`):
    input not read from the cache, output, input read from the cache, input written
    to it."""

    __pydantic_config__: ClassVar[dict[str, Any]] = {"extra": "forbid"}

    input: float
    output: float
    cache_read: float = 0.0
    cache_write: float = 0.0

    def __post_init__(self) -> None:
        for name in ("input", "output", "cache_read", "cache_write"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be at least 0")


#: USD per million tokens: input, output, cache reads, cache writes (5-minute).
DEFAULT_PRICES: Mapping[str, Price] = {
    "claude-opus-4-5": Price(input=5, output=25, cache_read=0.5, cache_write=6.25),
    "claude-opus-4-1": Price(input=15, output=75, cache_read=1.5, cache_write=18.75),
    "claude-opus-4": Price(input=15, output=75, cache_read=1.5, cache_write=18.75),
    "claude-sonnet-4-5": Price(input=3, output=15, cache_read=0.3, cache_write=3.75),
    "claude-sonnet-4": Price(input=3, output=15, cache_read=0.3, cache_write=3.75),
    "claude-3-7-sonnet": Price(input=3, output=15, cache_read=0.3, cache_write=3.75),
    "claude-haiku-4-5": Price(input=1, output=5, cache_read=0.1, cache_write=1.25),
    "claude-3-5-haiku": Price(input=0.8, output=4, cache_read=0.08, cache_write=1),
}


@dataclass(frozen=True)
class Cost:
    """A sum of money in USD. `estimated`: a default price was used; `unpriced`: the
    models no price was found for (their calls are not in `amount`)."""

    amount: float = 0.0
    estimated: bool = False
    unpriced: tuple[str, ...] = ()

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.amount + other.amount, self.estimated or other.estimated,
                    tuple(sorted({*self.unpriced, *other.unpriced})))

    def text(self) -> str:
        """`$0.0123`, `~$0.0123` for an estimate, `no price for local:x` when nothing
        was priced, `~$0.0123 + no price for local:x` when some calls were not (the sum
        leaves them out: it must not read as the whole spend)."""
        unpriced = "no price for " + ", ".join(self.unpriced)
        if self.unpriced and not self.amount:
            return unpriced
        priced = f"{'~' if self.estimated else ''}${self.amount:.4f}"
        return f"{priced} + {unpriced}" if self.unpriced else priced

    def record(self) -> dict[str, object]:
        return {"usd": round(self.amount, 6), "estimated": self.estimated,
                "unpriced": list(self.unpriced), "text": self.text()}


@dataclass(frozen=True)
class PriceTable:
    """The defaults with the workspace's `[prices]` over them."""

    given: Mapping[str, Price] = field(default_factory=dict)

    def find(self, model: str) -> tuple[Price, bool] | None:
        """The price of `model` and whether it is an estimate. An entry matches the
        names it starts (so `claude-sonnet-4-5` prices `claude-sonnet-4-5-20250929`),
        of any provider, or only of the one it names (`openai:gpt-4.1`); the longest
        name wins, and of two as long, the one that names the provider."""
        provider, name = _provider_and_name(model)

        def fit(key: str) -> tuple[int, bool] | None:
            """How well `key` names the model: the length of the name it matched, and
            whether it named the provider too. A key is tried as the whole model
            name (`openai:gpt-4.1`), then as the name after the provider (`gpt-4.1`,
            `llama3:8b`: a name may hold a colon)."""
            if provider is not None and _starts(model, key):
                return len(key) - len(provider) - 1, True
            return (len(key), False) if _starts(name, key) else None

        for table, estimated in ((self.given, False), (DEFAULT_PRICES, True)):
            matches = {key: rank for key in table if (rank := fit(key)) is not None}
            if matches:
                return table[max(matches, key=matches.__getitem__)], estimated
        return None

    def fingerprint(self) -> str:
        """What tells two tables apart (the workspace's prices and the estimates), for
        costs kept on disk (`agentfs/core/listcache.py:ListCache`)."""
        table = repr((sorted(self.given.items()), sorted(DEFAULT_PRICES.items())))
        return hashlib.blake2b(table.encode(), digest_size=16).hexdigest()

    @classmethod
    def in_config(cls, path: Path) -> PriceTable:
        """The table of an `agentfs.toml` already found valid
        (`agentfs/core/doctor.py:check_config`), read without loading the rest of
        it; the estimates alone when it cannot be read."""
        try:
            entries = tomllib.loads(read_config_file(path).decode()).get("prices", {})
            return cls({name: Price(**entry) for name, entry in entries.items()})
        except (OSError, ValueError, TypeError, AttributeError, FileRefused):
            return cls()

    def cost(self, spent: Mapping[str, Spent]) -> Cost:
        """The cost of calls summed by model."""
        total = Cost()
        for model, sums in spent.items():
            found = self.find(model)
            if found is None:
                if sums.input_tokens or sums.output_tokens or sums.cache_read_input_tokens:
                    total += Cost(unpriced=(model,))
                continue
            price, estimated = found
            amount = (sums.input_tokens * price.input + sums.output_tokens * price.output
                      + sums.cache_read_input_tokens * price.cache_read
                      + sums.cache_creation_input_tokens * price.cache_write) / 1_000_000
            total += Cost(amount, estimated)
        return total

#: The built-in estimates only.
NO_PRICES = PriceTable()


def _provider_and_name(model: str) -> tuple[str | None, str]:
    """`anthropic:claude-sonnet-4-5` as ("anthropic", "claude-sonnet-4-5"); a name
    without a provider as (None, name)."""
    provider, sep, name = model.partition(":")
    return (provider, name) if sep else (None, model)


def _starts(name: str, key: str) -> bool:
    """Does `key` price `name`: the same, or the start of it followed by `-` (a dated id)."""
    return name == key or name.startswith(key + "-")
