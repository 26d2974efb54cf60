"""A model turn too large or too deep to store is made to fit, never stored unreadable."""

from __future__ import annotations

from agentfs.core.fit import REFUSED_INPUT_KEY
from agentfs.store.messages import MAX_MESSAGE_BYTES
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
