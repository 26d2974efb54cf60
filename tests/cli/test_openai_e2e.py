"""The OpenAI-compatible provider end to end: the real `openai` SDK against agentfs' fake
OpenAI server, runs that switch provider, and faults that must never become a saved turn."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentfs.core.runner import Runner
from agentfs.models.openai import OpenAIModel
from agentfs.testing import FakeAnthropicServer, assert_valid_request
from agentfs.testing.fake_openai import FakeOpenAIServer, main
from tests.conftest import assert_git_clean, git, message_paths, run_cli, user

STEPS = 4


def written(body: dict[str, Any]) -> int:
    """How many write_file calls the conversation holds, in either API's form."""
    count = 0
    for message in body["messages"]:
        if message["role"] != "assistant":
            continue
        if isinstance(message.get("content"), list):  # Messages API blocks
            count += sum(1 for b in message["content"]
                         if b.get("type") == "tool_use" and b["name"] == "write_file")
        count += sum(1 for c in message.get("tool_calls") or []
                     if c["function"]["name"] == "write_file")
    return count


def answer(body: dict[str, Any]) -> dict[str, Any]:
    """A deterministic model for both fakes: one file write per turn, then a last word."""
    done = written(body)
    last = body["messages"][-1]
    content = last["content"]
    asked = content if isinstance(content, str) else " ".join(
        b.get("text", "") for b in content if isinstance(b, dict))
    if done % STEPS == 0 and done and "more" not in asked or done >= 3 * STEPS:
        return {"text": f"{done} files written"}
    return {"text": f"writing {done}", "tool_calls": [
        {"id": f"call_w{done}", "name": "write_file",
         "input": {"path": f"out/{done}.txt", "content": f"{done}\n"}}]}


@pytest.fixture
def server():
    with FakeOpenAIServer() as fake:
        yield fake
        assert fake.violations == []  # zero rule violations in every request of a test


def quick_model(server: FakeOpenAIServer, retries: int = 3) -> OpenAIModel:
    """The provider on the fake, without waiting between retries."""
    return OpenAIModel("gpt-test", api_key="k", base_url=server.base_url,
                       max_retries=retries, sleep=lambda s: None)


def env_for(server: FakeOpenAIServer) -> dict[str, str]:
    return {"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": server.base_url}


def test_a_run_through_the_real_sdk_writes_files_and_records_usage(project, server):
    project.new_trace("t", user("write the files"))
    server.enqueue(*[answer] * 20)
    events: list[tuple[str, Any]] = []
    runner = Runner(project.workspace, project.repo, quick_model(server), config=project.config,
                    on_event=lambda kind, data: events.append((kind, data)))
    streamed: list[str] = []
    runner.on_text = streamed.append
    result = runner.run("t")

    assert result.final_text == f"{STEPS} files written"
    assert "".join(streamed).startswith("writing 0")
    assert (project.workspace.root / "out" / "3.txt").read_text() == "3\n"
    assistants = [m for m in project.trace("t").main_path()
                  if m.role == "assistant" and not m.synthetic]
    assert all(m.model == "openai:gpt-test" and m.usage.output_tokens > 0 for m in assistants)
    assert sum(m.usage.cache_read_input_tokens for m in assistants[1:]) > 0
    first = server.requests[0].body
    assert first["messages"][0]["role"] == "system" and first["tools"]
    assert_git_clean(project.workspace.root)


def test_a_trace_switches_provider_between_runs_and_back(project, server):
    """anthropic → openai → anthropic on one trace: each provider reads what the other
    wrote, as plain messages, and sends a valid request."""
    root = project.workspace.root
    project.new_trace("t", user("write the files"))
    server.enqueue(*[answer] * 20)
    with FakeAnthropicServer() as anthropic:
        anthropic.enqueue(*[answer] * 40)
        claude = {"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": anthropic.base_url}
        run_cli("run", "t", "--model", "anthropic:claude-test", cwd=root, env=claude)
        run_cli("run", "t", "-m", "write more", "--model", "openai:gpt-test", cwd=root,
                env=env_for(server))
        run_cli("run", "t", "-m", "write more", "--model", "anthropic:claude-test", cwd=root,
                env=claude)
        for request in anthropic.requests:
            assert_valid_request(request.body)
        back = anthropic.requests[-1].body

    assert {p.name for p in (root / "out").iterdir()} == {f"{n}.txt" for n in range(12)}
    assistants = [m for m in project.trace("t").main_path()
                  if m.role == "assistant" and not m.synthetic]
    assert {m.model for m in assistants} == {"anthropic:claude-test", "openai:gpt-test"}
    sent = server.requests[0].body["messages"]
    calls = [c["id"] for m in sent if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    assert {"call_w0", "call_w3"} <= set(calls)  # what Claude did, sent as OpenAI tool calls
    assert "call_w4" in json.dumps(back)  # and what the OpenAI model did, back to Claude
    for path in message_paths(project.trace("t").messages_dir):  # no provider's own fields
        assert "provider_data" not in path.read_text()
    assert_git_clean(root)


@pytest.mark.parametrize(("during", "abort"), [("text", False), ("tool_input", False),
                                               ("tool_input", True)],
                         ids=["eof-mid-text", "eof-mid-tool-arguments", "aborted-chunk"])
def test_a_cut_stream_is_retried_and_only_the_whole_turn_is_saved(project, server, during,
                                                                   abort):
    project.new_trace("t", user("write the files"))
    server.enqueue(*[answer] * 20)
    server.cut_stream_next(during, abort=abort)
    events: list[tuple[str, Any]] = []
    runner = Runner(project.workspace, project.repo, quick_model(server), config=project.config,
                    on_event=lambda kind, data: events.append((kind, data)))
    result = runner.run("t")

    assert result.final_text == f"{STEPS} files written"
    first = next(m for m in project.trace("t").main_path() if m.role == "assistant")
    assert first.text == "writing 0" and first.tool_calls[0].input["path"] == "out/0.txt"
    assert [d["attempt"] for k, d in events if k == "retry"] == [1]
    assert len(server.requests) == result.iterations + 1
    assert_git_clean(project.workspace.root)


@pytest.fixture
def cli_model(monkeypatch, server):
    """`agentfs run --model openai:...` gets the quick provider on the fake."""
    monkeypatch.setattr("agentfs.models.resolve.resolve_model",  # imported when a command runs
                        lambda name, base_dir, settings: quick_model(server))
    return env_for(server)


def test_retries_that_run_out_stop_the_run_with_nothing_saved(project, server, cli_model):
    project.new_trace("t", user("write the files"))
    root = project.workspace.root
    head = git(root, "rev-parse", "HEAD")
    files = [p.name for p in message_paths(project.trace("t").messages_dir)]
    server.enqueue(answer)
    server.cut_stream_next("tool_input", count=2)
    server.fail_next(503, count=2)

    done = run_cli("run", "t", "--model", "openai:gpt-test", cwd=root, env=cli_model,
                   check=False)
    assert done.returncode == 1
    assert "still failing after 4 attempts: 503" in done.stderr
    retries = [line for line in done.stderr.splitlines() if "[retrying" in line]
    assert len(retries) == 3
    assert "attempt 1 of 4 failed: the stream ended before its finish_reason inside tool " \
        "call write_file" in retries[0]
    assert "Traceback" not in done.stderr
    # no turn saved; the failure recorded in trace.json alone (an `error` commit)
    assert git(root, "diff", "--name-only", head.strip(), "HEAD").split() == [
        "traces/t/trace.json"]
    assert "still failing" in git(root, "log", "-1", "--format=%s")
    assert [p.name for p in message_paths(project.trace("t").messages_dir)] == files
    assert not (root / "out").exists()
    assert_git_clean(root)


def test_a_bad_key_stops_the_run_once_with_a_hint(project, server):
    project.new_trace("t", user("go"))
    with FakeOpenAIServer(api_key="right") as guarded:
        done = run_cli("run", "t", "--model", "openai:gpt-test", cwd=project.workspace.root,
                       env={"OPENAI_API_KEY": "wrong", "OPENAI_BASE_URL": guarded.base_url},
                       check=False)
        assert len(guarded.requests) == 1
    assert done.returncode == 1 and "401" in done.stderr and "OPENAI_API_KEY" in done.stderr
    assert "wrong" not in "".join(p.read_text() for p in project.workspace.root.rglob("*.json"))


def test_the_fake_server_command_runs_agentfs_against_itself(project, capfd, monkeypatch):
    project.new_trace("hello", user("Say hello"))
    monkeypatch.chdir(project.workspace.root)
    code = main(["--answer", "Hello from a local model.", "agentfs", "run", "hello",
                 "--model", "openai:local-model"])
    assert code == 0
    assert capfd.readouterr().out.strip().endswith("Hello from a local model.")
