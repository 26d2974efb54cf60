"""LLM models: the interface, the offline replay model and the Anthropic provider."""

from agentfs.models.base import Model, ModelRequest, ModelResponse, ToolSpec

__all__ = ["Model", "ModelRequest", "ModelResponse", "ToolSpec"]
