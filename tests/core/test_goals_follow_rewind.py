"""Goal state follows the main path: a rewind puts goals.json back as it was then."""

from __future__ import annotations

import json

from agentfs.core.goals import GoalTree
from tests.conftest import assert_git_clean, git, user
from tests.core.test_runner import make_runner


def test_rewinding_before_a_goal_was_done_reopens_it(project, write_script):
    project.new_trace("t", user("plan"))
    runner, _ = make_runner(project, write_script([
        {"tool_calls": [{"name": "goal", "input": {"add": "Research"}},
                        {"name": "goal", "input": {"add": "Sources", "under": "1"}}]},
        {"tool_calls": [{"name": "goal", "input": {"focus": "1.1"}}]},
        {"tool_calls": [{"name": "goal", "input": {"done": "1.1", "summary": "found 3"}}]},
        {"text": "done"},
        {"text": "again"},
    ]))
    runner.run("t")
    trace = project.trace("t")
    goals = trace.dir / "goals.json"
    assert GoalTree.load(goals).find("1.1").status == "done"
    focus_step = next(m for m in trace.main_path() if m.role == "tool"
                      and "focus moved to 1.1" in m.text)
    with trace.lock():
        trace.rewind(focus_step.sequence)
    tree = GoalTree.load(goals)
    assert tree.find("1.1").status == "open" and tree.focus == "1.1"
    assert "goals.json" in git(project.workspace.root, "show", "--stat", "--format=", "HEAD")
    with trace.lock():
        trace.rewind(2)  # before any goal: the file goes
    assert not goals.exists()
    assert json.loads((trace.dir / "trace.json").read_text())["head"] == 2
    assert_git_clean(project.workspace.root)


def test_rewinding_a_fork_before_its_fork_point_puts_its_goals_back_as_they_were_then(
        project, write_script):
    """A fork's earlier steps are its origin's: its goals.json follows a rewind there
    as the origin's did, from the origin's folder as it was then."""
    from agentfs.core.actions import fork

    project.new_trace("t", user("plan"))
    runner, _ = make_runner(project, write_script([
        {"tool_calls": [{"name": "goal", "input": {"add": "Research"}}]},
        {"tool_calls": [{"name": "goal", "input": {"done": "1", "summary": "found 3"}}]},
        {"text": "done"},
    ]))
    runner.run("t")
    source = project.trace("t")
    added = next(m for m in source.main_path() if m.role == "tool" and "added" in m.text)
    copy = fork(source, new_id="f")
    assert GoalTree.load(copy.dir / "goals.json").find("1").status == "done"

    with copy.lock():
        copy.rewind(added.sequence)

    assert GoalTree.load(copy.dir / "goals.json").find("1").status == "open"
    assert "traces/f/goals.json" in git(project.workspace.root, "show", "--stat",
                                        "--format=", "HEAD")
    with copy.lock():
        copy.rewind(2)  # before any goal: the file goes
    assert not (copy.dir / "goals.json").exists()
    assert GoalTree.load(source.dir / "goals.json").find("1").status == "done"  # untouched
    assert_git_clean(project.workspace.root)
