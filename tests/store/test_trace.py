"""Traces on disk: the main path, rewind and recovery of uncommitted work."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from agentfs.core.project import Project
from agentfs.errors import AgentfsError, MessageFileError
from agentfs.store.commits import parse_trailers
from agentfs.store.messages import ToolCall
from agentfs.store.trace import FORMAT_VERSION, Trace, TraceMeta
from tests.conftest import assert_git_clean, git, user


@pytest.fixture
def trace(project: Project) -> Trace:
    """A trace holding #1 system and #2 user ("hello"), both committed."""
    return project.new_trace("demo", user("hello"))


def fresh(project: Project) -> Trace:
    """The trace as a new process (a later `agentfs run`) would open it."""
    return Project.open(project.workspace.root).trace("demo")


def sequences(messages) -> list[int]:
    return [m.sequence for m in messages]


def last_commit(root: Path) -> tuple[str, dict[str, str]]:
    body = git(root, "log", "-1", "--format=%B")
    return body.splitlines()[0], parse_trailers(body)


def commit_count(root: Path) -> int:
    return int(git(root, "rev-list", "--count", "HEAD"))


def set_head(trace: Trace, sequence: int) -> None:
    trace.meta.head = sequence
    trace.save_meta()


def build(trace: Trace, *roles: str) -> None:
    """Commit one message per role, each continuing the head."""
    for role in roles:
        message = trace.new_message(role, f"{role} #{trace.next_sequence()}")
        trace.commit_step(role, [message])


# --- the main path ---------------------------------------------------------


def test_main_path_follows_parent_sequence(trace: Trace) -> None:
    build(trace, "assistant", "user", "assistant")  # #3, #4, #5
    assert sequences(trace.main_path()) == [1, 2, 3, 4, 5]
    # #6 answers #2 differently: a second path through the same files.
    other = trace.new_message("assistant", "another answer")
    other.parent_sequence = 2
    trace.commit_step("assistant", [other])
    assert trace.meta.head == 6
    assert sequences(trace.main_path()) == [1, 2, 6]
    assert sequences(trace.path_to(5)) == [1, 2, 3, 4, 5]
    assert [m.content for m in trace.main_path()] == [
        trace.messages()[1].content,
        "hello",
        "another answer",
    ]


def test_message_without_parent_follows_the_previous_file(trace: Trace) -> None:
    # Files a person writes by hand carry no frontmatter, so no parent_sequence.
    (trace.messages_dir / "000000-000999/000003-assistant.md").write_text("a reply I wrote myself\n")
    (trace.messages_dir / "000000-000999/000007-user.md").write_text("and a question\n")  # gap: 4-6 unused
    set_head(trace, 7)
    path = trace.main_path()
    assert sequences(path) == [1, 2, 3, 7]
    assert [m.role for m in path] == ["system", "user", "assistant", "user"]
    assert path[-1].content == "and a question"
    # The next message continues after the highest file.
    assert trace.new_message("assistant", "x").sequence == 8


def test_missing_parent_is_a_clear_error(trace: Trace) -> None:
    (trace.messages_dir / "000000-000999/000003-assistant.md").write_text("---\nparent_sequence: 9\n---\nreply\n")
    set_head(trace, 3)
    with pytest.raises(AgentfsError) as info:
        trace.main_path()
    assert "#9" in info.value.message
    assert "000003-assistant.md" in info.value.message
    assert info.value.hint

    set_head(trace, 42)
    with pytest.raises(AgentfsError) as info:
        trace.main_path()
    assert "#42" in info.value.message and "trace.json" in info.value.message
    assert "rewind" in (info.value.hint or "")


def test_parent_cycle_is_a_clear_error(trace: Trace) -> None:
    (trace.messages_dir / "000000-000999/000003-assistant.md").write_text("---\nparent_sequence: 4\n---\na\n")
    (trace.messages_dir / "000000-000999/000004-user.md").write_text("---\nparent_sequence: 3\n---\nb\n")
    set_head(trace, 4)
    with pytest.raises(AgentfsError) as info:
        trace.main_path()
    assert "cycle" in info.value.message
    assert str(trace.messages_dir) in info.value.message
    assert "parent_sequence" in (info.value.hint or "")


def test_self_parent_is_a_cycle(trace: Trace) -> None:
    (trace.messages_dir / "000000-000999/000003-user.md").write_text("---\nparent_sequence: 3\n---\nme\n")
    set_head(trace, 3)
    with pytest.raises(AgentfsError, match="cycle"):
        trace.main_path()


def test_duplicate_sequence_names_the_files(trace: Trace) -> None:
    (trace.messages_dir / "000000-000999/000003-user.md").write_text("one\n")
    (trace.messages_dir / "000000-000999/000003-assistant.md").write_text("two\n")
    with pytest.raises(MessageFileError) as info:
        trace.messages()
    names = {"000003-user.md", "000003-assistant.md"}
    assert info.value.path.name in names
    assert str(info.value.path) in str(info.value)
    other = (names - {info.value.path.name}).pop()
    assert other in info.value.message
    assert "rename" in (info.value.hint or "")


def test_symlinked_message_file_is_refused(tmp_path: Path, trace: Trace) -> None:
    outside = tmp_path / "outside.md"
    outside.write_text("secret\n")
    (trace.messages_dir / "000000-000999/000003-user.md").symlink_to(outside)
    with pytest.raises(MessageFileError) as info:
        trace.messages()
    assert info.value.path.name == "000003-user.md"
    assert "symlink" in info.value.message


def test_a_workspace_file_is_never_written_through_a_linked_folder(
        project: Project, trace: Trace, tmp_path: Path) -> None:
    """As a reflection writes `knowledge/<item>.md`, where a clone brought a link."""
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.rmtree(project.workspace.root / "knowledge")
    (project.workspace.root / "knowledge").symlink_to(outside)
    with pytest.raises(MessageFileError, match="is a symlink, not a folder"):
        trace.write_file("knowledge/lesson.md", b"---\ntitle: x\n---\n")
    assert list(outside.iterdir()) == []


def test_a_step_landing_while_a_view_lists_is_off_its_path_not_a_missing_parent(
        project: Project, trace: Trace, monkeypatch: pytest.MonkeyPatch) -> None:
    """A view reads the head before the files: another process's step written between
    the two reads (its file, then trace.json) is simply not on the path yet."""
    viewer = fresh(project)
    listed = Trace.messages

    def listing_then_a_step_lands(self: Trace, **kwargs: object) -> dict:
        found = listed(self, **kwargs)
        if self is viewer:
            writer = fresh(project)
            with writer.lock():
                build(writer, "assistant")  # #3, and trace.json's head moves to it
        return found

    monkeypatch.setattr(Trace, "messages", listing_then_a_step_lands)
    view = viewer.view()
    assert sequences(view.path) == [1, 2]
    assert fresh(project).meta.head == 3


def test_newer_format_version_is_refused(project: Project, trace: Trace) -> None:
    data = json.loads(trace.meta_path.read_text())
    data["format_version"] = 99
    trace.meta_path.write_text(json.dumps(data))
    with pytest.raises(AgentfsError) as info:
        fresh(project).main_path()
    assert str(trace.meta_path) in info.value.message
    assert "newer agentfs" in info.value.message and "99" in info.value.message
    assert "upgrade" in (info.value.hint or "")


def test_broken_trace_json_is_a_clear_error(project: Project, trace: Trace) -> None:
    trace.meta_path.write_text("{not json")
    with pytest.raises(AgentfsError) as info:
        _ = fresh(project).meta
    assert str(trace.meta_path) in info.value.message
    assert "git checkout HEAD -- traces/demo/trace.json" in (info.value.hint or "")

    trace.meta_path.write_text('{"id": "demo", "head": "two"}')
    with pytest.raises(AgentfsError) as info:
        _ = fresh(project).meta
    assert "head" in info.value.message


# --- rewind -----------------------------------------------------------------


def test_rewind_moves_the_head_and_keeps_later_files(project: Project, trace: Trace) -> None:
    root = project.workspace.root
    build(trace, "assistant", "user", "assistant", "user")  # #3..#6
    trace.rewind(4)

    subject, trailers = last_commit(root)
    assert subject.startswith("demo: rewind #4")
    assert trailers["Agentfs-Kind"] == "rewind"
    assert trailers["Agentfs-Sequence"] == "4"
    assert_git_clean(root)

    reopened = fresh(project)
    assert reopened.meta.head == 4
    assert sequences(reopened.main_path()) == [1, 2, 3, 4]
    for name in ("000005-assistant.md", "000006-user.md"):
        assert (trace.messages_dir / "000000-000999" / name).is_file()
        assert git(root, "ls-files", f"traces/demo/messages/000000-000999/{name}") != ""

    again = reopened.new_message("assistant", "a different answer")
    assert (again.sequence, again.parent_sequence) == (7, 4)
    reopened.commit_step("assistant", [again])
    assert sequences(fresh(project).main_path()) == [1, 2, 3, 4, 7]
    assert_git_clean(root)


def test_rewind_onto_unanswered_tool_calls_is_refused(project: Project, trace: Trace) -> None:
    root = project.workspace.root
    call = trace.new_message(
        "assistant", "let me look", tool_calls=[ToolCall(id="c1", name="read", input={"path": "x"})]
    )
    trace.commit_step("assistant", [call])  # #3
    result = trace.new_message("tool", "contents", tool_call_id="c1")
    trace.commit_step("tool", [result])  # #4
    build(trace, "assistant")  # #5
    before = git(root, "rev-parse", "HEAD")

    with pytest.raises(AgentfsError) as info:
        trace.rewind(3)
    assert "#3" in info.value.message and "read" in info.value.message
    assert "#4" in (info.value.hint or "")
    with pytest.raises(AgentfsError) as info:
        trace.rewind(99)
    assert "#99" in info.value.message

    assert git(root, "rev-parse", "HEAD") == before
    assert fresh(project).meta.head == 5
    assert_git_clean(root)

    trace.rewind(4)  # after the results is fine
    assert fresh(project).meta.head == 4


# --- recover ----------------------------------------------------------------


def test_recover_commits_user_edits(project: Project, trace: Trace) -> None:
    root = project.workspace.root
    path = trace.messages_dir / "000000-000999/000002-user.md"
    path.write_bytes(path.read_bytes().replace(b"hello", b"hello, but in French"))
    before = commit_count(root)

    assert fresh(project).recover() == ["edit"]
    subject, trailers = last_commit(root)
    assert subject == "demo: edit #2 messages/000000-000999/000002-user.md"
    assert trailers == {"Agentfs-Trace": "demo", "Agentfs-Sequence": "2", "Agentfs-Kind": "edit"}
    assert commit_count(root) == before + 1
    assert_git_clean(root)
    assert fresh(project).main_path()[-1].content == "hello, but in French"
    assert fresh(project).recover() == []
    assert commit_count(root) == before + 1


def test_recover_with_nothing_to_do_commits_nothing(project: Project, trace: Trace) -> None:
    root = project.workspace.root
    before = git(root, "rev-parse", "HEAD")
    assert fresh(project).recover() == []
    assert git(root, "rev-parse", "HEAD") == before


def test_recover_adopts_a_new_message_continuing_the_head(project: Project, trace: Trace) -> None:
    root = project.workspace.root
    (trace.messages_dir / "000000-000999/000003-user.md").write_text("one more thing\n")

    reopened = fresh(project)
    assert reopened.recover() == ["recover"]
    subject, trailers = last_commit(root)
    assert subject.startswith("demo: recover #3")
    assert trailers["Agentfs-Kind"] == "recover"
    assert_git_clean(root)

    reopened = fresh(project)
    assert reopened.meta.head == 3
    path = reopened.main_path()
    assert sequences(path) == [1, 2, 3]
    assert (path[-1].role, path[-1].content, path[-1].parent_sequence) == (
        "user",
        "one more thing",
        2,
    )
    assert reopened.recover() == []


def test_a_recover_commit_s_subject_counts_its_files_in_words(
        project: Project, trace: Trace) -> None:
    folder = trace.messages_dir / "000000-000999"
    (folder / "000003-assistant.md").write_text("an answer left by a crash\n")
    assert fresh(project).recover() == ["recover"]
    assert last_commit(project.workspace.root)[0].endswith("adopted 1 uncommitted message file")

    (folder / "000004-user.md").write_text("one more thing\n")
    (folder / "000005-assistant.md").write_text("and its answer\n")
    assert fresh(project).recover() == ["recover"]
    assert last_commit(project.workspace.root)[0].endswith("adopted 2 uncommitted message files")


def test_recover_adopts_and_commits_edits_separately(project: Project, trace: Trace) -> None:
    root = project.workspace.root
    first = trace.messages_dir / "000000-000999/000002-user.md"
    first.write_bytes(first.read_bytes().replace(b"hello", b"hi there"))
    (trace.messages_dir / "000000-000999/000003-assistant.md").write_text("an answer left by a crash\n")
    before = commit_count(root)

    assert fresh(project).recover() == ["recover", "edit"]
    assert commit_count(root) == before + 2
    kinds = git(root, "log", "-2", "--format=%(trailers:key=Agentfs-Kind,valueonly)%x00")
    assert [k.strip() for k in kinds.split("\x00") if k.strip()] == ["edit", "recover"]
    assert_git_clean(root)
    path = fresh(project).main_path()
    assert [m.content for m in path[1:]] == ["hi there", "an answer left by a crash"]


def test_recover_adopts_an_interrupted_tool_step_with_its_files(
    project: Project, trace: Trace
) -> None:
    root = project.workspace.root
    calls = trace.new_message(
        "assistant", "", tool_calls=[ToolCall(id="a", name="write"), ToolCall(id="b", name="read")]
    )
    trace.commit_step("assistant", [calls])  # #3
    before = commit_count(root)
    # Killed inside commit_step of the tool step: results and trace.json written,
    # the file the tool wrote is on disk, nothing committed.
    (root / "out.txt").write_text("tool output\n")
    first = trace.new_message("tool", "wrote out.txt", tool_call_id="a", files_changed=["out.txt"])
    second = trace.new_message("tool", "read it", tool_call_id="b")
    second.parent_sequence = first.sequence
    trace.write_message(first)
    trace.write_message(second)
    set_head(trace, second.sequence)

    assert fresh(project).recover() == ["recover"]
    assert commit_count(root) == before + 1
    shown = git(root, "show", "--name-only", "--format=", "HEAD").split()
    assert "out.txt" in shown
    assert "traces/demo/messages/000000-000999/000004-tool.md" in shown
    assert "traces/demo/messages/000000-000999/000005-tool.md" in shown
    assert sequences(fresh(project).main_path()) == [1, 2, 3, 4, 5]
    assert_git_clean(root)


def test_recover_after_a_crash_while_creating_a_trace(project: Project) -> None:
    # Killed inside the first commit_step of a new trace: the system message and
    # trace.json (head 1) are written, nothing of the trace is committed yet.
    root = project.workspace.root
    created = Trace.create(project.workspace, project.repo, TraceMeta(id="demo"))
    system = created.new_message("system", "You are helpful.")
    created.write_message(system)
    created.meta.head = system.sequence
    created.meta.next_sequence = system.sequence + 1
    created.save_meta()

    assert fresh(project).recover() == ["recover"]
    reopened = fresh(project)
    path = reopened.main_path()
    assert sequences(path) == [1]
    assert path[0].parent_sequence is None
    assert path[0].content == "You are helpful."
    assert_git_clean(root)


def test_deleting_a_message_on_the_main_path_is_refused_before_anything_is_committed(
        project: Project, trace: Trace) -> None:
    root = project.workspace.root
    before = git(root, "rev-parse", "HEAD")
    (trace.messages_dir / "000000-000999/000002-user.md").unlink()
    with pytest.raises(AgentfsError) as info, fresh(project).lock():
        fresh(project).recover()
    assert "needs message #2" in str(info.value) and "were not committed" in str(info.value)
    assert "git checkout HEAD -- traces/demo/messages/000000-000999/000002-user.md" in str(info.value)
    assert git(root, "rev-parse", "HEAD") == before
    git(root, "checkout", "--", "traces/demo/messages/000000-000999/000002-user.md")  # the hint works
    assert fresh(project).recover() == []
    assert_git_clean(root)


def _tool_step(trace: Trace) -> tuple[str, str]:
    """#3 assistant calling `read` (id "c1"), #4 its result, committed; their paths."""
    call = trace.new_message("assistant", "let me look",
                             tool_calls=[ToolCall(id="c1", name="read", input={"path": "a"})])
    trace.commit_step("assistant", [call])
    result = trace.new_message("tool", "contents of a", tool_call_id="c1")
    trace.commit_step("tool", [result])
    return (trace.rel(trace.message_path(call)), trace.rel(trace.message_path(result)))


@pytest.mark.parametrize("edit", ["first dashes deleted", "calls removed", "call renamed",
                                  "result repointed"])
def test_an_edit_that_changes_tool_calls_or_their_pairing_is_refused_before_any_commit(
        project: Project, trace: Trace, edit: str) -> None:
    root = project.workspace.root
    call_path, result_path = _tool_step(trace)
    path = call_path if edit != "result repointed" else result_path
    data = (root / path).read_bytes()
    if edit == "first dashes deleted":  # the YAML becomes body text, the calls vanish
        assert data.startswith(b"---\n")
        changed = data[len(b"---\n"):]
    elif edit == "calls removed":
        changed = data.replace(b"tool_calls:", b"old_calls:")
    elif edit == "call renamed":
        changed = data.replace(b"name: read", b"name: bash")
    else:
        changed = data.replace(b"tool_call_id: c1", b"tool_call_id: c2")
    assert changed != data
    (root / path).write_bytes(changed)
    before = git(root, "rev-parse", "HEAD")
    with pytest.raises(AgentfsError) as info, fresh(project).lock():
        fresh(project).recover()
    assert "were not committed" in str(info.value)
    assert f"git checkout HEAD -- {path}" in (info.value.hint or "")
    assert git(root, "rev-parse", "HEAD") == before
    git(root, "checkout", "--", path)  # the hint undoes it
    assert fresh(project).recover() == []
    assert_git_clean(root)


@pytest.mark.parametrize("text, words", [
    (b'{"goals": [', "Invalid JSON"),
    (b'{"goals": [{"id": "1", "title": "a\\ud800"}]}', "hex escape"),  # a lone surrogate
    (b'{"goals": [{"id": "1", "title": "x", "status": "finished"}]}', "status"),
    (b'{"goals": [{"id": "1"}]}', "title"),
])
def test_a_goal_tree_a_run_could_not_read_is_refused_before_any_commit(
        project: Project, trace: Trace, text: bytes, words: str) -> None:
    root = project.workspace.root
    goals = trace.dir / "goals.json"
    goals.write_bytes(b'{"goals": [{"id": "1", "title": "plan"}], "focus": "1"}\n')
    assert fresh(project).recover() == ["edit"]  # a good hand edit is committed
    before = git(root, "rev-parse", "HEAD")
    goals.write_bytes(text)
    with pytest.raises(AgentfsError) as info, fresh(project).lock():
        fresh(project).recover()
    said = f"{info.value} {info.value.hint}"
    assert "goals.json: not a valid goal tree" in said and words in said, said
    assert "were not committed" in said and "git checkout HEAD -- traces/demo/goals.json" in said
    assert git(root, "rev-parse", "HEAD") == before
    assert goals.read_bytes() == text  # the person's file is left as they wrote it
    goals.unlink()  # no tree at all is a tree with no goals: committed
    assert fresh(project).recover() == ["edit"]
    _a_folder_in_its_place_is_refused(project, goals)  # where no tree was committed


def _a_folder_in_its_place_is_refused(project: Project, path: Path) -> None:
    """A folder holding a file where the trace's file `path` belongs (absent from
    HEAD) is refused before any commit; once it is gone there is nothing to commit."""
    root = project.workspace.root
    before = git(root, "rev-parse", "HEAD")
    path.mkdir()
    (path / "notes.txt").write_text("not a trace file")
    with pytest.raises(AgentfsError, match=f"{path.name}: is not a regular file"), \
            fresh(project).lock():
        fresh(project).recover()
    assert git(root, "rev-parse", "HEAD") == before
    shutil.rmtree(path)
    assert fresh(project).recover() == []
    assert_git_clean(root)


def test_an_approval_json_a_run_could_not_read_is_refused_before_any_commit(
        project: Project, trace: Trace) -> None:
    root = project.workspace.root
    approval = trace.dir / "approval.json"
    before = git(root, "rev-parse", "HEAD")
    approval.write_text("{broken")
    with pytest.raises(AgentfsError, match="approval.json: not valid JSON.*were not committed"), \
            fresh(project).lock():
        fresh(project).recover()
    assert git(root, "rev-parse", "HEAD") == before
    approval.unlink()
    _a_folder_in_its_place_is_refused(project, approval)


def test_an_edit_of_the_text_beside_tool_calls_is_committed(
        project: Project, trace: Trace) -> None:
    root = project.workspace.root
    call_path, _ = _tool_step(trace)
    (root / call_path).write_bytes((root / call_path).read_bytes().replace(
        b"let me look", b"let me look closely"))
    assert fresh(project).recover() == ["edit"]
    assert fresh(project).main_path()[2].content == "let me look closely"
    assert_git_clean(root)


def test_a_head_pointing_nowhere_is_refused_before_anything_is_committed(
        project: Project, trace: Trace) -> None:
    root = project.workspace.root
    before = git(root, "rev-parse", "HEAD")
    data = json.loads(trace.meta_path.read_text())
    data["head"] = 77
    trace.meta_path.write_text(json.dumps(data))
    with pytest.raises(AgentfsError, match="needs message #77"):
        fresh(project).recover()
    assert git(root, "rev-parse", "HEAD") == before


@pytest.mark.parametrize("bad", ["demo\n", "demo\nx", "", "-x", "a/b", "../x", "x" * 65, "é"])
def test_trace_ids_must_match_in_full(project: Project, bad: str) -> None:
    with pytest.raises(AgentfsError, match="invalid trace id"):
        Trace(project.workspace, project.repo, bad)


def test_a_rewind_to_the_head_commits_nothing(project: Project, trace: Trace) -> None:
    before = git(project.workspace.root, "rev-parse", "HEAD")
    with trace.lock():
        assert trace.rewind(2) is None
    assert git(project.workspace.root, "rev-parse", "HEAD") == before


def test_trace_json_is_written_only_when_its_bytes_change(project: Project, trace: Trace) -> None:
    trace.save_meta()
    before = os.stat(trace.meta_path)
    trace.save_meta()  # nothing changed: no temp file, no fsync, no rename
    assert os.stat(trace.meta_path).st_ino == before.st_ino
    trace.meta.context.inject_skills = ["changed"]
    trace.save_meta()
    assert os.stat(trace.meta_path).st_ino != before.st_ino
    assert '"changed"' in trace.meta_path.read_text()


@pytest.mark.parametrize(("change", "named"), [
    ({"surprise": 1}, "surprise"),
    ({"context": {"inject_skills": ["a"], "colaborators": {}}}, "colaborators"),
    ({"context": {"collaborators": {"c": {"trace": "c", "mood": "x"}}}}, "mood"),
    ({"context": {"side_calls": {"compression": "two"}}}, "side_calls"),
    ({"side_queue": {"reason": "compress", "head": 1, "steps": [{"type": "compression",
                                                                  "colour": "red"}]}}, "colour"),
])
def test_an_undeclared_or_mistyped_trace_json_field_is_refused_naming_it(
        project: Project, trace: Trace, change: dict, named: str) -> None:
    data = json.loads(trace.meta_path.read_text())
    for key, value in change.items():
        data[key] = value if key != "context" else {**data.get("context", {}), **value}
    trace.meta_path.write_text(json.dumps(data))
    with pytest.raises(AgentfsError) as caught:
        project.trace(trace.id).meta  # noqa: B018 — loading is the point
    assert str(trace.meta_path) in str(caught.value) and named in str(caught.value)
    assert "git checkout" in (caught.value.hint or "")
    unknown = named != "side_calls"  # the others are keys agentfs does not know
    assert ("remove the fields agentfs does not know" in (caught.value.hint or "")) == unknown


OLD_CONTEXT = {"inject_skills": ["x"], "side_calls": {"compression": 1},
               "collaborators": {"c": {"trace": "c", "task": "t", "status": "running"}},
               "last_error": {"at": "2026-01-01T00:00:00+00:00", "error": "boom"}}


def meta_text(trace: Trace, version: int, context: dict) -> str:
    """trace.json as agentfs wrote it in format `version`, with this `context`."""
    data = {"format_version": version, "id": trace.id, "head": 1, "next_sequence": 2,
            "created_at": "2026-01-01T00:00:00+00:00", "model": None, "preset": None,
            "iterations": 0, "injected_skills": {}, "context": context}
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def test_trace_json_as_agentfs_wrote_it_loads_and_saves_byte_identical(
        project: Project, trace: Trace) -> None:
    for context in (OLD_CONTEXT, {}):
        text = meta_text(trace, FORMAT_VERSION, context)
        trace.meta_path.write_text(text)
        reread = project.trace(trace.id)
        reread.save_meta()
        assert trace.meta_path.read_text() == text


def test_a_format_2_trace_json_loads_and_saves_without_its_side_branch_count(
        project: Project, trace: Trace) -> None:
    """Format 2 counted the side branches a trace named; format 3 names them after
    commits. The count is read and dropped, every other key kept as it was."""
    trace.meta_path.write_text(meta_text(
        trace, 2, {**OLD_CONTEXT, "side_branches": {"compression": 2}}))
    reread = project.trace(trace.id)
    assert reread.meta.context.inject_skills == ["x"]
    reread.save_meta()
    assert trace.meta_path.read_text() == meta_text(trace, FORMAT_VERSION, OLD_CONTEXT)
