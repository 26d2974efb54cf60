"""What `agentfs status` reports: each trace's head, whether it runs, waits or
failed, and the files waiting in (or put aside from) the inboxes."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from agentfs.core.project import Project
from agentfs.errors import AgentfsError
from agentfs.store.inbox import rejected_names, waiting

__all__ = ["TraceStatus", "WorkspaceStatus", "workspace_status"]


@dataclass(frozen=True)
class TraceStatus:
    """One trace as `agentfs status` shows it."""

    trace: str
    head: int | None
    running: bool
    pending_inbox: list[str]
    rejected: list[str]
    error: str | None = None  # trace.json cannot be read
    last_error: str | None = None  # the last run failed (context.last_error in trace.json)

    def record(self) -> dict[str, Any]:
        """The JSON form (`error` only when there is one)."""
        data = asdict(self)
        for key in ("error", "last_error"):
            if data[key] is None:
                del data[key]
        return data


@dataclass(frozen=True)
class WorkspaceStatus:
    traces: list[TraceStatus] = field(default_factory=list)
    inbox: list[str] = field(default_factory=list)  # files waiting to start new traces
    inbox_rejected: list[str] = field(default_factory=list)


def workspace_status(project: Project) -> WorkspaceStatus:
    """Every trace and both kinds of inbox; a broken trace.json is reported, not raised."""
    rows = []
    for trace_id in project.workspace.trace_ids():
        trace = project.trace(trace_id)
        failed = None
        try:
            head, problem = trace.meta.head, None
            record = trace.meta.context.get("last_error")
            if isinstance(record, dict):
                failed = str(record.get("error") or "failed")
        except AgentfsError as exc:
            head, problem = None, str(exc)
        rows.append(TraceStatus(
            trace_id, head, trace.is_running(), [p.name for p in trace.pending_inbox()],
            rejected_names(trace.inbox_dir), problem, failed,
        ))
    inbox = project.workspace.inbox_dir
    return WorkspaceStatus(rows, [p.name for p in waiting(inbox)], rejected_names(inbox))
