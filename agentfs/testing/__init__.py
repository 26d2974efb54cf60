"""Test support for agentfs and its users: models that need no network, a fake
Anthropic server for the real SDK, and the Messages API's rules."""

from agentfs.models.replay import ReplayModel
from agentfs.testing.api_rules import assert_valid_request, check_request
from agentfs.testing.fake_anthropic import (
    FakeAnthropicServer,
    PromptCache,
    RecordedRequest,
    sign_thinking,
)
from agentfs.testing.gitserver import GitServer
from agentfs.testing.models import FunctionModel, ScriptedModel

__all__ = [
    "FakeAnthropicServer",
    "FunctionModel",
    "GitServer",
    "PromptCache",
    "RecordedRequest",
    "ReplayModel",
    "ScriptedModel",
    "assert_valid_request",
    "check_request",
    "sign_thinking",
]
