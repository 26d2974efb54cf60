"""Tools: what they are, how they are registered, what they return.

Every result is bounded here (`ToolRegistry.call`): a tool result is stored
as a message file, and agentfs never writes a message file it would refuse
to read (see docs/decisions.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentfs.errors import AgentfsError
from agentfs.models.base import ToolSpec
from agentfs.store.atomic import atomic_write, atomic_write_at
from agentfs.store.frontmatter import FrontmatterError, check_depth
from agentfs.store.messages import MAX_MESSAGE_BYTES
from agentfs.store.unicode import valid_unicode

__all__ = [
    "NOT_IN_TOOL_NAME",
    "TOOL_NAME",
    "TOOL_RESULT_MAX_BYTES",
    "Tool",
    "ToolContext",
    "ToolFailure",
    "ToolRegistry",
    "ToolResult",
    "cut_marker",
    "cut_text",
    "schema",
]

#: The most a tool result may hold, in UTF-8 bytes (text) or bytes of indented
#: JSON (structured content). An eighth of the message file limit: text with a
#: NUL is stored as JSON, where each control character becomes a 6-byte
#: `\u00XX` escape, so the worst case is 3 MiB, and the rest is room for the
#: frontmatter (nested JSON gains at most 2 bytes of indentation per line).
TOOL_RESULT_MAX_BYTES = MAX_MESSAGE_BYTES // 8
#: The model APIs' rule for tool names, and what it leaves out.
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}\Z")  # \Z: `$` lets a final line break through
NOT_IN_TOOL_NAME = re.compile(r"[^a-zA-Z0-9_-]")


def cut_marker(more_bytes: int, hint: str = "") -> str:
    """The note that replaces cut content: how much is missing and how to see it."""
    return f"[... cut by agentfs: {more_bytes:,} more bytes" + (f"; {hint}]" if hint else "]")


def cut_text(text: str, limit_bytes: int, *, hint: str = "", dropped: int = 0) -> str:
    """`text` cut to at most `limit_bytes` of UTF-8, marker included.

    Text that fits is returned as it is. Otherwise the result is the longest
    head that leaves room for the marker, cut between characters, then a line
    with `cut_marker`: how many bytes were cut and `hint`, which should say how
    to see the rest (for example "read the file in parts with offset/limit").

    Args:
        text: The text to bound.
        limit_bytes: The size of the result in UTF-8 bytes, at most.
        hint: How the reader can get what was cut.
        dropped: Bytes that followed `text` and were left out already (output read
            and dropped past a limit): counted in the marker, which is then always there.

    Returns:
        `text`, or its head and the marker.

    Raises:
        ValueError: `limit_bytes` cannot even hold the marker.
    """
    if not dropped and len(text) * 4 <= limit_bytes:  # no character is longer than 4 bytes
        return text
    data = text.encode("utf-8", "surrogatepass")  # never fails; the count stays right
    if not dropped and len(data) <= limit_bytes:
        return text
    room = limit_bytes - len(("\n" + cut_marker(len(data) + dropped, hint)).encode())
    if room < 0:
        raise ValueError(f"{limit_bytes} bytes cannot hold the cut marker")
    room = min(room, len(data))
    while 0 < room < len(data) and data[room] & 0xC0 == 0x80:  # inside a character
        room -= 1
    head = data[:room].decode("utf-8", "surrogatepass")
    return f"{head}\n{cut_marker(len(data) - room + dropped, hint)}"


class ToolFailure(Exception):
    """A tool could not do what was asked; becomes an `is_error` result, never a crash."""


@dataclass
class ToolContext:
    """What a tool may use: the workspace root, and a record of the files it changed.

    Tools change files through `write`, which announces the path first
    (`before_change`), so even a run killed mid-write knows what to commit.
    """

    root: Path
    trace_id: str
    changed: set[str] = field(default_factory=set)
    tmp_dir: Path | None = None
    before_change: Callable[[str], None] | None = None

    def write(self, path: Path, data: bytes, dir_fd: int | None = None) -> None:
        """Atomically replace a workspace file, recording it as changed. With `dir_fd`,
        the file replaced is `path.name` in that open folder, wherever `path` leads
        by now (`agentfs/tools/paths.py:confined_dir`)."""
        rel = path.relative_to(self.root.resolve()).as_posix()
        if self.before_change is not None:
            self.before_change(rel)
        if dir_fd is None:
            atomic_write(path, data, tmp_dir=self.tmp_dir)
        else:
            atomic_write_at(dir_fd, path.name, data, tmp_dir=self.tmp_dir)
        self.changed.add(rel)


@dataclass
class ToolResult:
    """A tool's answer: text or JSON data, and whether it is an error.

    `ToolRegistry.call` cuts it to `TOOL_RESULT_MAX_BYTES`.
    """

    content: Any
    is_error: bool = False


@dataclass(frozen=True)
class Tool:
    """A named function the model can call with JSON input.

    A tool is *acting* unless it is declared `read_only`: it may change the
    workspace's files, the machine or the world (bash, write_file, edit_file,
    delegate, an MCP tool whose server does not declare `readOnlyHint`). With
    `[tools] approve = "acting"`, acting calls wait for the person's yes
    (`agentfs/core/approval.py`).
    """

    name: str
    description: str
    input_schema: dict[str, Any]
    run: Callable[[dict[str, Any], ToolContext], Any]
    #: Declared to change nothing outside the trace's own state (reads, searches, the
    #: goal tree); such a tool never waits for approval.
    read_only: bool = False

    @property
    def acting(self) -> bool:
        """May change things outside the trace: the calls approval is asked for."""
        return not self.read_only

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.input_schema)


class ToolRegistry:
    """The tools a run offers, by name."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.add(tool)

    def add(self, tool: Tool) -> None:
        self._tools[tool.name] = tool

    def remove(self, name: str) -> None:
        self._tools.pop(name, None)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def specs(self) -> list[ToolSpec]:
        return [self._tools[name].spec for name in sorted(self._tools)]

    def call(self, name: str, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        """Run a tool; every failure comes back as an error result, and every result
        is cut to `TOOL_RESULT_MAX_BYTES`."""
        return _bounded(name, self._call(name, arguments, context))

    def _call(self, name: str, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        tool = self._tools.get(name)
        if tool is None:
            return ToolResult(
                f"unknown tool {name!r}; available: {', '.join(self.names())}", is_error=True
            )
        try:
            value = tool.run(arguments, context)
        except (ToolFailure, AgentfsError) as exc:
            return ToolResult(str(exc), is_error=True)
        except Exception as exc:  # noqa: BLE001 — a tool bug must not crash the run
            return ToolResult(f"{name} failed: {type(exc).__name__}: {exc}", is_error=True)
        return value if isinstance(value, ToolResult) else ToolResult(value)


def _bounded(name: str, result: ToolResult) -> ToolResult:
    """`result` as the store can write it: content cut to `TOOL_RESULT_MAX_BYTES`, and
    JSON data too large or too deeply nested turned into its indented text, cut.
    Content that is not JSON data is an error. Text that is not valid Unicode (a
    lone surrogate: a file name that is not UTF-8, a JSON escape) holds U+FFFD in
    its place."""
    hint = f"one tool result holds at most {TOOL_RESULT_MAX_BYTES:,} bytes; ask {name} for less"
    content = result.content
    if isinstance(content, str):
        cut = cut_text(valid_unicode(content), TOOL_RESULT_MAX_BYTES, hint=hint)
        return result if cut is content else ToolResult(cut, result.is_error)
    try:
        rendered = json.dumps(content, indent=2, ensure_ascii=False)  # as the store writes it
    except (TypeError, ValueError) as exc:
        return ToolResult(
            f"{name} returned {type(content).__name__}, which is not JSON data: {exc}",
            is_error=True,
        )
    except RecursionError:
        return ToolResult(f"{name} returned JSON data nested too deeply to store", is_error=True)
    if valid_unicode(rendered) is not rendered:  # a lone surrogate in the data
        try:
            content = valid_unicode(content)
            rendered = json.dumps(content, indent=2, ensure_ascii=False)
        except RecursionError:  # deeper than this walk goes: kept as its text
            content = rendered = valid_unicode(rendered)
        result = ToolResult(content, result.is_error)
    cut = cut_text(rendered, TOOL_RESULT_MAX_BYTES, hint=hint)
    if cut is not rendered:
        return ToolResult(cut, result.is_error)
    try:
        check_depth([content])  # as deep as it sits in the message's fields
    except FrontmatterError:
        return ToolResult(rendered, result.is_error)  # as text, its depth does not matter
    return result


def schema(properties: dict[str, Any], required: Iterable[str] = ()) -> dict[str, Any]:
    """A JSON schema for an object with these properties."""
    return {"type": "object", "properties": properties, "required": list(required)}
