"""No tool result is larger than a message file may be: results are cut, with a marker."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentfs.core.runner import Runner
from agentfs.models.base import ModelResponse
from agentfs.skills import SkillCatalog, parse_skill_file
from agentfs.store.frontmatter import MAX_DEPTH
from agentfs.store.message_dir import message_relpath
from agentfs.store.messages import (
    MAX_MESSAGE_BYTES,
    Message,
    ToolCall,
    load_message,
    parse_message,
    render_message,
)
from agentfs.testing import ScriptedModel
from agentfs.tools.base import (
    TOOL_RESULT_MAX_BYTES,
    Tool,
    ToolContext,
    ToolFailure,
    ToolRegistry,
    cut_text,
    schema,
)
from agentfs.tools.files import MAX_WRITE_BYTES
from agentfs.tools.skill import SKILL_MAX_BYTES, skill_tool
from tests.conftest import assert_git_clean, message_paths, user

MARKER = re.compile(r"\n\[\.\.\. cut by agentfs: ([\d,]+) more bytes(?:; (.*))?\]$")


def cut_bytes(text: str) -> int:
    """How many bytes the marker at the end of `text` says were cut."""
    match = MARKER.search(text)
    assert match is not None, text[-300:]
    return int(match[1].replace(",", ""))


def head_of(text: str) -> str:
    """What is left of `text` before the marker."""
    return text[: MARKER.search(text).start()]


def returning(value) -> Tool:
    return Tool("big", "returns a lot", schema({}), lambda arguments, context: value)


def call(tool: Tool, tmp_path: Path):
    return ToolRegistry([tool]).call(tool.name, {}, ToolContext(tmp_path, "t"))


def run_returning(project, value) -> None:
    """A run of new trace t whose one tool call returns `value`."""
    project.new_trace("t", user("go"))
    model = ScriptedModel(
        ModelResponse(tool_calls=[ToolCall(id="c1", name="big", input={})]), "done")
    Runner(project.workspace, project.repo, model, config=project.config,
           tools=[returning(value)]).run("t")


def test_text_that_fits_comes_back_unchanged():
    text = "é" * 100
    assert cut_text(text, 200) is text
    assert cut_text("", 0) == ""


def test_cut_text_keeps_the_head_and_says_how_much_was_cut_and_how_to_see_it():
    text = "line\n" * 1000
    cut = cut_text(text, 1000, hint="read the file in parts with offset/limit")
    assert len(cut.encode()) <= 1000
    head = head_of(cut)
    assert text.startswith(head)
    assert cut_bytes(cut) == len(text) - len(head)
    assert cut.endswith("; read the file in parts with offset/limit]")


@given(st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=300),
       st.integers(min_value=60, max_value=400))
def test_multibyte_characters_are_never_split(text, limit):
    cut = cut_text(text, limit)
    assert len(cut.encode()) <= limit
    if cut != text:
        head = head_of(cut)
        assert text.startswith(head)  # whole characters only: the head decodes as it was
        assert len(head.encode()) + cut_bytes(cut) == len(text.encode())


def test_a_budget_too_small_for_the_marker_is_a_programming_error():
    with pytest.raises(ValueError, match="cannot hold the cut marker"):
        cut_text("x" * 100, 10)


def test_the_budget_leaves_room_for_json_escapes_of_control_characters():
    # a NUL makes the store write JSON, where each control character takes 6 bytes
    assert 6 * TOOL_RESULT_MAX_BYTES < MAX_MESSAGE_BYTES


def test_twenty_megabytes_of_text_are_cut_to_the_budget(tmp_path):
    result = call(returning("€" * 7_000_000), tmp_path)
    assert not result.is_error
    assert len(result.content.encode()) <= TOOL_RESULT_MAX_BYTES
    assert "ask big for less" in result.content
    assert len(head_of(result.content).encode()) + cut_bytes(result.content) == 21_000_000


def test_error_results_are_cut_too(tmp_path):
    def fail(arguments, context):
        raise ToolFailure("x" * 10_000_000)

    result = call(Tool("big", "fails loudly", schema({}), fail), tmp_path)
    assert result.is_error and len(result.content.encode()) <= TOOL_RESULT_MAX_BYTES
    assert cut_bytes(result.content) > 9_000_000


def test_a_huge_json_result_becomes_cut_text_and_a_small_one_stays_json(tmp_path):
    rows = {"rows": [{"n": n, "text": "ü" * 20} for n in range(200_000)]}
    result = call(returning(rows), tmp_path)
    assert isinstance(result.content, str)
    assert len(result.content.encode()) <= TOOL_RESULT_MAX_BYTES
    assert result.content.startswith('{\n  "rows": [\n    {\n      "n": 0,')
    assert cut_bytes(result.content) > 1_000_000
    assert call(returning({"ok": [1, 2]}), tmp_path).content == {"ok": [1, 2]}


def test_json_nested_too_deeply_to_store_becomes_text(tmp_path):
    deep: list = []
    for _ in range(MAX_DEPTH + 5):
        deep = [deep]
    result = call(returning(deep), tmp_path)
    assert not result.is_error and result.content == json.dumps(deep, indent=2)
    assert call(returning([[["fine"]]]), tmp_path).content == [[["fine"]]]


def test_a_result_that_is_not_valid_unicode_holds_u_fffd_in_its_place(project):
    """A file name that is not UTF-8, a JSON escape of an MCP server: lone surrogates."""
    assert call(returning("caf\udce9 \ud83d\ude00"), project.workspace.root).content \
        == "caf\ufffd \U0001f600"  # a pair read apart joins again
    data = {"name\udce9": ["\ud800", 1, None]}
    assert call(returning(data), project.workspace.root).content == {"name\ufffd": ["\ufffd", 1, None]}
    run_returning(project, data)
    assert_every_message_loads(project, "t")
    assert project.trace("t").main_path()[-2].content == {"name\ufffd": ["\ufffd", 1, None]}
    assert_git_clean(project.workspace.root)


def test_a_result_that_is_not_json_data_is_an_error(tmp_path):
    result = call(returning({"when": object()}), tmp_path)
    assert result.is_error and "big returned dict, which is not JSON data" in result.content


def test_a_long_skill_is_cut_with_a_pointer_to_its_file(tmp_path):
    root = tmp_path / "ws"
    (root / "skills").mkdir(parents=True)
    path = root / "skills" / "long.md"
    path.write_text("---\nname: long\ndescription: Very long.\n---\n" + "Step.\n" * 100_000)
    catalog = SkillCatalog([parse_skill_file(path, "workspace")])
    result = ToolRegistry([skill_tool(catalog)]).call("skill", {"name": "long"},
                                                      ToolContext(root, "t"))
    assert not result.is_error and len(result.content.encode()) <= SKILL_MAX_BYTES
    assert result.content.startswith("# Skill: long\n\nStep.\n")
    assert "read the rest of skills/long.md in parts with read_file offset/limit" in result.content


def assert_every_message_loads(project, trace_id: str) -> None:
    """Each message file is under the reader's limit and parses on its own."""
    files = message_paths(project.workspace.root / "traces" / trace_id / "messages")
    assert files
    for path in files:
        assert path.stat().st_size <= MAX_MESSAGE_BYTES, path.name
        load_message(path)
    from agentfs.core.project import Project

    reopened = Project.open(project.workspace.root).trace(trace_id)
    assert len(reopened.messages(refresh=True)) == len(files)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("text", "€" * 7_000_000),  # 21 MB of UTF-8
        # stored as JSON, 6 bytes a character (the first line stays printable: the
        # commit subject quotes it, and git refuses a NUL there)
        ("control_characters", "dump:\n" + "\x00\x01" * 10_000_000),
        ("json", {"rows": [{"n": n, "text": "\x02" * 20} for n in range(200_000)]}),
    ],
    # named, not shown: pytest puts the test's id in the environment of the git it runs
    ids=["text", "control_characters", "json"],
)
def test_a_run_with_a_huge_tool_result_stays_readable(project, name, value):
    run_returning(project, value)
    assert_every_message_loads(project, "t")
    # so large a result also sets off a compression: look past the main path
    result = next(m for m in project.trace("t").messages().values() if m.role == "tool")
    assert len(result.text.encode()) <= TOOL_RESULT_MAX_BYTES
    assert cut_bytes(result.text) > 1_000_000
    assert_git_clean(project.workspace.root)


def test_json_content_that_fits_is_stored_as_json(project):
    run_returning(project, {"rows": [1, 2, 3]})
    result = next(m for m in project.trace("t").main_path() if m.role == "tool")
    assert result.content == {"rows": [1, 2, 3]}
    assert json.loads((project.workspace.root / "traces/t/messages" / message_relpath(result.file_name()))
                      .read_text())["content"] == {"rows": [1, 2, 3]}


def test_a_write_file_call_at_the_limit_fits_in_the_assistant_message():
    worst = "\x01" * MAX_WRITE_BYTES  # the longest YAML escape per byte
    answer = Message(id="m3", sequence=3, role="assistant", tool_calls=[
        ToolCall(id="c1", name="write_file", input={"path": "a.txt", "content": worst})])
    data = render_message(answer)
    assert len(data) <= MAX_MESSAGE_BYTES
    read_back = parse_message(Path(answer.file_name()), data)
    assert read_back.tool_calls[0].input["content"] == worst
