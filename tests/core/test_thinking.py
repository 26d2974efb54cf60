"""Extended thinking end to end: the real SDK against the fake server, which checks
that every thinking block comes back as issued, after the prefix it was issued after."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentfs.core.compaction import CLEARED
from agentfs.core.project import Project
from agentfs.core.reflection import REFLECT_PROMPT
from agentfs.core.sidebranch import SUMMARY_REQUEST
from agentfs.models.anthropic import AnthropicModel
from agentfs.testing import FakeAnthropicServer, assert_valid_request, sign_thinking
from tests.conftest import assert_git_clean, git

THINKING = {"type": "enabled", "budget_tokens": 2000}
REFLECTING = REFLECT_PROMPT[: REFLECT_PROMPT.index("]") + 1]
SUMMARIZING = SUMMARY_REQUEST[: SUMMARY_REQUEST.index("]") + 1]


def configure(root: Path, text: str) -> Project:
    (root / "notes").mkdir(exist_ok=True)
    for name in ("a", "b"):
        (root / "notes" / f"{name}.md").write_text(f"# Note {name}\n\n" + "words " * 40 + "\n")
    config = root / "agentfs.toml"
    config.write_text(config.read_text() + text)
    git(root, "add", "-A")
    git(root, "commit", "-qm", "config and notes")
    return Project.open(root)


def user_texts(body: dict[str, Any]) -> list[str]:
    return [b["text"] for m in body["messages"] if m["role"] == "user"
            for b in m["content"] if b["type"] == "text"]


def call(text: str, tool: str, **arguments: Any) -> dict[str, Any]:
    return {"text": text, "tool_calls": [{"name": tool, "input": arguments}]}


class Script:
    """The model: main-path turns in order; side branches answer on their own."""

    def __init__(self, turns: list[dict[str, Any]]) -> None:
        self.turns = list(turns)

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        texts = user_texts(body)
        if any(t.startswith(SUMMARIZING) for t in texts):
            return {"text": "Summary: notes were read."}
        if any(t.startswith(REFLECTING) for t in texts):
            last = body["messages"][-1]["content"]
            if any(b["type"] == "tool_result" for b in last):  # after its list_files call
                return {"text": "## Read notes first\nThe notes folder holds the facts."}
            return call("Checking the files.", "list_files")
        return self.turns.pop(0) if self.turns else {"text": "(script ended)"}


@pytest.fixture
def server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer(strict_thinking=True) as fake:  # a violation is a 400
        yield fake


def model_on(server: FakeAnthropicServer) -> AnthropicModel:
    return AnthropicModel("claude-test", api_key="k", base_url=server.base_url,
                          sleep=lambda s: None)


def canonical(value: Any) -> str:
    def clean(item: Any) -> Any:
        if isinstance(item, dict):
            return {k: clean(v) for k, v in item.items() if k != "cache_control"}
        if isinstance(item, list):
            return [clean(v) for v in item]
        return item

    return json.dumps(clean(value), sort_keys=True)


def test_thinking_runs_keep_every_prefix_across_skills_reflection_and_level1(workspace, server):
    project = configure(workspace, (
        'goal_compression = "on_complete"\nmax_tokens = 8000\n'
        "[thinking]\nenabled = true\nbudget_tokens = 2000\n"
        "[knowledge]\nenable_completion_extraction = true\n"))
    script = Script([
        call("Planning.", "goal", add="Read the notes"),
        call("Reading a.", "read_file", path="notes/a.md"),
        call("Reading b.", "read_file", path="notes/b.md"),
        call("Done reading.", "goal", done="1", summary="read both notes"),
        {"text": "The first task is done."},
        # second run, after a skill file was added
        call("Planning again.", "goal", add="Follow the new skill"),
        call("Loading it.", "skill", name="tidy"),
        call("Reading a again.", "read_file", path="notes/a.md"),
        call("Finished.", "goal", done="2", summary="followed it"),
        call("One more look.", "read_file", path="notes/b.md"),
        {"text": "The second task is done."},
    ])
    server.enqueue(*[script] * 40)
    runner = project.runner(model_on(server))
    first = runner.run("t", ["Read the notes."])
    assert first.final_text == "The first task is done."

    (workspace / "skills" / "tidy.md").write_text(
        "---\nname: tidy\ndescription: Keep notes tidy.\n---\nOne topic per note.\n")
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "a new skill")
    project = Project.open(workspace)
    second = project.runner(model_on(server)).run("t", ["Now follow the tidy skill."])
    assert second.final_text == "The second task is done."

    bodies = [r.body for r in server.requests]
    assert server.thinking_violations == []
    for body in bodies:
        assert_valid_request(body)
        assert body["thinking"] == THINKING
    assert len({canonical(b["tools"]) for b in bodies}) == 1  # side branches and runs alike
    assert len({canonical(b["system"]) for b in bodies}) == 1
    reflections = [b for b in bodies if any(t.startswith(REFLECTING) for t in user_texts(b))]
    assert len(reflections) == 4  # two branches of two turns each
    assert any(CLEARED in canonical(b["messages"]) for b in bodies)  # Level 1 compressed goal 1
    assert not any(CLEARED in canonical(b["messages"]) for b in bodies[:len(bodies) // 2])

    path = project.trace("t").main_path()
    loaded = next(m for m in path if m.role == "tool" and "# Skill: tidy" in m.text)
    assert "One topic per note." in loaded.text
    answers = [m for m in path if m.role == "assistant"]
    assert all(m.thinking and m.thinking[0]["signature"] == sign_thinking(
        m.thinking[0]["thinking"]) for m in answers)
    assert (workspace / "knowledge" / "read-notes-first.md").exists()
    assert_git_clean(workspace)


def test_within_a_loop_nothing_in_front_of_a_thinking_block_changes(workspace, server):
    """A goal finished in the middle of a tool-use loop is compressed only at the next
    user message, and the earlier turns then go without their thinking blocks."""
    project = configure(workspace, (
        'goal_compression = "on_complete"\nmax_tokens = 8000\n'
        "[thinking]\nenabled = true\nbudget_tokens = 2000\n"))
    server.enqueue(*[Script([
        call("Planning.", "goal", add="Read"),
        call("Reading.", "read_file", path="notes/a.md"),
        call("Done.", "goal", done="1", summary="read"),
        call("Again.", "read_file", path="notes/b.md"),
        {"text": "done"},
        call("Once more.", "read_file", path="notes/a.md"),
        {"text": "done again"},
    ])] * 10)
    runner = project.runner(model_on(server))
    runner.run("t", ["Read."])
    runner.run("t", ["And again."])

    bodies = [r.body for r in server.requests]
    assert server.thinking_violations == []
    first_run, second_run = bodies[:5], bodies[5:]
    assert not any(CLEARED in canonical(b["messages"]) for b in first_run)
    fresh = second_run[0]["messages"]
    assert CLEARED in canonical(fresh)
    assert not any(block["type"] == "thinking" for m in fresh for block in m["content"])
    kept = len(fresh) - 1  # the next request of the loop sends the same turns before it
    assert canonical(second_run[1]["messages"][:kept]) == canonical(fresh[:kept])


def test_level_2_and_level_1_on_overflow_keep_thinking_valid(workspace, server):
    project = configure(workspace, (
        "context_window = 3000\ncompression_threshold = 0.5\nmax_tokens = 8000\n"
        "[thinking]\nenabled = true\nbudget_tokens = 2000\n"))
    turns = []
    for goal in range(1, 5):
        turns += [call("Planning.", "goal", add=f"Task {goal}"),
                  call("Reading.", "read_file", path="notes/a.md"),
                  call("Done.", "goal", done=str(goal), summary="read")]
    server.enqueue(*[Script([*turns, {"text": "all done"}])] * 60)
    result = project.runner(model_on(server)).run("t", ["Work."], max_iterations=40)
    assert result.final_text == "all done"
    bodies = [r.body for r in server.requests]
    assert server.thinking_violations == []
    assert any(t.startswith(SUMMARIZING) for b in bodies for t in user_texts(b))
    assert all(b["thinking"] == THINKING for b in bodies)
    assert_git_clean(workspace)


def test_a_loop_that_began_without_thinking_goes_on_without_it(workspace, server):
    """Declared skills injected at the start of a run make a synthetic assistant turn
    with no thinking block; the API takes one thinking configuration per turn."""
    project = configure(workspace, (
        "max_tokens = 8000\n[thinking]\nenabled = true\nbudget_tokens = 2000\n"))
    (workspace / "skills" / "tidy.md").write_text(
        "---\nname: tidy\ndescription: Keep notes tidy.\n---\nOne topic per note.\n")
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "a skill")
    server.enqueue(*[Script([
        call("Reading.", "read_file", path="notes/a.md"),
        {"text": "done"},
        call("Reading.", "read_file", path="notes/b.md"),
        {"text": "done again"},
    ])] * 10)
    runner = project.runner(model_on(server))
    runner.run("t", ["Read."], inject_skills=["tidy"])
    runner.run("t", ["And again."])
    bodies = [r.body for r in server.requests]
    assert server.thinking_violations == []
    assert ["thinking" in b for b in bodies] == [False, False, True, True]
