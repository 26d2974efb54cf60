"""Test support for agentfs and its users: a fake Anthropic server and the API's rules."""

from agentfs.testing.api_rules import assert_valid_request, check_request
from agentfs.testing.fake_anthropic import FakeAnthropicServer, PromptCache, RecordedRequest

__all__ = [
    "FakeAnthropicServer",
    "PromptCache",
    "RecordedRequest",
    "assert_valid_request",
    "check_request",
]
