"""File tools confined to the workspace: read, write, edit, list (glob), grep.

Paths are relative to the workspace root. Each is resolved (`..` and symlinks
followed) before it is judged (`resolve_path`): nothing outside the workspace
or in a `.git` directory is reachable, and the workspace's control files
(`[tools] read_only`) may be read but not changed (`WritePolicy`). Every tool
is bounded in bytes and time. `edit_file` refuses a file that changed since
the trace last saw it, and the changes to one file are made one at a time,
across threads and processes (`change_lock`).
"""

from __future__ import annotations

import hashlib
import io
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import regex  # type: ignore[import-untyped]  # tiktoken's dependency; has no type hints

from agentfs.config import DEFAULT_READ_ONLY
from agentfs.store.frontmatter import MAX_HEADER_BYTES
from agentfs.tools.base import Tool, ToolContext, ToolFailure, cut_marker, schema
from agentfs.tools.paths import (
    FILE_TOOL_TIMEOUT,
    WritePolicy,
    change_lock,
    confined_dir,
    is_git_path,
    open_regular,
    open_regular_at,
    resolve_path,
)
from agentfs.tools.search import (
    MAX_GREP_BYTES,
    MAX_GREP_FILE_BYTES,
    MAX_GREP_READ_BYTES,
    MAX_WALK_ENTRIES,
    Search,
    Walk,
    glob_match,
)

__all__ = [
    "FILE_TOOLS",
    "FILE_TOOL_TIMEOUT",
    "MAX_EDIT_FILE_BYTES",
    "MAX_GREP_BYTES",
    "MAX_GREP_FILE_BYTES",
    "MAX_GREP_READ_BYTES",
    "MAX_READ_BYTES",
    "MAX_READ_CHARS",
    "MAX_WALK_ENTRIES",
    "MAX_WRITE_BYTES",
    "WritePolicy",
    "change_lock",
    "file_tools",
    "is_git_path",
    "resolve_path",
]

#: What one `read_file` call returns at most: characters (what the model pays
#: for) and bytes of the file (each shows as at most 3 bytes of UTF-8, so a
#: result stays well under `agentfs/tools/base.py:TOOL_RESULT_MAX_BYTES`).
MAX_READ_CHARS = 100_000
MAX_READ_BYTES = 128 * 1024
#: What one `write_file` or `edit_file` call may carry, in UTF-8 bytes. The call
#: is stored in the frontmatter of the assistant message, which must stay
#: readable: YAML may write a control character as a 4-byte escape, and the
#: rest of the header needs room too. Larger files are written in parts.
MAX_WRITE_BYTES = MAX_HEADER_BYTES // 5
#: The largest file `edit_file` and `write_file` with `append` change: both read
#: the whole file and write it back.
MAX_EDIT_FILE_BYTES = 32 * 1024 * 1024
MAX_LIST_ENTRIES = 500
#: How many (trace, file) versions one set of file tools remembers; the oldest go first.
MAX_REMEMBERED = 10_000


# --- what a trace last saw of a file -----------------------------------------------


@dataclass(frozen=True)
class _Version:
    """A file as a trace last saw it: its stat identity and the SHA-256 of its bytes."""

    identity: tuple[int, ...]
    digest: bytes


def _identity(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _digest(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


# --- reading files safely --------------------------------------------------------------


def _read_for_change(parent: int, name: str, raw: str) -> bytes | None:
    """The bytes of the file `name` of the open folder `parent` that `edit_file` or an
    append is about to change; None if it is missing."""
    try:
        file = open_regular_at(parent, name, raw)
    except FileNotFoundError:
        return None
    with file:
        data = file.read(MAX_EDIT_FILE_BYTES + 1)
    if len(data) > MAX_EDIT_FILE_BYTES:
        raise ToolFailure(
            f"{raw}: over {MAX_EDIT_FILE_BYTES:,} bytes; edit_file and append change files "
            "of at most that size (they rewrite the whole file)"
        )
    return data


def _path_arg(arguments: dict[str, Any]) -> str:
    raw = arguments.get("path")
    if not isinstance(raw, str) or not raw.strip():
        raise ToolFailure("'path' must be a non-empty string relative to the workspace")
    return raw


def _text_arg(arguments: dict[str, Any], name: str, *, required: bool = True) -> str | None:
    value = arguments.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise ToolFailure(f"'{name}' must be a string")
    return value


def _line_number(arguments: dict[str, Any], name: str) -> int | None:
    value = arguments.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ToolFailure(f"'{name}' must be a whole number of lines, 1 or more")
    return value


def _skip_lines(file: BinaryIO, count: int) -> int:
    """Skip `count` lines (fewer at the end of the file); returns how many were skipped."""
    skipped = 0
    while skipped < count:
        chunk = file.readline(64 * 1024)  # a bounded read: a line may be huge
        if not chunk:
            break
        if chunk.endswith(b"\n"):
            skipped += 1
    return skipped


def _read_lines(file: BinaryIO, limit: int | None) -> tuple[str, int, bool]:
    """Whole lines from the file's position while they fit the read limits: the text,
    how many lines, and whether that was all that was asked for. The file is left
    after the last line taken."""
    parts: list[str] = []
    size = chars = 0
    while limit is None or len(parts) < limit:
        start = file.tell()
        raw = file.readline(MAX_READ_BYTES - size + 1)
        if not raw:
            break
        line = raw.decode("utf-8", "replace")
        if size + len(raw) > MAX_READ_BYTES or chars + len(line) > MAX_READ_CHARS:
            file.seek(start)
            return "".join(parts), len(parts), False
        parts.append(line)
        size += len(raw)
        chars += len(line)
    return "".join(parts), len(parts), True


def _line_head(file: BinaryIO) -> str:
    """The head of the over-long line at the file's position, cut between characters;
    the file is left after the bytes shown."""
    start = file.tell()
    raw = file.read(MAX_READ_BYTES + 1)
    end = min(len(raw), MAX_READ_BYTES)
    while 0 < end < len(raw) and raw[end] & 0xC0 == 0x80:  # inside a character
        end -= 1
    # surrogateescape: one character per invalid byte, so the count of bytes stays exact
    head = raw[:end].decode("utf-8", "surrogateescape")[:MAX_READ_CHARS]
    end = len(head.encode("utf-8", "surrogateescape"))
    file.seek(start + end)
    return raw[:end].decode("utf-8", "replace")


def _too_big(what: str, size: int, advice: str) -> ToolFailure:
    return ToolFailure(
        f"{what} {size:,} bytes; one call may carry at most {MAX_WRITE_BYTES:,} "
        f"(the call is stored in the trace). {advice}"
    )


# --- the tools ----------------------------------------------------------------------


class _FileTools:
    """The file tools of one run: what they may change, how long they may take,
    and the version of each file each trace last saw (for `edit_file`)."""

    def __init__(self, policy: WritePolicy, timeout: float) -> None:
        self.policy = policy
        self.timeout = timeout
        self._seen: dict[tuple[str, str], _Version] = {}
        self._seen_lock = threading.Lock()

    # --- versions seen

    def _last_seen(self, context: ToolContext, path: Path) -> _Version | None:
        with self._seen_lock:
            return self._seen.get((context.trace_id, str(path)))

    def _remember(self, context: ToolContext, path: Path, version: _Version) -> None:
        key = (context.trace_id, str(path))
        with self._seen_lock:
            self._seen.pop(key, None)  # re-inserted last: the oldest entry goes first
            self._seen[key] = version
            while len(self._seen) > MAX_REMEMBERED:
                del self._seen[next(iter(self._seen))]

    def _note_read(self, context: ToolContext, path: Path, file: io.BufferedReader) -> None:
        """Remember the version of `path` a read shows (of files edit_file can change).
        A file read in parts is hashed once, while its stat identity stays the same."""
        st = os.fstat(file.fileno())
        if st.st_size > MAX_EDIT_FILE_BYTES:
            return
        known = self._last_seen(context, path)
        if known is not None and known.identity == _identity(st):
            return
        file.seek(0)
        digest = hashlib.file_digest(file, "sha256").digest()
        self._remember(context, path, _Version(_identity(st), digest))

    def _note_change(self, context: ToolContext, path: Path, before: bytes | None,
                     after: bytes) -> None:
        """Remember `after` as what the trace saw of `path`, unless it had missed an
        earlier change to `before` (an append does not show the file): then its next
        edit must still read the file first."""
        known = self._last_seen(context, path)
        if known is not None and before is not None and known.digest != _digest(before):
            return
        self._remember(context, path, _Version(_identity(os.stat(path)), _digest(after)))

    # --- the tools themselves

    def read_file(self, arguments: dict[str, Any], context: ToolContext) -> str:
        raw = _path_arg(arguments)
        path = resolve_path(context, raw)
        offset = _line_number(arguments, "offset") or 1
        limit = _line_number(arguments, "limit")
        try:
            file = open_regular(context.root, path, raw)
        except FileNotFoundError:
            raise ToolFailure(f"{raw}: no such file") from None
        with file:
            size = os.fstat(file.fileno()).st_size
            if b"\x00" in file.read(8192):
                raise ToolFailure(f"{raw}: binary file ({size} bytes)")
            self._note_read(context, path, file)
            file.seek(0)
            skipped = _skip_lines(file, offset - 1)
            if skipped < offset - 1:
                raise ToolFailure(f"{raw}: offset {offset} is past the end ({skipped} lines)")
            text, lines, complete = _read_lines(file, limit)
            if complete:
                return text
            if lines:
                hint = f"read the rest in parts with offset/limit, from offset={offset + lines}"
            else:  # one line longer than a whole read: show its head
                text = _line_head(file)
                hint = (f"line {offset} alone is over what read_file shows at once; "
                        f"the next line is offset={offset + 1}")
            rest = size - file.tell()
        separator = "" if text.endswith("\n") else "\n"
        return f"{text}{separator}{cut_marker(rest, hint)}"

    def write_file(self, arguments: dict[str, Any], context: ToolContext) -> str:
        raw = _path_arg(arguments)
        path = resolve_path(context, raw, self.policy)
        content = _text_arg(arguments, "content")
        assert content is not None
        data = content.encode("utf-8")
        if len(data) > MAX_WRITE_BYTES:
            raise _too_big("'content' is", len(data), "Write the file in parts: write_file "
                           "with the first part, then write_file with append=true for each "
                           "next part.")
        if path.is_dir():
            raise ToolFailure(f"{raw}: is a directory")
        with (change_lock(context.root, path, self.timeout),
              confined_dir(context.root, path, raw, create=True) as (parent, name)):
            before = _read_for_change(parent, name, raw) if arguments.get("append") else None
            if before is not None:
                whole = before + data
                context.write(path, whole, parent)
                self._note_change(context, path, before, whole)
                return f"appended {len(data)} bytes to {raw} (now {len(whole)} bytes)"
            existed = path.exists()
            context.write(path, data, parent)
            self._note_change(context, path, None, data)
        verb = "overwrote" if existed else "created"
        return f"{verb} {raw} ({len(data)} bytes)"

    def edit_file(self, arguments: dict[str, Any], context: ToolContext) -> str:
        raw = _path_arg(arguments)
        path = resolve_path(context, raw, self.policy)
        old = _text_arg(arguments, "old_text")
        new = _text_arg(arguments, "new_text")
        assert old is not None and new is not None
        if not old:
            raise ToolFailure("'old_text' must not be empty")
        carried = len(old.encode("utf-8")) + len(new.encode("utf-8"))
        if carried > MAX_WRITE_BYTES:
            raise _too_big("old_text and new_text together are", carried,
                           "Make several smaller edits.")
        replace_all = bool(arguments.get("replace_all", False))
        try:
            return self._edit(context, path, raw, old, new, replace_all=replace_all)
        except FileNotFoundError:  # a folder on the way is missing
            raise ToolFailure(f"{raw}: no such file") from None

    def _edit(self, context: ToolContext, path: Path, raw: str, old: str, new: str, *,
              replace_all: bool) -> str:
        with (change_lock(context.root, path, self.timeout),
              confined_dir(context.root, path, raw) as (parent, name)):
            before = _read_for_change(parent, name, raw)
            if before is None:
                raise ToolFailure(f"{raw}: no such file")
            known = self._last_seen(context, path)
            if known is not None and known.digest != _digest(before):
                raise ToolFailure(f"{raw}: changed since you last read it (someone else "
                                  "edited it); read it again")
            try:
                text = before.decode("utf-8")  # bytes, not text mode: keep CRLF line ends
            except UnicodeDecodeError:
                raise ToolFailure(f"{raw}: not a UTF-8 text file") from None
            count = text.count(old)
            if count == 0:
                raise ToolFailure(f"{raw}: old_text not found")
            if count > 1 and not replace_all:
                raise ToolFailure(f"{raw}: old_text occurs {count} times; "
                                  "add context to make it unique or set replace_all")
            after = text.replace(old, new).encode("utf-8")
            context.write(path, after, parent)
            self._note_change(context, path, before, after)
        return f"edited {raw} ({count if replace_all else 1} replacement(s))"

    def list_files(self, arguments: dict[str, Any], context: ToolContext) -> str:
        pattern = _text_arg(arguments, "pattern", required=False) or "**/*"
        base = resolve_path(context, arguments.get("path") or ".")
        if not base.is_dir():
            raise ToolFailure(f"{arguments.get('path')}: not a directory")
        root = context.root.resolve()
        walk = Walk(root, base, time.monotonic() + self.timeout)
        matches = [
            p.relative_to(root).as_posix()
            for p in walk
            if glob_match(p.relative_to(base).as_posix(), pattern)
        ]
        note = (f"\n[... {walk.stopped}; narrow the listing with path or pattern]"
                if walk.stopped else "")
        if not matches:
            return f"no files match {pattern!r}{note}"
        shown = matches[:MAX_LIST_ENTRIES]
        more = len(matches) - len(shown)
        return "\n".join(shown) + (f"\n[... {more} more]" if more else "") + note

    def grep(self, arguments: dict[str, Any], context: ToolContext) -> str:
        raw = _text_arg(arguments, "pattern")
        assert raw is not None
        try:
            pattern = regex.compile(raw)
        except regex.error as exc:
            raise ToolFailure(f"invalid regular expression {raw!r}: {exc}") from None
        base = resolve_path(context, arguments.get("path") or ".")
        file_glob = _text_arg(arguments, "glob", required=False) or "**/*"
        root = context.root.resolve()
        search = Search(pattern, time.monotonic() + self.timeout, self.timeout)
        walk = Walk(root, base, search.deadline)
        files = [base] if base.is_file() else (
            path for path in walk if glob_match(path.relative_to(base).as_posix(), file_glob))
        search.run(root, files)
        if walk.timed_out:
            raise search.timed_out()
        if walk.stopped:
            search.notes.append(f"{walk.stopped}; narrow the search with path or glob")
        return search.result(raw)

    def tools(self) -> tuple[Tool, ...]:
        read_only = ", ".join(self.policy.read_only) or "none"
        return (
            Tool(
                "read_file",
                f"Read a text file of the workspace. At most {MAX_READ_CHARS:,} characters "
                "come back at once; read longer files in parts with offset and limit.",
                schema(
                    {
                        "path": _PATH,
                        "offset": {"type": "integer", "minimum": 1,
                                   "description": "First line to read (1 is the first line)"},
                        "limit": {"type": "integer", "minimum": 1,
                                  "description": "How many lines to read at most"},
                    },
                    ["path"],
                ),
                self.read_file,
                read_only=True,
            ),
            Tool(
                "write_file",
                f"Create or overwrite a text file of the workspace, or append to it. One call "
                f"carries at most {MAX_WRITE_BYTES:,} bytes; write larger files in parts with "
                f"append. Read-only (may be read, not changed): {read_only}.",
                schema(
                    {
                        "path": _PATH,
                        "content": {"type": "string"},
                        "append": {"type": "boolean", "description":
                                   "Add content at the end instead of replacing the file"},
                    },
                    ["path", "content"],
                ),
                self.write_file,
            ),
            Tool(
                "edit_file",
                "Replace old_text with new_text in a file (old_text must be unique unless "
                "replace_all). Refused if the file changed since you last read or wrote it. "
                f"Read-only (may be read, not changed): {read_only}.",
                schema(
                    {
                        "path": _PATH,
                        "old_text": {"type": "string"},
                        "new_text": {"type": "string"},
                        "replace_all": {"type": "boolean"},
                    },
                    ["path", "old_text", "new_text"],
                ),
                self.edit_file,
            ),
            Tool(
                "list_files",
                "List workspace files matching a glob pattern (default **/*), below an "
                "optional path.",
                schema({"pattern": {"type": "string"}, "path": _PATH}),
                self.list_files,
                read_only=True,
            ),
            Tool(
                "grep",
                "Search workspace files for a regular expression; prints path:line: text.",
                schema({"pattern": {"type": "string"}, "path": _PATH, "glob": {"type": "string"}},
                       ["pattern"]),
                self.grep,
                read_only=True,
            ),
        )


_PATH = {"type": "string", "description": "Path relative to the workspace root"}


def file_tools(read_only: Iterable[str] = DEFAULT_READ_ONLY, *,
               timeout: float = FILE_TOOL_TIMEOUT) -> tuple[Tool, ...]:
    """The file tools for one run: read_file, write_file, edit_file, list_files, grep.

    Args:
        read_only: Workspace paths the tools may read but not change
            (`[tools] read_only`; see `WritePolicy`).
        timeout: Seconds a `list_files` or `grep` call may take, and a write
            may wait for another writer of the same file.

    Returns:
        The tools. They share what each trace last saw of each file, so build
        them once per run: `edit_file` refuses a file changed since then.

    Raises:
        ConfigError: an entry of `read_only` is not a path inside the workspace.
    """
    return _FileTools(WritePolicy(tuple(read_only)), timeout).tools()


#: The file tools with the default read-only paths (a run builds its own: `file_tools`).
FILE_TOOLS = file_tools()
