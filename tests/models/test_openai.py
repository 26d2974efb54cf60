"""The OpenAI-compatible provider against the fake server (the real `openai` SDK over
local HTTP): complete turns only, tool-call deltas assembled, retries reported, typed
refusals, usage, and stored messages turned into valid Chat Completions requests."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentfs.errors import ModelError
from agentfs.models.anthropic_messages import to_api_messages as anthropic_messages
from agentfs.models.base import PromptTooLong
from agentfs.models.openai import DEFAULT_BASE_URL, OpenAIModel, finish_reason
from agentfs.models.openai_messages import to_api_messages
from agentfs.models.providers import ProviderSettings, is_local_url
from agentfs.models.resolve import resolve_model
from agentfs.store.messages import Message, ToolCall
from agentfs.testing.fake_openai import FakeOpenAIServer
from agentfs.testing.openai_rules import assert_valid_chat_request, check_chat_request
from tests.models.calls import ANSWER, Sink, request


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake
        assert fake.violations == []  # every request the provider made kept the rules


def model(server: FakeOpenAIServer, retries: int = 3) -> OpenAIModel:
    return OpenAIModel("gpt-test", api_key="k", base_url=server.base_url,
                       max_retries=retries, sleep=lambda s: None)


# --- a turn is complete only once its finish_reason arrived ----------------------------


@pytest.mark.parametrize(("during", "abort"), [("text", False), ("tool_input", False),
                                               ("text", True)],
                         ids=["eof-mid-text", "eof-mid-tool-arguments", "aborted-chunk"])
def test_a_cut_stream_is_retried_and_only_the_complete_turn_returned(server, during, abort):
    server.enqueue(ANSWER)
    server.cut_stream_next(during, abort=abort)
    sink = Sink()
    response = model(server).complete(request(), sink)

    assert response.text == ANSWER["text"] and response.stop_reason == "tool_use"
    assert [c.input for c in response.tool_calls] == [ANSWER["tool_calls"][0]["input"]]
    [notice] = sink.notices()
    assert (notice.attempt, notice.attempts) == (1, 4)
    after = sink.heard[sink.heard.index(notice) + 1:]
    assert "".join(str(t) for t in after) == ANSWER["text"]  # the new attempt, from its start
    assert len(server.requests) == 2


def test_the_retry_reason_says_where_the_stream_ended(server):
    server.enqueue(ANSWER)
    server.cut_stream_next("tool_input")
    sink = Sink()
    model(server).complete(request(), sink)
    assert sink.notices()[0].reason == \
        "the stream ended before its finish_reason inside tool call read"


def test_a_stream_that_never_completes_is_an_error_after_the_retries(server):
    server.enqueue(ANSWER)
    server.cut_stream_next("text", count=3)
    sink = Sink()
    with pytest.raises(ModelError, match="still failing after 3 attempts: the stream ended "
                       "before its finish_reason inside the text") as caught:
        model(server, retries=2).complete(request(), sink)
    assert "nothing of the failed turn was saved" in caught.value.hint
    assert [n.attempt for n in sink.notices()] == [1, 2]


@pytest.mark.parametrize("fault", ["429", "500", "503", "garbage", "error-in-stream",
                                   "dropped", "dropped-mid-stream"])
def test_transient_faults_are_retried_and_reported(server, fault):
    server.enqueue(ANSWER)
    {"429": lambda: server.fail_next(429), "500": lambda: server.fail_next(500),
     "503": lambda: server.fail_next(503), "garbage": server.malformed_next,
     "error-in-stream": server.error_in_stream_next, "dropped": server.drop_next,
     "dropped-mid-stream": lambda: server.drop_next(mid_stream=True)}[fault]()
    sink = Sink()
    response = model(server).complete(request(), sink)
    assert response.tool_calls[0].input == ANSWER["tool_calls"][0]["input"]
    assert len(sink.notices()) == 1 and len(server.requests) == 2


def test_a_429_waits_as_long_as_the_server_asks(server):
    server.enqueue(ANSWER)
    server.fail_next(429, retry_after=2.5)
    waits: list[float] = []
    sink = Sink()
    OpenAIModel("gpt-test", api_key="k", base_url=server.base_url,
                sleep=waits.append).complete(request(), sink)
    assert waits == [2.5] and sink.notices()[0].wait == 2.5
    assert sink.notices()[0].reason.startswith("429 ")


def test_a_bad_key_is_reported_once_and_not_retried(server):
    server.fail_next(401)
    with pytest.raises(ModelError, match="rejected the API key") as caught:
        model(server).complete(request())
    assert "OPENAI_API_KEY" in caught.value.hint
    assert len(server.requests) == 1


def test_a_request_over_the_context_window_is_a_typed_error_and_not_retried(server):
    server.context_too_long_next()
    with pytest.raises(PromptTooLong, match="maximum context length"):
        model(server).complete(request())
    assert len(server.requests) == 1


def test_a_wrong_base_url_says_what_to_check(server):
    wrong = OpenAIModel("gpt-test", api_key="k", base_url=server.base_url.removesuffix("/v1"),
                        max_retries=0)
    with pytest.raises(ModelError, match="404") as caught:
        wrong.complete(request())
    assert "OPENAI_BASE_URL" in caught.value.hint


# --- tool calls, stop reasons, usage ---------------------------------------------------


def test_parallel_tool_calls_are_assembled_from_their_deltas(server):
    calls = [{"id": f"call_{n}", "name": "read", "input": {"path": f"notes/{n}.md" * 5}}
             for n in range(3)]
    server.enqueue({"text": ["Reading ", "three ", "files."], "tool_calls": calls})
    streamed: list[str] = []
    response = model(server).complete(request(), streamed.append)
    assert streamed == ["Reading ", "three ", "files."]
    assert [(c.id, c.name, c.input) for c in response.tool_calls] == \
        [(c["id"], c["name"], c["input"]) for c in calls]
    assert response.stop_reason == "tool_use"


def test_a_call_cut_at_max_tokens_is_named_and_not_retried(server):
    server.enqueue({**ANSWER, "max_tokens_during": "tool_input"})
    response = model(server).complete(request())
    assert response.stop_reason == "max_tokens"
    assert response.cut_call() is response.tool_calls[-1]
    assert len(server.requests) == 1


def test_arguments_that_are_not_json_are_a_garbled_answer_and_retried(server):
    # a turn that ends normally (finish_reason tool_calls) with half of its arguments
    server.enqueue({**ANSWER, "max_tokens_during": "tool_input", "finish_reason": "tool_calls"},
                   ANSWER)
    sink = Sink()
    response = model(server).complete(request(), sink)
    assert "are not JSON" in sink.notices()[0].reason
    assert response.tool_calls[0].input == ANSWER["tool_calls"][0]["input"]


@pytest.mark.parametrize(("given", "expected"), [("stop", "end_turn"), ("tool_calls", "tool_use"),
                                                 ("length", "max_tokens"),
                                                 ("content_filter", "end_turn"),
                                                 (None, "end_turn")])
def test_finish_reasons_map_to_agentfs_stop_reasons(given, expected):
    assert finish_reason(given) == expected


def test_a_server_that_says_stop_after_tool_calls_still_gets_them_run(server):
    server.enqueue({**ANSWER, "finish_reason": "stop"})
    assert model(server).complete(request()).stop_reason == "tool_use"


def test_usage_keeps_cached_tokens_apart_from_the_input(server):
    server.enqueue({"text": "first"}, {"text": "second"})
    first = model(server).complete(request())
    again = request(Message(id="m2", sequence=2, role="user", content="What do the notes say?"),
                    Message(id="m3", sequence=3, role="assistant", content="first"),
                    Message(id="m4", sequence=4, role="user", content="And then?"))
    second = model(server).complete(again)
    assert first.usage.cache_read_input_tokens == 0 and first.usage.input_tokens > 0
    assert second.usage.cache_read_input_tokens >= first.usage.input_tokens
    assert second.usage.output_tokens > 0
    prompt = server.requests[-1].body
    assert prompt["stream_options"] == {"include_usage": True}


def test_openai_itself_is_sent_max_completion_tokens_and_other_servers_max_tokens(server):
    other = model(server).build_params(request())
    itself = OpenAIModel("gpt-test", api_key="k").build_params(request())
    assert other["max_tokens"] == 4096 and "max_completion_tokens" not in other
    assert itself["max_completion_tokens"] == 4096 and "max_tokens" not in itself


# --- stored messages -> Chat Completions messages --------------------------------------


def test_results_come_right_after_their_calls_even_when_a_user_message_came_between():
    call = ToolCall(id="c1", name="read", input={"path": "a"})
    messages = [
        Message(id="u", sequence=1, role="user", content="read a"),
        Message(id="a", sequence=2, role="assistant", content="", tool_calls=[call],
                thinking=[{"type": "thinking", "thinking": "hm", "signature": "s"}]),
        Message(id="i", sequence=3, role="user", content="also b, please"),
        Message(id="r", sequence=4, role="tool", content="no such file", tool_call_id="c1",
                is_error=True),
    ]
    sent = to_api_messages("sys", messages)
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "user"]
    assert sent[3] == {"role": "tool", "tool_call_id": "c1", "content": "Error: no such file"}
    assert sent[2]["content"] is None and "thinking" not in json.dumps(sent)
    assert_valid_chat_request({"model": "m", "messages": sent})


def test_what_a_provider_keeps_for_itself_is_sent_by_no_other():
    kept = {"openai": {"response_id": "chatcmpl-1"}, "anthropic": {"opaque": "x"}}
    messages = [Message(id="u", sequence=1, role="user", content="hi"),
                Message(id="a", sequence=2, role="assistant", content="hello",
                        provider_data=kept)]
    openai_body = to_api_messages("", messages)
    claude_body = anthropic_messages(messages)
    assert openai_body == [{"role": "user", "content": "hi"},
                           {"role": "assistant", "content": "hello"}]
    assert "chatcmpl-1" not in json.dumps(claude_body) and "opaque" not in json.dumps(claude_body)


def test_synthetic_calls_after_a_turn_merge_into_it():
    turn = Message(id="a", sequence=2, role="assistant", content="Reading.",
                   tool_calls=[ToolCall(id="c1", name="read", input={})])
    synthetic = Message(id="s", sequence=3, role="assistant", content="",
                        tool_calls=[ToolCall(id="c2", name="get_current_context", input={},
                                             synthetic="context")])
    results = [Message(id=f"r{n}", sequence=3 + n, role="tool", content="ok",
                       tool_call_id=f"c{n}") for n in (1, 2)]
    sent = to_api_messages("", [Message(id="u", sequence=1, role="user", content="go"),
                                turn, synthetic, *results])
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool"]
    assert [c["id"] for c in sent[1]["tool_calls"]] == ["c1", "c2"]
    assert sent[1]["content"] == "Reading."
    assert_valid_chat_request({"model": "m", "messages": sent})


def test_the_rules_checker_catches_what_servers_refuse():
    call = {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    unanswered = [{"role": "user", "content": "x"},
                  {"role": "assistant", "content": None, "tool_calls": [call]},
                  {"role": "user", "content": "y"}]
    stray = [{"role": "user", "content": "x"},
             {"role": "tool", "tool_call_id": "c9", "content": "?"}]
    bad_args = [{"role": "user", "content": "x"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {**call, "function": {"name": "read", "arguments": "{not"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    assert any("have no tool message" in p for p in check_chat_request(
        {"model": "m", "messages": unanswered}))
    assert any("must follow an assistant" in p for p in check_chat_request(
        {"model": "m", "messages": stray}))
    assert any("JSON object" in p for p in check_chat_request(
        {"model": "m", "messages": bad_args}))
    assert any("role must be" in p for p in check_chat_request(
        {"model": "m", "messages": [{"role": "robot", "content": "x"}]}))


@st.composite
def traces(draw) -> list[Message]:
    """Stored main paths as agentfs writes them: user turns, assistant turns with calls,
    their results (some with a user message arriving before them), synthetic calls."""
    out = [Message(id="u0", sequence=0, role="user", content="start")]
    for step in range(draw(st.integers(0, 6))):
        seq = len(out)
        n = draw(st.integers(0, 3))
        calls = [ToolCall(id=f"c{step}_{k}", name="read", input={"k": k}) for k in range(n)]
        out.append(Message(id=f"a{seq}", sequence=seq, role="assistant",
                           content=draw(st.sampled_from(["", "text", "  "])),
                           tool_calls=calls or None))
        if calls and draw(st.booleans()):
            out.append(Message(id=f"s{seq}", sequence=len(out), role="assistant", content="",
                               tool_calls=[ToolCall(id=f"x{step}", name="get_current_context",
                                                    synthetic="context")]))
            calls.append(out[-1].tool_calls[0])
        if calls and draw(st.booleans()):
            out.append(Message(id=f"i{seq}", sequence=len(out), role="user", content="btw"))
        for call in calls:
            out.append(Message(id=f"r{call.id}", sequence=len(out), role="tool",
                               content={"json": True} if draw(st.booleans()) else "done",
                               tool_call_id=call.id, is_error=draw(st.booleans()) or None))
        if not calls or draw(st.booleans()):
            out.append(Message(id=f"u{len(out)}", sequence=len(out), role="user", content="go"))
    return out


@settings(max_examples=150, deadline=None)
@given(traces())
def test_any_stored_trace_becomes_a_valid_chat_request(messages):
    body = {"model": "m", "messages": to_api_messages("system prompt", messages),
            "tools": [{"type": "function", "function": {"name": "read", "parameters":
                                                         {"type": "object"}}}]}
    assert check_chat_request(body) == []


# --- the provider in the registry --------------------------------------------------------


def test_openai_models_resolve_with_the_settings_the_cli_gathers(tmp_path):
    settings_ = ProviderSettings.from_environment(
        {"OPENAI_API_KEY": "sk-x", "OPENAI_BASE_URL": "https://proxy.example/v1"})
    made = resolve_model("openai:gpt-4.1", base_dir=tmp_path, settings=settings_)
    assert isinstance(made, OpenAIModel)
    assert made.name == "openai:gpt-4.1" and made.base_url == "https://proxy.example/v1"
    assert resolve_model("openai:m", base_dir=tmp_path, settings=ProviderSettings.from_environment(
        {"OPENAI_API_KEY": "sk-x"})).base_url == DEFAULT_BASE_URL


def test_a_missing_key_is_a_clear_error_unless_the_server_is_local(tmp_path):
    with pytest.raises(ModelError, match="needs OPENAI_API_KEY") as caught:
        resolve_model("openai:gpt-4.1", base_dir=tmp_path, settings=ProviderSettings())
    assert "OPENAI_BASE_URL=http://localhost:11434/v1" in caught.value.hint
    with pytest.raises(ModelError, match="OPENAI_BASE_URL is https://proxy.example/v1"):
        resolve_model("openai:m", base_dir=tmp_path, settings=ProviderSettings.from_environment(
            {"OPENAI_BASE_URL": "https://proxy.example/v1"}))
    ollama = ProviderSettings.from_environment({"OPENAI_BASE_URL": "http://localhost:11434/v1"})
    assert resolve_model("openai:llama3.2", base_dir=tmp_path, settings=ollama).name == \
        "openai:llama3.2"


@pytest.mark.parametrize(("url", "local"), [
    ("http://localhost:11434/v1", True), ("http://127.0.0.1:8000/v1", True),
    ("http://[::1]:8000/v1", True), ("http://192.168.1.20:11434/v1", True),
    ("http://10.0.0.5/v1", True), ("https://api.openai.com/v1", False),
    ("https://8.8.8.8/v1", False), ("https://localhost.example.com/v1", False), (None, False)])
def test_which_base_urls_count_as_local(url, local):
    assert is_local_url(url) is local


def test_without_the_extra_the_error_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "openai", None)  # `import openai` fails as if absent
    monkeypatch.delitem(sys.modules, "agentfs.models.openai", raising=False)
    with pytest.raises(ModelError, match="needs the openai package") as caught:
        resolve_model("openai:gpt-4.1", base_dir=tmp_path,
                      settings=ProviderSettings.from_environment({"OPENAI_API_KEY": "k"}))
    assert "agentfs-workspace[openai]" in caught.value.hint
