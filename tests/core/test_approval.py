"""Asking before acting: calls of acting tools wait for the person's yes, no or always."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentfs.core.approval import REFUSED, answer_waiting
from agentfs.core.project import Project
from agentfs.core.runner import INTERRUPTED, Runner, StopReason
from agentfs.errors import AgentfsError
from agentfs.models.replay import ReplayModel
from agentfs.store.approval import Answer
from agentfs.store.messages import ToolCall
from agentfs.tools.base import Tool, schema
from tests.conftest import assert_git_clean, git, user

TWO_WRITES = [
    {"text": "Writing.", "tool_calls": [
        {"name": "read_file", "input": {"path": "missing.txt"}},
        {"name": "write_file", "input": {"path": "a.txt", "content": "a\n"}},
        {"name": "write_file", "input": {"path": "b.txt", "content": "b\n"}}]},
    {"text": "Done."},
]


def runner(project: Project, script: Path, **options) -> Runner:
    return Runner(project.workspace, project.repo, ReplayModel(script), config=project.config,
                  approve="acting", **options)


def results(project: Project, trace_id: str = "t1") -> list:
    trace = project.trace(trace_id)
    return [m for m in trace.main_path() if m.role == "tool"]


def test_an_acting_call_waits_in_a_committed_file_and_runs_once_answered(
        project, write_script):
    project.new_trace("t1", user("Write two files."))
    script = write_script(TWO_WRITES)

    first = runner(project, script).run("t1")

    root = project.workspace.root
    assert first.stop is StopReason.APPROVAL
    assert not (root / "a.txt").exists()
    pending = json.loads((root / "traces/t1/approval.json").read_text())
    assert (pending["tool"], pending["input"]["path"], pending["answer"]) == (
        "write_file", "a.txt", None)
    assert "traces/t1/approval.json" in git(root, "show", "--name-only", "HEAD")
    assert git(root, "log", "-1", "--format=%s").startswith("t1: approval")
    assert [m.is_error for m in results(project)] == [True]  # read_file ran: read-only
    assert_git_clean(root)
    trace = project.trace("t1")
    assert trace.waits_for_user() and not trace.unfinished()

    again = runner(project, script).run("t1")  # not answered: still waits, nothing new
    assert again.stop is StopReason.APPROVAL and again.iterations == 0
    assert_git_clean(root)

    pending["answer"] = "yes"  # answered by editing the file
    (root / "traces/t1/approval.json").write_text(json.dumps(pending))
    assert project.trace("t1").unfinished()
    third = runner(project, script).run("t1")

    assert third.stop is StopReason.APPROVAL  # the second write asks in turn
    assert (root / "a.txt").read_text() == "a\n"
    assert json.loads((root / "traces/t1/approval.json").read_text())["input"]["path"] == "b.txt"
    _answer(root, "no")
    last = runner(project, script).run("t1")

    assert last.stop is StopReason.END_TURN
    assert not (root / "b.txt").exists()
    assert [m.text for m in results(project)][2] == REFUSED
    assert not (root / "traces/t1/approval.json").exists()
    assert_git_clean(root)
    assert "traces/t1/approval.json" not in git(root, "ls-files")


def _answer(root: Path, answer: str, trace_id: str = "t1") -> None:
    path = root / f"traces/{trace_id}/approval.json"
    data = json.loads(path.read_text())
    data["answer"] = answer
    path.write_text(json.dumps(data))


def test_always_approves_the_tool_for_the_rest_of_the_run(project, write_script):
    project.new_trace("t1", user("Write two files."))
    script = write_script(TWO_WRITES)
    runner(project, script).run("t1")

    _answer(project.workspace.root, "always")
    result = runner(project, script).run("t1")

    root = project.workspace.root
    assert result.stop is StopReason.END_TURN
    assert (root / "a.txt").exists() and (root / "b.txt").exists()
    assert_git_clean(root)


def test_an_asker_answers_at_once_and_no_file_is_written(project, write_script):
    project.new_trace("t1", user("Write two files."))
    asked: list[str] = []

    def ask(trace_id: str, call: ToolCall) -> Answer:
        asked.append(call.input["path"])
        return Answer.NO if call.input["path"] == "a.txt" else Answer.YES

    result = runner(project, write_script(TWO_WRITES), ask=ask).run("t1")

    root = project.workspace.root
    assert result.stop is StopReason.END_TURN
    assert asked == ["a.txt", "b.txt"]
    assert not (root / "a.txt").exists() and (root / "b.txt").exists()
    assert "approval" not in git(root, "log", "--format=%s")
    assert_git_clean(root)


def test_read_only_tools_and_approve_none_never_ask(project, write_script):
    project.new_trace("t1", user("Write two files."))

    def ask(trace_id: str, call: ToolCall) -> Answer:
        raise AssertionError("asked")

    result = Runner(project.workspace, project.repo, ReplayModel(write_script(TWO_WRITES)),
                    config=project.config, ask=ask).run("t1")  # approve: agentfs.toml's none

    assert result.stop is StopReason.END_TURN


def test_a_tool_not_declared_read_only_is_acting():
    def run(arguments, context):
        return "ok"

    plain = Tool("mcp__x__do", "d", schema({}), run)
    reader = Tool("mcp__x__look", "d", schema({}), run, read_only=True)

    assert plain.acting and not reader.acting


class _Killed(BaseException):
    """Stands for a kill: nothing after it runs."""


def test_a_kill_while_asking_asks_again_and_never_runs_the_call_twice(project, write_script):
    project.new_trace("t1", user("Write."))
    ran: list[str] = []

    def counting(arguments, context):
        ran.append(arguments["path"])
        return "written"

    tool = Tool("write_file", "writes", schema({"path": {"type": "string"}}), counting)
    script = write_script([
        {"text": "Writing.", "tool_calls": [
            {"name": "write_file", "input": {"path": "a.txt", "content": "a"}}]},
        {"text": "Done."}])

    def killed(trace_id: str, call: ToolCall) -> Answer:
        raise _Killed

    with pytest.raises(_Killed):
        runner(project, script, tools=[tool], ask=killed).run("t1")
    assert ran == []

    killed_after_yes: list[str] = []

    def yes_then_kill(trace_id: str, call: ToolCall) -> Answer:
        killed_after_yes.append(call.id)
        return Answer.YES

    def dies(arguments, context):  # the call starts, then the process is killed
        ran.append(arguments["path"])
        raise _Killed

    dying = Tool("write_file", "writes", schema({"path": {"type": "string"}}), dies)
    with pytest.raises(_Killed):
        runner(project, script, tools=[dying], ask=yes_then_kill).run("t1")
    assert ran == ["a.txt"] and len(killed_after_yes) == 1  # asked again after the first kill

    result = runner(project, script, tools=[tool], ask=yes_then_kill).run("t1")

    assert result.stop is StopReason.END_TURN
    assert ran == ["a.txt"]  # started once: answered "interrupted", never run again
    assert results(project)[0].text == INTERRUPTED
    assert_git_clean(project.workspace.root)


def test_a_waiting_call_never_runs_unanswered_in_a_run_without_approval(
        project, write_script):
    project.new_trace("t1", user("Write two files."))
    script = write_script(TWO_WRITES)
    runner(project, script).run("t1")
    plain = Runner(project.workspace, project.repo, ReplayModel(script),
                   config=project.config)  # agentfs.toml's approve: none

    result = plain.run("t1", ["and then a third"])

    root = project.workspace.root
    assert result.stop is StopReason.APPROVAL
    assert not (root / "a.txt").exists()
    kept = list((root / "traces/t1/inbox").glob("*.md"))
    assert [p.read_text() for p in kept] == ["and then a third"]  # waits behind the call
    assert project.trace("t1").waits_for_user()


def test_a_call_asked_about_when_the_run_died_is_asked_again_without_approval(
        project, write_script):
    project.new_trace("t1", user("Write two files."))
    script = write_script(TWO_WRITES)

    def killed(trace_id: str, call: ToolCall) -> Answer:
        raise _Killed

    with pytest.raises(_Killed):
        runner(project, script, ask=killed).run("t1")
    plain = Runner(project.workspace, project.repo, ReplayModel(script),
                   config=project.config)

    result = plain.run("t1")

    root = project.workspace.root
    assert result.stop is StopReason.APPROVAL
    assert not (root / "a.txt").exists()
    assert json.loads((root / "traces/t1/approval.json").read_text())["input"]["path"] == "a.txt"
    assert_git_clean(root)


def _edit_call(root: Path, old: str, new: str) -> None:
    """Change a waiting call's input in its committed message file, and commit it (as
    a pull or a person with `git commit` would)."""
    [file] = [p for p in (root / "traces/t1/messages").rglob("*-assistant.md")
              if old in p.read_text()]
    file.write_text(file.read_text().replace(old, new))
    git(root, "commit", "-qam", "changed the waiting call")


def test_a_waiting_call_changed_by_a_commit_is_refused_not_run_once_approved(
        project, write_script):
    """What the person approves is what the model asked for: a call whose input was
    changed after agentfs received it is not the call received, whatever approves it."""
    project.new_trace("t1", user("Write two files."))
    runner(project, write_script(TWO_WRITES)).run("t1")
    root = project.workspace.root
    _edit_call(root, "path: a.txt", "path: evil.txt")
    _answer(root, "yes")  # the approval shows a.txt, as the model asked
    head = git(root, "rev-parse", "HEAD")

    with pytest.raises(AgentfsError, match="as they stand") as info:
        runner(project, write_script(TWO_WRITES)).run("t1")

    assert "--pending-tools" in str(info.value)
    assert not (root / "evil.txt").exists() and not (root / "a.txt").exists()
    assert git(root, "log", "--format=%s", f"{head.strip()}..").startswith("t1: edit")
    assert_git_clean(root)  # the answer, a hand edit, is committed as one


def test_an_approval_file_edited_to_show_another_call_answers_nothing(
        project, write_script):
    """approval.json is what the person reads: an answer given to a file that shows
    another input than the waiting call's is refused, and the run asks again about
    the call as it stands."""
    project.new_trace("t1", user("Write two files."))
    script = write_script(TWO_WRITES)
    runner(project, script).run("t1")
    root = project.workspace.root
    path = root / "traces/t1/approval.json"
    shown = json.loads(path.read_text())
    shown["input"]["path"] = "harmless.txt"
    path.write_text(json.dumps(shown))

    with pytest.raises(AgentfsError, match="shows a call to write_file that no message"):
        answer_waiting(project.trace("t1"), Answer.YES)
    _answer(root, "yes")  # answered in the edited file by hand
    result = runner(project, script).run("t1")

    assert result.stop is StopReason.APPROVAL  # asked again, not run
    assert not (root / "a.txt").exists() and not (root / "harmless.txt").exists()
    again = json.loads(path.read_text())
    assert (again["input"]["path"], again["answer"]) == ("a.txt", None)
    assert_git_clean(root)


def test_a_call_changed_by_a_commit_after_a_crash_is_not_run_on_resume(project, write_script):
    project.new_trace("t1", user("Write two files."))
    script = write_script(TWO_WRITES)

    def killed(trace_id: str, call: ToolCall) -> Answer:
        raise _Killed

    with pytest.raises(_Killed):  # the turn received and committed, no call run yet
        runner(project, script, ask=killed).run("t1")
    root = project.workspace.root
    _edit_call(root, "path: b.txt", "path: evil.txt")

    with pytest.raises(AgentfsError, match="as they stand"):
        Runner(project.workspace, project.repo, ReplayModel(script),
               config=project.config).run("t1")

    assert not (root / "evil.txt").exists() and not (root / "b.txt").exists()
