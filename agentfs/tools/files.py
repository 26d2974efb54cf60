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
from typing import Any

from agentfs.tools.base import Tool, ToolContext, ToolFailure, schema

MAX_READ_CHARS = 100_000
MAX_LIST_ENTRIES = 500
MAX_GREP_MATCHES = 200
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


def read_file(arguments: dict[str, Any], context: ToolContext) -> str:
    path = resolve_path(context, arguments.get("path"))
    if path.is_dir():
        raise ToolFailure(f"{arguments['path']}: is a directory; use list_files")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ToolFailure(f"{arguments['path']}: no such file") from None
    if b"\x00" in data[:8192]:
        raise ToolFailure(f"{arguments['path']}: binary file ({len(data)} bytes)")
    text = data.decode("utf-8", errors="replace")
    if len(text) > MAX_READ_CHARS:
        return text[:MAX_READ_CHARS] + f"\n[... cut: {len(text) - MAX_READ_CHARS} more characters]"
    return text


def write_file(arguments: dict[str, Any], context: ToolContext) -> str:
    path = resolve_path(context, arguments.get("path"), for_write=True)
    content = _text_arg(arguments, "content")
    assert content is not None
    if path.is_dir():
        raise ToolFailure(f"{arguments['path']}: is a directory")
    existed = path.exists()
    context.write(path, content.encode("utf-8"))
    verb = "overwrote" if existed else "created"
    return f"{verb} {arguments['path']} ({len(content.encode('utf-8'))} bytes)"


def edit_file(arguments: dict[str, Any], context: ToolContext) -> str:
    path = resolve_path(context, arguments.get("path"), for_write=True)
    old = _text_arg(arguments, "old_text")
    new = _text_arg(arguments, "new_text")
    assert old is not None and new is not None
    if not old:
        raise ToolFailure("'old_text' must not be empty")
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
                hits.append(f"{rel}:{number}: {line[:300]}")
                if len(hits) >= MAX_GREP_MATCHES:
                    return "\n".join(hits) + f"\n[... stopped at {MAX_GREP_MATCHES} matches]"
    return "\n".join(hits) if hits else f"no matches for {raw!r}"


_PATH = {"type": "string", "description": "Path relative to the workspace root"}

FILE_TOOLS = (
    Tool(
        "read_file",
        "Read a text file of the workspace.",
        schema({"path": _PATH}, ["path"]),
        read_file,
    ),
    Tool(
        "write_file",
        "Create or overwrite a text file of the workspace.",
        schema({"path": _PATH, "content": {"type": "string"}}, ["path", "content"]),
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
