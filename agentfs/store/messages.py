"""Message files: one message per file, Markdown with YAML frontmatter or JSON.

File names sort in sequence order and show the role: `000042-assistant.md`.
A Markdown file's body is the message text; its frontmatter holds the fields.
A JSON file (used when the content is structured, e.g. a JSON tool result)
holds the same fields plus `content`.

Round trips are exact: `render_message(parse_message(...))` returns the bytes
that were read when nothing changed, and the canonical rendering of a message
parses back to an equal message (see docs/trace-format.md).

Files are untrusted input: they are read without following symlinks and with
limits (size, sequence, frontmatter depth, no YAML aliases), and agentfs
refuses to write a message it would refuse to read.
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from agentfs.errors import MessageFileError, validation_problems
from agentfs.store.filenames import message_file_name, parse_file_name
from agentfs.store.frontmatter import FrontmatterError, Problem, check_depth, render, split
from agentfs.store.regularfile import FileRefused, over_limit, read_regular
from agentfs.store.unicode import LONE_SURROGATE, load_json

Role = Literal["system", "user", "assistant", "tool"]
ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")

#: Larger message files are refused: they are almost certainly not messages.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
#: The highest sequence. A longer number in a file name is a slip or hostile: it would
#: push the next sequence out of reach, or alias another (`0000000001` is 1).
MAX_SEQUENCE = 999_999_999

#: Characters no single-line field may hold (line breaks, NUL, other C0 and C1 controls).
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class UnwritableMessage(MessageFileError):
    """agentfs would refuse to read this message back, so it does not write it."""


class MessageTooLarge(UnwritableMessage):
    """The message's file would be over `MAX_MESSAGE_BYTES`, or its frontmatter over
    `MAX_HEADER_BYTES`: the caller must cut the content (or tool input) first."""


class Synthetic(enum.StrEnum):
    """What agentfs itself wrote into a trace (the `synthetic` field)."""

    CONTEXT = "context"  # a periodic `get_current_context` call and its result
    SKILL = "skill"  # a declared skill's `skill` call and its result
    RECOVERY = "recovery"  # an "interrupted" or "not run" answer to a tool call
    SUMMARY = "summary"  # a compression summary


class ToolCall(BaseModel):
    """A tool the assistant asked to run."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="Id that the matching tool result refers to")
    name: str = Field(description="Tool name")
    input: dict[str, Any] = Field(default_factory=dict, description="Arguments for the tool")
    synthetic: Literal[Synthetic.CONTEXT, Synthetic.SKILL] | None = Field(
        default=None, description="Set when agentfs appended the call, not the model"
    )

    def digest(self) -> str:
        """What the call does, as a short hash of its tool and input: the same for the
        call as received and as read back from its file, different once either is
        edited (`agentfs/store/inflight.py`)."""
        text = json.dumps([self.name, self.input], sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


class Usage(BaseModel):
    """Token usage the provider reported for one model call."""

    model_config = ConfigDict(extra="allow")

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    estimated_input_tokens: int | None = Field(
        default=None, description="agentfs' own estimate of the same input, to calibrate "
        "later estimates against what the provider counted",
    )


class Timing(BaseModel):
    """How long an assistant turn took, in milliseconds."""

    model_config = ConfigDict(extra="forbid")

    model_ms: int = Field(ge=0, description="In the model call, its retries included")
    wall_ms: int = Field(ge=0, description="From the start of the turn (reading the trace, "
                         "building the request) until the turn was written")


class Message(BaseModel):
    """One message of a trace, as stored in `traces/<id>/messages/`."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    id: str = Field(description="Stable message id, unique within the trace")
    sequence: int = Field(
        ge=0, le=MAX_SEQUENCE, description="Position in the trace; also the file name prefix"
    )
    parent_sequence: int | None = Field(
        default=None, description="The message before this one on its path; None for the first"
    )
    role: Role
    content: Any = Field(default="", description="Text, or JSON data for structured content")
    goal_id: str | None = Field(default=None, description="Goal focused when it was written")
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = Field(default=None, description="For tool results: the call")
    is_error: bool | None = Field(default=None, description="For tool results: it failed")
    synthetic: Synthetic | None = Field(
        default=None, description="Set when agentfs, not the model or user, wrote it"
    )
    branch_type: str | None = None
    branch_id: str | None = None
    model: str | None = Field(default=None, description="Model that wrote an assistant message")
    stop_reason: str | None = None
    usage: Usage | None = None
    timing: Timing | None = None
    thinking: list[dict[str, Any]] | None = Field(
        default=None, description="Thinking blocks, kept verbatim with their signatures"
    )
    files_changed: list[str] | None = Field(
        default=None, description="Workspace files a tool step changed (relative paths)"
    )
    source_branch: str | None = Field(
        default=None, description="For a compression summary: the side branch that wrote it"
    )
    answered: bool | None = Field(
        default=None, description="For a compression summary: what it replaces ended in the "
        "model's final answer, so the trace waits for the user after it as it did before",
    )
    blocks: list[dict[str, Any]] | None = Field(
        default=None, description="The order of an assistant turn's content blocks as "
        "received, when not thinking, text, tool calls (see docs/models.md)",
    )
    provider_data: dict[str, dict[str, Any]] | None = Field(
        default=None, description="What a model provider keeps with a turn for its own API "
        "(opaque ids, reasoning state), under the provider's name; other providers ignore "
        "it (see docs/architecture.md, adding a model provider)",
    )

    @field_validator("files_changed")
    @classmethod
    def _inside_workspace(cls, paths: list[str] | None) -> list[str] | None:
        """Entries are staged with the step: one outside the workspace must never be."""
        for path in paths or []:
            problem = workspace_path_problem(path)
            if problem is not None:
                raise PydanticCustomError(
                    "workspace_path",
                    "{path} is not a relative path inside the workspace: {problem}",
                    {"path": repr(path), "problem": problem},
                )
        return paths

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


def workspace_path_problem(path: str) -> str | None:
    """Why `path` is not a normalized relative POSIX path inside the workspace, or None."""
    if not path:
        return "it is empty"
    if "\x00" in path or "\\" in path:
        return "it holds a NUL or a backslash"
    if LONE_SURROGATE.search(path):
        return "it is not valid UTF-8"
    if path.startswith("/"):
        return "it is absolute"
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "it has an empty, '.' or '..' part"
    if any(part.lower() == ".git" for part in parts):
        return "it is inside .git"
    return None


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
    """The file bytes for `message`: the bytes it was read from if it is unchanged.

    Raises:
        MessageTooLarge: the file would be over `MAX_MESSAGE_BYTES` (or its
            frontmatter over the header limit).
        UnwritableMessage: its data is nested too deeply to be read back.
    """
    ext = message.file_ext
    if (
        message._source is not None
        and message._source_ext == ext
        and message._source_digest == _digest(message)
    ):
        return message._source
    name = message.file_name()
    try:
        fields = _fields(message)
    except ValueError as exc:  # pydantic's serializer: nested hundreds deep, or holds itself
        raise UnwritableMessage(
            name, f"cannot be written: {exc}", hint="flatten the data"
        ) from None
    try:
        if ext == "json":
            fields["content"] = message.content
            check_depth(fields)
            text = json.dumps(fields, indent=2, ensure_ascii=False) + "\n"
        else:
            text = render(fields, message.content)
        encoded = utf8(text, name)
    except FrontmatterError as exc:
        error = MessageTooLarge if exc.kind is Problem.TOO_LARGE else UnwritableMessage
        raise error(name, exc.message, hint=exc.hint) from None
    except UnicodeEncodeError:  # YAML's emitter encodes as it writes
        raise _not_unicode(name) from None
    if len(encoded) > MAX_MESSAGE_BYTES:
        raise MessageTooLarge(name, _over_limit(len(encoded)), hint=_SIZE_HINT)
    return encoded


def utf8(text: str, name: str | Path) -> bytes:
    """`text` as the UTF-8 of message file `name`.

    Raises:
        UnwritableMessage: it holds a lone surrogate (`LONE_SURROGATE`), which no
            UTF-8 file can.
    """
    try:
        return text.encode()
    except UnicodeEncodeError:
        raise _not_unicode(name) from None


def _not_unicode(name: str | Path) -> UnwritableMessage:
    return UnwritableMessage(
        name, "cannot be written: its text is not valid Unicode (it holds a lone surrogate, "
        "U+D800 to U+DFFF, as a JSON escape such as \\ud800 makes)",
        hint="send the text as UTF-8, without lone surrogate escapes")


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
    digits = path.name.partition("-")[0]
    if len(digits) > len(str(MAX_SEQUENCE)):
        raise MessageFileError(
            path,
            f"sequence {digits} is too long: sequences go up to {MAX_SEQUENCE:,} (6 to 9 digits)",
            hint="rename the file with the next free number, e.g. 000042-user.md",
        )
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
    text = _decode(path, data)
    if ext == "json":
        fields = _parse_json(path, text)
        content = fields.pop("content", "")
    else:
        try:
            header, content = split(text)
        except FrontmatterError as exc:
            raise MessageFileError(path, exc.message, hint=exc.hint) from None
        fields = header if header is not None else {}

    if dropped:
        _check_dropped(path, fields, content)
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


def _decode(path: Path, data: bytes) -> str:
    """A message file's text: within the size limit, no NUL byte, UTF-8."""
    if len(data) > MAX_MESSAGE_BYTES:
        raise MessageFileError(path, _over_limit(len(data)), hint=_SIZE_HINT)
    if b"\x00" in data:
        raise MessageFileError(path, "binary file (contains NUL bytes)", hint="messages are text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MessageFileError(
            path, f"not valid UTF-8 (byte {exc.start})", hint="save the file as UTF-8"
        ) from None


def _check_dropped(path: Path, fields: dict[str, Any], content: Any) -> None:
    """A dropped file is a user message with text; the trace gives it its id and place
    (the fields saying otherwise are dropped from `fields`)."""
    for key in ("id", "sequence", "parent_sequence"):
        fields.pop(key, None)
    if fields.get("role", "user") != "user":
        raise MessageFileError(
            path,
            f"a dropped file is a user message, but its frontmatter says role: {fields['role']!r}",
            hint="remove the role line",
        )
    if content is None or (isinstance(content, str) and not content.strip()):
        raise MessageFileError(
            path, "empty message: the file has no text", hint="write the message, then save"
        )


def _parse_json(path: Path, text: str) -> dict[str, Any]:
    try:
        value = load_json(text)
        check_depth(value)
    except json.JSONDecodeError as exc:
        raise MessageFileError(
            path, f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}",
            hint="fix the JSON there; a message written as Markdown goes in a .md file"
        ) from None
    except FrontmatterError as exc:
        raise MessageFileError(path, f"JSON {exc.message}", hint=exc.hint) from None
    except RecursionError:
        raise MessageFileError(path, "JSON is nested too deeply", hint="flatten the data") from None
    if not isinstance(value, dict):
        raise MessageFileError(path, "a JSON message file must hold an object",
                               hint='write {"content": "..."} with its fields (see '
                               "docs/trace-format.md); Markdown goes in a .md file")
    return value


def load_dropped(path: Path) -> Message:
    """Read and parse a file dropped as a new user message (see `parse_dropped`)."""
    return parse_dropped(path, _read(path, single=True))


def load_message(path: Path) -> Message:
    """Read and parse one message file."""
    return parse_message(path, _read(path))


def _read(path: Path, *, single: bool = False) -> bytes:
    """The file's bytes (`agentfs/store/regularfile.py:read_regular`): symlinks,
    non-regular files and oversize files are refused unread, and with `single` files
    with other hard links too (a dropped file is untrusted: a link could bring in a
    file from outside the workspace; the person's own message files may be hard
    links, as in a `cp -al` copy)."""
    try:
        return read_regular(path, MAX_MESSAGE_BYTES, what="message files",
                            size_hint=_SIZE_HINT, single=single)
    except FileNotFoundError as exc:
        raise MessageFileError(path, f"cannot read: {exc.strerror}") from None
    except FileRefused as exc:
        raise MessageFileError(path, exc.problem, hint=exc.hint) from None


_SIZE_HINT = "put large content in a workspace file and refer to it"


def _over_limit(size: int) -> str:
    return over_limit(size, MAX_MESSAGE_BYTES)
