"""A new run on a compressed trace reads its main path, not the trace (issue 23, item 4):
the path through `MessageDir.lookup`, `call_index` from trace.json's `iterations`; the
request is the one found from every message file, and hand edits still come first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentfs.core.doctor import diagnose
from agentfs.core.project import Project
from agentfs.store import dirmemory, parsecache
from agentfs.store import message_dir as message_dir_module
from agentfs.store.history import is_model_turn
from agentfs.store.messages import Message, render_message
from agentfs.store.trace import Trace
from agentfs.testing import ScriptedModel
from tests.conftest import assert_git_clean, git, long_trace

COUNT = 301  # messages 1..301, the last an assistant answer
SUMMARY = 264  # a user message whose parent is the first user message, as Level 2 makes it


@pytest.fixture
def root(project: Project) -> Path:
    """A compressed trace (path: 1, 2, SUMMARY..COUNT) after an earlier run."""
    long_trace(project, "t", COUNT, parents={SUMMARY: 2}, commit=True)
    project.runner(ScriptedModel("first answer")).run("t", ["An earlier question."])
    return project.workspace.root


def new_process(root: Path) -> tuple[Project, Trace]:
    dirmemory.forget()  # nothing parsed in memory
    project = Project.open(root)
    return project, project.trace("t")


def count_parses(monkeypatch) -> list[int]:
    parsed: list[int] = []
    real = message_dir_module.load_message

    def counting(path: Path):
        message = real(path)
        parsed.append(message.sequence)
        return message

    monkeypatch.setattr(message_dir_module, "load_message", counting)
    return parsed


def check_request(trace: Trace, model: ScriptedModel) -> None:
    """The run's request is the one built from every message file: its path, and
    `call_index` counted over every file before its answer."""
    request = model.requests[0]
    answer = next(m for m in trace.main_path() if m.text == "second answer")
    messages = trace.messages(refresh=True)
    path = trace.path_to(answer.parent_sequence, messages)
    project = Project.open(trace.workspace.root)
    expected = project.runner(ScriptedModel()).requests.build(trace, path, request.tools)
    assert request.system == expected.system
    # as read from the files (a message the run wrote keeps no `_source` bytes)
    assert [m.model_dump() for m in request.messages] == [m.model_dump() for m in expected.messages]
    assert request.call_index == sum(
        is_model_turn(m) for s, m in messages.items() if s < answer.sequence)


def test_a_resumed_run_on_a_compressed_trace_parses_only_its_path(root: Path, monkeypatch):
    project, trace = new_process(root)
    path = [m.sequence for m in trace.main_path()]
    assert path[:3] == [1, 2, SUMMARY]
    project, trace = new_process(root)
    parsed = count_parses(monkeypatch)
    model = ScriptedModel("second answer")
    result = project.runner(model).run("t", ["A second question."])
    assert result.steps == ["user", "assistant"]
    # the path's files, and below the summary at most the last window the walk
    # back read at once (agentfs/store/message_dir.py:MessageLookup), never the rest
    window = set(range(SUMMARY - message_dir_module.LOOKUP_RUN, SUMMARY))
    assert set(parsed) <= set(path) | window
    assert len(parsed) < 2 * len(path) < COUNT / 3
    check_request(trace, model)
    assert_git_clean(root)


def test_a_run_in_a_fresh_clone_reads_the_count_of_model_turns_from_trace_json(
        root: Path, tmp_path: Path, monkeypatch):
    """A clone has no parse cache, no summary and no saved names: its first run still
    reads only its path, taking `call_index` from trace.json's `iterations`."""
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(root), str(clone))
    assert not (clone / ".git" / "agentfs").exists()
    project, trace = new_process(clone)
    turns = sum(map(is_model_turn, trace.messages().values()))
    assert trace.meta.iterations == turns
    project, trace = new_process(clone)
    scans: list[object] = []
    monkeypatch.setattr(message_dir_module.MessageDir, "_scan",
                        lambda self, key: scans.append(key))  # no listing of every file
    model = ScriptedModel("second answer")
    project.runner(model).run("t", ["A second question."])
    assert scans == []
    assert model.requests[0].call_index == turns
    committed = json.loads(git(clone, "show", "HEAD:traces/t/trace.json"))
    assert committed["iterations"] == turns + 1


@pytest.mark.parametrize("edit", ["removed", "added"])
def test_a_hand_edit_of_the_model_turns_is_counted_and_committed_with_it(root: Path, edit: str):
    """A turn of the model removed by hand, or one added off the path, changes the
    count: the edit's commit counts the files again and holds trace.json with it."""
    project, trace = new_process(root)
    turns = trace.meta.iterations
    if edit == "removed":
        next(trace.messages_dir.rglob("000101-assistant.md")).unlink()  # replaced by the summary
    else:
        answer = Message(id="by-hand", sequence=trace.next_sequence(), parent_sequence=2, role="assistant",
                         content="a turn written by hand")
        trace.message_path(answer).write_bytes(render_message(answer))
    project, trace = new_process(root)
    model = ScriptedModel("second answer")
    result = project.runner(model).run("t", ["A second question."])
    assert result.steps == ["edit", "user", "assistant"]
    expected = turns - 1 if edit == "removed" else turns + 1
    assert model.requests[0].call_index == expected
    edit_commit = git(root, "log", "--format=%H", "-3").split()[-1]
    assert json.loads(git(root, "show", f"{edit_commit}:traces/t/trace.json"))["iterations"] == (
        expected)
    assert diagnose(project.workspace).problems == []
    check_request(trace, model)
    assert_git_clean(root)


def test_a_hand_edit_off_the_path_is_still_committed_first(root: Path):
    project, trace = new_process(root)
    off_path = next(trace.messages_dir.rglob("000100-*.md"))  # replaced by the summary
    off_path.write_text(off_path.read_text().replace("#100", "#100, edited by hand"))
    model = ScriptedModel("second answer")
    result = project.runner(model).run("t", ["A second question."])
    assert result.steps == ["edit", "user", "assistant"]
    subjects = git(root, "log", "--format=%s", "-3").splitlines()
    assert "edit" in subjects[-1] and "000100" in subjects[-1]
    assert "edited by hand" in git(root, "show", f"HEAD~2:{off_path.relative_to(root)}")
    check_request(trace, model)
    assert_git_clean(root)


@pytest.mark.parametrize("caches", ["kept", "cloned"])
def test_a_long_path_after_the_summary_reads_its_own_folders_not_the_trace(
        project: Project, tmp_path: Path, monkeypatch, caches: str):
    """A path that runs on for hundreds of messages after its summary (more than a
    walk's first windows) still reads its own files and folders: no listing of every
    file, no parse cache of a folder it does not reach, before a clone or after it."""
    count, summary = 2300, 2101  # the path: 1, 2, 2101..2300, in folders 0 and 2 of 3
    long_trace(project, "t", count, parents={summary: 2}, commit=True)
    project.runner(ScriptedModel("first answer")).run("t", ["An earlier question."])
    root = project.workspace.root
    if caches == "cloned":
        root = tmp_path / "clone"
        git(tmp_path, "clone", "-q", str(project.workspace.root), str(root))
    project, trace = new_process(root)
    scans: list[object] = []
    monkeypatch.setattr(message_dir_module.MessageDir, "_scan",
                        lambda self, key: scans.append(key))  # no listing of every file
    loaded: list[str] = []
    real_load = parsecache.load
    monkeypatch.setattr(parsecache, "load",
                        lambda path: loaded.append(path.name) or real_load(path))
    parsed = count_parses(monkeypatch)
    model = ScriptedModel("second answer")
    project.runner(model).run("t", ["A second question."])
    assert scans == []
    assert "001000-001999.pickle" not in loaded  # the summary's originals, off the path
    path = {m.sequence for m in trace.main_path()}
    window = set(range(summary - message_dir_module.LOOKUP_RUN, summary))
    assert set(parsed) <= path | window
    if caches == "kept":  # the path's 200 files come from their folders' saved caches,
        # but for the first, smallest windows, which parse their few files instead
        assert len(set(parsed) - {m for m in path if m > count}) <= 2 * parsecache.SAVE_AFTER
    monkeypatch.undo()
    check_request(trace, model)
    assert_git_clean(root)
