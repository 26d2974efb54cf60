"""The `openai` provider: any OpenAI-compatible Chat Completions API (OpenAI, Ollama, vLLM,
LiteLLM proxies) on the official `openai` SDK, streaming text and tool calls.

It follows the same rules as the Anthropic provider (docs/models.md): retries are
ours (the SDK's `max_retries` is 0) under the shared policy
(`agentfs/models/retry.py:RetryPolicy`): on 429, 408, 5xx, timeouts, dropped
connections, garbled bodies, errors sent inside the stream, and streams that
end before a `finish_reason`; never on other 4xx. A turn is returned only once
its `finish_reason` arrived (`IncompleteStream` otherwise), with its tool-call
deltas assembled and each call's arguments parsed. A 400
`context_length_exceeded` (or a 413) raises `PromptTooLong`.

The `openai` package is an extra (`agentfs-workspace[openai]`): this module is
imported only when an `openai:` model is made.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Generator
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

import openai

from agentfs.errors import ModelError
from agentfs.models.base import (
    FinishReason,
    ModelRequest,
    ModelResponse,
    PromptTooLong,
    TextSink,
)
from agentfs.models.openai_messages import to_api_messages, to_api_tools
from agentfs.models.retry import Retry, RetryPolicy, is_transport_error
from agentfs.store.messages import ToolCall, Usage

__all__ = ["DEFAULT_BASE_URL", "IncompleteStream", "OpenAIModel", "finish_reason"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"

#: Chat Completions `finish_reason` → agentfs' stop reason (a content filter's stop, or
#: an unknown one, ends the turn).
FINISH_REASONS = {
    "stop": FinishReason.END_TURN,
    "tool_calls": FinishReason.TOOL_USE,
    "function_call": FinishReason.TOOL_USE,
    "length": FinishReason.MAX_TOKENS,
}
#: Error types or codes a server sends inside a stream (or in a 4xx body) that
#: another attempt may fix.
RETRYABLE_TYPES = {"server_error", "rate_limit_exceeded", "rate_limit_error", "api_error",
                   "overloaded_error", "timeout", "internal_error", "service_unavailable"}


class OpenAIModel:
    """A model behind a Chat Completions API; the key is passed in, never read from files."""

    def __init__(  # noqa: PLR0913 -- keyword-only options, each with its default
        self,
        model_id: str,
        *,
        api_key: str,
        base_url: str = DEFAULT_BASE_URL,
        organization: str | None = None,
        project: str | None = None,
        max_retries: int = 6,
        timeout: float = 600.0,
        backoff: float = 1.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.model_id = model_id
        self.name = f"openai:{model_id}"
        self.base_url = base_url
        self.retry = RetryPolicy(max_retries, backoff, sleep=sleep)
        self.client = openai.OpenAI(api_key=api_key, base_url=base_url, organization=organization,
                                    project=project, max_retries=0, timeout=timeout)

    def build_params(self, request: ModelRequest) -> dict[str, Any]:
        """The request body: the system prompt first, the tools, streaming with usage."""
        params: dict[str, Any] = {
            "model": self.model_id,
            "messages": to_api_messages(request.system, request.messages),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        # OpenAI's own newer models refuse `max_tokens`; the servers that copy its API
        # (Ollama, vLLM, LiteLLM) all take it, not all take the newer name.
        limit = "max_completion_tokens" if self.base_url == DEFAULT_BASE_URL else "max_tokens"
        params[limit] = request.max_tokens
        if request.tools:
            params["tools"] = to_api_tools(request.tools)
        return params

    def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelResponse:
        """Stream one turn, retrying failed attempts; see the module docstring.

        Raises:
            PromptTooLong: the request is over the model's context window.
            ModelError: a refusal (e.g. 401), or still failing after the retries.
        """
        params = self.build_params(request)
        return self.retry.call(lambda: self._stream(params, on_text), on_text,
                               service=f"the API at {self.base_url}")

    def _stream(self, params: dict[str, Any], on_text: TextSink | None) -> ModelResponse:
        """One attempt: the complete turn, or `Retry` / a `ModelError`."""
        turn = _Turn()
        with closing(self._chunks(params)) as chunks:
            for chunk in chunks:
                text = turn.add(chunk)
                if text and on_text is not None:
                    on_text(text)
        if turn.finish is None:
            cut = IncompleteStream(turn.last)
            raise Retry(cut, str(cut))
        return turn.response(self.name)

    def _chunks(self, params: dict[str, Any]) -> Generator[Any, None, None]:
        """The SDK's stream chunks, its failures turned into `Retry` or a `ModelError`
        (the caller's own code runs outside this `try`)."""
        try:
            with self.client.chat.completions.create(**params) as stream:
                yield from stream
        except openai.APIError as exc:
            if _retryable(exc):
                raise Retry(exc, _describe(exc)) from None
            raise _refusal(exc, self.base_url) from None
        except (ValueError, UnicodeDecodeError) as exc:  # a garbled body or event
            raise Retry(exc) from None
        except Exception as exc:
            if is_transport_error(exc):  # e.g. the connection cut after the headers
                raise Retry(exc) from None
            raise


def finish_reason(value: str | None) -> str:
    """agentfs' stop reason for a Chat Completions `finish_reason`."""
    return FINISH_REASONS.get(value or "stop", FinishReason.END_TURN)


class IncompleteStream(Exception):
    """The stream ended before a `finish_reason`: the turn is incomplete, and never used."""

    def __init__(self, inside: str | None) -> None:
        where = f" inside {inside}" if inside else ""
        super().__init__(f"the stream ended before its finish_reason{where}")


@dataclass
class _Call:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class _Turn:
    """A turn as its chunks arrive: text, tool calls by index, finish reason, usage."""

    text: list[str] = field(default_factory=list)
    calls: dict[int, _Call] = field(default_factory=dict)
    finish: str | None = None
    usage: Any = None
    last: str | None = None  # what the last delta added to: "text" or "tool call N"

    def add(self, chunk: Any) -> str:
        """Take in one chunk; returns the text it adds."""
        if getattr(chunk, "usage", None) is not None:
            self.usage = chunk.usage
        added = ""
        for choice in getattr(chunk, "choices", None) or []:
            if getattr(choice, "index", 0) != 0:
                continue
            delta = choice.delta
            if delta is not None and delta.content:
                added += delta.content
                self.last = "the text"
            for part in (delta.tool_calls if delta is not None else None) or []:
                self._add_call(part)
            if choice.finish_reason:
                self.finish = choice.finish_reason
        self.text.append(added)
        return added

    def _add_call(self, part: Any) -> None:
        index = part.index if part.index is not None else len(self.calls)
        call = self.calls.setdefault(index, _Call())
        call.id = call.id or (part.id or "")
        function = part.function
        if function is not None:
            call.name = call.name or (function.name or "")
            if function.arguments:
                # some servers send the arguments whole, as an object
                arguments = function.arguments
                call.arguments.append(arguments if isinstance(arguments, str)
                                      else json.dumps(arguments))
        self.last = f"tool call {call.name or index}"

    def response(self, name: str) -> ModelResponse:
        stop = finish_reason(self.finish)
        calls = [self._tool_call(self.calls[i], cut=stop == FinishReason.MAX_TOKENS
                                 and i == max(self.calls))
                 for i in sorted(self.calls)]
        if calls and stop == FinishReason.END_TURN:
            stop = FinishReason.TOOL_USE  # servers that say "stop" after tool calls
        return ModelResponse(text="".join(self.text), tool_calls=calls, stop_reason=stop,
                             usage=_usage(self.usage), model=name)

    @staticmethod
    def _tool_call(call: _Call, *, cut: bool) -> ToolCall:
        """The call, its arguments parsed; the call cut off at max tokens keeps what
        parsed (nothing): `ModelResponse.cut_call` tells the runner it is incomplete."""
        text = "".join(call.arguments) or "{}"
        try:
            arguments = json.loads(text)
        except ValueError as exc:
            if cut:
                arguments = {}
            else:
                raise Retry(exc, f"the arguments of tool call {call.name!r} are not "
                                 f"JSON: {text[:80]!r}") from None
        if not isinstance(arguments, dict):
            raise Retry(ValueError(text), f"the arguments of tool call {call.name!r} are "
                                          "not a JSON object")
        return ToolCall(id=call.id or f"call_{uuid.uuid4().hex[:24]}", name=call.name,
                        input=arguments)


def _usage(usage: Any) -> Usage | None:
    """OpenAI counts cached tokens inside `prompt_tokens`; agentfs keeps them apart, as
    the Messages API does, so `input_tokens` + `cache_read_input_tokens` is the prompt."""
    if usage is None:
        return None
    details = getattr(usage, "prompt_tokens_details", None)
    cached = (getattr(details, "cached_tokens", None) or 0) if details is not None else 0
    prompt = usage.prompt_tokens or 0
    return Usage(input_tokens=max(0, prompt - cached), output_tokens=usage.completion_tokens or 0,
                 cache_read_input_tokens=cached)


def _retryable(exc: openai.APIError) -> bool:
    if isinstance(exc, (openai.RateLimitError, openai.InternalServerError,
                        openai.APIConnectionError)):  # 429, 5xx, timeouts, dropped connections
        return True
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code == 408
    # an error event inside the stream (or a response the SDK could not read)
    return exc.type in RETRYABLE_TYPES or exc.code in RETRYABLE_TYPES or exc.type is None


def _refusal(exc: openai.APIError, base_url: str) -> ModelError:
    """The error to report for a failure that retrying would not fix."""
    detail = _detail(exc)
    if isinstance(exc, openai.APIStatusError) and (
            exc.status_code == 413 or exc.code == "context_length_exceeded"
            or "maximum context length" in detail):
        return PromptTooLong(f"the request is too long for the model: {detail}",
                             hint="compress the trace: agentfs compress TRACE")
    if isinstance(exc, openai.AuthenticationError):
        return ModelError(f"{base_url} rejected the API key (401): {detail}",
                          hint="check OPENAI_API_KEY (and OPENAI_BASE_URL)")
    if isinstance(exc, openai.NotFoundError):
        return ModelError(f"{base_url} answered 404: {detail}",
                          hint="check the model name and OPENAI_BASE_URL (which usually "
                          "ends in /v1)")
    if isinstance(exc, openai.APIStatusError):
        return ModelError(f"the API at {base_url} answered {exc.status_code}: {detail}",
                          hint="the request was refused; it is not retried")
    return ModelError(f"the API at {base_url} failed: {detail}")


def _describe(exc: openai.APIError) -> str:
    if isinstance(exc, openai.APITimeoutError):
        return "the request timed out"
    if isinstance(exc, openai.APIStatusError):
        return f"{exc.status_code} {_detail(exc)}"
    return f"{type(exc).__name__}: {_detail(exc)}"


def _detail(exc: openai.APIError) -> str:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
    return str(exc.message)
