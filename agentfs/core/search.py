"""Finding messages across a workspace's traces by their text: `agentfs search`
and `GET /api/search`.

Each trace's messages are read through its parse cache (`Trace.messages`), so a
search after the first reads only the files that changed; what is returned is
bounded by `limit`, with a short excerpt of each message found.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentfs.errors import AgentfsError

if TYPE_CHECKING:
    from agentfs.core.project import Project

__all__ = ["Found", "Hit", "search_messages"]

#: Characters of a message shown around the first term found.
EXCERPT = 160


@dataclass(frozen=True)
class Hit:
    """One message whose text holds every term."""

    trace: str
    sequence: int
    role: str
    on_path: bool
    excerpt: str

    def record(self) -> dict[str, Any]:
        return {"trace": self.trace, "sequence": self.sequence, "role": self.role,
                "on_path": self.on_path, "excerpt": self.excerpt}


@dataclass(frozen=True)
class Found:
    """The hits, in trace order then sequence order; `more`: the limit cut them
    short; `unreadable`: traces skipped, each with its error."""

    hits: list[Hit]
    more: bool
    unreadable: dict[str, str]

    def record(self) -> dict[str, Any]:
        return {"hits": [h.record() for h in self.hits], "more": self.more,
                "unreadable": self.unreadable}


def search_messages(project: Project, query: str, limit: int = 50) -> Found:
    """Messages of every trace's files (main path and off it) whose text holds each
    whitespace-separated term of `query`, case-insensitively; at most `limit`.

    Raises:
      AgentfsError: the query has no term.
    """
    terms = query.casefold().split()
    if not terms:
        raise AgentfsError("the search has no words", hint="give a word or two to look for")
    hits: list[Hit] = []
    unreadable: dict[str, str] = {}
    for trace_id in project.workspace.trace_ids():
        trace = project.trace(trace_id)
        try:
            path, messages = trace.path_and_messages()
            on_path = {m.sequence for m in path}
        except AgentfsError as exc:
            unreadable[trace_id] = exc.message
            continue
        for message in messages.values():
            text = message.text
            folded = text.casefold()
            if all(term in folded for term in terms):
                if len(hits) == limit:
                    return Found(hits, True, unreadable)
                hits.append(Hit(trace_id, message.sequence, message.role,
                                message.sequence in on_path,
                                _excerpt(text, folded.find(terms[0]))))
    return Found(hits, False, unreadable)


def _excerpt(text: str, at: int) -> str:
    """About `EXCERPT` characters of `text` around position `at`, on one line."""
    start = max(0, at - EXCERPT // 3)
    if start:  # from the start of a word
        space = text.find(" ", start, at)
        start = space + 1 if space >= 0 else start
    piece = " ".join(text[start:start + EXCERPT].split())
    return ("…" if start else "") + piece + ("…" if start + EXCERPT < len(text) else "")
