"""Test doubles, context hooks, plugin tools, thinking blocks and the loop's CLI commands."""

from __future__ import annotations

import json
from importlib.metadata import EntryPoint

import pytest

from agentfs.core.runner import Runner
from agentfs.errors import ConfigError
from agentfs.models.anthropic import AnthropicModel
from agentfs.models.base import ModelResponse
from agentfs.store.messages import ToolCall
from agentfs.testing import FakeAnthropicServer, FunctionModel, ScriptedModel
from agentfs.tools.base import Tool, schema
from tests.conftest import assert_git_clean, git, run_cli, user


def call(name: str, **arguments) -> ToolCall:
    return ToolCall(id=f"c_{name}_{len(arguments)}", name=name, input=arguments)


def test_scripted_and_function_models_drive_a_run(project):
    project.new_trace("t", user("hello"))
    scripted = ScriptedModel(ModelResponse(tool_calls=[call("list_files")]), "bye")
    runner = Runner(project.workspace, project.repo, scripted, config=project.config)
    assert runner.run("t").final_text == "bye"
    assert scripted.requests[0].messages[-1].text == "hello"
    assert scripted.requests[1].messages[-1].role == "tool"

    echo = FunctionModel(lambda r: ModelResponse(text=f"{len(r.messages)} messages"))
    runner = Runner(project.workspace, project.repo, echo, config=project.config)
    assert runner.run("t", ["again"]).final_text == "5 messages"


def test_context_hooks_python_command_and_failing(project):
    config = project.workspace.config_path
    config.write_text(config.read_text() + "\ncontext_injection_interval = 1\n"
                      '[[context_hooks]]\nname = "Branch"\ncommand = "git branch --show-current"\n'
                      '[[context_hooks]]\nname = "Broken"\ncommand = "exit 4"\n'
                      '[[context_hooks]]\nname = "Slow"\ncommand = "sleep 5"\ntimeout = 0.2\n')
    git(project.workspace.root, "commit", "-qam", "hooks")
    from agentfs.core.project import Project
    from agentfs.core.trust import config_fingerprint

    project = Project.open(project.workspace.root)
    project.new_trace("t", user("go"))
    model = ScriptedModel(ModelResponse(tool_calls=[call("list_files")]), "done")
    runner = Runner(project.workspace, project.repo, model, config=project.config,
                    trusted=config_fingerprint(project.config))

    def failing(trace_id: str) -> str:
        raise ValueError("no database")

    runner.register_context_hook("Deploys", lambda trace_id: f"none pending for {trace_id}")
    runner.register_context_hook("Flaky", failing)
    runner.run("t")
    injected = next(m for m in project.trace("t").main_path() if m.synthetic == "context").text
    assert "## Branch\nmain" in injected
    assert "## Deploys\nnone pending for t" in injected
    assert "## Broken\n(hook failed: RuntimeError: exit status 4" in injected
    assert "## Slow\n(hook failed: RuntimeError: timed out" in injected
    assert "## Flaky\n(hook failed: ValueError: no database)" in injected
    assert_git_clean(project.workspace.root)


def test_plugin_tools_come_from_entry_points(project, monkeypatch):
    echo = Tool("echo", "Echo the text.", schema({"text": {"type": "string"}}),
                lambda arguments, context: arguments["text"])
    points = [EntryPoint("echo", "plugin_mod:echo", "agentfs.tools")]
    monkeypatch.setattr("agentfs.tools.plugins.entry_points", lambda group: points)
    monkeypatch.setattr(EntryPoint, "load", lambda self: echo)
    project.new_trace("t", user("go"))
    model = ScriptedModel(ModelResponse(tool_calls=[call("echo", text="ping")]), "ok")
    Runner(project.workspace, project.repo, model, config=project.config).run("t")
    assert model.requests[1].messages[-1].text == "ping"
    assert "echo" in {t.name for t in model.requests[0].tools}

    clash = Tool("read_file", "shadow", schema({}), lambda a, c: "x")
    monkeypatch.setattr(EntryPoint, "load", lambda self: clash)
    with pytest.raises(ConfigError, match="built-in tool"):
        Runner(project.workspace, project.repo, model, config=project.config).run("t", ["x"])


def test_thinking_blocks_are_stored_and_sent_back_verbatim(project):
    project.new_trace("t", user("think"))
    thinking = {"thinking": "Let me consider.", "signature": "sig-abc=="}
    with FakeAnthropicServer() as server:
        server.enqueue({"text": "", "thinking": [thinking],
                        "tool_calls": [{"name": "list_files", "input": {}}]}, {"text": "done"})
        model = AnthropicModel("claude-test", api_key="k", base_url=server.base_url,
                               sleep=lambda s: None)
        Runner(project.workspace, project.repo, model, config=project.config).run("t")
        second = server.requests[1].body
    stored = next(m for m in project.trace("t").main_path() if m.thinking)
    assert stored.thinking == [{"type": "thinking", **thinking}]
    sent = next(m for m in second["messages"] if m["role"] == "assistant")
    assert sent["content"][0] == {"type": "thinking", **thinking}


def test_cli_skills_goals_and_inject_skill(workspace, write_script):
    (workspace / "skills" / "review").mkdir()
    (workspace / "skills" / "review" / "SKILL.md").write_text(
        "---\nname: review\ndescription: How to review a change.\n---\nRead the diff first.\n")
    listing = run_cli("skills", cwd=workspace).stdout
    assert "review" in listing and "agentfs-workspace" in listing
    script = write_script([{"tool_calls": [{"name": "goal", "input": {"add": "Review"}}]},
                           {"text": "reviewed"}])
    done = run_cli("run", "t", "-m", "review it", "--model", f"replay:{script}",
                   "--inject-skill", "review", cwd=workspace)
    assert "reviewed" in done.stdout
    shown = json.loads(run_cli("show", "t", "--json", cwd=workspace).stdout)["messages"]
    assert shown[2]["synthetic"] == "skill" and "Read the diff first." in shown[3]["text"]
    assert run_cli("goals", "t", cwd=workspace).stdout.startswith("[ ] 1 Review ← focus")
    (workspace / "skills" / "Bad_Name.md").write_text("---\nname: Bad_Name\n---\nx\n")
    bad = run_cli("skills", cwd=workspace, check=False)
    assert bad.returncode == 1 and "Bad_Name.md" in bad.stderr
    unknown = run_cli("run", "t", "-m", "x", "--inject-skill", "nope", "--model",
                      f"replay:{script}", cwd=workspace, check=False)
    assert unknown.returncode == 1 and "unknown skill 'nope'" in unknown.stderr
