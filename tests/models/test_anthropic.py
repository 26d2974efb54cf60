"""The Anthropic provider against the fake server: complete turns only, retries reported,
typed refusals, and assistant turns sent back block by block."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentfs.errors import ModelError
from agentfs.models.anthropic import AnthropicModel, thinking_param
from agentfs.models.anthropic_messages import assistant_blocks, block_layout, to_api_messages
from agentfs.models.base import ModelRequest, ModelResponse, PromptTooLong, RetryNotice
from agentfs.store.messages import Message, ToolCall, parse_message, render_message
from agentfs.testing import FakeAnthropicServer, assert_valid_request
from tests.models.calls import ANSWER, Sink, request


@pytest.fixture
def server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer() as fake:
        yield fake


def model(server: FakeAnthropicServer, retries: int = 3) -> AnthropicModel:
    return AnthropicModel("claude-test", api_key="k", base_url=server.base_url,
                          max_retries=retries, sleep=lambda s: None)


# --- a turn is complete only at message_stop ---------------------------------------------


@pytest.mark.parametrize(("during", "abort"), [("text", False), ("tool_input", False),
                                               ("text", True)],
                         ids=["eof-mid-text", "eof-mid-tool-input", "aborted-chunk"])
def test_a_cut_stream_is_retried_and_only_the_complete_turn_returned(server, during, abort):
    server.enqueue(ANSWER)
    server.cut_stream_next(during, abort=abort)
    sink = Sink()
    response = model(server).complete(request(), sink)

    assert response.text == ANSWER["text"] and response.stop_reason == "tool_use"
    assert [c.input for c in response.tool_calls] == [ANSWER["tool_calls"][0]["input"]]
    notices = [h for h in sink.heard if isinstance(h, RetryNotice)]
    assert len(notices) == 1 and (notices[0].attempt, notices[0].attempts) == (1, 4)
    after = sink.heard[sink.heard.index(notices[0]) + 1:]
    assert "".join(str(t) for t in after) == ANSWER["text"]  # the new attempt, from its start
    assert len(server.requests) == 2


def test_the_retry_reason_says_where_the_stream_ended(server):
    server.enqueue(ANSWER)
    server.cut_stream_next("tool_input")
    sink = Sink()
    model(server).complete(request(), sink)
    (notice,) = [h for h in sink.heard if isinstance(h, RetryNotice)]
    assert notice.reason == "the stream ended before message_stop inside a tool_use block"


def test_a_stream_that_never_completes_is_an_error_after_the_retries(server):
    server.enqueue(ANSWER)
    server.cut_stream_next("text", count=3)
    sink = Sink()
    with pytest.raises(ModelError, match="after 3 attempts: the stream ended before "
                       "message_stop") as info:
        model(server, retries=2).complete(request(), sink)
    assert "nothing of the failed turn was saved" in str(info.value)
    assert [h.attempt for h in sink.heard if isinstance(h, RetryNotice)] == [1, 2]
    assert len(server.requests) == 3


def test_a_plain_callable_sink_still_gets_the_text(server):
    server.enqueue({"text": "fine"})
    server.fail_next(529)
    streamed: list[str] = []
    assert model(server).complete(request(), streamed.append).text == "fine"
    assert streamed == ["fine"]


# --- max_tokens ----------------------------------------------------------------------------


def test_max_tokens_mid_tool_input_names_the_cut_call(server):
    server.enqueue({**ANSWER, "max_tokens_during": "tool_input"})
    response = model(server).complete(request())
    assert response.stop_reason == "max_tokens"
    cut = response.cut_call()
    assert cut is not None and cut.name == "read" and cut.id == response.tool_calls[-1].id


def test_max_tokens_mid_text_cuts_no_call(server):
    server.enqueue({**ANSWER, "max_tokens_during": "text"})
    response = model(server).complete(request())
    assert response.stop_reason == "max_tokens" and response.tool_calls == []
    assert response.cut_call() is None
    assert ANSWER["text"].startswith(response.text) and response.text != ANSWER["text"]


def test_only_the_last_block_is_cut():
    calls = [ToolCall(id="a", name="read"), ToolCall(id="b", name="read")]
    ended_in_text = ModelResponse(text="xy", tool_calls=calls, stop_reason="max_tokens",
                                  blocks=[{"tool_use": "a"}, {"tool_use": "b"}, {"text": 2}])
    assert ended_in_text.cut_call() is None
    assert ModelResponse(tool_calls=calls, stop_reason="max_tokens").cut_call() is calls[1]
    assert ModelResponse(tool_calls=calls, stop_reason="tool_use").cut_call() is None


# --- refusals -------------------------------------------------------------------------------


@pytest.mark.parametrize("fault", ["prompt_too_long", "413"])
def test_a_too_long_request_is_a_typed_error_and_not_retried(server, fault):
    if fault == "413":
        server.fail_next(413)
    else:
        server.prompt_too_long_next()
    with pytest.raises(PromptTooLong) as info:
        model(server).complete(request())
    assert isinstance(info.value, ModelError)
    assert "agentfs compress" in str(info.value)
    assert len(server.requests) == 1


def test_other_400s_are_plain_model_errors(server):
    server.fail_next(400)
    with pytest.raises(ModelError) as info:
        model(server).complete(request())
    assert not isinstance(info.value, PromptTooLong)


# --- block order ----------------------------------------------------------------------------


TEXT_AFTER_TOOL_USE = [
    {"type": "text", "text": "First I read a."},
    {"type": "tool_use", "id": "toolu_a", "name": "read", "input": {"path": "a.md"}},
    {"type": "text", "text": "Then, b."},
    {"type": "tool_use", "id": "toolu_b", "name": "read", "input": {"path": "b.md"}},
]


def stored(response: ModelResponse, sequence: int = 3) -> Message:
    """The assistant message the runner stores for `response`, read back from its bytes."""
    message = Message(
        id=f"m{sequence}", sequence=sequence, parent_sequence=sequence - 1, role="assistant",
        content=response.text, tool_calls=response.tool_calls or None,
        thinking=response.thinking, stop_reason=response.stop_reason,
        **({"blocks": response.blocks} if response.blocks else {}),
    )
    data = render_message(message)
    path = Path(message.file_name())
    again = parse_message(path, data)
    assert render_message(again) == data  # byte-identical round trip
    return again


def test_text_after_tool_use_goes_back_block_by_block(server):
    server.enqueue({"content": TEXT_AFTER_TOOL_USE}, {"text": "Done."})
    ai = model(server)
    response = ai.complete(request())
    assert response.text == "First I read a.Then, b."
    assert response.blocks == [{"text": 15}, {"tool_use": "toolu_a"}, {"text": 8},
                               {"tool_use": "toolu_b"}]
    assistant = stored(response)
    results = [Message(id=f"r{i}", sequence=4 + i, role="tool", content="ok", tool_call_id=c)
               for i, c in enumerate(["toolu_a", "toolu_b"])]
    ai.complete(request(Message(id="m2", sequence=2, role="user", content="Read them."),
                        assistant, *results))

    sent = server.requests[1].body["messages"][1]["content"]
    assert [{k: v for k, v in b.items() if k != "cache_control"} for b in sent] \
        == TEXT_AFTER_TOOL_USE
    assert_valid_request(server.requests[1].body)


def test_the_default_order_stores_no_layout(server):
    server.enqueue({"text": "Reading.", "thinking": [{"thinking": "hm", "signature": "s"}],
                    "tool_calls": [{"name": "read", "input": {}}]})
    response = model(server).complete(request())
    assert response.blocks is None
    assert "blocks" not in render_message(stored(response)).decode()


def test_a_layout_that_no_longer_fits_is_ignored():
    calls = [ToolCall(id="a", name="read")]
    layout = [{"text": 3}, {"tool_use": "a"}, {"text": 3}]
    message = Message(id="m", sequence=3, role="assistant", content="onetwo",
                      tool_calls=calls, blocks=layout)
    assert [b["type"] for b in assistant_blocks(message)] == ["text", "tool_use", "text"]
    edited = message.model_copy(update={"content": "one, two"})  # a person's edit wins
    assert [b.get("text") for b in assistant_blocks(edited)] == ["one, two", None]
    for broken in ([{"text": 3}, {"tool_use": "zz"}, {"text": 3}], [{"text": "3"}],
                   [{"text": 6, "tool_use": "a"}], "text: 6", [{"text": True}]):
        odd = message.model_copy(update={"blocks": broken})
        assert [b["type"] for b in assistant_blocks(odd)] == ["text", "tool_use"]


def test_synthetic_calls_follow_the_layout():
    calls = [ToolCall(id="a", name="read"),
             ToolCall(id="ctx", name="get_current_context", synthetic="context")]
    message = Message(id="m", sequence=3, role="assistant", content="xy", tool_calls=calls,
                      blocks=[{"text": 1}, {"tool_use": "a"}, {"text": 1}])
    assert [b.get("id") or b["text"] for b in assistant_blocks(message)] == ["x", "a", "y", "ctx"]


@st.composite
def turns(draw: Any) -> list[dict[str, Any]]:
    kinds = draw(st.lists(st.sampled_from(["text", "tool_use", "thinking", "redacted"]),
                          min_size=1, max_size=7))
    words = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")),
                    min_size=1, max_size=12)
    blocks: list[dict[str, Any]] = []
    for n, kind in enumerate(kinds):
        if kind == "text":
            blocks.append({"type": "text", "text": draw(words | st.just(" \n"))})
        elif kind == "tool_use":
            blocks.append({"type": "tool_use", "id": f"toolu_{n}", "name": "read",
                           "input": {"path": draw(words)}})
        elif kind == "thinking":
            blocks.append({"type": "thinking", "thinking": draw(words), "signature": f"s{n}"})
        else:
            blocks.append({"type": "redacted_thinking", "data": f"d{n}"})
    return blocks


@settings(max_examples=200, deadline=None)
@given(turns())
def test_any_turn_goes_back_exactly_as_received(received):
    text = "".join(b["text"] for b in received if b["type"] == "text")
    calls = [ToolCall(id=b["id"], name=b["name"], input=b["input"])
             for b in received if b["type"] == "tool_use"]
    thinking = [b for b in received if b["type"] in ("thinking", "redacted_thinking")]
    response = ModelResponse(text=text, tool_calls=calls, thinking=thinking or None,
                             blocks=block_layout(received, text, calls, thinking))
    message = stored(response)
    expected = [b for b in received if b["type"] != "text" or b["text"].strip()]
    assert assistant_blocks(message) == (expected or [{"type": "text", "text": "(empty)"}])
    conversation = [Message(id="u", sequence=2, role="user", content="go"), message]
    assert to_api_messages(conversation)[1]["content"] == assistant_blocks(message)


# --- extended thinking --------------------------------------------------------------------


def test_a_thinking_budget_asks_for_thinking(server):
    thinking = ModelRequest(system="s", messages=request().messages, thinking_budget=2048)
    params = model(server).build_params(thinking)
    assert params["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert "thinking" not in model(server).build_params(request())


def test_a_tool_loop_that_began_without_thinking_goes_on_without_it():
    use = {"type": "tool_use", "id": "a", "name": "read", "input": {}}
    results = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a",
                                            "content": "x"}]}
    go = {"role": "user", "content": [{"type": "text", "text": "go"}]}
    thought = {"type": "thinking", "thinking": "hm", "signature": "s"}
    assert thinking_param(1024, [go]) == {"type": "enabled", "budget_tokens": 1024}
    assert thinking_param(1024, [go, {"role": "assistant", "content": [use]}, results]) is None
    assert thinking_param(1024, [go, {"role": "assistant", "content": [thought, use]},
                                 results]) is not None
    assert thinking_param(None, [go]) is None
