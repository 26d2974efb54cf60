"""The fake Anthropic server, driven through the real `anthropic` SDK, and the API rules."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from agentfs.errors import ModelError
from agentfs.models.anthropic import AnthropicModel
from agentfs.models.base import ModelRequest, ToolSpec
from agentfs.store.messages import Message, ToolCall
from agentfs.testing import (
    FakeAnthropicServer,
    RecordedRequest,
    assert_valid_request,
    check_request,
)
from agentfs.testing.fake_anthropic import NO_SCRIPT_TEXT

MODEL = "claude-test"
HELLO = [{"role": "user", "content": "Hello"}]
READ_TOOL = {
    "name": "read",
    "description": "Read a file",
    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
}


@pytest.fixture
def server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer() as fake:
        yield fake


def make_client(server: FakeAnthropicServer, **options: Any) -> anthropic.Anthropic:
    """A real SDK client on the fake; no retries unless asked for."""
    return anthropic.Anthropic(
        api_key="test", base_url=server.base_url, **{"max_retries": 0, **options}
    )


@pytest.fixture
def client(server: FakeAnthropicServer) -> Iterator[anthropic.Anthropic]:
    with make_client(server) as sdk:
        yield sdk


def create(client: anthropic.Anthropic, **params: Any) -> Any:
    return client.messages.create(
        **{"model": MODEL, "max_tokens": 256, "messages": HELLO, **params}
    )


def stream(client: anthropic.Anthropic, **params: Any) -> tuple[list[str], Any]:
    """(text chunks, final message) of one streamed call."""
    with client.messages.stream(
        **{"model": MODEL, "max_tokens": 256, "messages": HELLO, **params}
    ) as events:
        chunks = list(events.text_stream)
        return chunks, events.get_final_message()


# --- answers ---------------------------------------------------------------------------


def test_create_returns_a_complete_message(server, client):
    server.enqueue({"text": "Hi there"})
    message = create(client)
    assert message.type == "message" and message.role == "assistant"
    assert message.id.startswith("msg_") and message.model == MODEL
    assert [(b.type, b.text) for b in message.content] == [("text", "Hi there")]
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    usage = message.usage
    assert usage.input_tokens > 0 and usage.output_tokens > 0
    assert usage.cache_creation_input_tokens == 0 and usage.cache_read_input_tokens == 0
    (request,) = server.requests
    assert isinstance(request, RecordedRequest)
    assert (request.method, request.path) == ("POST", "/v1/messages")
    assert request.api_key == "test" and "anthropic-version" in request.headers
    assert request.body["messages"] == HELLO and json.loads(request.raw) == request.body


def test_stream_yields_the_scripted_chunks_and_a_final_message(server, client):
    server.enqueue({"text": ["Hel", "lo, ", "world"], "usage": {"output_tokens": 7}})
    chunks, final = stream(client)
    assert chunks == ["Hel", "lo, ", "world"]
    assert [(b.type, b.text) for b in final.content] == [("text", "Hello, world")]
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 7 and final.usage.input_tokens > 0
    assert server.requests[0].body["stream"] is True


def test_stream_splits_plain_text_into_word_deltas(server, client):
    server.enqueue({"text": "one two three"})
    chunks, final = stream(client)
    assert len(chunks) == 3 and "".join(chunks) == "one two three"
    assert final.content[0].text == "one two three"


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
def test_tool_use_input_arrives_parsed(server, client, streaming):
    big_input = {"path": "notes/a.md", "lines": list(range(20)), "opts": {"nested": [True, None]}}
    server.enqueue(
        {
            "text": "Reading both.",
            "tool_calls": [
                {"name": "read", "input": big_input, "id": "toolu_given"},
                {"name": "read", "input": {}},
            ],
        }
    )
    params = {"tools": [READ_TOOL]}
    final = stream(client, **params)[1] if streaming else create(client, **params)
    text, first, second = final.content
    assert text.type == "text" and text.text == "Reading both."
    assert (first.type, first.id, first.name, first.input) == (
        "tool_use",
        "toolu_given",
        "read",
        big_input,
    )
    assert second.type == "tool_use" and second.id.startswith("toolu_") and second.input == {}
    assert final.stop_reason == "tool_use"


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
def test_thinking_blocks_come_with_their_signature(server, client, streaming):
    server.enqueue(
        {
            "thinking": [
                {"thinking": "Let me think it over.", "signature": "c2lnbmF0dXJl"},
                {"data": "ZW5jcnlwdGVk"},
            ],
            "text": "Done.",
        }
    )
    final = stream(client)[1] if streaming else create(client)
    thinking, redacted, text = final.content
    assert (thinking.type, thinking.thinking, thinking.signature) == (
        "thinking",
        "Let me think it over.",
        "c2lnbmF0dXJl",
    )
    assert (redacted.type, redacted.data) == ("redacted_thinking", "ZW5jcnlwdGVk")
    assert text.text == "Done."


def test_a_callable_answers_from_the_request(server, client):
    server.enqueue(lambda body: {"text": f"you said {body['messages'][-1]['content']}"})
    assert create(client).content[0].text == "you said Hello"


def test_an_empty_queue_answers_a_placeholder(server, client):
    assert create(client).content[0].text == NO_SCRIPT_TEXT


def test_raw_content_blocks_are_sent_as_given(server, client):
    server.enqueue({"content": [{"type": "text", "text": "raw"}], "stop_reason": "max_tokens"})
    chunks, final = stream(client)
    assert chunks == ["raw"] and final.stop_reason == "max_tokens"


def test_count_tokens(server, client):
    counted = client.messages.count_tokens(model=MODEL, messages=HELLO)
    assert counted.input_tokens > 0


# --- faults ----------------------------------------------------------------------------


def test_rate_limit_then_success_is_retried_by_the_sdk(server):
    server.fail_next(429)
    server.enqueue({"text": "after the wait"})
    with make_client(server, max_retries=2) as client:
        assert create(client).content[0].text == "after the wait"
    first, second = server.requests
    assert first.body == second.body


def test_rate_limit_sends_the_api_error_shape_and_retry_after(server, client):
    server.fail_next(429)
    with pytest.raises(anthropic.RateLimitError) as info:
        create(client)
    assert info.value.status_code == 429
    assert info.value.body["type"] == "error"
    assert info.value.body["error"]["type"] == "rate_limit_error"
    assert info.value.response.headers["retry-after"] == "1"
    assert info.value.response.headers["retry-after-ms"] == "10"


def test_authentication_error_is_not_retried(server):
    server.fail_next(401)
    with (
        make_client(server, max_retries=2) as client,
        pytest.raises(anthropic.AuthenticationError) as info,
    ):
        create(client)
    assert info.value.body["error"]["type"] == "authentication_error"
    assert len(server.requests) == 1


def test_wrong_api_key_gets_401():
    with FakeAnthropicServer(api_key="right") as server:
        with make_client(server) as client, pytest.raises(anthropic.AuthenticationError):
            create(client)
        with anthropic.Anthropic(api_key="right", base_url=server.base_url) as client:
            assert create(client).content[0].text == NO_SCRIPT_TEXT


@pytest.mark.parametrize("status", [500, 529])
@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
def test_server_errors_are_retried(server, status, streaming):
    server.fail_next(status)
    server.enqueue({"text": "recovered"})
    with make_client(server, max_retries=2) as client:
        final = stream(client)[1] if streaming else create(client)
    assert final.content[0].text == "recovered"
    assert len(server.requests) == 2


@pytest.mark.parametrize(
    ("status", "error", "error_type"),
    [
        (429, anthropic.RateLimitError, "rate_limit_error"),
        (500, anthropic.InternalServerError, "api_error"),
        (529, anthropic.OverloadedError, "overloaded_error"),
    ],
)
def test_retries_run_out_with_a_typed_error(server, status, error, error_type):
    server.fail_next(status, count=3)
    with make_client(server, max_retries=2) as client, pytest.raises(error) as info:
        create(client)
    assert info.value.body["error"]["type"] == error_type
    assert len(server.requests) == 3


def test_faults_are_taken_in_order_before_scripted_answers(server):
    server.enqueue({"text": "finally"})
    server.fail_next(529)
    server.fail_next(429)
    with make_client(server, max_retries=2) as client:
        assert create(client).content[0].text == "finally"
    assert len(server.requests) == 3


def raw_stream(client: anthropic.Anthropic, **params: Any) -> list[Any]:
    """Every event of one streamed call, until the body ends (however it ends)."""
    with client.messages.stream(
        **{"model": MODEL, "max_tokens": 256, "messages": HELLO, "tools": [READ_TOOL], **params}
    ) as events:
        return list(events)


LONG_ANSWER = {
    "text": "Let me read the notes before I answer you.",
    "tool_calls": [{"name": "read", "input": {"path": "notes/a.md", "lines": list(range(12))}}],
}


def test_a_stream_cut_mid_text_ends_cleanly_without_message_stop(server, client):
    server.enqueue(LONG_ANSWER)
    server.cut_stream_next("text")
    events = raw_stream(client)  # no error: the body ended properly
    types = [e.type for e in events]
    assert "message_stop" not in types and "message_delta" not in types
    text = "".join(e.text for e in events if e.type == "text")
    assert text and LONG_ANSWER["text"].startswith(text) and text != LONG_ANSWER["text"]
    assert not any(e.type == "content_block_start" and e.content_block.type == "tool_use"
                   for e in events)


def test_a_stream_cut_mid_tool_input_leaves_incomplete_json(server, client):
    server.enqueue(LONG_ANSWER)
    server.cut_stream_next("tool_input")
    events = raw_stream(client)
    assert "message_stop" not in [e.type for e in events]
    sent = "".join(e.partial_json for e in events if e.type == "input_json")
    full = json.dumps(LONG_ANSWER["tool_calls"][0]["input"])
    assert sent and full.startswith(sent) and sent != full


def events_until_failure(client: anthropic.Anthropic) -> list[Any]:
    """The events of one streamed call that arrived before the read failed; fails the
    test if the stream ends without an error. Which exception the SDK raises is its own
    choice (it changed between releases): the provider retries any failed read."""
    seen: list[Any] = []
    with (
        pytest.raises(Exception),  # noqa: B017 — the class is the SDK's, see above
        client.messages.stream(
            model=MODEL, max_tokens=256, messages=HELLO, tools=[READ_TOOL]
        ) as events,
    ):
        seen.extend(events)
    return seen


@pytest.mark.parametrize("during", ["text", "tool_input"])
def test_an_aborted_chunk_fails_the_read_after_part_of_the_answer(server, client, during):
    server.enqueue(LONG_ANSWER)
    server.cut_stream_next(during, abort=True)
    types = [e.type for e in events_until_failure(client)]
    assert "message_start" in types and "message_stop" not in types
    chunks, final = stream(client, tools=[READ_TOOL])  # the answer was left for the retry
    assert "".join(chunks) == LONG_ANSWER["text"] and final.stop_reason == "tool_use"


def test_a_cut_stream_peeks_so_the_retry_gets_the_whole_answer(server, client):
    server.enqueue(LONG_ANSWER)
    server.cut_stream_next("text")
    raw_stream(client)
    chunks, final = stream(client, tools=[READ_TOOL])
    assert "".join(chunks) == LONG_ANSWER["text"]
    assert final.stop_reason == "tool_use" and final.content[1].input["path"] == "notes/a.md"


def test_a_cut_json_answer_fails_the_call(server, client):
    server.cut_stream_next("text")
    with pytest.raises(Exception):  # noqa: B017 — half a JSON body; the class is the SDK's
        create(client)


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
def test_running_out_of_tokens_mid_text_cuts_the_text_and_drops_later_blocks(
    server, client, streaming
):
    server.enqueue({**LONG_ANSWER, "max_tokens_during": "text"})
    params = {"tools": [READ_TOOL]}
    final = stream(client, **params)[1] if streaming else create(client, **params)
    assert final.stop_reason == "max_tokens"
    (text,) = final.content
    assert LONG_ANSWER["text"].startswith(text.text) and text.text != LONG_ANSWER["text"]


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
def test_running_out_of_tokens_mid_tool_input_leaves_the_complete_keys(
    server, client, streaming
):
    server.enqueue({**LONG_ANSWER, "max_tokens_during": "tool_input"})
    params = {"tools": [READ_TOOL]}
    final = stream(client, **params)[1] if streaming else create(client, **params)
    assert final.stop_reason == "max_tokens"
    text, call = final.content
    assert text.text == LONG_ANSWER["text"]
    assert call.type == "tool_use" and call.input["path"] == "notes/a.md"
    assert call.input != LONG_ANSWER["tool_calls"][0]["input"]  # the SDK parsed part of it
    if not streaming:
        assert call.input == {"path": "notes/a.md"}


def test_prompt_too_long_is_a_400_once(server, client):
    server.prompt_too_long_next()
    with pytest.raises(anthropic.BadRequestError) as info:
        create(client)
    assert info.value.body["error"]["type"] == "invalid_request_error"
    assert info.value.body["error"]["message"].startswith("prompt is too long: ")
    assert create(client).content[0].text == NO_SCRIPT_TEXT


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
def test_a_malformed_body_fails_the_call_once(server, client, streaming):
    """Which exception is the SDK's choice; the provider retries any (see below)."""
    server.malformed_next()
    with pytest.raises(Exception):  # noqa: B017
        stream(client) if streaming else create(client)
    assert create(client).content[0].text == NO_SCRIPT_TEXT
    assert len(server.requests) == 2


@pytest.mark.parametrize("streaming", [False, True], ids=["json", "sse"])
def test_dropped_connection_raises_connection_error(server, client, streaming):
    server.drop_next()
    with pytest.raises(anthropic.APIConnectionError):
        stream(client) if streaming else create(client)


def test_dropped_connection_is_retried_by_the_sdk(server):
    server.drop_next()
    server.enqueue({"text": "second try"})
    with make_client(server, max_retries=1) as client:
        assert create(client).content[0].text == "second try"
    assert len(server.requests) == 2


def test_a_connection_cut_mid_stream_fails_the_read_not_the_request(server, client):
    """The answer started (the SDK's `stream()` returned): the failure comes while the
    events are read, where the SDK's own retries do not reach."""
    server.drop_next(mid_stream=True)
    types = [e.type for e in events_until_failure(client)]
    assert "message_start" in types and "message_stop" not in types
    assert len(server.requests) == 1


def test_broken_answers_leave_the_script_for_the_retry(server):
    server.enqueue({"text": "kept"})
    server.drop_next(mid_stream=True)
    with make_client(server, max_retries=1) as client:
        assert create(client).content[0].text == "kept"
    assert len(server.requests) == 2


def test_a_json_body_cut_by_the_connection_fails_the_call(server, client):
    server.drop_next(mid_stream=True)
    with pytest.raises(Exception):  # noqa: B017 — the class is the SDK's
        create(client)


def test_error_event_mid_stream_is_not_retried(server):
    server.error_in_stream_next(529)
    with (
        make_client(server, max_retries=2) as client,
        pytest.raises(anthropic.APIError) as info,
    ):
        stream(client)
    # the error's type is in its body: what the provider looks at to retry it
    assert info.value.body["error"]["type"] == "overloaded_error"
    assert len(server.requests) == 1


def test_slow_answer_trips_the_client_timeout(server):
    server.delay_next(30)
    with make_client(server, timeout=0.3) as client, pytest.raises(anthropic.APITimeoutError):
        create(client)
    server.wait_for_requests(1)


def test_slow_answer_still_arrives_within_the_timeout(server, client):
    server.delay_next(0.05)
    server.enqueue({"text": "late"})
    assert stream(client)[0] == ["late"]


def test_invalid_request_gets_a_400_naming_the_rule(server, client):
    with pytest.raises(anthropic.BadRequestError) as info:
        create(client, messages=[{"role": "assistant", "content": "first"}])
    assert "first message must have role 'user'" in info.value.body["error"]["message"]


def test_validation_can_be_turned_off():
    with FakeAnthropicServer(validate=False) as server, make_client(server) as sdk:
        server.enqueue({"text": "fine"})
        assert (
            create(sdk, messages=[{"role": "assistant", "content": "x"}]).content[0].text == "fine"
        )


# --- prompt cache simulation -----------------------------------------------------------


def cached_system(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]


def test_second_request_sharing_a_prefix_reads_the_cache(server, client):
    system = cached_system("You are a careful agent. " * 100)
    first = create(client, system=system).usage
    assert first.cache_creation_input_tokens > 600 and first.cache_read_input_tokens == 0
    turn = [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi"},
        {
            "role": "user",
            "content": [{"type": "text", "text": "More", "cache_control": {"type": "ephemeral"}}],
        },
    ]
    second = create(client, system=system, messages=turn).usage
    assert second.cache_read_input_tokens == first.cache_creation_input_tokens
    assert 0 < second.cache_creation_input_tokens < first.cache_creation_input_tokens
    third = create(client, system=cached_system("Another prompt. " * 100)).usage
    assert third.cache_read_input_tokens == 0


def test_cache_lookback_is_limited_to_20_blocks(server, client):
    def turns(count: int) -> list[dict[str, Any]]:
        return [
            m
            for k in range(count)
            for m in (
                {"role": "user", "content": f"question {k}"},
                {"role": "assistant", "content": f"answer {k}"},
            )
        ]

    def go_on(cached: bool) -> dict[str, Any]:
        block = {**text("go on"), **({"cache_control": CACHE} if cached else {})}
        return {"role": "user", "content": [block]}

    reply = {"role": "assistant", "content": "ok"}
    first = create(client, messages=turns(1) + [go_on(True)]).usage
    # 22 blocks after the first request's breakpoint: beyond the lookback window
    far = create(client, messages=turns(1) + [go_on(False), reply] + turns(10) + [go_on(True)])
    assert far.usage.cache_read_input_tokens == 0
    near = create(client, messages=turns(1) + [go_on(False), reply, go_on(True)])
    assert near.usage.cache_read_input_tokens == first.cache_creation_input_tokens > 0


# --- check_request ---------------------------------------------------------------------


def body(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 100, "messages": messages, **extra}


def use(*ids: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": i, "name": "read", "input": {}} for i in ids],
    }


def result(use_id: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": use_id, "content": "ok"}


def text(value: str = "go") -> dict[str, Any]:
    return {"type": "text", "text": value}


CACHE = {"type": "ephemeral"}
SIGNED = {"type": "thinking", "thinking": "hmm", "signature": "sig"}

VALID = {
    "plain": body(HELLO),
    "prefill": body(HELLO + [{"role": "assistant", "content": ""}]),
    "parallel tools": body(
        [
            {"role": "user", "content": "go"},
            use("a", "b"),
            {"role": "user", "content": [result("a"), result("b"), text("and then")]},
            {"role": "assistant", "content": "done"},
            {"role": "user", "content": "thanks"},
        ],
        tools=[READ_TOOL],
    ),
    "thinking": body(
        [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": [SIGNED, {"type": "redacted_thinking", "data": "x"}, text("ok")],
            },
            {"role": "user", "content": "more"},
        ]
    ),
    "four breakpoints": body(
        [
            {"role": "user", "content": [{**text(), "cache_control": CACHE}]},
            {"role": "assistant", "content": [{**text("a"), "cache_control": CACHE}]},
            {"role": "user", "content": [{**text(), "cache_control": CACHE}]},
        ],
        system=[{"type": "text", "text": "sys", "cache_control": CACHE}],
    ),
}


@pytest.mark.parametrize("name", VALID)
def test_check_request_accepts_valid_bodies(name):
    assert check_request(VALID[name]) == []
    assert_valid_request(VALID[name])


INVALID = {
    "starts with assistant": (
        body([{"role": "assistant", "content": "hi"}, {"role": "user", "content": "x"}]),
        "first message must have role 'user'",
    ),
    "roles do not alternate": (
        body([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]),
        "roles must alternate",
    ),
    "unknown role": (body([{"role": "system", "content": "a"}]), "role must be"),
    "no messages": (body([]), "non-empty list"),
    "unanswered tool_use": (
        body(
            [
                {"role": "user", "content": "go"},
                use("a", "b"),
                {"role": "user", "content": [result("a")]},
            ],
            tools=[READ_TOOL],
        ),
        "tool_use 'b' not answered",
    ),
    "tool_use at the end": (
        body([{"role": "user", "content": "go"}, use("a")], tools=[READ_TOOL]),
        "no user message follows",
    ),
    "result after text": (
        body(
            [
                {"role": "user", "content": "go"},
                use("a"),
                {"role": "user", "content": [text(), result("a")]},
            ],
            tools=[READ_TOOL],
        ),
        "must come before any other block",
    ),
    "parallel results split": (
        body(
            [
                {"role": "user", "content": "go"},
                use("a", "b"),
                {"role": "user", "content": [result("a")]},
                {"role": "assistant", "content": "wait"},
                {"role": "user", "content": [result("b")]},
            ],
            tools=[READ_TOOL],
        ),
        "tool_result for 'b' has no matching tool_use",
    ),
    "result without tool_use": (
        body([{"role": "user", "content": [result("zzz")]}], tools=[READ_TOOL]),
        "has no matching tool_use",
    ),
    "duplicate result": (
        body(
            [
                {"role": "user", "content": "go"},
                use("a"),
                {"role": "user", "content": [result("a"), result("a")]},
            ],
            tools=[READ_TOOL],
        ),
        "duplicate tool_result for 'a'",
    ),
    "duplicate tool_use id": (
        body(
            [
                {"role": "user", "content": "go"},
                use("a"),
                {"role": "user", "content": [result("a")]},
                use("a"),
                {"role": "user", "content": [result("a")]},
            ],
            tools=[READ_TOOL],
        ),
        "is used twice",
    ),
    "tool blocks without tools": (
        body(
            [
                {"role": "user", "content": "go"},
                use("a"),
                {"role": "user", "content": [result("a")]},
            ]
        ),
        "no tools are defined",
    ),
    "five breakpoints": (
        body(
            [{"role": "user", "content": [{**text(), "cache_control": CACHE}] * 3}],
            system=[{"type": "text", "text": "s", "cache_control": CACHE}],
            tools=[{**READ_TOOL, "cache_control": CACHE}],
        ),
        "5 cache_control breakpoints",
    ),
    "empty text block": (body([{"role": "user", "content": [text(" ")]}]), "non-whitespace"),
    "empty content": (body([{"role": "user", "content": ""}]), "content is empty"),
    "empty system block": (body(HELLO, system=[{"type": "text", "text": ""}]), "system[0]"),
    "thinking in a user message": (
        body([{"role": "user", "content": [SIGNED, text()]}]),
        "may only appear in assistant messages",
    ),
    "thinking without signature": (
        body(
            [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm"}, text()]},
                {"role": "user", "content": "more"},
            ]
        ),
        "without its signature",
    ),
    "missing max_tokens": ({"model": MODEL, "messages": HELLO}, "'max_tokens'"),
}


@pytest.mark.parametrize("name", INVALID)
def test_check_request_names_each_violation(name):
    request, expected = INVALID[name]
    problems = check_request(request)
    assert any(expected in p for p in problems), problems
    with pytest.raises(AssertionError, match="invalid Messages API request"):
        assert_valid_request(request)


# --- agentfs's provider against the fake -----------------------------------------------


def stored_conversation() -> list[Message]:
    return [
        Message(id="m1", sequence=1, role="user", content="Read a.md and b.md"),
        Message(
            id="m2",
            sequence=2,
            parent_sequence=1,
            role="assistant",
            content="Reading.",
            thinking=[{"type": "thinking", "thinking": "Two files.", "signature": "sig-1"}],
            tool_calls=[
                ToolCall(id="toolu_a", name="read", input={"path": "a.md"}),
                ToolCall(id="toolu_b", name="read", input={"path": "b.md"}),
            ],
        ),
        Message(
            id="m3",
            sequence=3,
            parent_sequence=2,
            role="tool",
            content="alpha",
            tool_call_id="toolu_a",
        ),
        Message(
            id="m4",
            sequence=4,
            parent_sequence=3,
            role="tool",
            content="",
            tool_call_id="toolu_b",
            is_error=True,
        ),
        Message(id="m5", sequence=5, parent_sequence=4, role="user", content="Summarise them."),
    ]


def model_request(messages: list[Message]) -> ModelRequest:
    return ModelRequest(
        system="You are a careful agent. " * 50,
        messages=messages,
        tools=[ToolSpec(READ_TOOL["name"], READ_TOOL["description"], READ_TOOL["input_schema"])],
    )


def test_provider_sends_a_valid_request_and_streams_text(server):
    server.enqueue(
        {
            "text": ["Both ", "files ", "read."],
            "thinking": [{"thinking": "ok", "signature": "s2"}],
            "tool_calls": [{"name": "read", "input": {"path": "c.md"}, "id": "toolu_c"}],
        },
        {"text": "Next."},
    )
    model = AnthropicModel(MODEL, api_key="k", base_url=server.base_url, max_retries=0)
    streamed: list[str] = []
    messages = stored_conversation()
    response = model.complete(model_request(messages), on_text=streamed.append)

    assert streamed == ["Both ", "files ", "read."]
    assert response.text == "Both files read." and response.stop_reason == "tool_use"
    assert [(c.id, c.name, c.input) for c in response.tool_calls] == [
        ("toolu_c", "read", {"path": "c.md"})
    ]
    assert response.thinking == [{"type": "thinking", "thinking": "ok", "signature": "s2"}]
    assert response.usage is not None and response.usage.cache_creation_input_tokens > 0

    (request,) = server.requests
    assert request.body["stream"] is True and request.api_key == "k"
    assert_valid_request(request.body)
    sent = request.body["messages"]
    assert sent[1]["content"][0] == {
        "type": "thinking",
        "thinking": "Two files.",
        "signature": "sig-1",
    }
    assert [b["type"] for b in sent[2]["content"]] == ["tool_result", "tool_result", "text"]

    messages += [
        Message(
            id="m6",
            sequence=6,
            role="assistant",
            content=response.text,
            tool_calls=response.tool_calls,
            thinking=response.thinking,
        ),
        Message(id="m7", sequence=7, role="tool", content="gamma", tool_call_id="toolu_c"),
    ]
    second = model.complete(model_request(messages))
    assert_valid_request(server.requests[1].body)
    assert second.usage is not None
    # four new blocks since the last breakpoint: the whole earlier request is read from cache
    assert second.usage.cache_read_input_tokens == response.usage.cache_creation_input_tokens


def test_provider_turns_sdk_errors_into_model_errors(server):
    model = AnthropicModel(MODEL, api_key="k", base_url=server.base_url, max_retries=1)
    server.fail_next(401)
    with pytest.raises(ModelError, match="401"):
        model.complete(model_request(stored_conversation()))
    server.fail_next(529, count=2)
    with pytest.raises(ModelError, match="529"):
        model.complete(model_request(stored_conversation()))
    assert len(server.requests) == 3


def test_provider_reports_a_malformed_stream_as_a_model_error(server):
    server.malformed_next()
    model = AnthropicModel(MODEL, api_key="k", base_url=server.base_url, max_retries=0)
    with pytest.raises(ModelError):
        model.complete(model_request(stored_conversation()))


def test_provider_reports_a_cut_stream_as_a_model_error(server):
    server.drop_next(mid_stream=True)
    model = AnthropicModel(MODEL, api_key="k", base_url=server.base_url, max_retries=0)
    with pytest.raises(ModelError):
        model.complete(model_request(stored_conversation()))


def test_provider_retries_a_malformed_or_cut_stream(server):
    server.malformed_next()
    server.drop_next(mid_stream=True)
    server.enqueue({"text": "recovered"})
    model = AnthropicModel(MODEL, api_key="k", base_url=server.base_url, max_retries=2,
                           sleep=lambda s: None)
    assert model.complete(model_request(stored_conversation())).text == "recovered"


def test_provider_retries_an_overloaded_stream(server):
    server.error_in_stream_next(529)
    server.enqueue({"text": "recovered"})
    model = AnthropicModel(MODEL, api_key="k", base_url=server.base_url, max_retries=2)
    assert model.complete(model_request(stored_conversation())).text == "recovered"
