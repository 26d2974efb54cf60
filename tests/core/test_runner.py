"""The runner on real workspaces with the replay model."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from agentfs.core.project import Project
from agentfs.core.runner import INTERRUPTED, Runner
from agentfs.errors import AgentfsError
from agentfs.models.base import ModelRequest, ModelResponse
from agentfs.models.replay import ReplayModel
from agentfs.store.commits import parse_trailers
from tests.conftest import assert_git_clean, git, user

WRITE_THEN_ANSWER = [
    {"text": "Writing.", "tool_calls": [
        {"name": "write_file", "input": {"path": "out/hello.txt", "content": "hello\n"}}]},
    {"text": "Reading back.", "tool_calls": [
        {"name": "read_file", "input": {"path": "out/hello.txt"}},
        {"name": "read_file", "input": {"path": "missing.txt"}}]},
    {"text": "All done."},
]


class RecordingModel:
    """Wraps a model and keeps every request it was given."""

    def __init__(self, inner: ReplayModel) -> None:
        self.inner = inner
        self.name = inner.name
        self.requests: list[ModelRequest] = []

    def complete(self, request: ModelRequest, on_text=None) -> ModelResponse:
        self.requests.append(request)
        return self.inner.complete(request, on_text)


def make_runner(project: Project, script: Path) -> tuple[Runner, RecordingModel]:
    model = RecordingModel(ReplayModel(script))
    return Runner(project.workspace, project.repo, model, config=project.config), model


def test_run_commits_every_step_with_trailers_and_tool_files(project, write_script):
    project.new_trace("t1", user("Say hello into a file."))
    runner, _ = make_runner(project, write_script(WRITE_THEN_ANSWER))

    result = runner.run("t1")

    assert result.stop == "end_turn"
    assert result.iterations == 3
    assert result.final_text == "All done."
    root = project.workspace.root
    assert_git_clean(root)
    subjects = git(root, "log", "--format=%s").splitlines()
    assert subjects[:6] == [
        "t1: assistant #8 All done.",
        "t1: tool #7 2 tool results",
        "t1: assistant #5 Reading back.",
        "t1: tool #4 created out/hello.txt (6 bytes)",
        "t1: assistant #3 Writing.",
        "t1: user #2 Say hello into a file.",
    ]
    for sha in git(root, "log", "--format=%H", "-6").split():
        trailers = parse_trailers(git(root, "log", "-1", "--format=%B", sha))
        assert trailers["Agentfs-Trace"] == "t1"
        assert trailers["Agentfs-Kind"] in {"assistant", "tool", "user"}
    # the tool step's commit holds the file the tool wrote
    tool_commit = git(root, "log", "--format=%H", "--grep", "^t1: tool #4").strip()
    changed = git(root, "show", "--name-only", "--format=", tool_commit).split()
    assert "out/hello.txt" in changed
    assert "traces/t1/messages/000000-000999/000004-tool.md" in changed
    # a failing tool is an error result, not a crash
    path = project.trace("t1").main_path()
    errors = [m for m in path if m.role == "tool" and m.is_error]
    assert len(errors) == 1 and "missing.txt" in errors[0].text


def test_requests_carry_system_prompt_tools_and_call_index(project, write_script):
    project.new_trace("t1", user("go"))
    runner, model = make_runner(project, write_script(WRITE_THEN_ANSWER))
    runner.run("t1")
    assert [r.call_index for r in model.requests] == [0, 1, 2]
    first = model.requests[0]
    assert first.system.startswith("You are an agent")
    assert [m.role for m in first.messages] == ["user"]
    assert {t.name for t in first.tools} >= {"read_file", "write_file", "edit_file", "grep"}
    # each request extends the previous one
    for earlier, later in itertools.pairwise(model.requests):
        assert [m.sequence for m in later.messages][: len(earlier.messages)] == [
            m.sequence for m in earlier.messages
        ]


def test_edit_is_committed_and_seen_by_the_model(project, write_script):
    project.new_trace("t1", user("original question"))
    runner, model = make_runner(project, write_script([{"text": "a1"}, {"text": "a2"}]))
    runner.run("t1")
    first_user = project.workspace.root / "traces/t1/messages/000000-000999/000002-user.md"
    first_user.write_text(first_user.read_text().replace("original question", "edited question"))

    runner.run("t1", ["follow-up"])

    root = project.workspace.root
    assert "t1: edit" in git(root, "log", "--format=%s")
    sent = model.requests[-1].messages
    assert sent[0].text == "edited question"
    assert sent[-1].text == "follow-up"
    assert_git_clean(root)


def test_rewind_then_run_continues_from_rewound_point(project, write_script):
    project.new_trace("t1", user("q1"))
    runner, model = make_runner(project, write_script([{"text": "a1"}, {"text": "a2"}]))
    runner.run("t1")  # #3 a1
    runner.run("t1", ["q2"])  # #4 q2, #5 a2
    trace = project.trace("t1")
    with trace.lock():
        trace.rewind(3)
    runner.run("t1", ["q2 again"])

    path = [m.sequence for m in project.trace("t1").main_path()]
    assert path == [1, 2, 3, 6, 7]
    assert {4, 5} <= set(project.trace("t1").messages())  # still on disk, off the path
    assert [m.text for m in model.requests[-1].messages] == ["q1", "a1", "q2 again"]
    assert_git_clean(project.workspace.root)


def test_nothing_to_do_and_max_iterations(project, write_script):
    project.new_trace("t1", user("go"))
    looping = [{"text": "", "tool_calls": [{"name": "list_files", "input": {}}]}] * 5
    runner, _ = make_runner(project, write_script(looping))
    result = runner.run("t1", max_iterations=2)
    assert (result.stop, result.iterations) == ("max_iterations", 2)
    result = runner.run("t1", max_iterations=10)
    assert result.iterations == 4  # 3 scripted turns left, then the exhausted-script text
    assert "no more 'turns' entries" in result.final_text
    assert runner.run("t1").stop == "nothing_to_do"


def test_trace_without_user_message_is_an_error(project, write_script):
    project.new_trace("t1", user("go"))
    trace = project.trace("t1")
    with trace.lock():
        trace.rewind(1)
    runner, _ = make_runner(project, write_script([]))
    with pytest.raises(AgentfsError, match="no user message"):
        runner.run("t1")


def test_inbox_files_are_ingested_before_running(project, write_script):
    project.new_trace("t1", user("go"))
    inbox = project.workspace.root / "traces/t1/inbox"
    inbox.mkdir(exist_ok=True)
    (inbox / "later.md").write_text("a dropped message\n")
    (inbox / ".later.md.swp").write_bytes(b"vim swap")
    runner, model = make_runner(project, write_script([{"text": "seen"}]))
    runner.run("t1")
    assert [m.text for m in model.requests[0].messages] == ["go", "a dropped message"]
    assert not (inbox / "later.md").exists()
    assert (inbox / ".later.md.swp").exists()  # editor files are left alone


def test_tool_call_started_before_a_crash_is_answered_interrupted_not_rerun(project, write_script):
    project.new_trace("t1", user("go"))
    script = write_script([
        {"tool_calls": [{"name": "write_file", "input": {"path": "a.txt", "content": "A"}},
                        {"name": "write_file", "input": {"path": "b.txt", "content": "B"}}]},
        {"text": "ok"},
    ])
    runner, _ = make_runner(project, script)
    runner.run("t1", max_iterations=1)  # assistant + both results
    trace = project.trace("t1")
    # Simulate a crash: the assistant turn is committed and its calls recorded as
    # received; the first may have started, neither result was written.
    with trace.lock():
        trace.rewind(2)
    assistant = trace.new_message(
        "assistant", "", tool_calls=trace.messages()[3].tool_calls, model="replay"
    )
    with trace.lock():
        trace.mark_received(assistant.tool_calls)  # as the runner does
        trace.commit_step("assistant", [assistant])
    (project.workspace.root / "a.txt").unlink()
    (project.workspace.root / "b.txt").unlink()

    runner.run("t1", max_iterations=1)

    path = project.trace("t1").main_path()
    results = [m for m in path if m.role == "tool" and m.parent_sequence is not None
               and m.sequence > assistant.sequence]
    assert results[0].text == INTERRUPTED and results[0].is_error
    assert results[1].text.startswith("created b.txt")
    assert not (project.workspace.root / "a.txt").exists()  # not run a second time
    assert (project.workspace.root / "b.txt").read_text() == "B"


def test_after_a_crash_only_the_call_that_may_have_been_running_is_interrupted(
        project, write_script):
    """One in-flight record per step: calls run in order, each result is written
    before the next call starts, so the first call without a result is the only one
    that may have started."""
    project.new_trace("t1", user("go"))
    calls = [{"name": "write_file", "input": {"path": f"{n}.txt", "content": n}}
             for n in "abc"]
    runner, _ = make_runner(project, write_script([{"tool_calls": calls}, {"text": "ok"}]))
    runner.run("t1", max_iterations=1)
    trace = project.trace("t1")
    with trace.lock():
        trace.rewind(2)
    root = project.workspace.root
    for n in "bc":
        (root / f"{n}.txt").unlink()
    git(root, "commit", "-qam", "start over without b.txt and c.txt")
    # The crash: the turn committed, the call to a.txt done and its result written,
    # the call to b.txt maybe running when the process died.
    assistant = trace.new_message(
        "assistant", "", tool_calls=trace.messages()[3].tool_calls, model="replay")
    with trace.lock():
        trace.mark_received(assistant.tool_calls)
        trace.commit_step("assistant", [assistant])
        first = trace.new_message("tool", "created a.txt (1 bytes)",
                                  tool_call_id=assistant.tool_calls[0].id)
        first.parent_sequence = assistant.sequence
        trace.write_message(first)

    runner.run("t1", max_iterations=1)

    path = project.trace("t1").main_path()
    results = [m for m in path if m.role == "tool" and m.sequence > assistant.sequence]
    assert [r.tool_call_id for r in results] == [c.id for c in assistant.tool_calls]
    assert results[0].text == "created a.txt (1 bytes)"  # adopted, not run again
    assert results[1].text == INTERRUPTED and results[1].is_error
    assert results[2].text.startswith("created c.txt")
    assert not (root / "b.txt").exists()  # never run twice
    assert (root / "c.txt").read_text() == "c"
    assert not trace.in_flight().received  # the record ends with its step
    assert_git_clean(root)


def test_the_in_flight_record_says_which_calls_may_have_started():
    from agentfs.store.inflight import InFlight

    record = InFlight(received=["a", "b", "c"])
    assert record.may_have_started(["a", "b", "c"]) == {"a"}
    assert record.may_have_started(["c"]) == {"c"}
    assert record.may_have_started([]) == set()
    assert InFlight().may_have_started(["a", "b"]) == set()  # not received: not ours
    legacy = InFlight(received=["a", "b"], started=["a"])  # written call by call
    assert legacy.may_have_started(["a", "b"]) == {"a"}


def head_with_foreign_calls(project, write_script):
    """A trace whose head is an assistant turn with tool calls agentfs never received
    (as after `git checkout` of a trace or an edit of trace.json's head)."""
    project.new_trace("t1", user("go"))
    script = write_script([
        {"tool_calls": [{"name": "write_file", "input": {"path": "a.txt", "content": "A"}}]},
        {"text": "ok"}, {"text": "ok"},
    ])
    runner, _ = make_runner(project, script)
    runner.run("t1", max_iterations=1)
    (project.workspace.root / "a.txt").unlink()
    git(project.workspace.root, "commit", "-qam", "remove a.txt")
    meta_path = project.workspace.root / "traces/t1/trace.json"
    meta = json.loads(meta_path.read_text())
    meta["head"] = 3  # the assistant turn, before its result
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    return runner


def test_tool_calls_agentfs_did_not_receive_are_refused_before_anything_runs(
        project, write_script):
    runner = head_with_foreign_calls(project, write_script)
    root = project.workspace.root
    before = git(root, "rev-parse", "HEAD").strip()
    with pytest.raises(AgentfsError, match="did not just receive") as info:
        runner.run("t1")
    assert "--pending-tools" in str(info.value)
    assert not (root / "a.txt").exists()  # not run
    assert "edit" in git(root, "log", "-1", "--format=%s")  # the head edit is recorded
    assert git(root, "rev-list", "--count", f"{before}..HEAD").strip() == "1"


@pytest.mark.parametrize("choice", ["run", "skip"])
def test_pending_tools_can_be_run_or_answered_as_not_run(project, write_script, choice):
    runner = head_with_foreign_calls(project, write_script)
    runner.run("t1", pending_tools=choice)
    path = project.trace("t1").main_path()
    result = next(m for m in path if m.role == "tool" and m.sequence > 3)
    assert result.parent_sequence == 3
    if choice == "run":
        assert (project.workspace.root / "a.txt").read_text() == "A"
    else:
        assert result.is_error and result.text.startswith("not run")
        assert not (project.workspace.root / "a.txt").exists()
    assert path[-1].role == "assistant"
    assert_git_clean(project.workspace.root)


def test_rewind_never_leaves_tool_calls_unanswered(project, write_script):
    project.new_trace("t1", user("go"))
    script = write_script([
        {"tool_calls": [{"name": "write_file", "input": {"path": "a.txt", "content": "A"}},
                        {"name": "write_file", "input": {"path": "b.txt", "content": "B"}}]},
        {"text": "ok"},
    ])
    runner, _ = make_runner(project, script)
    runner.run("t1")  # 3 assistant, 4 and 5 results, 6 answer
    trace = project.trace("t1")
    for target in (3, 4):
        with trace.lock(), pytest.raises(AgentfsError) as caught:
            trace.rewind(target)
        assert "#5 (its last result)" in str(caught.value)
        assert "#2 (before the call)" in str(caught.value)
    with trace.lock():
        trace.rewind(5)
    assert trace.meta.head == 5
