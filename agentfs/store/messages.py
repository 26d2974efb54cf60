"""Message files: one message per file, Markdown with YAML frontmatter or JSON.

File names sort in sequence order and show the role: `000042-assistant.md`.
A Markdown file's body is the message text; its frontmatter holds the fields.
A JSON file (used when the content is structured, e.g. a JSON tool result)
holds the same fields plus `content`.

Round trips are exact: `render_message(parse_message(...))` returns the bytes
that were read when nothing changed, and the canonical rendering of a message
parses back to an equal message (see docs/trace-format.md).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from agentfs.errors import MessageFileError, validation_problems

Role = Literal["system", "user", "assistant", "tool"]
ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")

#: Larger message files are refused: they are almost certainly not messages.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024

FILE_NAME = re.compile(r"^(?P<sequence>\d{6,})-(?P<role>[a-z]+)\.(?P<ext>md|json)$")

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class ToolCall(BaseModel):
    """A tool the assistant asked to run."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="Id that the matching tool result refers to")
    name: str = Field(description="Tool name")
    input: dict[str, Any] = Field(default_factory=dict, description="Arguments for the tool")
    synthetic: Literal["context", "skill"] | None = Field(
        default=None, description="Set when agentfs appended the call, not the model"
    )


class Usage(BaseModel):
    """Token usage the provider reported for one model call."""

    model_config = ConfigDict(extra="allow")

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0


class Message(BaseModel):
    """One message of a trace, as stored in `traces/<id>/messages/`."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    id: str = Field(description="Stable message id, unique within the trace")
    sequence: int = Field(ge=0, description="Position in the trace; also the file name prefix")
    parent_sequence: int | None = Field(
        default=None, description="The message before this one on its path; None for the first"
    )
    role: Role
    content: Any = Field(default="", description="Text, or JSON data for structured content")
    goal_id: str | None = Field(default=None, description="Goal focused when it was written")
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = Field(default=None, description="For tool results: the call")
    is_error: bool | None = Field(default=None, description="For tool results: it failed")
    synthetic: Literal["context", "skill", "recovery", "summary"] | None = Field(
        default=None, description="Set when agentfs, not the model or user, wrote it"
    )
    branch_type: str | None = None
    branch_id: str | None = None
    model: str | None = Field(default=None, description="Model that wrote an assistant message")
    stop_reason: str | None = None
    usage: Usage | None = None
    thinking: list[dict[str, Any]] | None = Field(
        default=None, description="Thinking blocks, kept verbatim with their signatures"
    )
    files_changed: list[str] | None = Field(
        default=None, description="Workspace files a tool step changed (relative paths)"
    )

    _source: bytes | None = PrivateAttr(default=None)
    _source_digest: bytes | None = PrivateAttr(default=None)
    _source_ext: str | None = PrivateAttr(default=None)

    @property
    def text(self) -> str:
        """The content as text (JSON content is shown as formatted JSON)."""
        if isinstance(self.content, str):
            return self.content
        return json.dumps(self.content, indent=2, ensure_ascii=False)

    @property
    def is_structured(self) -> bool:
        """True when the content must be stored as a `.json` file: JSON data, or text
        a Markdown file cannot hold faithfully (NUL characters)."""
        return not isinstance(self.content, str) or "\x00" in self.content

    @property
    def file_ext(self) -> str:
        """`json` for structured content or a message read from JSON, else `md`."""
        if self.is_structured:
            return "json"
        return self._source_ext or "md"

    def file_name(self) -> str:
        """The file name this message is stored under."""
        return message_file_name(self.sequence, self.role, self.file_ext)


def message_file_name(sequence: int, role: str, ext: str = "md") -> str:
    """File name for a message with this sequence and role."""
    return f"{sequence:06d}-{role}.{ext}"


def parse_file_name(name: str) -> tuple[int, str, str] | None:
    """(sequence, role, ext) from a message file name, or None if it is not one."""
    match = FILE_NAME.match(name)
    if match is None:
        return None
    return int(match["sequence"]), match["role"], match["ext"]


def authored_fields(message: Message) -> dict[str, Any]:
    """Fields a person set on a message, without its identity, place and content."""
    data = message.model_dump(exclude_none=True)
    for key in ("id", "sequence", "parent_sequence", "role", "content"):
        data.pop(key, None)
    return data


def _fields(message: Message) -> dict[str, Any]:
    """Fields to store, in a stable order, leaving out what is unset."""
    data = message.model_dump(mode="json", exclude_none=True, exclude={"content"})
    if not data.get("tool_calls"):
        data.pop("tool_calls", None)
    return data


def render_message(message: Message) -> bytes:
    """The file bytes for `message`: the bytes it was read from if it is unchanged."""
    ext = message.file_ext
    if (
        message._source is not None
        and message._source_ext == ext
        and message._source_digest == _digest(message)
    ):
        return message._source
    if ext == "json":
        data = _fields(message)
        data["content"] = message.content
        return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    header = yaml.dump(
        _fields(message),
        Dumper=_DUMPER,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=1_000_000,
    )
    return f"---\n{header}---\n{message.content}\n".encode()


def _digest(message: Message) -> bytes:
    """A fingerprint of every field, to tell whether a parsed message was changed since."""
    return hashlib.blake2b(message.model_dump_json().encode(), digest_size=16).digest()


def parse_message(path: Path, data: bytes) -> Message:
    """Parse a message file's bytes; errors name the file and what to fix.

    The sequence and role come from the file name; frontmatter that disagrees
    with the name is an error. A Markdown file without frontmatter is a
    message whose body is the whole file (a user message when named so).
    """
    parsed_name = parse_file_name(path.name)
    if parsed_name is None:
        raise MessageFileError(
            path,
            "not a message file name",
            hint="message files are named NNNNNN-ROLE.md (e.g. 000007-user.md); "
            "to add a new user message, put the file in the trace's inbox/",
        )
    sequence, role, ext = parsed_name
    if role not in ROLES:
        raise MessageFileError(
            path, f"unknown role {role!r}", hint=f"use one of: {', '.join(ROLES)}"
        )
    return _parse(path, data, sequence, role, ext)


def parse_dropped(path: Path, data: bytes) -> Message:
    """Parse a file dropped as a new user message (any name, frontmatter optional).

    The result carries sequence 0; the trace gives it its real place.
    """
    ext = "json" if path.suffix == ".json" else "md"
    return _parse(path, data, 0, "user", ext, dropped=True)


def _parse(
    path: Path, data: bytes, sequence: int, role: str, ext: str, *, dropped: bool = False
) -> Message:
    if len(data) > MAX_MESSAGE_BYTES:
        raise MessageFileError(
            path,
            f"file is {len(data):,} bytes, over the {MAX_MESSAGE_BYTES:,}-byte limit",
            hint="put large content in a workspace file and refer to it",
        )
    if b"\x00" in data:
        raise MessageFileError(path, "binary file (contains NUL bytes)", hint="messages are text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MessageFileError(
            path, f"not valid UTF-8 (byte {exc.start})", hint="save the file as UTF-8"
        ) from None

    if ext == "json":
        fields = _parse_json(path, text)
        content = fields.pop("content", "")
    else:
        fields, content = _split_frontmatter(path, text)

    if dropped:
        for key in ("id", "sequence", "parent_sequence"):
            fields.pop(key, None)
        if fields.get("role", "user") != "user":
            raise MessageFileError(
                path,
                f"a dropped file is a user message, but its frontmatter says role: {fields['role']!r}",
                hint="remove the role line",
            )
    for key, expected in (("sequence", sequence), ("role", role)):
        if key in fields and fields[key] != expected:
            raise MessageFileError(
                path,
                f"frontmatter says {key}: {fields[key]!r} but the file name says {expected!r}",
                hint="rename the file or fix the frontmatter",
            )
    fields["sequence"] = sequence
    fields["role"] = role
    fields.setdefault("id", f"msg-{sequence:06d}")
    try:
        message = Message.model_validate({**fields, "content": content})
    except ValidationError as exc:
        raise MessageFileError(path, f"invalid fields: {validation_problems(exc)}") from None
    message._source = data
    message._source_ext = ext
    message._source_digest = _digest(message)
    return message


def _parse_json(path: Path, text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MessageFileError(
            path, f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    if not isinstance(value, dict):
        raise MessageFileError(path, "a JSON message file must hold an object")
    return value


def _split_frontmatter(path: Path, text: str) -> tuple[dict[str, Any], str]:
    """(fields, body) of a Markdown message; the body loses one trailing newline."""
    bom = "\ufeff" if text.startswith("\ufeff") else ""
    if text.startswith((f"{bom}---\n", f"{bom}---\r\n")):
        first_break = text.index("\n") + 1
        end = _closing_fence(text, first_break)
        if end is None:
            raise MessageFileError(
                path,
                "frontmatter starts with '---' but has no closing '---' line",
                hint="add a line '---' after the fields, or remove the first line",
            )
        header, body_start = end
        try:
            fields = yaml.load(text[first_break:header], Loader=_LOADER) or {}
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 2}" if mark is not None else ""
            problem = getattr(exc, "problem", None) or str(exc)
            raise MessageFileError(path, f"malformed YAML frontmatter{where}: {problem}") from None
        if not isinstance(fields, dict):
            raise MessageFileError(path, "frontmatter must be a mapping of 'key: value' lines")
        body = text[body_start:]
    else:
        fields, body = {}, text
    body = body.removesuffix("\n")
    return fields, body


def _closing_fence(text: str, start: int) -> tuple[int, int] | None:
    """(end of header, start of body) for the `---` line closing the frontmatter."""
    pos = start
    while pos <= len(text):
        line_end = text.find("\n", pos)
        line = text[pos:] if line_end == -1 else text[pos:line_end]
        if line.rstrip("\r") == "---":
            return pos, (len(text) if line_end == -1 else line_end + 1)
        if line_end == -1:
            return None
        pos = line_end + 1
    return None


def load_dropped(path: Path) -> Message:
    """Read and parse a file dropped as a new user message (see `parse_dropped`)."""
    return parse_dropped(path, _read(path))


def load_message(path: Path) -> Message:
    """Read and parse one message file."""
    return parse_message(path, _read(path))


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise MessageFileError(path, f"cannot read: {exc.strerror}") from None
