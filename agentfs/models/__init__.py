"""LLM models: the interface, the offline replay model, the Anthropic provider and the
OpenAI-compatible one."""

from agentfs.models.base import (
    FinishReason,
    Model,
    ModelRequest,
    ModelResponse,
    PromptTooLong,
    RetryNotice,
    RetrySink,
    ToolSpec,
)

__all__ = [
    "FinishReason",
    "Model",
    "ModelRequest",
    "ModelResponse",
    "PromptTooLong",
    "RetryNotice",
    "RetrySink",
    "ToolSpec",
]
