"""Side work asked for by a person (compress, reflect, evaluate knowledge), the same
from the command line and from `agentfs serve`: which pending items to judge where,
and what a queue brought to `main`, as JSON-ready records."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentfs.core.knowledge import KnowledgeItem, load_items, parse_item
from agentfs.errors import AgentfsError

if TYPE_CHECKING:
    from agentfs.core.project import Project
    from agentfs.core.sidequeue import QueueReport

__all__ = ["item_record", "pending_by_trace", "report_record"]


def item_record(item: KnowledgeItem) -> dict[str, Any]:
    """A knowledge item as JSON: its fields and its body."""
    return {**item.model_dump(), "body": item.body}


def report_record(project: Project, trace_id: str, report: QueueReport) -> dict[str, Any]:
    """The branches a queue merged, with what each brought to main."""
    root, repo = project.workspace.root, project.repo

    def item(head: str | None, path: str) -> dict[str, Any]:
        """The item as the branch left it (a later branch may have judged it since)."""
        data = repo.read_file(head.encode() if head else repo.head(), path)
        assert data is not None
        return item_record(parse_item(root / path, data))

    return {"trace": trace_id, "branches": [{
        "type": merged.step.type, "branch": merged.step.branch, "head": merged.step.head,
        "messages": [m.sequence for m in merged.messages],
        "items": [item(merged.step.head, path) for path in merged.files],
    } for merged in report.merged]}


def pending_by_trace(project: Project, trace_ref: str | None) -> dict[str, list[str] | None]:
    """Trace id → the pending items to judge there (None: all of them)."""
    pending = [i for i in load_items(project.workspace.knowledge_dir) if i.status == "pending"]
    if trace_ref is not None:
        trace_id = project.workspace.resolve_trace(trace_ref)
        return {trace_id: None} if pending else {}
    groups: dict[str, list[str] | None] = {}
    known = set(project.workspace.trace_ids())
    orphans = [i.id for i in pending if i.source_trace not in known]
    if orphans:
        raise AgentfsError(
            f"pending item(s) {', '.join(orphans)} come from no trace of this workspace",
            hint="name a trace to judge them in: agentfs knowledge evaluate TRACE",
        )
    for item in pending:
        ids = groups.setdefault(item.source_trace, [])
        assert ids is not None
        ids.append(item.id)
    return groups
