"""The `anthropic` provider, on the official SDK (streaming, tools, prompt caching)."""

from __future__ import annotations

from typing import Any

import anthropic

from agentfs.errors import ModelError
from agentfs.models.anthropic_messages import to_api_messages
from agentfs.models.base import ModelRequest, ModelResponse, TextSink
from agentfs.store.messages import ToolCall, Usage

CACHE = {"type": "ephemeral"}


class AnthropicModel:
    """Claude through the Messages API; the key is passed in, never read from files."""

    def __init__(
        self,
        model_id: str,
        *,
        api_key: str,
        base_url: str | None = None,
        max_retries: int = 4,
        timeout: float = 600.0,
    ) -> None:
        self.model_id = model_id
        self.name = f"anthropic:{model_id}"
        self.client = anthropic.Anthropic(
            api_key=api_key, base_url=base_url, max_retries=max_retries, timeout=timeout
        )

    def build_params(self, request: ModelRequest) -> dict[str, Any]:
        """The request body: cache breakpoints on the tools, the system prompt and the
        newest message, so each iteration reuses the previous iteration's prefix."""
        messages = to_api_messages(request.messages)
        if messages:
            messages[-1]["content"][-1] = {**messages[-1]["content"][-1], "cache_control": CACHE}
        params: dict[str, Any] = {
            "model": self.model_id,
            "max_tokens": request.max_tokens,
            "messages": messages,
        }
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
        params = self.build_params(request)
        try:
            with self.client.messages.stream(**params) as stream:
                for text in stream.text_stream:
                    if on_text is not None:
                        on_text(text)
                final = stream.get_final_message()
        except anthropic.AuthenticationError as exc:
            raise ModelError(
                f"Anthropic rejected the API key (401): {_detail(exc)}",
                hint="check ANTHROPIC_API_KEY",
            ) from None
        except anthropic.APIStatusError as exc:
            raise ModelError(
                f"Anthropic API error {exc.status_code}: {_detail(exc)}"
            ) from None
        except anthropic.APIConnectionError as exc:
            raise ModelError(
                f"cannot reach the Anthropic API ({exc})",
                hint="check the network or ANTHROPIC_BASE_URL",
            ) from None
        return _response(final, self.name)


def _detail(exc: anthropic.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
    return str(exc.message)


def _response(final: Any, name: str) -> ModelResponse:
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
    return ModelResponse(
        text="".join(texts),
        tool_calls=calls,
        stop_reason=final.stop_reason or "end_turn",
        usage=Usage(
            input_tokens=usage.input_tokens or 0,
            output_tokens=usage.output_tokens or 0,
            cache_read_input_tokens=getattr(usage, "cache_read_input_tokens", None) or 0,
            cache_creation_input_tokens=getattr(usage, "cache_creation_input_tokens", None) or 0,
        ),
        model=name,
        thinking=thinking or None,
    )
