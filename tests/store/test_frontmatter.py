"""Frontmatter: read with limits (aliases, depth, size), written only within them,
and refused the same way in message, skill and knowledge files."""

from __future__ import annotations

import datetime
import itertools
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from agentfs.core.knowledge import KnowledgeItem, load_items
from agentfs.errors import AgentfsError, MessageFileError
from agentfs.skills import SkillError, parse_skill_file
from agentfs.store import frontmatter
from agentfs.store.frontmatter import (
    MAX_DEPTH,
    MAX_HEADER_BYTES,
    FrontmatterError,
    Problem,
    check_depth,
    render,
    split,
)
from agentfs.store.messages import load_message
from tests.store.test_messages import json_values, texts

# The classic "billion laughs": 9 ** 8 strings from ~300 bytes once expanded.
ALIAS_BOMB = "\n".join(
    [
        'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]',
        *(f"{n}: &{n} [{','.join([f'*{p}'] * 9)}]" for p, n in itertools.pairwise("abcdefgh")),
    ]
)


def nested(depth: int) -> str:
    """A flow sequence `depth` levels deep, as the value of one key (so depth + 1 in all)."""
    return "[" * depth + "]" * depth


def deep_data(depth: int) -> dict:
    data: dict = {}
    inner = data
    for _ in range(depth - 1):
        inner["k"] = {}
        inner = inner["k"]
    return data


def refused(text: str) -> FrontmatterError:
    with pytest.raises(FrontmatterError) as info:
        split(text)
    return info.value


# --- aliases -------------------------------------------------------------------------------


def test_an_alias_bomb_is_refused_at_its_first_anchor_before_anything_expands() -> None:
    error = refused(f"---\n{ALIAS_BOMB}\n---\nbody\n")
    assert error.kind is Problem.ALIAS
    assert error.line == 2  # the first anchor: no alias was even reached
    assert "anchor &a" in str(error)
    assert "write the value out in full" in (error.hint or "")


@pytest.mark.parametrize(
    ("header", "what", "line"),
    [
        ("a: &x 1\nb: *x", "anchor &x", 2),
        ("a: 1\nb: [1, *x]", "alias *x", 3),
        ("a: &m {k: v}", "anchor &m", 2),
        ("<<: *base\nk: v", "alias *base", 2),
    ],
)
def test_any_anchor_or_alias_is_refused_with_its_line(header: str, what: str, line: int) -> None:
    error = refused(f"---\n{header}\n---\n")
    assert (error.kind, error.line) == (Problem.ALIAS, line)
    assert what in error.message


def test_anchor_and_star_characters_inside_values_are_plain_text() -> None:
    fields, _ = split("---\ncmd: ls *.md && echo '&x'\nq: \"*y\"\n---\n")
    assert fields == {"cmd": "ls *.md && echo '&x'", "q": "*y"}


# --- depth -------------------------------------------------------------------------------


def test_nesting_up_to_the_limit_is_read() -> None:
    fields, _ = split(f"---\nk: {nested(MAX_DEPTH - 1)}\n---\n")
    assert fields is not None
    check_depth(fields)


@pytest.mark.parametrize("depth", [MAX_DEPTH, 40, 100_000])
def test_nesting_past_the_limit_is_refused_without_recursion(depth: int) -> None:
    error = refused(f"---\nk: {nested(depth)}\n---\n")
    assert error.kind is Problem.TOO_DEEP
    assert f"more than {MAX_DEPTH} levels" in error.message


def test_deep_block_style_nesting_is_refused_with_its_line() -> None:
    lines = "".join(f"{'  ' * i}k{i}:\n" for i in range(40))
    error = refused(f"---\n{lines}---\n")
    assert error.kind is Problem.TOO_DEEP
    assert error.line == MAX_DEPTH + 2  # the 33rd mapping opens on the line after the 32nd


def test_without_libyaml_the_same_limits_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    class PureLoader(frontmatter._LimitedComposer, yaml.SafeLoader):
        pass

    monkeypatch.setattr(frontmatter, "_Loader", PureLoader)
    assert split("---\na: [1, {b: yes}]\n---\nx\n") == ({"a": [1, {"b": True}]}, "x")
    assert refused(f"---\nk: {nested(100_000)}\n---\n").kind is Problem.TOO_DEEP
    assert refused(f"---\n{ALIAS_BOMB}\n---\n").kind is Problem.ALIAS


# --- size --------------------------------------------------------------------------------


def test_a_header_over_the_size_limit_is_refused_before_parsing() -> None:
    error = refused(f"---\nk: '{'x' * MAX_HEADER_BYTES}'\n---\n")
    assert error.kind is Problem.TOO_LARGE
    assert f"{MAX_HEADER_BYTES:,}-byte limit" in error.message


def test_the_size_limit_counts_bytes_not_characters() -> None:
    text = "é" * (MAX_HEADER_BYTES // 2)  # within the limit in characters, over it in bytes
    assert refused(f"---\nk: {text}\n---\n").kind is Problem.TOO_LARGE


def test_a_large_body_is_not_a_large_header() -> None:
    assert split(f"---\nk: v\n---\n{'x' * (2 * MAX_HEADER_BYTES)}\n")[0] == {"k": "v"}


# --- other problems ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind", "line"),
    [
        ("---\nk: v\n", Problem.UNCLOSED, None),
        ("---\nk: v: w\n---\n", Problem.SYNTAX, 2),
        ("---\n- a\n---\n", Problem.NOT_MAPPING, None),
        ("---\nwhen: 2024-13-45\n---\n", Problem.SYNTAX, None),  # looks like a date, is not one
        ("---\nk: !!python/object:os.system x\n---\n", Problem.SYNTAX, 2),
        (f"---\nn: {'1' * 5000}\n---\n", Problem.SYNTAX, None),  # over Python's int digits
    ],
)
def test_every_problem_is_one_typed_error(text: str, kind: Problem, line: int | None) -> None:
    error = refused(text)
    assert (error.kind, error.line) == (kind, line)
    assert isinstance(error, AgentfsError)


# --- reading rules -----------------------------------------------------------------------


def test_yaml_11_words_keep_their_yaml_11_meaning() -> None:
    fields, _ = split("---\na: yes\nb: off\nc: 2024-01-01\nd: ~\ne: '0x1f'\nf: 0x1f\n---\n")
    assert fields == {
        "a": True,
        "b": False,
        "c": datetime.date(2024, 1, 1),
        "d": None,
        "e": "0x1f",
        "f": 31,
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("plain text\n", (None, "plain text")),
        ("---\n---\n", ({}, "")),
        ("---\r\nk: v\r\n---\r\nbody\r\n", ({"k": "v"}, "body\r")),
        ("\ufeff---\nk: v\n---\nbody", ({"k": "v"}, "body")),
        ("---\nk: v\n---\none\n---\ntwo\n\n", ({"k": "v"}, "one\n---\ntwo\n")),
        ("--- \nk: v\n---\n", (None, "--- \nk: v\n---")),
    ],
)
def test_fences_bom_and_final_newline(text: str, expected: tuple) -> None:
    assert split(text) == expected


@given(st.dictionaries(texts, json_values, max_size=5), texts)
def test_render_then_split_gives_the_fields_and_body_back(fields: dict, body: str) -> None:
    assert split(render(fields, body)) == (fields, body)


# --- writing -----------------------------------------------------------------------------


def test_data_at_the_depth_limit_renders_and_reads_back() -> None:
    data = deep_data(MAX_DEPTH)
    assert split(render(data, "b")) == (data, "b")


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 10_000])
def test_render_refuses_data_deeper_than_the_reader_accepts(depth: int) -> None:
    with pytest.raises(FrontmatterError) as info:
        render(deep_data(depth), "b")
    assert info.value.kind is Problem.TOO_DEEP


def test_render_refuses_data_that_holds_itself() -> None:
    looped: dict = {}
    looped["self"] = looped
    with pytest.raises(FrontmatterError):
        render(looped, "b")


def test_render_refuses_a_header_over_the_size_limit() -> None:
    with pytest.raises(FrontmatterError) as info:
        render({"k": "x" * MAX_HEADER_BYTES}, "b")
    assert info.value.kind is Problem.TOO_LARGE


def test_a_value_used_twice_is_written_twice_not_as_an_alias() -> None:
    shared = ["a", "b"]
    text = render({"x": shared, "y": shared}, "")
    assert "&" not in text and "*" not in text
    assert split(text) == ({"x": shared, "y": shared}, "")


# --- the same refusals in each file format -----------------------------------------------


def message_error(tmp_path: Path, text: str) -> str:
    path = tmp_path / "000003-user.md"
    path.write_text(text)
    with pytest.raises(MessageFileError) as info:
        load_message(path)
    assert info.value.path == path
    return str(info.value)


def skill_error(tmp_path: Path, text: str) -> str:
    path = tmp_path / "a.md"
    path.write_text(text)
    with pytest.raises(SkillError) as info:
        parse_skill_file(path, "workspace")
    assert info.value.path == path
    return str(info.value)


def knowledge_error(tmp_path: Path, text: str) -> str:
    path = tmp_path / "item.md"
    path.write_text(text)
    with pytest.raises(AgentfsError) as info:
        load_items(tmp_path)
    return str(info.value)


READERS = [message_error, skill_error, knowledge_error]
BAD_HEADERS = {
    "depth 40": (f"k: {nested(40)}", f"nested more than {MAX_DEPTH} levels deep"),
    "depth 100,000": (f"k: {nested(100_000)}", f"nested more than {MAX_DEPTH} levels deep"),
    "alias bomb": (ALIAS_BOMB, "YAML anchor &a at line 4"),
    "oversize": (f"k: '{'x' * MAX_HEADER_BYTES}'", f"{MAX_HEADER_BYTES:,}-byte limit"),
}


@pytest.mark.parametrize("read", READERS, ids=lambda r: r.__name__)
@pytest.mark.parametrize("bad", BAD_HEADERS, ids=str)
def test_each_file_format_refuses_bad_frontmatter_in_one_line_naming_the_file(
    tmp_path: Path, read: Callable[[Path, str], str], bad: str
) -> None:
    header, expected = BAD_HEADERS[bad]
    error = read(tmp_path, f"---\nname: a\ndescription: d\n{header}\n---\nbody\n")
    assert str(tmp_path) in error
    assert expected in error
    assert "\n" not in error


def test_a_knowledge_item_renders_within_the_limits(tmp_path: Path) -> None:
    item = KnowledgeItem(id="a", title="A " * MAX_HEADER_BYTES, source_trace="t", body="b")
    with pytest.raises(FrontmatterError):
        item.render()
