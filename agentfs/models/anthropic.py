"""The `anthropic` provider, on the official SDK (streaming, tools, prompt caching).

Retries are ours, not the SDK's (its `max_retries` is 0): a stream that fails
half-way is retried too, under the policy every provider shares
(`agentfs/models/retry.py:RetryPolicy`): on 429, 5xx (incl. 529 overloaded),
timeouts, dropped connections and streams that end before `message_stop`;
never on 4xx such as 400/401. A turn is returned only
once its `message_stop` arrived: anything short of it is a failed attempt,
so a cut stream is never taken for a complete answer (see docs/models.md).
A 400 "prompt is too long" raises `PromptTooLong`, so the runner can compress.
A request with a `thinking_budget` asks for extended thinking, unless the API
would refuse it for these messages (`thinking_param`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from contextlib import closing
from typing import Any

import anthropic

from agentfs.errors import ModelError
from agentfs.models.anthropic_messages import block_layout, to_api_messages
from agentfs.models.base import (
    FinishReason,
    ModelRequest,
    ModelResponse,
    PromptTooLong,
    TextSink,
)
from agentfs.models.retry import Retry, RetryPolicy, is_transport_error
from agentfs.store.messages import ToolCall, Usage

__all__ = ["AnthropicModel", "IncompleteStream", "thinking_param"]

CACHE = {"type": "ephemeral"}


class AnthropicModel:
    """Claude through the Messages API; the key is passed in, never read from files."""

    def __init__(  # noqa: PLR0913 -- keyword-only options, each with its default
        self,
        model_id: str,
        *,
        api_key: str,
        base_url: str | None = None,
        max_retries: int = 6,
        timeout: float = 600.0,
        backoff: float = 1.0,
        max_backoff: float = 60.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.model_id = model_id
        self.name = f"anthropic:{model_id}"
        self.retry = RetryPolicy(max_retries, backoff, max_backoff, sleep)
        self.client = anthropic.Anthropic(
            api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout
        )

    def build_params(self, request: ModelRequest) -> dict[str, Any]:
        """The request body, with cache breakpoints (at most 4): the tools, the system
        prompt, the newest message and the user message before it, so each iteration
        reads the prefix the previous one wrote."""
        messages = to_api_messages(request.messages)
        users = [i for i, m in enumerate(messages) if m["role"] == "user"]
        for index in {len(messages) - 1, *users[-2:-1]} if messages else ():
            blocks = messages[index]["content"]
            blocks[-1] = {**blocks[-1], "cache_control": CACHE}
        params: dict[str, Any] = {
            "model": self.model_id,
            "max_tokens": request.max_tokens,
            "messages": messages,
        }
        thinking = thinking_param(request.thinking_budget, messages)
        if thinking is not None:
            params["thinking"] = thinking
        if request.system:
            params["system"] = [{"type": "text", "text": request.system, "cache_control": CACHE}]
        if request.tools:
            tools = [
                {"name": t.name, "description": t.description, "input_schema": t.input_schema}
                for t in request.tools
            ]
            tools[-1]["cache_control"] = CACHE
            params["tools"] = tools
        return params

    def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelResponse:
        """Stream one turn, retrying failed attempts; see the module docstring.

        Raises:
            PromptTooLong: the request is over the model's context window.
            ModelError: a refusal (e.g. 401), or still failing after the retries.
        """
        params = self.build_params(request)
        return self.retry.call(lambda: self._stream(params, on_text), on_text,
                               service="Anthropic API")

    def _stream(self, params: dict[str, Any], on_text: TextSink | None) -> ModelResponse:
        """One attempt: the complete turn, or `Retry` / a `ModelError`."""
        open_block: str | None = None  # the kind of block the stream is inside
        with closing(self._events(params)) as events:
            for event in events:
                if event.type == "text" and on_text is not None:
                    on_text(event.text)
                elif event.type == "content_block_start":
                    open_block = event.content_block.type
                elif event.type == "content_block_stop":
                    open_block = None
                elif event.type == "message_stop":
                    return _response(event.message, self.name)
        cut = IncompleteStream(open_block)
        raise Retry(cut, str(cut))

    def _events(self, params: dict[str, Any]) -> Generator[Any, None, None]:
        """The SDK's stream events, its failures turned into `Retry` or a `ModelError`
        (the caller's own code runs outside this `try`)."""
        try:
            with self.client.messages.stream(**params) as stream:
                yield from stream
        except anthropic.APIError as exc:
            if _retryable(exc):
                raise Retry(exc, _describe(exc)) from None
            raise _refusal(exc) from None
        except (ValueError, UnicodeDecodeError) as exc:  # a garbled body, event or tool JSON
            raise Retry(exc) from None
        except Exception as exc:
            if is_transport_error(exc):  # e.g. the connection cut after the headers
                raise Retry(exc) from None
            raise


def thinking_param(budget: int | None, messages: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The request's `thinking` parameter: extended thinking with `budget` tokens, or None.

    The API takes one thinking configuration per assistant turn, and a tool-use
    loop is one turn: with thinking on, the assistant message before the final
    tool results must start with a thinking block. A loop that began without
    one (agentfs' synthetic `skill` turn at the start of a run, or a turn made
    with thinking off) therefore goes on without thinking until the next user
    message.
    """
    if budget is None:
        return None
    if len(messages) >= 2 and messages[-1]["role"] == "user" and messages[-2]["role"] == "assistant":
        results = any(b.get("type") == "tool_result" for b in messages[-1]["content"])
        first = messages[-2]["content"][0] if messages[-2]["content"] else {}
        if results and first.get("type") not in ("thinking", "redacted_thinking"):
            return None
    return {"type": "enabled", "budget_tokens": budget}


class IncompleteStream(Exception):
    """The stream ended before `message_stop`: the turn is incomplete, and never used."""

    def __init__(self, open_block: str | None) -> None:
        where = f" inside a {open_block} block" if open_block else ""
        super().__init__(f"the stream ended before message_stop{where}")


def _refusal(exc: anthropic.APIError) -> ModelError:
    """The error to report for a failure that retrying would not fix."""
    if isinstance(exc, anthropic.APIStatusError) and _too_long(exc):
        return PromptTooLong(
            f"the request is too long for the model: {_detail(exc)}",
            hint="compress the trace: agentfs compress TRACE",
        )
    if isinstance(exc, anthropic.AuthenticationError):
        return ModelError(
            f"Anthropic rejected the API key (401): {_detail(exc)}",
            hint="check ANTHROPIC_API_KEY",
        )
    if isinstance(exc, anthropic.APIStatusError):
        return ModelError(
            f"Anthropic API error {exc.status_code}: {_detail(exc)}",
            hint="the request was refused; it is not retried",
        )
    return ModelError(f"Anthropic API error: {exc}")  # e.g. a malformed response


RETRYABLE = (
    anthropic.RateLimitError,  # 429
    anthropic.InternalServerError,  # 5xx, including 529 overloaded
    anthropic.RequestTimeoutError,  # 408
    anthropic.APIConnectionError,  # dropped connections and APITimeoutError
)
#: Error types the API can also send inside a stream that has already started.
RETRYABLE_TYPES = {"overloaded_error", "api_error", "rate_limit_error", "timeout_error"}


def _retryable(exc: Exception) -> bool:
    if isinstance(exc, RETRYABLE):
        return True
    body = getattr(exc, "body", None)
    error = body.get("error") if isinstance(body, dict) else None
    return isinstance(error, dict) and error.get("type") in RETRYABLE_TYPES


def _too_long(exc: anthropic.APIStatusError) -> bool:
    """A 400 "prompt is too long", or a 413 (the request is over the size limit)."""
    if exc.status_code == 413:
        return True
    return exc.status_code == 400 and "prompt is too long" in _detail(exc).lower()


def _describe(exc: Exception) -> str:
    if isinstance(exc, anthropic.APITimeoutError):
        return "the request timed out"
    if isinstance(exc, anthropic.APIStatusError):
        return f"{exc.status_code} {_detail(exc)}"
    return f"{type(exc).__name__}: {exc}"


def _detail(exc: anthropic.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
    return str(exc.message)


def _response(final: Any, name: str) -> ModelResponse:
    """The turn in `final` (a complete message: `message_stop` arrived)."""
    texts: list[str] = []
    calls: list[ToolCall] = []
    thinking: list[dict[str, Any]] = []
    for block in final.content:
        if block.type == "text":
            texts.append(block.text)
        elif block.type == "tool_use":
            calls.append(ToolCall(id=block.id, name=block.name, input=dict(block.input or {})))
        elif block.type in ("thinking", "redacted_thinking"):
            thinking.append(block.model_dump(mode="json", exclude_none=True))
    usage = final.usage
    text = "".join(texts)
    received = [b.model_dump(include={"type", "text", "id"}) for b in final.content]
    return ModelResponse(
        text=text,
        tool_calls=calls,
        stop_reason=final.stop_reason or FinishReason.END_TURN,
        usage=Usage(
            input_tokens=usage.input_tokens or 0,
            output_tokens=usage.output_tokens or 0,
            cache_read_input_tokens=getattr(usage, "cache_read_input_tokens", None) or 0,
            cache_creation_input_tokens=getattr(usage, "cache_creation_input_tokens", None) or 0,
        ),
        model=name,
        thinking=thinking or None,
        blocks=block_layout(received, text, calls, thinking),
    )
