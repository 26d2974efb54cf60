"""Test support for agentfs and its users: models that need no network, fake
Anthropic and OpenAI-compatible servers for the real SDKs, and their APIs' request rules."""

from agentfs.models.replay import ReplayModel
from agentfs.testing.api_rules import assert_valid_request, check_request
from agentfs.testing.fake_anthropic import (
    FakeAnthropicServer,
    PromptCache,
    RecordedRequest,
    sign_thinking,
)
from agentfs.testing.fake_openai import FakeOpenAIServer
from agentfs.testing.gitserver import GitServer
from agentfs.testing.models import FunctionModel, ScriptedModel
from agentfs.testing.openai_rules import assert_valid_chat_request, check_chat_request

__all__ = [
    "FakeAnthropicServer",
    "FakeOpenAIServer",
    "FunctionModel",
    "GitServer",
    "PromptCache",
    "RecordedRequest",
    "ReplayModel",
    "ScriptedModel",
    "assert_valid_chat_request",
    "assert_valid_request",
    "check_chat_request",
    "check_request",
    "sign_thinking",
]
