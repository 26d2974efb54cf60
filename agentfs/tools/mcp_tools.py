"""MCP servers' tools as agentfs tools: their names, their records, their results.

A server's tool `search` is offered as `<server>__search`. The Messages API
takes tool names of at most 64 characters from `[a-zA-Z0-9_-]`, so a tool
name with other characters, or too long, is offered with those characters
replaced and a short hash of the real name (stable, and never two tools on one
name). What is offered is a `ToolRecord`: kept in the trace (trace.json), so
the tool list is the same from one request to the next.

A result becomes an ordinary tool result: its text parts joined; an image (or
audio, or a binary resource) written to `mcp-files/<server>/<hash>.<ext>` in
the workspace (committed with the step) and named in the text; `isError` an
error result.

A stdio server runs in the workspace and may change its files: around a call
of its tools that are not declared read-only, the work tree is compared
(`agentfs/tools/worktree.py:WorkTreeChanges`, as for bash), so what the call
changed is committed with the step. An HTTP server cannot change local files.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import mimetypes
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from agentfs.tools.base import (
    NOT_IN_TOOL_NAME,
    TOOL_NAME,
    Tool,
    ToolContext,
    ToolFailure,
    ToolResult,
)
from agentfs.tools.paths import confined_dir
from agentfs.tools.worktree import WorkTreeChanges

__all__ = ["FILES_DIR", "McpTool", "ToolRecord", "offered_name", "record_of", "result_of",
           "tool_of"]

#: Where images and other binary results of MCP tools are written, in the workspace.
FILES_DIR = "mcp-files"
_SEPARATOR = "__"

#: Extensions of the usual media types; `mimetypes` knows what the machine's tables say.
_EXTENSIONS = {"image/png": ".png", "image/jpeg": ".jpg", "image/gif": ".gif",
               "image/webp": ".webp", "image/svg+xml": ".svg", "audio/wav": ".wav",
               "audio/mpeg": ".mp3", "audio/ogg": ".ogg", "application/pdf": ".pdf"}
#: Calls a server's tool by its own name: `call(name, arguments)` → the SDK's result.
CallTool = Callable[[str, dict[str, Any]], Any]


class ToolRecord(TypedDict):
    """One tool of a server as a trace records it (`context.mcp_tools` in trace.json)."""

    name: str
    description: str
    input_schema: dict[str, Any]
    read_only: bool


@dataclass(frozen=True)
class McpTool(Tool):
    """A tool of an MCP server, offered under its `offered_name`."""

    #: The server's name in agentfs.toml.
    server: str = ""
    #: The tool's own name on the server. (`read_only` is the server's `readOnlyHint`.)
    remote_name: str = ""


def offered_name(server: str, tool: str) -> str:
    """The name `tool` of `server` is offered under (see the module docstring)."""
    name = f"{server}{_SEPARATOR}{tool}"
    if TOOL_NAME.match(name):
        return name
    digest = hashlib.sha256(tool.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    room = 64 - len(server) - len(_SEPARATOR) - 1 - len(digest)
    cleaned = NOT_IN_TOOL_NAME.sub("_", tool)[:max(room, 0)]
    return f"{server}{_SEPARATOR}{cleaned}_{digest}"


def record_of(tool: Any) -> ToolRecord:
    """The record of an SDK `Tool` as listed by its server."""
    schema = tool.input_schema if isinstance(tool.input_schema, dict) else {}
    annotations = tool.annotations
    return ToolRecord(
        name=tool.name,
        description=tool.description or tool.title or "",
        input_schema={"type": "object", **schema},
        read_only=bool(annotations is not None and annotations.read_only_hint),
    )


def tool_of(server: str, record: ToolRecord, call: CallTool, *, local: bool = False
            ) -> McpTool:
    """The agentfs tool that calls `record`'s tool on `server` through `call`. `local`:
    the server runs in the workspace (stdio), and the work tree is compared around a
    call of a tool it does not declare read-only (see the module docstring)."""
    remote = record["name"]
    watched = local and not record["read_only"]

    def run(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        if not watched:
            return result_of(call(remote, arguments), context, server)
        with WorkTreeChanges(context) as changes:
            answer = call(remote, arguments)
        return _noted(result_of(answer, context, server), changes.note())

    return McpTool(
        name=offered_name(server, remote),
        description=record["description"],
        input_schema=record["input_schema"],
        run=run,
        server=server,
        remote_name=remote,
        read_only=record["read_only"],
    )


def _noted(result: ToolResult, note: str) -> ToolResult:
    """`result` with `note` as its last line (none when `note` is empty)."""
    if not note:
        return result
    return ToolResult(f"{result.content}\n{note}".lstrip("\n"), is_error=result.is_error)


def result_of(result: Any, context: ToolContext, server: str) -> ToolResult:
    """An SDK `CallToolResult` as a tool result (see the module docstring)."""
    parts = [_part(item, context, server) for item in result.content or []]
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, indent=2, ensure_ascii=False))
    text = "\n".join(parts)
    if result.is_error:
        return ToolResult(text or "the tool reported an error and said nothing more",
                          is_error=True)
    return ToolResult(text)


def _part(item: Any, context: ToolContext, server: str) -> str:
    kind = getattr(item, "type", None)
    if kind == "text":
        return str(item.text)
    if kind in ("image", "audio"):
        path = _save(context, server, item.data, item.mime_type)
        return f"[{kind}: {path} ({item.mime_type})]"
    if kind == "resource":
        resource = item.resource
        if getattr(resource, "text", None) is not None:
            return f"[resource {resource.uri}]\n{resource.text}"
        mime = resource.mime_type or "application/octet-stream"
        path = _save(context, server, resource.blob, mime)
        return f"[resource {resource.uri}: {path} ({mime})]"
    if kind == "resource_link":
        about = f": {item.description}" if item.description else ""
        return f"[resource link {item.uri} ({item.name}){about}]"
    return f"[a {kind} part, which agentfs does not store]"


def _save(context: ToolContext, server: str, data: str, mime: str) -> str:
    """Write base64 `data` under `FILES_DIR/<server>/`, named by its hash; its path."""
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ToolFailure(f"MCP server {server!r} sent {mime} data that is not base64") from None
    kind = mime.split(";", maxsplit=1)[0].strip().lower()
    extension = _EXTENSIONS.get(kind) or mimetypes.guess_extension(kind) or ".bin"
    rel = f"{FILES_DIR}/{server}/{hashlib.sha256(raw).hexdigest()[:16]}{extension}"
    full = context.root.resolve() / rel
    with confined_dir(context.root, full, rel, create=True) as (folder, _name):
        context.write(Path(full), raw, dir_fd=folder)
    return rel
