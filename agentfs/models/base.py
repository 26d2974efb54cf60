"""The model interface: system + messages + tool schemas in, one assistant turn out."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentfs.store.messages import Message, ToolCall, Usage

TextSink = Callable[[str], None]


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
    restart.
    """

    system: str
    messages: list[Message]
    tools: list[ToolSpec] = field(default_factory=list)
    branch_type: str | None = None
    call_index: int = 0
    max_tokens: int = 4096


@dataclass
class ModelResponse:
    """One assistant turn."""

    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    stop_reason: str = "end_turn"
    usage: Usage | None = None
    model: str = ""
    thinking: list[dict[str, Any]] | None = None


class Model(Protocol):
    """Anything that can take a `ModelRequest` and answer with a `ModelResponse`."""

    name: str

    def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelResponse:
        """Answer the request; stream text through `on_text` as it arrives."""
        ...
