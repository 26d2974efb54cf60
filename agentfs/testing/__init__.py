"""Test support for agentfs and its users: models that need no network, fake
Anthropic and OpenAI-compatible servers for the real SDKs, and their APIs' request rules.

The names are imported when first used, so `python -m agentfs.testing.fake_openai`
(and the other runnable modules) start without their module imported twice.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

#: Where each public name lives.
_HOMES = {
    "FakeAnthropicServer": "agentfs.testing.fake_anthropic",
    "FakeOpenAIServer": "agentfs.testing.fake_openai",
    "FunctionModel": "agentfs.testing.models",
    "GitServer": "agentfs.testing.gitserver",
    "PromptCache": "agentfs.testing.fake_anthropic",
    "RecordedRequest": "agentfs.testing.fake_anthropic",
    "ReplayModel": "agentfs.models.replay",
    "ScriptedModel": "agentfs.testing.models",
    "assert_valid_chat_request": "agentfs.testing.openai_rules",
    "assert_valid_request": "agentfs.testing.api_rules",
    "check_chat_request": "agentfs.testing.openai_rules",
    "check_request": "agentfs.testing.api_rules",
    "sign_thinking": "agentfs.testing.fake_anthropic",
}

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


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
