"""LLM models: the interface, the offline replay model and the Anthropic provider."""

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
