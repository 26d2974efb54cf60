"""Knowledge items: what reflection learned, judged by knowledge evaluation.

Each item is `knowledge/<id>.md`: YAML frontmatter (`id`, `status`
pending|accepted|rejected, `title`, `source_trace`, `source_sequence`,
`reason`) and the item's text as the body. Reflection side branches create
pending items, `knowledge_eval` side branches accept or reject them
(`agentfs/core/reflection.py`), and the `knowledge_search` tool finds
accepted ones.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from agentfs.errors import AgentfsError, validation_problems
from agentfs.store.frontmatter import FrontmatterError, render, split
from agentfs.store.messages import MAX_MESSAGE_BYTES
from agentfs.store.regularfile import check_real_folder, read_regular
from agentfs.tools.base import Tool, ToolContext, ToolFailure, schema

Status = Literal["pending", "accepted", "rejected"]
MAX_RESULTS = 5


class KnowledgeItem(BaseModel):
    id: str
    title: str
    status: Status = "pending"
    source_trace: str
    source_sequence: int | None = None
    reason: str | None = Field(default=None, description="Why it was accepted or rejected")
    body: str = Field(default="", exclude=True)

    def render(self) -> bytes:
        """The item's file: frontmatter fields, then the text.

        Raises:
            FrontmatterError: a field is too large to be read back.
        """
        return render(self.model_dump(exclude_none=True), self.body.rstrip()).encode()


def load_items(folder: Path) -> list[KnowledgeItem]:
    """Every item in `folder`, by id; a broken file is an error naming it, and so is
    a `folder` that is a link (`agentfs/store/regularfile.py:check_real_folder`) or
    something else than a folder (items could not be written into it)."""
    check_real_folder(folder)
    if not folder.is_dir():
        if os.path.lexists(folder):
            raise AgentfsError(f"{folder}: is not a folder",
                               hint="knowledge items are the files of the folder knowledge/: "
                               "move this away and make knowledge/ a folder")
        return []
    return [load_item(path) for path in sorted(folder.glob("*.md"))]


def knowledge_problem(folder: Path) -> str | None:
    """Why the items in `folder` cannot be read (`load_items`' error), or None."""
    try:
        load_items(folder)
    except AgentfsError as exc:
        return str(exc)
    return None


def load_item(path: Path) -> KnowledgeItem:
    """One item file; a broken one is an error naming it. A hand-written file is
    untrusted: never followed out of knowledge/ through a link, at most as large as a
    message file, whose text it becomes (`agentfs/store/regularfile.py:read_regular`)."""
    try:
        data = read_regular(path, MAX_MESSAGE_BYTES, what="knowledge items")
    except FileNotFoundError as exc:
        raise AgentfsError(f"{path}: cannot read: {exc.strerror}") from None
    return parse_item(path, data)


def parse_item(path: Path, data: bytes) -> KnowledgeItem:
    """An item from its file's bytes (`path` names it in errors)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AgentfsError(
            f"{path}: not valid UTF-8 (byte {exc.start})", hint="save the file as UTF-8"
        ) from None
    try:
        fields, body = split(text)
    except FrontmatterError as exc:
        raise AgentfsError(f"{path}: invalid knowledge item: {exc.message}", hint=exc.hint) from None
    if fields is None:
        raise AgentfsError(f"{path}: no frontmatter", hint="see docs/context.md")
    try:
        return KnowledgeItem.model_validate({**fields, "body": body.strip()})
    except ValidationError as exc:
        detail = validation_problems(exc)
        raise AgentfsError(f"{path}: invalid knowledge item: {detail}") from None


def slug(title: str, taken: set[str]) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:48] or "item"
    candidate, number = base, 2
    while candidate in taken:
        candidate, number = f"{base}-{number}", number + 1
    return candidate


def search(items: list[KnowledgeItem], query: str) -> list[KnowledgeItem]:
    """Accepted items ranked by how many of the query's words they contain."""
    words = [w for w in re.findall(r"\w+", query.lower()) if len(w) > 2]
    scored = []
    for item in items:
        if item.status != "accepted":
            continue
        text = f"{item.title} {item.body}".lower()
        score = sum(text.count(w) for w in words)
        if score:
            scored.append((score, item.id, item))
    return [item for _, _, item in sorted(scored, key=lambda t: (-t[0], t[1]))[:MAX_RESULTS]]


def knowledge_search_tool(folder: Path) -> Tool:
    def run(arguments: dict[str, Any], context: ToolContext) -> str:
        query = arguments.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ToolFailure("'query' must be a non-empty string")
        found = search(load_items(folder), query)
        if not found:
            return f"no accepted knowledge matches {query!r}"
        return "\n\n".join(f"## {i.title} ({i.id})\n{i.body}" for i in found)

    return Tool(
        "knowledge_search",
        "Search accepted knowledge items (lessons saved from earlier work) by keywords.",
        schema({"query": {"type": "string"}}, ["query"]),
        run,
        read_only=True,
    )
