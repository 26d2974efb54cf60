"""The fake OpenAI-compatible server with the real SDK: plain JSON answers, keys,
the request rules it enforces, and its fault injection seen from a raw client."""

from __future__ import annotations

import json

import openai
import pytest

from agentfs.testing.fake_openai import NO_SCRIPT_TEXT, FakeOpenAIServer

CALL = {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}


def client(server: FakeOpenAIServer, key: str = "k") -> openai.OpenAI:
    return openai.OpenAI(api_key=key, base_url=server.base_url, max_retries=0)


def test_a_plain_request_gets_the_scripted_answer_as_json():
    with FakeOpenAIServer() as server:
        server.enqueue({"text": "hi", "tool_calls": [{"id": "c1", "name": "read",
                                                      "input": {"path": "a"}}]})
        done = client(server).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "go"}])
        second = client(server).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "go"}])
    choice = done.choices[0]
    assert choice.message.content == "hi" and choice.finish_reason == "tool_calls"
    assert json.loads(choice.message.tool_calls[0].function.arguments) == {"path": "a"}
    assert second.choices[0].message.content == NO_SCRIPT_TEXT
    assert server.requests[0].api_key == "k"


def test_a_request_that_breaks_the_rules_gets_a_400_and_is_recorded():
    unanswered = [{"role": "user", "content": "go"},
                  {"role": "assistant", "content": None, "tool_calls": [CALL]},
                  {"role": "user", "content": "and?"}]
    with FakeOpenAIServer() as server, \
            pytest.raises(openai.BadRequestError, match="have no tool message"):
        client(server).chat.completions.create(model="m", messages=unanswered)
    assert server.violations == [("request 1: messages[2]: tool call(s) c1 of the assistant "
                                  "message before have no tool message")]


def test_without_validation_a_bad_request_is_answered_and_still_recorded():
    with FakeOpenAIServer(validate=False) as server:
        client(server).chat.completions.create(
            model="m", messages=[{"role": "tool", "tool_call_id": "x", "content": "?"}])
    assert len(server.violations) == 1


def test_a_wrong_key_gets_a_401():
    with FakeOpenAIServer(api_key="right") as server, \
            pytest.raises(openai.AuthenticationError):
        client(server, "wrong").chat.completions.create(
            model="m", messages=[{"role": "user", "content": "go"}])


def test_a_cut_stream_never_sends_a_finish_reason_and_keeps_the_answer_for_the_retry():
    with FakeOpenAIServer() as server:
        server.enqueue({"text": "one two three four five six"})
        server.cut_stream_next("text")
        body = {"model": "m", "messages": [{"role": "user", "content": "go"}], "stream": True}
        first = list(client(server).chat.completions.create(**body))
        second = list(client(server).chat.completions.create(**body))
    assert not any(c.choices and c.choices[0].finish_reason for c in first)
    assert "".join(c.choices[0].delta.content or "" for c in second if c.choices) == \
        "one two three four five six"
    assert second[-1].choices[0].finish_reason == "stop"


def test_a_429_carries_the_wait_the_client_should_honour():
    with FakeOpenAIServer() as server:
        server.fail_next(429, retry_after=1.5)
        with pytest.raises(openai.RateLimitError) as caught:
            client(server).chat.completions.create(
                model="m", messages=[{"role": "user", "content": "go"}])
    assert caught.value.response.headers["retry-after-ms"] == "1500"


def test_the_runnable_servers_start_without_a_warning_about_their_module() -> None:
    """`python -m agentfs.testing.fake_openai` (the README's command) ran the module
    after the package had imported it, which runpy warns about."""
    import subprocess
    import sys

    for module in ("agentfs.testing.fake_openai", "agentfs.testing.mcp_server"):
        done = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-m", module,
                               "--help"], capture_output=True, text=True, check=False)
        assert done.returncode == 0 and done.stderr == "", (module, done.stderr)
        assert done.stdout.startswith(f"usage: python -m {module}")
