"""A model turn too large or too deep to store, or not valid Unicode, is made to fit,
never stored unreadable."""

from __future__ import annotations

from agentfs.core.fit import NOT_FINITE, NOT_UNICODE, REFUSED_INPUT_KEY
from agentfs.core.runner import Runner
from agentfs.models.base import ModelResponse
from agentfs.store.messages import MAX_MESSAGE_BYTES, ToolCall
from agentfs.testing import ScriptedModel
from tests.conftest import assert_git_clean, user
from tests.core.test_runner import make_runner


def test_a_twenty_megabyte_tool_input_is_answered_not_run_and_the_trace_stays_readable(
        project, write_script):
    project.new_trace("t", user("write a big file"))
    big = "x" * (20 * 1024 * 1024)
    runner, _ = make_runner(project, write_script([
        {"tool_calls": [{"name": "write_file", "input": {"path": "big.txt", "content": big}},
                        {"name": "list_files", "input": {}}]},
        {"text": "ok, in parts then"},
    ]))
    runner.run("t")
    trace = project.trace("t")
    path = trace.main_path()  # every file loads
    assistant = path[2]
    assert assistant.tool_calls[0].input.keys() == {REFUSED_INPUT_KEY}
    assert trace.message_path(assistant).stat().st_size < MAX_MESSAGE_BYTES
    results = [m for m in path if m.role == "tool"]
    assert results[0].is_error and results[0].text.startswith("not run")
    assert not (project.workspace.root / "big.txt").exists()
    assert path[-1].text == "ok, in parts then"
    assert_git_clean(project.workspace.root)


def test_a_tool_input_nested_too_deep_is_answered_not_run(project, write_script):
    project.new_trace("t", user("go"))
    deep: dict = {}
    node = deep
    for _ in range(200):
        node["a"] = {}
        node = node["a"]
    runner, _ = make_runner(project, write_script([
        {"tool_calls": [{"name": "list_files", "input": {"deep": deep}}]},
        {"text": "fine"},
    ]))
    runner.run("t")
    path = project.trace("t").main_path()
    assert path[2].tool_calls[0].input.keys() == {REFUSED_INPUT_KEY}
    assert path[3].is_error and path[-1].text == "fine"
    assert_git_clean(project.workspace.root)


def test_a_turn_that_is_not_valid_unicode_is_stored_readable_and_its_call_is_not_run(project):
    """JSON may escape what UTF-8 cannot hold (a lone surrogate): such text is stored
    with U+FFFD, and a call whose input holds it is answered instead of run."""
    project.new_trace("t", user("go"))
    shown: list[str] = []
    model = ScriptedModel(
        ModelResponse(
            text="caf\udce9, \ud83d\ude00, \ud800",  # a pair read apart joins again
            thinking=[{"type": "thinking", "thinking": "hm \ud800", "signature": "sig"}],
            tool_calls=[ToolCall(id="c1", name="write_file",
                                 input={"path": "odd\udce9.txt", "content": "x"}),
                        ToolCall(id="c2", name="write_file",
                                 input={"path": "fine.txt", "content": "ok\n"})]),
        "done")
    result = Runner(project.workspace, project.repo, model, config=project.config,
                    on_text=shown.append).run("t")
    path = project.trace("t").main_path()  # every file loads
    turn = path[2]
    assert turn.text == "caf\ufffd, \U0001f600, \ufffd" == shown[0]  # streamed as stored
    assert turn.thinking is None  # changed, its signature would no longer hold
    assert turn.tool_calls[0].input == {REFUSED_INPUT_KEY: NOT_UNICODE}
    assert turn.tool_calls[1].input == {"path": "fine.txt", "content": "ok\n"}
    refused, written = (m for m in path if m.role == "tool")
    assert refused.is_error and refused.text == NOT_UNICODE
    assert not written.is_error and written.files_changed == ["fine.txt"]
    root = project.workspace.root
    assert sorted(p.name for p in root.iterdir() if p.suffix == ".txt") == ["fine.txt"]
    assert path[-1].text == "done" == result.final_text
    assert_git_clean(root)


def test_a_call_whose_id_name_or_key_is_not_valid_unicode_is_answered_not_run(project):
    """A key would be stored changed and an id or name would be refused by the API:
    such calls get ids and names of agentfs's, and the note instead of their input."""
    project.new_trace("t", user("go"))
    model = ScriptedModel(
        ModelResponse(text="three", stop_reason="end\ud800", model="m\udce9", tool_calls=[
            ToolCall(id="toolu_\ud800", name="write_file", input={"path": "a.txt", "content": "a"}),
            ToolCall(id="c2", name="write\udce9file", input={"path": "b.txt", "content": "b"}),
            ToolCall(id="c3", name="write_file", input={"path": "c.txt", "content\ud800": "c"})]),
        "done")
    Runner(project.workspace, project.repo, model, config=project.config).run("t")
    path = project.trace("t").main_path()  # every file loads
    calls = path[2].tool_calls
    assert [(c.id, c.name) for c in calls] == [
        ("toolu_agentfs_3_0", "write_file"), ("toolu_agentfs_3_1", "write_file"),
        ("c3", "write_file")]
    assert all(c.input == {REFUSED_INPUT_KEY: NOT_UNICODE} for c in calls)
    assert (path[2].stop_reason, path[2].model) == ("end\ufffd", "m\ufffd")
    results = [m for m in path if m.role == "tool"]
    assert [r.tool_call_id for r in results] == [c.id for c in calls]
    assert all(r.is_error and r.text == NOT_UNICODE for r in results)
    assert not list(project.workspace.root.glob("*.txt")) and path[-1].text == "done"
    assert_git_clean(project.workspace.root)


def test_a_call_holding_infinity_is_answered_not_run_and_never_waits_unanswerable(project):
    """1e999 reads as infinity, which a file stores as null: the call would not be the
    call in its file, and an approval of it could never match. It is answered instead."""
    from agentfs.store.approval import Answer

    project.new_trace("t", user("go"))
    model = ScriptedModel(
        ModelResponse(tool_calls=[
            ToolCall(id="c1", name="write_file",
                     input={"path": "a.txt", "content": "a", "n": float("inf")}),
            ToolCall(id="c2", name="write_file",
                     input={"path": "b.txt", "content": "b", "deep": [{"x": float("nan")}]}),
            ToolCall(id="c3", name="write_file", input={"path": "c.txt", "content": "c"})]),
        "done")
    result = Runner(project.workspace, project.repo, model, config=project.config,
                    approve="acting", ask=lambda trace_id, call: Answer.YES).run("t")
    path = project.trace("t").main_path()
    calls = path[2].tool_calls
    assert [c.input for c in calls[:2]] == [{REFUSED_INPUT_KEY: NOT_FINITE}] * 2
    results = [m for m in path if m.role == "tool"]
    assert [r.is_error for r in results] == [True, True, None]
    assert results[0].text == NOT_FINITE
    root = project.workspace.root
    assert sorted(p.name for p in root.glob("*.txt")) == ["c.txt"]
    assert result.final_text == "done"
    assert_git_clean(root)
