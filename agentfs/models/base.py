"""The model interface: system + messages + tool schemas in, one assistant turn out."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentfs.errors import ModelError
from agentfs.store.messages import Message, ToolCall, Usage

__all__ = [
    "FinishReason",
    "Model",
    "ModelRequest",
    "ModelResponse",
    "PromptTooLong",
    "RetryNotice",
    "RetrySink",
    "TextSink",
    "ToolSpec",
    "report_retry",
]

TextSink = Callable[[str], None]


class FinishReason(enum.StrEnum):
    """Why the model ended its turn (the Messages API's `stop_reason`)."""

    END_TURN = "end_turn"  # the answer is complete
    TOOL_USE = "tool_use"  # it wants its tool calls run
    MAX_TOKENS = "max_tokens"  # it ran out of output tokens: the last block is cut off
    STOP_SEQUENCE = "stop_sequence"


class PromptTooLong(ModelError):
    """The request is over the model's context window; compressing the trace may help."""


@dataclass(frozen=True)
class ToolSpec:
    """What the model is told about a tool."""

    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass
class ModelRequest:
    """One model call.

    `messages` are the stored messages to send, in path order, without the
    system message. `branch_type` is None on the main path, or the side
    branch's type. `call_index` counts the model calls this trace already made
    for that branch type, so scripted models know where they are after a
    restart. `thinking_budget` asks for extended thinking with that many
    tokens (`[thinking]` in agentfs.toml); None asks for none.
    """

    system: str
    messages: list[Message]
    tools: list[ToolSpec] = field(default_factory=list)
    branch_type: str | None = None
    call_index: int = 0
    max_tokens: int = 4096
    thinking_budget: int | None = None


@dataclass
class ModelResponse:
    """One assistant turn."""

    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    stop_reason: str = FinishReason.END_TURN
    usage: Usage | None = None
    model: str = ""
    thinking: list[dict[str, Any]] | None = None
    #: The order the blocks came in, when it is not the default one (thinking, the
    #: text, the tool calls); stored as the message's `blocks` field (see
    #: `agentfs/models/anthropic_messages.py:block_layout`).
    blocks: list[dict[str, Any]] | None = None
    #: Milliseconds the call took, its retries included; set by the run that made it.
    elapsed_ms: int | None = None

    def cut_call(self) -> ToolCall | None:
        """The tool call the model was still writing when it ran out of output tokens
        (the turn's last block, with `max_tokens`), or None: its input is incomplete."""
        if self.stop_reason != FinishReason.MAX_TOKENS or not self.tool_calls:
            return None
        last = self.blocks[-1] if self.blocks else {"tool_use": self.tool_calls[-1].id}
        return next((c for c in self.tool_calls if c.id == last.get("tool_use")), None)


@dataclass(frozen=True)
class RetryNotice:
    """A model call's attempt failed and will be tried again."""

    attempt: int  # the attempt that failed, from 1
    attempts: int  # how many attempts the call may make in all
    wait: float  # seconds before the next attempt
    reason: str  # what went wrong, for people


class RetrySink(Protocol):
    """An `on_text` sink that also hears of retries. After `retrying`, the model
    streams the new attempt's text from its start: text the failed attempt sent is
    void (nothing of it is stored)."""

    def __call__(self, text: str) -> None: ...

    def retrying(self, notice: RetryNotice) -> None: ...


def report_retry(on_text: TextSink | None, notice: RetryNotice) -> None:
    """Tell `on_text` of a retry, if it is a `RetrySink`; a plain callable is left alone."""
    retrying = getattr(on_text, "retrying", None)
    if callable(retrying):
        retrying(notice)


class Model(Protocol):
    """Anything that can take a `ModelRequest` and answer with a `ModelResponse`."""

    name: str

    def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelResponse:
        """Answer the request; stream text through `on_text` as it arrives.

        A model that retries failed attempts tells `on_text` through
        `report_retry` before each new attempt. A model must return only a
        complete turn: a stream cut short is an error, never a response.
        """
        ...
