"""Periodic context injection, declared skill injection, goals and IM notifications."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentfs.core.project import Project
from agentfs.core.runner import Runner
from agentfs.errors import AgentfsError
from agentfs.models.base import ModelRequest, ModelResponse
from agentfs.models.replay import ReplayModel
from agentfs.skills import load_skills
from agentfs.store.messages import ToolCall
from tests.conftest import assert_git_clean, git, message_paths, user


class Recorder:
    def __init__(self, inner) -> None:
        self.inner, self.name, self.requests = inner, inner.name, []

    def complete(self, request: ModelRequest, on_text=None) -> ModelResponse:
        self.requests.append(request)
        return self.inner.complete(request, on_text)


def runner_for(project, script: Path, **kwargs) -> tuple[Runner, Recorder]:
    model = Recorder(ReplayModel(script))
    return Runner(project.workspace, project.repo, model, config=project.config, **kwargs), model


def assistants(project, trace_id="t"):
    return [m for m in project.trace(trace_id).main_path() if m.role == "assistant"]


def test_context_injected_every_fifth_iteration_unless_model_called_it(project, write_script):
    project.new_trace("t", user("work"))
    turns = [{"tool_calls": [{"name": "list_files", "input": {"pattern": "*.none"}}]}
             for _ in range(33)]
    turns[9] = {"tool_calls": [{"name": "get_current_context", "input": {}}]}  # iteration 10
    turns.append({"text": "done"})
    runner, _ = runner_for(project, write_script(turns))
    result = runner.run("t", max_iterations=40)
    assert result.iterations == 34

    for iteration, message in enumerate(assistants(project), start=1):
        synthetic = [c for c in message.tool_calls or [] if c.synthetic == "context"]
        model_called = any(c.name == "get_current_context" and not c.synthetic
                           for c in message.tool_calls or [])
        expected = iteration % 5 == 0 and not model_called and bool(message.tool_calls)
        assert bool(synthetic) == expected, f"iteration {iteration}"
    results = [m for m in project.trace("t").main_path() if m.synthetic == "context"]
    assert len(results) == 5  # iterations 5, 15, 20, 25, 30
    assert "## Goals" in results[0].text and "## Current time" in results[0].text
    assert_git_clean(project.workspace.root)


def test_declared_skill_injected_at_start_kept_while_recent_then_reinjected(
        project, write_script):
    (project.workspace.root / "skills" / "house-style.md").write_text(
        "---\nname: house-style\ndescription: How we write.\n---\nUse short sentences.\n")
    project.new_trace("t", user("write"))
    turns = [{"tool_calls": [{"name": "list_files", "input": {"pattern": "*.none"}}]}
             for _ in range(12)] + [{"text": "done"}]
    runner, model = runner_for(project, write_script(turns))
    runner.run("t", inject_skills=["house-style"], skill_recency_threshold=6)

    path = project.trace("t").main_path()
    first_assistant = next(m for m in path if m.role == "assistant")
    assert first_assistant.synthetic == "skill"
    assert [c.name for c in first_assistant.tool_calls] == ["skill"]
    skill_results = [m for m in path if m.synthetic == "skill" and m.role == "tool"]
    assert "Use short sentences." in skill_results[0].text
    # not again while recent, again once it fell out of the last 6 messages sent
    reinjected = [m for m in path if m.role == "assistant" and m.synthetic is None
                  and any(c.synthetic == "skill" for c in m.tool_calls or [])]
    assert len(reinjected) >= 2  # appended to the model's own tool calls
    assert len(skill_results) == 1 + len(reinjected)
    answers = [m for m in path if m.role == "assistant" and m.synthetic is None]
    for request, answer in zip(model.requests, answers, strict=True):
        latest = max(i for i, m in enumerate(request.messages)
                     if m.synthetic == "skill" and m.role == "tool")
        beyond = len(request.messages) - latest > 6
        # re-injected exactly when the request had it further back than the threshold
        assert beyond == (answer in reinjected)
    record = project.trace("t").meta.injected_skills["house-style"]
    assert record["message_id"] == skill_results[-1].id


def test_unknown_declared_skill_fails_before_anything_is_written(project, write_script):
    project.new_trace("t", user("go"))
    runner, _ = runner_for(project, write_script([{"text": "x"}]))
    with pytest.raises(AgentfsError, match="unknown skill 'nope'"):
        runner.run("t", inject_skills=["nope"])
    assert len(project.trace("t").messages()) == 2


def test_goal_tool_maintains_tree_and_messages_record_focus(project, write_script):
    project.new_trace("t", user("plan"))
    runner, _ = runner_for(project, write_script([
        {"tool_calls": [{"name": "goal", "input": {"add": "Research"}},
                        {"name": "goal", "input": {"add": "Find sources", "under": "1"}}]},
        {"tool_calls": [{"name": "goal", "input": {"focus": "1.1"}}]},
        {"tool_calls": [{"name": "goal", "input": {"done": "1.1", "summary": "found 3"}}]},
        {"text": "done"},
    ]))
    runner.run("t")
    path = project.trace("t").main_path()
    focus_per_message = [(m.role, m.goal_id) for m in path[2:]]
    assert focus_per_message[0] == ("assistant", None)
    assert ("assistant", "1.1") in focus_per_message
    assert path[-1].goal_id == "1"  # after 1.1 is done, focus returns to its parent
    from agentfs.core.goals import GoalTree

    tree = GoalTree.load(project.workspace.root / "traces/t/goals.json")
    assert tree.find("1.1").status == "done" and tree.find("1.1").summary == "found 3"
    assert "[x] 1.1 Find sources" in tree.to_prompt()
    assert "summary: found 3" in tree.to_prompt(include_summary=True)
    assert_git_clean(project.workspace.root)


def test_messages_arriving_during_a_run_reach_the_model_next_iteration(project, write_script):
    config = project.workspace.config_path
    config.write_text(config.read_text() + "\nsettle = 0\n")  # files written at once
    git(project.workspace.root, "commit", "-qam", "settle = 0")
    project = Project.open(project.workspace.root)
    project.new_trace("t", user("go"))
    inbox = project.workspace.root / "traces/t/inbox"
    inbox.mkdir(exist_ok=True)

    class DropsWhileThinking(Recorder):
        def complete(self, request, on_text=None):
            if len(self.requests) == 0:
                (inbox / "note.md").write_text("also check the README\n")
            return super().complete(request, on_text)

    def drop_during_tool(arguments, context):
        (inbox / "late.md").write_text("and the LICENSE\n")
        return "ok"

    from agentfs.tools.base import Tool, schema

    model = DropsWhileThinking(ReplayModel(write_script([
        {"tool_calls": [{"name": "list_files", "input": {}}]},
        {"tool_calls": [{"name": "slow_work", "input": {}}]},
        {"text": "done"},
    ])))
    runner = Runner(project.workspace, project.repo, model, config=project.config,
                    tools=[Tool("slow_work", "work", schema({}), drop_during_tool)])
    runner.run("t")
    # arrived while the model was thinking: notified in this iteration's injection,
    # then appended after the tool results
    sent = model.requests[1].messages
    context = next(m for m in sent if m.synthetic == "context")
    assert "note.md" in context.text and "## New messages" in context.text
    assert sent[-1].role == "user" and sent[-1].text == "also check the README"
    # arrived while a tool ran: appended after that step's results
    assert model.requests[2].messages[-1].text == "and the LICENSE"
    assert [p.name for p in inbox.iterdir()] == [".gitkeep"]
    assert_git_clean(project.workspace.root)


def test_a_message_still_being_written_is_announced_once_it_is_taken_next(project,
                                                                         write_script):
    """The context says a message follows the tool results only of a file written
    whole (settled), which the run takes right after the step: a file still settling
    was announced at every iteration, and followed none of them."""
    project.new_trace("t", user("go"))
    inbox = project.workspace.root / "traces/t/inbox"

    class DropsWhileThinking(Recorder):
        def complete(self, request, on_text=None):
            if len(self.requests) == 0:
                (inbox / "note.md").write_text("also check the README\n")
            return super().complete(request, on_text)

    listing = {"tool_calls": [{"name": "list_files", "input": {}}]}
    model = DropsWhileThinking(ReplayModel(write_script(
        [listing, listing, listing, {"text": "done"}, {"text": "done, README too"}])))
    config = project.config.model_copy(update={"settle": 1.0})
    Runner(project.workspace, project.repo, model, config=config).run("t")
    for request in model.requests:
        contexts = [n for n, m in enumerate(request.messages)
                    if m.synthetic == "context" and "note.md" in m.text]
        for at in contexts:  # each announcement is followed by the message at once
            rest = request.messages[at + 1:]
            assert any(m.role == "user" and m.text == "also check the README" for m in rest)
    path = project.trace("t").main_path()
    assert [m.text for m in path if m.role == "user"].count("also check the README") == 1
    assert path[-1].text == "done, README too"
    assert_git_clean(project.workspace.root)


def test_system_prompt_priority_and_skills_listing(project, write_script):
    config = project.workspace.config_path
    config.write_text(config.read_text() + '\n[presets.critic]\nsystem_prompt = "You critique."\n'
                      'skills = []\n')
    from agentfs.core.project import Project

    project = Project.open(project.workspace.root)
    runner, _ = runner_for(project, write_script([{"text": "ok"}]))
    runner.run("a", ["hi"])
    runner.run("b", ["hi"], preset="critic")
    runner.run("c", ["hi"], preset="critic", system_prompt="Run-level prompt.")
    runner.run("d", [{"role": "system", "content": "Explicit."}, "hi"], system_prompt="ignored")
    first = {t: project.trace(t).main_path()[0].text for t in "abcd"}
    assert first["a"].startswith("You are an agent") and "agentfs-workspace" in first["a"]
    assert first["b"] == "You critique."  # the preset lists no skills
    assert first["c"] == "Run-level prompt."
    assert first["d"].startswith("Explicit.\n\n## Skills")  # skills follow any role prompt
    with pytest.raises(AgentfsError, match="already has its system prompt"):
        runner.run("d", [{"role": "system", "content": "again"}])


def test_delegate_runs_a_child_trace_and_returns_its_answer(project):
    project.new_trace("t", user("split the work"))

    class Scripted:
        name = "scripted"

        def complete(self, request, on_text=None):
            first = request.messages[0].text
            if first == "count the files" and len(request.messages) == 1:
                return ModelResponse(text="there are 4 files", model=self.name)
            if len(request.messages) == 1:
                return ModelResponse(tool_calls=[ToolCall(
                    id="d1", name="delegate", input={"task": "count the files", "name": "Counter"})],
                    model=self.name)
            return ModelResponse(text="child said: " + request.messages[-1].text, model=self.name)

    runner = Runner(project.workspace, project.repo, Scripted(), config=project.config,
                    skills=load_skills(None))
    result = runner.run("t")
    assert result.final_text == "child said: there are 4 files"
    assert "t--counter-1" in project.workspace.trace_ids()
    collaborators = project.trace("t").meta.context.collaborators
    assert collaborators["t--counter-1"].status.startswith("done")
    assert_git_clean(project.workspace.root)


def test_more_declared_skills_than_the_threshold_do_not_loop(project, write_script):
    for name in ("one", "two", "three"):
        (project.workspace.root / "skills" / f"{name}.md").write_text(
            f"---\nname: {name}\ndescription: Skill {name}.\n---\nBody {name}.\n")
    project.new_trace("t", user("go"))
    runner, model = runner_for(project, write_script([{"text": "ok"}]))
    result = runner.run("t", inject_skills=["one", "two", "three"], skill_recency_threshold=1)
    assert result.iterations == 1 and len(model.requests) == 1
    with pytest.raises(AgentfsError, match="at least 1"):
        runner.run("t", ["x"], inject_skills=["one"], skill_recency_threshold=0)


def test_a_message_dropped_during_the_final_answer_is_answered_in_the_same_run(
        project, write_script):
    project.new_trace("t", user("go"))
    inbox = project.workspace.root / "traces/t/inbox"
    inbox.mkdir(exist_ok=True)

    class DropsDuringFinalAnswer(Recorder):
        def complete(self, request, on_text=None):
            if len(self.requests) == 0:
                (inbox / "more.md").write_text("one more thing\n")
            return super().complete(request, on_text)

    model = DropsDuringFinalAnswer(ReplayModel(write_script([{"text": "a1"}, {"text": "a2"}])))
    result = Runner(project.workspace, project.repo, model, config=project.config).run("t")
    assert result.final_text == "a2"
    assert model.requests[1].messages[-1].text == "one more thing"


def test_unknown_preset_skill_leaves_no_half_created_trace(project, write_script):
    config = project.workspace.config_path
    config.write_text(config.read_text() + '\n[presets.bad]\nskills = ["missing"]\n')
    from agentfs.core.project import Project

    project = Project.open(project.workspace.root)
    runner, _ = runner_for(project, write_script([{"text": "ok"}]))
    with pytest.raises(AgentfsError, match="unknown skill 'missing'"):
        runner.run("t", ["hi"], preset="bad")
    assert not (project.workspace.root / "traces" / "t").exists()


def test_a_five_megabyte_hook_output_is_cut_and_the_trace_stays_readable(project):
    import json

    from agentfs.core.context import CONTEXT_MAX_BYTES, HOOK_MAX_BYTES
    from agentfs.core.trust import config_fingerprint
    from agentfs.store.messages import MAX_MESSAGE_BYTES, load_message
    from agentfs.testing import ScriptedModel
    from tests.conftest import run_cli

    config = project.workspace.config_path
    config.write_text(config.read_text() + "\ncontext_injection_interval = 1\n"
                      '[[context_hooks]]\nname = "Log"\ncommand = "yes log | head -c 5000000"\n')
    git(project.workspace.root, "commit", "-qam", "a noisy hook")
    project = Project.open(project.workspace.root)
    project.new_trace("t", user("go"))
    model = ScriptedModel(
        ModelResponse(tool_calls=[ToolCall(id="c1", name="list_files", input={})]), "done")
    runner = Runner(project.workspace, project.repo, model, config=project.config,
                    trusted=config_fingerprint(project.config))
    runner.register_context_hook("Dump", lambda trace_id: "€" * 5_000_000)
    runner.register_context_hook("Quiet", lambda trace_id: "all good")
    runner.run("t")

    injected = next(m for m in project.trace("t").main_path() if m.synthetic == "context").text
    assert len(injected.encode()) <= CONTEXT_MAX_BYTES
    dump = injected.split("## Dump\n")[1].split("\n\n## ")[0]
    assert len(dump.encode()) <= HOOK_MAX_BYTES
    assert dump.endswith(f"more bytes; a context hook's output is limited to {HOOK_MAX_BYTES:,} "
                         "bytes]")
    assert "## Quiet\nall good" in injected  # one noisy hook does not crowd out the rest
    assert "## Goals" in injected
    # the Python hooks come first, so the command's section is there, cut as well
    assert "## Log\nlog\nlog\n" in injected and "[... cut by agentfs: 4,98" in injected

    for path in message_paths(project.workspace.root / "traces/t/messages"):
        assert path.stat().st_size <= MAX_MESSAGE_BYTES
        load_message(path)
    shown = json.loads(run_cli("show", "t", "--json", cwd=project.workspace.root).stdout)
    assert any(m["synthetic"] == "context" for m in shown["messages"])
    assert_git_clean(project.workspace.root)


def test_the_whole_context_is_bounded_however_many_hooks_print(tmp_path):
    from agentfs.core.context import CONTEXT_MAX_BYTES, ContextSources, build_context

    hooks = [(f"Hook {n}", lambda trace_id: "x" * 1_000_000) for n in range(40)]
    text = build_context(ContextSources("t", tmp_path / "goals.json", hooks=hooks))
    assert len(text.encode()) <= CONTEXT_MAX_BYTES
    assert text.startswith("## Current time\n") and "## Hook 0\nxxx" in text
    assert text.endswith(f"; the context is limited to {CONTEXT_MAX_BYTES:,} bytes]")


def test_a_skill_the_model_loads_itself_is_not_loaded_again_in_the_same_turn(
        project, write_script):
    (project.workspace.root / "skills" / "house-style.md").write_text(
        "---\nname: house-style\ndescription: How we write.\n---\nUse short sentences.\n")
    project.new_trace("t", user("write"))
    turns = [{"tool_calls": [{"name": "list_files", "input": {"pattern": "*.none"}}]}
             for _ in range(4)]
    turns += [{"tool_calls": [{"name": "skill", "input": {"name": "house-style"}}]}]
    turns += [{"tool_calls": [{"name": "list_files", "input": {"pattern": "*.none"}}]}
              for _ in range(2)] + [{"text": "done"}]
    runner, _ = runner_for(project, write_script(turns))
    runner.run("t", inject_skills=["house-style"], skill_recency_threshold=6)
    path = project.trace("t").main_path()
    for message in path:
        names = [c.input.get("name") for c in message.tool_calls or [] if c.name == "skill"]
        assert len(names) == len(set(names)), f"#{message.sequence} loads a skill twice"
    own = next(m for m in path if m.role == "assistant" and m.synthetic is None
               and any(c.name == "skill" and not c.synthetic for c in m.tool_calls or []))
    assert [c for c in own.tool_calls if c.synthetic == "skill"] == []  # none appended
    result = next(m for m in path if m.tool_call_id == own.tool_calls[0].id)
    record = project.trace("t").meta.injected_skills["house-style"]
    later = [m for m in path if m.sequence > result.sequence and m.synthetic == "skill"
             and m.role == "tool"]
    assert record["message_id"] in {result.id, *(m.id for m in later)}


def test_collaborators_are_shown_with_their_state_now(project):
    from agentfs.core.delegate import collaborator_states
    from agentfs.store.meta import Collaborator

    project.new_trace("p", user("parent"))
    project.new_trace("c1", user("child one"))
    project.new_trace("c2", user("child two"))
    parent = project.trace("p")
    parent.meta.context.collaborators = {
        "c1": Collaborator(trace="c1", task="one", status="done (2 model calls)"),
        "c2": Collaborator(trace="c2", task="two", status="running"),
    }
    states = {s["trace"]: s["status"] for s in collaborator_states(parent)}
    assert states["c1"] == "done (2 model calls)"
    assert states["c2"].startswith("stopped before it answered")  # its run is gone
    with project.trace("c2").lock():
        assert {s["trace"]: s["status"] for s in collaborator_states(parent)}["c2"] == "running"


def test_a_hook_reads_no_more_output_than_its_section_holds(tmp_path):
    """A trusted hook that reads a file the model replaced with a link to a huge file
    (or /dev/zero) is read no further than its section: memory stays bounded."""
    from agentfs.core.context import HOOK_MAX_BYTES, CommandHook

    hook = CommandHook("Notes", "head -c 30000000 /dev/zero | tr '\\0' a", cwd=tmp_path)
    text = hook("t")
    assert len(text.encode()) <= HOOK_MAX_BYTES
    assert text.startswith("aaa") and "[... cut by agentfs: 29,9" in text


def test_a_hook_running_python_m_never_imports_a_module_written_into_the_workspace(tmp_path):
    """Hooks run in the workspace, where the model writes: `python3 -m platform` runs the
    installed module, not a `platform.py` put beside it."""
    import sys

    from agentfs.core.context import CommandHook

    (tmp_path / "platform.py").write_text("print('from the workspace')\n")
    text = CommandHook("Platform", f"{sys.executable} -m platform", cwd=tmp_path)("t")
    assert text and "from the workspace" not in text
