"""The Anthropic provider end to end: the real SDK against agentfs' fake server."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from agentfs.core.runner import Runner
from agentfs.models.anthropic import AnthropicModel
from agentfs.testing import FakeAnthropicServer, assert_valid_request
from tests.conftest import assert_git_clean, git, kill_runs_at_random, message_paths, run_cli, user

STEPS = 12


def answer(body: dict[str, Any]) -> dict[str, Any]:
    """A deterministic model: one file write per turn, decided by the turns so far."""
    done = sum(1 for m in body["messages"] if m["role"] == "assistant"
               and any(b["type"] == "tool_use" and b["name"] == "write_file" for b in m["content"]))
    if done >= STEPS:
        return {"text": "all files written"}
    return {"text": f"writing {done}", "tool_calls": [
        {"id": f"toolu_w{done}", "name": "write_file",
         "input": {"path": f"out/{done}.txt", "content": f"{done}\n"}}]}


@pytest.fixture
def server():
    with FakeAnthropicServer() as fake:
        yield fake


def without_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [without_cache_control(v) for v in value]
    return value


def test_runner_through_the_real_sdk_makes_valid_cached_requests(project, server):
    (project.workspace.root / "skills" / "tidy.md").write_text(
        "---\nname: tidy\ndescription: Keep files tidy.\n---\nOne topic per file.\n")
    git(project.workspace.root, "add", "skills/tidy.md")
    git(project.workspace.root, "commit", "-qm", "a skill")
    project.new_trace("t", user("write the files"))
    server.enqueue(*[answer] * 40)
    model = AnthropicModel("claude-test", api_key="k", base_url=server.base_url,
                           sleep=lambda s: None)
    runner = Runner(project.workspace, project.repo, model, config=project.config)
    streamed: list[str] = []
    runner.on_text = streamed.append
    result = runner.run("t", inject_skills=["tidy"])

    assert result.final_text == "all files written"
    assert "".join(streamed).startswith("writing 0")
    bodies = [r.body for r in server.requests]
    for body in bodies:
        assert_valid_request(body)
    assert any(b["type"] == "tool_use" and b["name"] == "skill"
               for b in bodies[0]["messages"][1]["content"])  # injected before the first call
    assert any(b.get("name") == "get_current_context" for m in bodies[-1]["messages"]
               if m["role"] == "assistant" for b in m["content"])
    assistants = [m for m in project.trace("t").main_path()
                  if m.role == "assistant" and not m.synthetic]
    assert all(m.usage is not None and m.usage.output_tokens > 0 and m.usage.input_tokens
               + m.usage.cache_read_input_tokens + m.usage.cache_creation_input_tokens > 0
               for m in assistants)
    assert sum(m.usage.cache_read_input_tokens for m in assistants[1:]) > 0
    assert (project.workspace.root / "out" / "11.txt").read_text() == "11\n"
    assert_git_clean(project.workspace.root)


def test_faults_are_retried_and_401_is_reported_once(project, server):
    project.new_trace("t", user("go"))
    server.enqueue(*[answer] * 40)
    server.fail_next(429)
    server.fail_next(529)
    server.fail_next(500)
    model = AnthropicModel("claude-test", api_key="k", base_url=server.base_url,
                           sleep=lambda s: None)
    result = Runner(project.workspace, project.repo, model, config=project.config).run("t")
    assert result.final_text == "all files written"
    assert len(server.requests) == result.iterations + 3

    server.fail_next(401)
    done = run_cli("run", "t", "-m", "again", "--model", "anthropic:claude-test",
                   cwd=project.workspace.root, check=False,
                   env={"ANTHROPIC_API_KEY": "bad", "ANTHROPIC_BASE_URL": server.base_url})
    assert done.returncode == 1
    assert "401" in done.stderr and "ANTHROPIC_API_KEY" in done.stderr
    assert "Traceback" not in done.stderr
    assert server.requests[-1].body["messages"][-1]["content"][-1]["text"] == "again"
    assert len(server.requests) == result.iterations + 4  # not retried
    assert "bad" not in "".join(p.read_text() for p in project.workspace.root.rglob("*.json"))


def test_killed_and_resumed_runs_resend_identical_prefixes(tmp_path, server):
    root = tmp_path / "ws"
    run_cli("init", str(root), cwd=tmp_path)
    run_cli("new", "t", "-m", "write the files", cwd=root)
    server.enqueue(*[answer] * 200)
    env = {"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": server.base_url}
    args = ["run", "t", "-q", "--model", "anthropic:claude-test"]
    kills = kill_runs_at_random(args, cwd=root, times=6, seed=7, delay=(0.7, 1.3), env=env)
    run_cli(*args, cwd=root, env=env)
    assert kills >= 2

    bodies = [without_cache_control(r.body) for r in server.requests]
    for earlier, later in itertools.pairwise(bodies):
        assert later["system"] == earlier["system"] and later["tools"] == earlier["tools"]
        before = [json.dumps(m, sort_keys=True) for m in earlier["messages"]]
        after = [json.dumps(m, sort_keys=True) for m in later["messages"]]
        assert after[: len(before)] == before, "a resumed run changed what was already sent"
        assert_valid_request(later)
    assert json.loads(run_cli("show", "t", "--json", cwd=root).stdout)["messages"][-1]["text"] \
        == "all files written"
    assert_git_clean(root)


# --- faults that must never become a saved turn (issue 11) -------------------------------

FIRST = "Writing the first file now, then I will check it."


def write_once(body: dict[str, Any]) -> dict[str, Any]:
    """One write_file turn, then a final answer."""
    if any(m["role"] == "assistant" for m in body["messages"]):
        return {"text": "all done"}
    return {"text": FIRST, "tool_calls": [
        {"id": "toolu_w", "name": "write_file",
         "input": {"path": "out/a.txt", "content": "alpha beta gamma delta epsilon\n"}}]}


def quick_model(server: FakeAnthropicServer, retries: int = 3) -> AnthropicModel:
    """The provider on the fake, without waiting between retries."""
    return AnthropicModel("claude-test", api_key="k", base_url=server.base_url,
                          max_retries=retries, sleep=lambda s: None)


def runner_on(project, model) -> tuple[Runner, list[tuple[str, dict[str, Any]]]]:
    events: list[tuple[str, dict[str, Any]]] = []
    runner = Runner(project.workspace, project.repo, model, config=project.config,
                    on_event=lambda kind, data: events.append((kind, data)))
    return runner, events


def assistants(project, trace_id: str = "t") -> list:
    return [m for m in project.trace(trace_id).main_path() if m.role == "assistant"]


@pytest.fixture
def cli_model(monkeypatch, server):
    """`agentfs run --model anthropic:...` gets the quick provider on the fake."""
    monkeypatch.setattr("agentfs.models.resolve.resolve_model",  # imported when a command runs
                        lambda name, base_dir, settings: quick_model(server))
    return {"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": server.base_url}


@pytest.mark.parametrize(("during", "abort"), [("text", False), ("tool_input", False),
                                               ("tool_input", True)],
                         ids=["eof-mid-text", "eof-mid-tool-input", "aborted-chunk"])
def test_a_cut_stream_is_retried_and_only_the_whole_turn_is_saved(project, server, during,
                                                                   abort):
    project.new_trace("t", user("write it"))
    server.enqueue(write_once, write_once)
    server.cut_stream_next(during, abort=abort)
    runner, events = runner_on(project, quick_model(server))
    result = runner.run("t")

    assert result.final_text == "all done" and result.iterations == 2
    first, _ = assistants(project)
    assert first.text == FIRST and first.stop_reason == "tool_use"
    assert [c.input["content"] for c in first.tool_calls] == ["alpha beta gamma delta epsilon\n"]
    assert (project.workspace.root / "out" / "a.txt").read_text() == \
        "alpha beta gamma delta epsilon\n"
    assert [d["attempt"] for k, d in events if k == "retry"] == [1]
    assert len(server.requests) == 3
    assert_git_clean(project.workspace.root)


def test_retries_that_run_out_stop_the_run_with_nothing_saved(project, server, cli_model):
    project.new_trace("t", user("write it"))
    root = project.workspace.root
    head = git(root, "rev-parse", "HEAD")
    files = [p.name for p in message_paths(project.trace("t").messages_dir)]
    server.enqueue(write_once)
    server.cut_stream_next("tool_input", count=4)

    done = run_cli("run", "t", "--model", "anthropic:claude-test", cwd=root, env=cli_model,
                   check=False)
    assert done.returncode == 1
    assert "still failing after 4 attempts: the stream ended before message_stop" in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.count("[retrying") == 3
    # no turn saved; the failure recorded (one `error` commit of trace.json), as
    # `agentfs status` and the API show it, whoever ran the trace
    [subject] = git(root, "log", "--format=%s", f"{head.strip()}..").splitlines()
    assert subject.startswith("t: error #2 Anthropic API still failing after 4 attempts")
    assert git(root, "diff", "--name-only", head.strip(), "HEAD").split() == ["traces/t/trace.json"]
    assert [p.name for p in message_paths(project.trace("t").messages_dir)] == files
    assert not (root / "out").exists()
    listed = json.loads(run_cli("status", "--json", cwd=root).stdout)["traces"][0]
    assert listed["status"] == "failed" and "still failing" in listed["last_error"]
    assert_git_clean(root)


def test_retries_are_shown_once_each_and_streamed_text_is_not_printed_twice(
    project, server, cli_model
):
    project.new_trace("t", user("write it"))
    server.enqueue(write_once, write_once)
    server.cut_stream_next("text")  # part of FIRST is on screen when the stream is cut
    server.fail_next(529)  # then the second attempt is refused

    done = run_cli("run", "t", "--model", "anthropic:claude-test", cwd=project.workspace.root,
                   env=cli_model)
    assert done.stdout == f"{FIRST}\nall done\n"
    retries = [line for line in done.stderr.splitlines() if "[retrying" in line]
    assert len(retries) == 2
    assert "attempt 1 of 4 failed: the stream ended before message_stop inside a text block" \
        in retries[0]
    assert "attempt 2 of 4 failed: 529" in retries[1]


def test_a_tool_call_cut_at_max_tokens_is_never_run(project, server):
    full = {"path": "out/a.txt", "content": "the whole of the file, " * 8}

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        results = [b for m in body["messages"] if m["role"] == "user" for b in m["content"]
                   if b["type"] == "tool_result"]
        call = {"id": f"toolu_{len(results)}", "name": "write_file", "input": full}
        if not results:
            return {"text": "Writing.", "tool_calls": [call], "max_tokens_during": "tool_input"}
        if len(results) == 1:
            assert results[0].get("is_error") and "max_tokens" in results[0]["content"]
            return {"text": "Again, whole.", "tool_calls": [call]}
        return {"text": "written"}

    project.new_trace("t", user("write it"))
    server.enqueue(*[answer] * 3)
    runner, events = runner_on(project, quick_model(server))
    result = runner.run("t")

    assert result.final_text == "written"
    assert (project.workspace.root / "out" / "a.txt").read_text() == full["content"]
    cut = assistants(project)[0]
    assert cut.stop_reason == "max_tokens"
    assert list(cut.tool_calls[0].input) == ["agentfs_refused_input"]  # the partial input
    ran = [d["name"] for k, d in events if k == "tool_result" and not d["is_error"]]
    assert ran == ["write_file"]  # once: the second, complete call
    assert [(d["cut_call"], d["final"]) for k, d in events if k == "max_tokens"] \
        == [("write_file", False)]
    assert_git_clean(project.workspace.root)


def test_an_answer_cut_at_max_tokens_ends_the_run_saying_so(project, server, cli_model):
    project.new_trace("t", user("explain"))
    long = "A long explanation that goes on and on"
    server.enqueue({"text": long, "max_tokens_during": "text"})
    done = run_cli("run", "t", "--model", "anthropic:claude-test", cwd=project.workspace.root,
                   env=cli_model)
    assert "the answer was cut off at max_tokens (4096)" in done.stderr
    assert "agentfs run t -m 'continue'" in done.stderr
    (answer,) = assistants(project)
    assert answer.stop_reason == "max_tokens" and answer.text == long[: len(long) // 2]

    server.enqueue({"text": "cut", "max_tokens_during": "text"})
    result = Runner(project.workspace, project.repo, quick_model(server),
                    config=project.config).run("t", ["go on"])
    assert result.stop == "max_tokens"
    assert_git_clean(project.workspace.root)


def test_prompt_too_long_compresses_once_and_goes_on(project, server):
    project.new_trace("t", user("write it"))
    server.prompt_too_long_next()
    server.enqueue({"text": "Summary: nothing done yet."}, write_once, write_once)
    runner, events = runner_on(project, quick_model(server))
    result = runner.run("t")

    assert result.final_text == "all done"
    assert result.steps.count("summary") == 1
    assert [k for k, _ in events if k in ("prompt_too_long", "compressed")] \
        == ["prompt_too_long", "compressed"]
    bodies = [r.body for r in server.requests]
    assert "[agentfs: compression]" in bodies[1]["messages"][-1]["content"][-1]["text"]
    assert "Summary: nothing done yet." in json.dumps(bodies[2]["messages"])
    assert_git_clean(project.workspace.root)


def test_prompt_still_too_long_after_compressing_stops_with_a_hint(project, server, cli_model):
    def summary(body: dict[str, Any]) -> dict[str, Any]:
        server.prompt_too_long_next()  # the request after the summary is refused again
        return {"text": "Summary."}

    project.new_trace("t", user("write it"))
    server.prompt_too_long_next()
    server.enqueue(summary, write_once)
    done = run_cli("run", "t", "--model", "anthropic:claude-test", cwd=project.workspace.root,
                   env=cli_model, check=False)
    assert done.returncode == 1
    assert "too long for" in done.stderr and "even after compressing" in done.stderr
    assert "agentfs compress t" in done.stderr
    assert len(server.requests) == 3  # main, compression, main: compressed once
    assert [m.synthetic for m in project.trace("t").main_path()][-1] == "summary"
    assert_git_clean(project.workspace.root)


def test_a_compression_request_that_is_itself_too_long_says_nothing_was_compressed(
    project, server, cli_model
):
    project.new_trace("t", user("write it"))
    server.prompt_too_long_next(2)  # the request, then the compression's request
    done = run_cli("run", "t", "--model", "anthropic:claude-test", cwd=project.workspace.root,
                   env=cli_model, check=False)
    assert done.returncode == 1
    assert "even after compressing" not in done.stderr
    assert "the request that would compress it" in done.stderr
    assert "nothing was compressed" in done.stderr and "agentfs compress t" in done.stderr
    assert_git_clean(project.workspace.root)


def test_text_after_tool_use_goes_back_block_by_block(project, server):
    received = [
        {"type": "text", "text": "First the file."},
        {"type": "tool_use", "id": "toolu_x", "name": "write_file",
         "input": {"path": "out/x.txt", "content": "x\n"}},
        {"type": "text", "text": "Then I will report."},
    ]
    project.new_trace("t", user("write it"))
    server.enqueue({"content": received}, {"text": "reported"})
    result = Runner(project.workspace, project.repo, quick_model(server),
                    config=project.config).run("t")

    assert result.final_text == "reported"
    sent = server.requests[1].body["messages"][1]["content"]
    assert without_cache_control(sent)[: len(received)] == received
    assert [b.get("name") for b in sent[len(received):]] == []  # no synthetic call this turn
    first = assistants(project)[0]
    path = project.trace("t").message_path(first)
    text = path.read_text()
    assert "blocks:" in text and text.rstrip().endswith("First the file.Then I will report.")
    assert_git_clean(project.workspace.root)


def test_ctrl_c_during_a_model_call_says_which_trace_to_run_to_go_on(project, server):
    import os
    import signal
    import subprocess
    import sys
    import time

    project.new_trace("t", user("write it"))
    server.enqueue(write_once)
    server.delay_next(60)
    run = subprocess.Popen(
        [sys.executable, "-m", "agentfs", "run", "t", "--model", "anthropic:claude-test"],
        cwd=project.workspace.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": server.base_url})
    deadline = time.monotonic() + 60
    while not server.requests:
        assert time.monotonic() < deadline and run.poll() is None, "no request came"
        time.sleep(0.05)

    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=60)

    assert run.returncode == 130
    assert "interrupted; everything committed so far is kept (`agentfs run t` goes on" in err
    assert "Traceback" not in err
    assert_git_clean(project.workspace.root)
