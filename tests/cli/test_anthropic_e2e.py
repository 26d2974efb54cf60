"""The Anthropic provider end to end: the real SDK against agentfs' fake server."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from agentfs.core.runner import Runner
from agentfs.models.anthropic import AnthropicModel
from agentfs.testing import FakeAnthropicServer, assert_valid_request
from tests.conftest import assert_git_clean, git, kill_runs_at_random, run_cli, user

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
