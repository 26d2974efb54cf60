"""The fake server's extended thinking: signed blocks, and the checks of what comes back."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from agentfs.testing import FakeAnthropicServer, check_request
from agentfs.testing.fake_anthropic import sign_thinking

THINKING = {"type": "enabled", "budget_tokens": 1024}
READ_TOOL = {"name": "read", "description": "Read a file", "input_schema": {"type": "object"}}


@pytest.fixture
def server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer() as fake:
        yield fake


@pytest.fixture
def client(server: FakeAnthropicServer) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(api_key="k", base_url=server.base_url, max_retries=0) as sdk:
        yield sdk


def ask(client: anthropic.Anthropic, messages: list[dict[str, Any]], *, stream: bool = False,
        tools: list[dict[str, Any]] | None = None, **extra: Any) -> list[dict[str, Any]]:
    """One call with thinking on; the answer's content blocks as dicts."""
    params = {"model": "claude-test", "max_tokens": 2048, "messages": messages,
              "tools": tools or [READ_TOOL], "thinking": THINKING, **extra}
    if stream:
        with client.messages.stream(**params) as events:
            final = events.get_final_message()
    else:
        final = client.messages.create(**params)
    return [b.model_dump(exclude_none=True) for b in final.content]


def first_turn(server: FakeAnthropicServer, client: anthropic.Anthropic,
               tools: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """A user message, then the assistant turn (thinking + a tool call) and its result."""
    server.enqueue({"tool_calls": [{"id": "toolu_1", "name": "read", "input": {}}]})
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Read it."}]
    answer = ask(client, messages, tools=tools)
    return messages + [
        {"role": "assistant", "content": answer},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": "text"}]},
    ]


@pytest.mark.parametrize("stream", [False, True])
def test_a_request_with_thinking_gets_a_signed_thinking_block_first(server, client, stream):
    server.enqueue({"text": "Hello."})
    thought, text = ask(client, [{"role": "user", "content": "Hi"}], stream=stream)
    assert thought["type"] == "thinking" and thought["thinking"]
    assert thought["signature"] == sign_thinking(thought["thinking"])
    assert text == {"type": "text", "text": "Hello."}


def test_scripted_thinking_without_a_signature_is_signed(server, client):
    server.enqueue({"thinking": [{"thinking": "Mine."}], "text": "ok"})
    thought, _ = ask(client, [{"role": "user", "content": "Hi"}])
    assert thought == {"type": "thinking", "thinking": "Mine.", "signature": sign_thinking("Mine.")}


def test_a_request_without_thinking_gets_none(server, client):
    server.enqueue({"text": "Hello."})
    final = client.messages.create(model="claude-test", max_tokens=100,
                                   messages=[{"role": "user", "content": "Hi"}])
    assert [b.type for b in final.content] == ["text"]


def test_blocks_sent_back_as_issued_after_the_same_prefix_pass(server, client):
    messages = first_turn(server, client)
    server.enqueue({"text": "Done."})
    ask(client, messages)
    assert server.thinking_violations == []


def test_a_changed_thinking_text_is_recorded(server, client):
    messages = first_turn(server, client)
    messages[1]["content"][0]["thinking"] += " (edited)"
    server.enqueue({"text": "Done."})
    ask(client, messages)  # recorded, not refused: the server is not strict
    [problem] = server.thinking_violations
    assert problem.startswith("request 2: messages[1].content[0]: a thinking block this server "
                              "never issued")


def test_a_changed_tool_description_in_front_of_a_thinking_block_is_recorded(server, client):
    messages = first_turn(server, client)
    server.enqueue({"text": "Done."})
    ask(client, messages, tools=[{**READ_TOOL, "description": "Read a file (now listing more)"}])
    [problem] = server.thinking_violations
    assert "messages[1].content[0]: the request in front of this thinking block is not the " \
        "one it was issued after: tools[0] changed" in problem


def test_a_turn_left_out_in_front_of_a_thinking_block_is_recorded(server, client):
    messages = first_turn(server, client)
    server.enqueue({"tool_calls": [{"id": "toolu_2", "name": "read", "input": {}}]})
    second = ask(client, messages)
    later = [{"role": "user", "content": "Read it."}, {"role": "assistant", "content": second},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2",
                                           "content": "text"}]}]
    server.enqueue({"text": "Done."})
    ask(client, later)  # the first turn and its result were dropped from the middle
    assert server.thinking_violations == [
        ("request 3: messages[1].content[0]: the request in front of this thinking block is not "
        "the one it was issued after: 3 block(s) it came after were left out, from "
        "messages[1].content[0] on")]


def test_a_strict_server_refuses_a_violation_with_a_400():
    with FakeAnthropicServer(strict_thinking=True) as server, anthropic.Anthropic(
            api_key="k", base_url=server.base_url, max_retries=0) as client:
        messages = first_turn(server, client)
        messages[1]["content"][0]["signature"] = "forged"
        with pytest.raises(anthropic.BadRequestError, match="never issued"):
            ask(client, messages)
        assert len(server.thinking_violations) == 1


# --- the Messages API's thinking rules ------------------------------------------------------


def body(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 4096, "messages": messages, "tools": [READ_TOOL],
            **extra}


SIGNED = {"type": "thinking", "thinking": "hmm", "signature": "sig"}
USE = {"type": "tool_use", "id": "a", "name": "read", "input": {}}
RESULT = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "x"}]}
GO = {"role": "user", "content": "go"}


def test_with_thinking_the_final_turn_of_a_tool_loop_must_start_with_thinking():
    without = body([GO, {"role": "assistant", "content": [USE]}, RESULT], thinking=THINKING)
    assert any("must start with a thinking block" in p for p in check_request(without))
    assert check_request({**without, "thinking": {"type": "disabled"}}) == []
    with_it = body([GO, {"role": "assistant", "content": [SIGNED, USE]}, RESULT],
                   thinking=THINKING)
    assert check_request(with_it) == []
    earlier_turn = body([GO, {"role": "assistant", "content": [USE]}, RESULT,
                         {"role": "assistant", "content": "done"}, GO], thinking=THINKING)
    assert check_request(earlier_turn) == []


@pytest.mark.parametrize(("budget", "problem"), [(1000, ">= 1024"), (4096, "less than max_tokens")])
def test_the_thinking_budget_is_checked(budget, problem):
    request = body([GO], thinking={"type": "enabled", "budget_tokens": budget})
    assert any(problem in p for p in check_request(request))


def test_thinking_blocks_come_first_in_an_assistant_message():
    request = body([GO, {"role": "assistant", "content": [{"type": "text", "text": "hi"},
                                                          SIGNED]}, GO])
    assert any("must start with one" in p for p in check_request(request))
