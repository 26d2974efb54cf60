"""Message files: exact round trips (property-based) and clear errors for bad input."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from agentfs.errors import MessageFileError
from agentfs.store.frontmatter import MAX_HEADER_BYTES
from agentfs.store.messages import (
    MAX_MESSAGE_BYTES,
    MAX_SEQUENCE,
    Message,
    MessageTooLarge,
    ToolCall,
    UnwritableMessage,
    Usage,
    load_dropped,
    load_message,
    message_file_name,
    parse_file_name,
    parse_message,
    render_message,
    workspace_path_problem,
)

# Strings that YAML 1.1 (or a naive frontmatter parser) would turn into something else.
TRICKY = [
    "yes",
    "no",
    "on",
    "off",
    "Yes",
    "NO",
    "y",
    "n",
    "true",
    "False",
    "null",
    "~",
    "",
    "2024-01-01",
    "2024-01-01 10:00:00",
    "12:30:00",
    "1:20",
    "0x1f",
    "0o17",
    "017",
    "1_000",
    "1e3",
    "1.0",
    ".inf",
    "-.nan",
    "---",
    "...",
    "--- x",
    "<<",
    "=",
    "&anchor",
    "*alias",
    "!tag",
    "# comment",
    "- item",
    "? key",
    ": value",
    "'",
    '"',
    "key: value",
    "{a: 1}",
    "[1]",
    " leading",
    "trailing ",
    "\tx",
    "\n",
    "\r\n",
    "a\rb",
    "x\n---\ny",
    "\ufeffbom",
    "\x85",
    "\u2028",
    "\u2029",
    "é",
    "日本語",
    "🙂",
    "\x1b[0m",
    "\x7f",
]

# NUL is left out here: a text body holding NUL has its own test below.
texts = st.one_of(
    st.sampled_from(TRICKY),
    st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=40),
)
# Text that mixes tricky pieces with arbitrary characters, and line structure.
bodies = st.one_of(
    texts,
    st.lists(
        st.one_of(texts, st.sampled_from(["\n", "\r\n", "---\n", "\n---\n", " "])), max_size=8
    ).map("".join),
)

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    texts,
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(texts, children, max_size=4)
    ),
    max_leaves=12,
)
structured = st.one_of(
    st.dictionaries(texts, json_values, max_size=5), st.lists(json_values, max_size=5)
)

tool_calls = st.lists(
    st.builds(
        ToolCall,
        id=texts,
        name=texts,
        input=st.dictionaries(texts, json_values, max_size=4),
    ),
    min_size=1,
    max_size=3,
)

# Workspace paths: any file names (tricky ones too) joined by '/', never leaving the workspace.
path_parts = texts.filter(lambda t: workspace_path_problem(t) is None and "/" not in t)
workspace_paths = st.lists(path_parts, min_size=1, max_size=3).map("/".join)

usages = st.builds(
    Usage,
    input_tokens=st.integers(0, 10**9),
    output_tokens=st.integers(0, 10**9),
    cache_read_input_tokens=st.integers(0, 10**9),
    cache_creation_input_tokens=st.integers(0, 10**9),
)


@st.composite
def messages(draw: st.DrawFn) -> Message:
    """Any valid message, as agentfs or a person might build it."""

    def optional(strategy: st.SearchStrategy[Any]) -> Any:
        return draw(st.one_of(st.none(), strategy))

    fields: dict[str, Any] = {
        "id": draw(texts),
        "sequence": draw(st.integers(0, 10**7)),
        "parent_sequence": optional(st.integers(0, 10**7)),
        "role": draw(st.sampled_from(["system", "user", "assistant", "tool"])),
        "content": draw(st.one_of(bodies, structured)),
        "goal_id": optional(texts),
        "tool_calls": optional(tool_calls),
        "tool_call_id": optional(texts),
        "is_error": optional(st.booleans()),
        "synthetic": optional(st.sampled_from(["context", "skill", "recovery"])),
        "branch_type": optional(texts),
        "branch_id": optional(texts),
        "model": optional(texts),
        "stop_reason": optional(texts),
        "usage": optional(usages),
        "thinking": optional(st.lists(st.dictionaries(texts, json_values, max_size=3), max_size=2)),
        "files_changed": optional(st.lists(workspace_paths, max_size=3)),
    }
    # Fields agentfs does not know (a person's or a newer version's) are kept too.
    extras = draw(
        st.dictionaries(
            texts.filter(lambda k: k not in Message.model_fields),
            json_values.filter(lambda v: v is not None),
            max_size=2,
        )
    )
    return Message(**fields, **extras)


def path_for(message: Message) -> Path:
    return Path("traces/t/messages") / message.file_name()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages())
@example(Message(id="x", sequence=1, role="user", content="  padded  \n\n"))
@example(Message(id="x", sequence=1, role="user", content=""))
@example(Message(id="x", sequence=1, role="user", content="\n"))
@example(Message(id="x", sequence=1, role="user", content="---"))
@example(Message(id="x", sequence=1, role="user", content="---\nrole: tool\n---\n"))
@example(Message(id="yes", sequence=2, role="assistant", content="no", goal_id="2024-01-01"))
@example(
    Message(
        id="x",
        sequence=3,
        role="assistant",
        content="",
        tool_calls=[ToolCall(id="on", name="off", input={"a": {"b": [1, None, "~"]}, "yes": None})],
    )
)
@example(Message(id="x", sequence=4, role="tool", content={"ok": True, "rows": [1, 2.5, None]}))
@example(Message(id="x", sequence=4, role="tool", content=[]))
def test_render_then_parse_is_identity(message: Message) -> None:
    data = render_message(message)
    parsed = parse_message(path_for(message), data)
    assert parsed.model_dump() == message.model_dump()
    assert render_message(parsed) == data
    # A message rebuilt from the parsed fields (no source bytes) renders the same bytes too.
    assert render_message(Message(**parsed.model_dump())) == data


# What a person may save as a plain Markdown user message: valid UTF-8, no NUL,
# no frontmatter.
user_texts = st.one_of(
    st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",))),
    st.lists(
        st.one_of(texts, st.sampled_from(["\n", "\r\n", "\r", "---", "---\n", "  ", "\t"])),
        max_size=10,
    ).map("".join),
).filter(lambda s: "\x00" not in s and not s.startswith("---"))


@settings(max_examples=300, deadline=None)
@given(user_texts)
@example("hello")
@example("hello\n")
@example("hello\n\n\n")
@example("  indented\r\nwindows\r\n")
@example("")
@example("\n")
@example("no final newline\n---\nnot: frontmatter\n---")
def test_plain_markdown_is_a_user_message_kept_byte_identical(text: str) -> None:
    data = text.encode("utf-8")
    parsed = parse_message(Path("000007-user.md"), data)
    assert parsed.role == "user"
    assert parsed.sequence == 7
    assert parsed.is_structured is False
    assert render_message(parsed) == data
    # The body is the whole file (less one final newline, which rendering puts back).
    assert parsed.content == text.removesuffix("\n")


def test_untouched_frontmatter_file_renders_its_own_bytes(tmp_path: Path) -> None:
    # Unusual but valid formatting a person might write: key order, quoting, comments, CRLF.
    data = (
        b"---\r\n# written by hand\r\nrole: user\r\nid: \"hand-1\"\r\ngoal_id: 'g1'\r\n"
        b"sequence: 5\r\n---\r\nBody with   spaces   \r\n\r\n"
    )
    path = tmp_path / "000005-user.md"
    path.write_bytes(data)
    message = load_message(path)
    assert (message.id, message.goal_id, message.role, message.sequence) == (
        "hand-1",
        "g1",
        "user",
        5,
    )
    assert render_message(message) == data

    message.goal_id = "g2"  # a real change re-renders canonically
    changed = render_message(message)
    assert changed != data
    reparsed = parse_message(path, changed)
    assert reparsed.goal_id == "g2" and reparsed.id == "hand-1"

    message.goal_id = "g1"  # changed back: the original bytes again
    assert render_message(message) == data


def test_json_file_keeps_its_bytes_and_structured_content(tmp_path: Path) -> None:
    data = b'{"content": {"b": 1, "a": [true, null]},   "role": "tool", "tool_call_id": "c1"}'
    message = parse_message(Path("000009-tool.json"), data)
    assert message.content == {"b": 1, "a": [True, None]}
    assert message.tool_call_id == "c1"
    assert message.file_name() == "000009-tool.json"
    assert render_message(message) == data


def test_json_file_with_text_content_stays_json() -> None:
    data = b'{"content": "plain text in a json file"}\n'
    message = parse_message(Path("000009-tool.json"), data)
    assert message.file_name() == "000009-tool.json"
    message.is_error = True
    assert parse_message(Path("000009-tool.json"), render_message(message)).is_error is True


def test_file_names() -> None:
    assert message_file_name(42, "assistant") == "000042-assistant.md"
    assert message_file_name(1234567, "tool", "json") == "1234567-tool.json"
    assert parse_file_name("000042-assistant.md") == (42, "assistant", "md")
    assert parse_file_name("1234567-tool.json") == (1234567, "tool", "json")
    for bad in (
        "42-user.md",
        "000042-user.txt",
        "000042_user.md",
        "000042-User.md",
        "notes.md",
        "000042-user.md~",
        ".000042-user.md.swp",
        "000042-.md",
    ):
        assert parse_file_name(bad) is None, bad


# --- bad input ------------------------------------------------------------


def error_for(name: str, data: bytes, tmp_path: Path) -> MessageFileError:
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(MessageFileError) as info:
        load_message(path)
    error = info.value
    assert error.path == path
    assert str(path) in str(error), "the error must name the file"
    return error


@pytest.mark.parametrize(
    ("data", "problem", "fix"),
    [
        # The line number counts from the top of the file (the first '---' is line 1).
        (b"---\nid: a\nrole: user: x\n---\nhi\n", "malformed YAML frontmatter at line 3", None),
        (b"---\nid: a\n  bad: indent\n---\nhi\n", "malformed YAML frontmatter at line 3", None),
        (b"---\nrole: [user\n---\nhi\n", "malformed YAML frontmatter", None),
        (b"---\nid: a\ngoal_id: g\nhi there\n", "no closing '---' line", "add a line '---'"),
        (b"---\n", "no closing '---' line", "add a line '---'"),
        (b"---\n- a\n- b\n---\nhi\n", "must be a mapping", None),
        (b"---\njust a string\n---\nhi\n", "must be a mapping", None),
    ],
)
def test_bad_frontmatter(tmp_path: Path, data: bytes, problem: str, fix: str | None) -> None:
    error = error_for("000003-user.md", data, tmp_path)
    assert problem in error.message
    if fix:
        assert fix in (error.hint or "")


def test_invalid_utf8(tmp_path: Path) -> None:
    error = error_for("000003-user.md", b"caf\xe9 ok\n", tmp_path)
    assert "not valid UTF-8 (byte 3)" in error.message
    assert "UTF-8" in (error.hint or "")


def test_nul_bytes(tmp_path: Path) -> None:
    error = error_for("000003-user.md", b"hello\x00world\n", tmp_path)
    assert "NUL" in error.message
    assert error.hint


def test_huge_file(tmp_path: Path) -> None:
    error = error_for("000003-user.md", b"a" * (MAX_MESSAGE_BYTES + 1), tmp_path)
    assert f"{MAX_MESSAGE_BYTES:,}" in error.message
    assert error.hint
    # Exactly at the limit is still a message.
    assert (
        parse_message(Path("000003-user.md"), b"a" * MAX_MESSAGE_BYTES).content
        == "a" * MAX_MESSAGE_BYTES
    )


def test_unknown_role_in_name(tmp_path: Path) -> None:
    error = error_for("000003-robot.md", b"hello\n", tmp_path)
    assert "unknown role 'robot'" in error.message
    assert "user" in (error.hint or "") and "assistant" in (error.hint or "")


@pytest.mark.parametrize(
    ("name", "data", "problem"),
    [
        ("000003-user.md", b"---\nrole: assistant\n---\nhi\n", "role: 'assistant'"),
        ("000003-user.md", b"---\nsequence: 4\n---\nhi\n", "sequence: 4"),
        ("000003-user.md", b'---\nsequence: "3"\n---\nhi\n', "sequence: '3'"),
        ("000003-tool.json", b'{"role": "user", "content": "x"}', "role: 'user'"),
    ],
)
def test_frontmatter_disagreeing_with_name(
    tmp_path: Path, name: str, data: bytes, problem: str
) -> None:
    error = error_for(name, data, tmp_path)
    assert problem in error.message
    assert "file name says" in error.message
    assert "rename the file or fix the frontmatter" in (error.hint or "")


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (b"---\ntool_calls: 5\n---\n", "tool_calls"),
        (b"---\ntool_calls:\n- id: c1\n---\n", "tool_calls.0.name"),
        (b"---\ntool_calls:\n- {id: c1, name: n, input: [1]}\n---\n", "tool_calls.0.input"),
        (b"---\ntool_calls:\n- {id: c1, name: n, surprise: 1}\n---\n", "tool_calls.0.surprise"),
        (b"---\nparent_sequence: abc\n---\n", "parent_sequence"),
        (b"---\nis_error: maybe\n---\n", "is_error"),
        (b"---\nsynthetic: magic\n---\n", "synthetic"),
        (b"---\nusage:\n  input_tokens: lots\n---\n", "usage.input_tokens"),
        (b"---\ngoal_id: [a, b]\n---\n", "goal_id"),
    ],
)
def test_invalid_field_types(tmp_path: Path, data: bytes, field: str) -> None:
    error = error_for("000003-assistant.md", data, tmp_path)
    assert "invalid fields" in error.message
    assert field in error.message


@pytest.mark.parametrize(
    ("data", "problem"),
    [(b'{"content": ', "invalid JSON at line 1"), (b"[1, 2]", "must hold an object")],
)
def test_bad_json_message(tmp_path: Path, data: bytes, problem: str) -> None:
    error = error_for("000003-tool.json", data, tmp_path)
    assert problem in error.message
    assert error.hint  # what to do: fix it, or write Markdown in a .md file


@pytest.mark.parametrize(
    "name", ["notes.md", "3-user.md", "000003-user.txt", "000003-user", "user-000003.md"]
)
def test_bad_file_name(tmp_path: Path, name: str) -> None:
    error = error_for(name, b"hello\n", tmp_path)
    assert "not a message file name" in error.message
    assert "NNNNNN-ROLE.md" in (error.hint or "")
    assert "inbox/" in (error.hint or "")


def test_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "000003-user.md"
    with pytest.raises(MessageFileError) as info:
        load_message(path)
    assert str(path) in str(info.value)
    assert "cannot read" in info.value.message


def test_text_with_nul_round_trips() -> None:
    # A tool result or model reply may contain NUL (e.g. `cat` of a binary file). agentfs
    # must be able to read back every message it writes, or the trace cannot be loaded.
    message = Message(id="m", sequence=4, role="tool", tool_call_id="c1", content="before\x00after")
    data = render_message(message)
    parsed = parse_message(Path(message.file_name()), data)
    assert parsed.model_dump() == message.model_dump()


def test_nul_in_fields_and_structured_content_round_trips() -> None:
    message = Message(
        id="m",
        sequence=4,
        role="assistant",
        content="ok",
        tool_calls=[ToolCall(id="c1", name="write", input={"text": "a\x00b"})],
    )
    assert parse_message(Path(message.file_name()), render_message(message)).model_dump() == (
        message.model_dump()
    )
    structured = Message(id="m", sequence=5, role="tool", content={"out": "a\x00b"})
    assert parse_message(Path(structured.file_name()), render_message(structured)).model_dump() == (
        structured.model_dump()
    )


def test_frontmatter_after_a_utf8_bom_is_still_frontmatter(tmp_path: Path) -> None:
    # Some Windows editors save UTF-8 with a byte-order mark. The fields must not
    # silently turn into message text (the tool result would lose its tool_call_id).
    data = "\ufeff---\ntool_call_id: c1\n---\nfile contents\n".encode()
    path = tmp_path / "000004-tool.md"
    path.write_bytes(data)
    message = load_message(path)
    assert message.tool_call_id == "c1"
    assert message.content == "file contents"
    assert render_message(message) == data


# --- limits: what agentfs refuses to read, and never writes ------------------------------


def test_a_symlinked_message_file_is_refused_without_reading_its_target(tmp_path: Path) -> None:
    outside = tmp_path / "secret.md"
    outside.write_text("---\nrole: user\n---\nsecret\n")
    messages = tmp_path / "messages"
    messages.mkdir()
    link = messages / "000003-user.md"
    link.symlink_to(outside)
    for load in (load_message, load_dropped):
        with pytest.raises(MessageFileError) as info:
            load(link)
        assert info.value.path == link
        assert "is a symlink; message files must be regular files" in info.value.message
        assert "secret" not in str(info.value)


def test_a_fifo_or_folder_named_like_a_message_is_refused_unread(tmp_path: Path) -> None:
    fifo = tmp_path / "000003-user.md"
    os.mkfifo(fifo)
    folder = tmp_path / "000004-user.md"
    folder.mkdir()
    for path in (fifo, folder):
        with pytest.raises(MessageFileError, match="is not a regular file"):
            load_message(path)


def test_an_oversize_file_is_refused_from_its_size_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "000003-user.md"
    with path.open("wb") as file:
        file.truncate(MAX_MESSAGE_BYTES * 100)  # sparse: only the size says how big it is
    with pytest.raises(MessageFileError) as info:
        load_message(path)
    assert f"{MAX_MESSAGE_BYTES * 100:,} bytes" in info.value.message


@pytest.mark.parametrize(
    "name", ["00000000000000000000001-user.md", "99999999999-user.md", "1000000000-tool.json"]
)
def test_an_absurd_sequence_in_a_file_name_is_refused(tmp_path: Path, name: str) -> None:
    error = error_for(name, b"hello\n", tmp_path)
    assert "is too long" in error.message
    assert f"{MAX_SEQUENCE:,}" in error.message
    assert error.hint


def test_the_highest_sequence_is_still_a_message() -> None:
    message = parse_message(Path(message_file_name(MAX_SEQUENCE, "user")), b"hi\n")
    assert message.sequence == MAX_SEQUENCE
    with pytest.raises(ValidationError):
        Message(id="m", sequence=MAX_SEQUENCE + 1, role="user")


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ("/etc/passwd", "absolute"),
        ("../outside.txt", "'..'"),
        ("notes/../../outside.txt", "'..'"),
        ("./notes.md", "'.'"),
        ("notes//a.md", "empty"),
        ("", "empty"),
        (".git/config", "inside .git"),
        ("sub/.GIT/hooks/pre-commit", "inside .git"),
        ("notes\\\\a.md", "backslash"),
    ],
)
def test_files_changed_outside_the_workspace_is_refused(
    tmp_path: Path, entry: str, problem: str
) -> None:
    data = f'---\ntool_call_id: c1\nfiles_changed:\n- notes.md\n- "{entry}"\n---\nok\n'
    error = error_for("000004-tool.md", data.encode(), tmp_path)
    assert "files_changed" in error.message
    assert repr(entry.replace("\\\\", "\\")) in error.message
    assert problem in error.message


def test_files_changed_is_checked_on_messages_built_in_code_too() -> None:
    with pytest.raises(ValidationError, match="inside .git"):
        Message(id="m", sequence=4, role="tool", files_changed=[".git/config"])
    message = Message(id="m", sequence=4, role="tool", files_changed=["notes/a.md", ".gitignore"])
    with pytest.raises(ValidationError, match="absolute"):
        message.files_changed = ["/tmp/x"]


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("note.md", b""),
        ("note.md", b"  \n\t\r\n"),
        ("note.md", b"---\ngoal_id: g1\n---\n\n"),
        ("note.json", b'{"content": "  "}'),
        ("note.json", b'{"goal_id": "g1"}'),
    ],
)
def test_a_blank_dropped_file_is_refused(tmp_path: Path, name: str, data: bytes) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(MessageFileError) as info:
        load_dropped(path)
    assert info.value.path == path
    assert "empty message: the file has no text" in info.value.message


def test_render_refuses_a_message_over_the_size_limit() -> None:
    message = Message(id="m", sequence=4, role="tool", content="x" * MAX_MESSAGE_BYTES)
    with pytest.raises(MessageTooLarge) as info:
        render_message(message)
    assert "000004-tool.md" in str(info.value)
    assert f"{MAX_MESSAGE_BYTES:,}-byte limit" in info.value.message


def test_render_refuses_tool_input_too_large_for_the_header() -> None:
    call = ToolCall(id="c1", name="write_file", input={"content": "x" * MAX_HEADER_BYTES})
    message = Message(id="m", sequence=4, role="assistant", tool_calls=[call])
    with pytest.raises(MessageTooLarge, match="byte limit"):
        render_message(message)


@pytest.mark.parametrize("depth", [40, 300, 100_000])
def test_deeply_nested_tool_input_is_a_clean_error_not_a_recursion_error(depth: int) -> None:
    data: dict[str, Any] = {}
    inner = data
    for _ in range(depth):
        inner["k"] = {}
        inner = inner["k"]
    call = ToolCall(id="c", name="n", input=data)
    for message in (
        Message(id="m", sequence=4, role="assistant", tool_calls=[call]),
        Message(id="m", sequence=5, role="tool", content=data),
    ):
        with pytest.raises(UnwritableMessage) as info:
            render_message(message)
        assert message.file_name() in str(info.value)


@pytest.mark.parametrize("depth", [40, 100_000])
def test_a_deeply_nested_json_message_is_refused(tmp_path: Path, depth: int) -> None:
    data = b'{"content": ' + b"[" * depth + b"]" * depth + b"}"
    error = error_for("000003-tool.json", data, tmp_path)
    assert "nested" in error.message
