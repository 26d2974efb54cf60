"""File tools confined to the workspace: read, write, edit, list (glob), grep.

Paths are relative to the workspace root. Nothing under `.git` is reachable,
`..` and symlinks cannot lead outside the workspace, and trace directories
are read-only to the agent (agentfs writes them).
"""

from __future__ import annotations

import fnmatch
import os
import re
from pathlib import Path
from typing import Any, BinaryIO

from agentfs.store.frontmatter import MAX_HEADER_BYTES
from agentfs.tools.base import Tool, ToolContext, ToolFailure, cut_marker, schema

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
MAX_LIST_ENTRIES = 500
MAX_GREP_MATCHES = 200
MAX_GREP_LINE_CHARS = 300
MAX_GREP_BYTES = 64 * 1024
#: Top-level paths tools may read but not change: agentfs' own state and the
#: settings that decide what runs (a prompt-injected model must not enable bash
#: or add hooks by editing them).
PROTECTED_FOR_WRITES = ("traces", "agentfs.toml", "skills")


def resolve_path(context: ToolContext, raw: Any, *, for_write: bool = False) -> Path:
    """The absolute path for `raw`, refusing anything outside the workspace."""
    if not isinstance(raw, str) or not raw.strip():
        raise ToolFailure("'path' must be a non-empty string relative to the workspace")
    root = context.root.resolve()
    candidate = Path(raw)
    full = (candidate if candidate.is_absolute() else root / candidate).resolve()
    try:
        rel = full.relative_to(root)
    except ValueError:
        raise ToolFailure(f"{raw}: outside the workspace") from None
    if ".git" in rel.parts:
        raise ToolFailure(f"{raw}: .git directories are off limits")
    if for_write and rel.parts and rel.parts[0] in PROTECTED_FOR_WRITES:
        raise ToolFailure(f"{raw}: {rel.parts[0]} is managed by people and agentfs; "
                          "tools may read it but not change it")
    return full


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


def read_file(arguments: dict[str, Any], context: ToolContext) -> str:
    path = resolve_path(context, arguments.get("path"))
    offset = _line_number(arguments, "offset") or 1
    limit = _line_number(arguments, "limit")
    if path.is_dir():
        raise ToolFailure(f"{arguments['path']}: is a directory; use list_files")
    try:
        file = path.open("rb")
    except FileNotFoundError:
        raise ToolFailure(f"{arguments['path']}: no such file") from None
    with file:
        size = os.fstat(file.fileno()).st_size
        if b"\x00" in file.read(8192):
            raise ToolFailure(f"{arguments['path']}: binary file ({size} bytes)")
        file.seek(0)
        skipped = _skip_lines(file, offset - 1)
        if skipped < offset - 1:
            raise ToolFailure(
                f"{arguments['path']}: offset {offset} is past the end ({skipped} lines)"
            )
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


def write_file(arguments: dict[str, Any], context: ToolContext) -> str:
    path = resolve_path(context, arguments.get("path"), for_write=True)
    content = _text_arg(arguments, "content")
    assert content is not None
    data = content.encode("utf-8")
    if len(data) > MAX_WRITE_BYTES:
        raise _too_big("'content' is", len(data), "Write the file in parts: write_file with "
                       "the first part, then write_file with append=true for each next part.")
    if path.is_dir():
        raise ToolFailure(f"{arguments['path']}: is a directory")
    existed = path.exists()
    if existed and arguments.get("append"):
        whole = path.read_bytes() + data
        context.write(path, whole)
        return f"appended {len(data)} bytes to {arguments['path']} (now {len(whole)} bytes)"
    context.write(path, data)
    verb = "overwrote" if existed else "created"
    return f"{verb} {arguments['path']} ({len(data)} bytes)"


def edit_file(arguments: dict[str, Any], context: ToolContext) -> str:
    path = resolve_path(context, arguments.get("path"), for_write=True)
    old = _text_arg(arguments, "old_text")
    new = _text_arg(arguments, "new_text")
    assert old is not None and new is not None
    if not old:
        raise ToolFailure("'old_text' must not be empty")
    carried = len(old.encode("utf-8")) + len(new.encode("utf-8"))
    if carried > MAX_WRITE_BYTES:
        raise _too_big("old_text and new_text together are", carried,
                       "Make several smaller edits.")
    try:
        text = path.read_bytes().decode("utf-8")  # not read_text: keep CRLF line ends
    except FileNotFoundError:
        raise ToolFailure(f"{arguments['path']}: no such file") from None
    except UnicodeDecodeError:
        raise ToolFailure(f"{arguments['path']}: not a UTF-8 text file") from None
    count = text.count(old)
    replace_all = bool(arguments.get("replace_all", False))
    if count == 0:
        raise ToolFailure(f"{arguments['path']}: old_text not found")
    if count > 1 and not replace_all:
        raise ToolFailure(
            f"{arguments['path']}: old_text occurs {count} times; "
            "add context to make it unique or set replace_all"
        )
    context.write(path, text.replace(old, new).encode("utf-8"))
    return f"edited {arguments['path']} ({count if replace_all else 1} replacement(s))"


def _walk(base: Path) -> list[Path]:
    """Files below `base`, without `.git` and without symlinks (they could lead outside)."""
    files: list[Path] = []
    for directory, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d != ".git")
        files.extend(
            Path(directory) / name
            for name in sorted(filenames)
            if not os.path.islink(os.path.join(directory, name))
        )
    return files


def list_files(arguments: dict[str, Any], context: ToolContext) -> str:
    pattern = _text_arg(arguments, "pattern", required=False) or "**/*"
    base = resolve_path(context, arguments.get("path") or ".")
    if not base.is_dir():
        raise ToolFailure(f"{arguments.get('path')}: not a directory")
    root = context.root.resolve()
    matches = [
        p.relative_to(root).as_posix()
        for p in _walk(base)
        if _glob_match(p.relative_to(base).as_posix(), pattern)
    ]
    if not matches:
        return f"no files match {pattern!r}"
    shown = matches[:MAX_LIST_ENTRIES]
    more = len(matches) - len(shown)
    return "\n".join(shown) + (f"\n[... {more} more]" if more else "")


def _glob_match(rel: str, pattern: str) -> bool:
    """fnmatch, with a leading `**/` also matching at the top level."""
    return fnmatch.fnmatchcase(rel, pattern) or (
        pattern.startswith("**/") and fnmatch.fnmatchcase(rel, pattern[3:])
    )


def grep(arguments: dict[str, Any], context: ToolContext) -> str:
    raw = _text_arg(arguments, "pattern")
    assert raw is not None
    try:
        regex = re.compile(raw)
    except re.error as exc:
        raise ToolFailure(f"invalid regular expression {raw!r}: {exc}") from None
    base = resolve_path(context, arguments.get("path") or ".")
    file_glob = _text_arg(arguments, "glob", required=False) or "**/*"
    root = context.root.resolve()
    candidates = [base] if base.is_file() else _walk(base)
    hits: list[str] = []
    size = 0
    for path in candidates:
        rel = path.relative_to(root).as_posix()
        if not base.is_file() and not _glob_match(path.relative_to(base).as_posix(), file_glob):
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if b"\x00" in data[:8192]:
            continue
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if regex.search(line):
                if len(line) > MAX_GREP_LINE_CHARS:
                    line = line[:MAX_GREP_LINE_CHARS] + " [... line cut]"
                hit = f"{rel}:{number}: {line}"
                size += len(hit.encode("utf-8")) + 1
                if size > MAX_GREP_BYTES:
                    note = f"stopped at {MAX_GREP_BYTES:,} bytes of matches; narrow the search"
                    return "\n".join(hits) + f"\n[... {note} with path or glob]"
                hits.append(hit)
                if len(hits) >= MAX_GREP_MATCHES:
                    return "\n".join(hits) + f"\n[... stopped at {MAX_GREP_MATCHES} matches]"
    return "\n".join(hits) if hits else f"no matches for {raw!r}"


_PATH = {"type": "string", "description": "Path relative to the workspace root"}

FILE_TOOLS = (
    Tool(
        "read_file",
        f"Read a text file of the workspace. At most {MAX_READ_CHARS:,} characters come back "
        "at once; read longer files in parts with offset and limit.",
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
        read_file,
    ),
    Tool(
        "write_file",
        f"Create or overwrite a text file of the workspace, or append to it. One call "
        f"carries at most {MAX_WRITE_BYTES:,} bytes; write larger files in parts with append.",
        schema(
            {
                "path": _PATH,
                "content": {"type": "string"},
                "append": {"type": "boolean",
                           "description": "Add content at the end instead of replacing the file"},
            },
            ["path", "content"],
        ),
        write_file,
    ),
    Tool(
        "edit_file",
        "Replace old_text with new_text in a file (old_text must be unique unless replace_all).",
        schema(
            {
                "path": _PATH,
                "old_text": {"type": "string"},
                "new_text": {"type": "string"},
                "replace_all": {"type": "boolean"},
            },
            ["path", "old_text", "new_text"],
        ),
        edit_file,
    ),
    Tool(
        "list_files",
        "List workspace files matching a glob pattern (default **/*), below an optional path.",
        schema({"pattern": {"type": "string"}, "path": _PATH}),
        list_files,
    ),
    Tool(
        "grep",
        "Search workspace files for a regular expression; prints path:line: text.",
        schema({"pattern": {"type": "string"}, "path": _PATH, "glob": {"type": "string"}}, ["pattern"]),
        grep,
    ),
)
