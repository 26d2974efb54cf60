"""What `agentfs status` and the trace list report: each trace's head, its state
(`TraceState`: running, waits for the person's approval, failed, waits for a user
message, or idle), what its model calls used, its title, message count and last
activity, and the files waiting in (or put aside from) the inboxes.

It stays cheap however long and however many the traces are: per trace it reads
`trace.json` and the summary kept beside it (`agentfs/store/summary.py`), tries
the lock and lists the inbox, never a message file, and it imports neither
pydantic nor dulwich (a `trace.json` that does not look right is handed to
`agentfs/store/meta.py:load_meta` for its error; a missing or stale summary is
built again, which reads the head's file and the first user message's).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentfs.core.usage import Totals
from agentfs.errors import AgentfsError, ModelError, TraceLocked
from agentfs.prices import PriceTable
from agentfs.store.approval import APPROVAL_FILE, read_pending
from agentfs.store.filenames import names_from
from agentfs.store.inbox import inbox_names, rejected_names, waiting
from agentfs.store.metafile import read_meta_file
from agentfs.store.regularfile import check_trace_folders
from agentfs.store.spent import Spent
from agentfs.store.summary import SummaryFile, listed_summary
from agentfs.store.tracelock import is_locked
from agentfs.store.workspace import INBOX_DIR, MESSAGES_DIR, TRACE_FILE, TRACES_DIR, Workspace

if TYPE_CHECKING:
    from agentfs.core.project import Project

__all__ = [
    "RowMaker",
    "TraceState",
    "TraceStatus",
    "WorkspaceStatus",
    "record_failure",
    "records_failure",
    "row_maker",
    "trace_state",
    "workspace_status",
]


class TraceState(StrEnum):
    """Where a trace stands, as the trace list shows it."""

    RUNNING = "running"  # a run holds its lock
    APPROVAL = "approval"  # a tool call waits for the person's approval (approval.json)
    FAILED = "failed"  # the last run failed (`context.last_error`)
    WAITING = "waiting"  # it ended in an answer: it waits for a user message
    IDLE = "idle"  # nothing runs it, and the next run has work (or its state is not known)


def trace_state(*, running: bool, approval: bool, failed: bool, final: bool | None,
                pending: bool, queued: bool, written: bool = False) -> TraceState:
    """The state of a trace from what the list knows of it: whether it is locked,
    waits for approval, failed, ends in a final answer (`final`, from its summary),
    has files waiting in its inbox, has a side-branch queue unfinished, or has
    message files past those agentfs numbered (`written`: a next message written by
    hand). The rule of `agentfs/store/trace.py:Trace.waits_for_user`, from the
    summary instead of the head's file, and from file names without Git: a file
    there that someone committed with `git` counts as work here, not for a run."""
    if running:
        return TraceState.RUNNING
    if approval:
        return TraceState.APPROVAL
    if failed:
        return TraceState.FAILED
    if final and not pending and not queued and not written:
        return TraceState.WAITING
    return TraceState.IDLE


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
    #: The tool whose call waits for the person's approval (approval.json), if any.
    approval: str | None = None
    updated: str | None = None  # when trace.json was last written: the last step
    usage: Totals | None = None  # what its model calls used (trace.json's `usage`)
    status: TraceState = TraceState.IDLE
    last_activity: str | None = None  # when its last step was committed (ISO 8601 UTC)
    messages: int | None = None  # message files in messages/ (None: trace.json is broken)
    title: str | None = None  # the first line of its first user message
    #: Not part of the record: the folders, below the trace's, whose change can change
    #: the row besides the files every row is made from (`ListCache` stats them).
    watched: tuple[str, ...] = ()

    def record(self) -> dict[str, Any]:
        """The JSON form (`error`, `last_error` only when there is one); a new dict each
        call, built once per row (a kept row is listed again and again by the server)."""
        return dict(self._record)

    @cached_property
    def _record(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in self.__dataclass_fields__
                if name != "watched"}
        for key in ("error", "last_error", "approval"):
            if data[key] is None:
                del data[key]
        data["pending_inbox"] = list(self.pending_inbox)
        data["rejected"] = list(self.rejected)
        data["usage"] = self.usage.record() if self.usage is not None else None
        data["status"] = str(self.status)
        return data


@dataclass(frozen=True)
class WorkspaceStatus:
    traces: list[TraceStatus] = field(default_factory=list)
    inbox: list[str] = field(default_factory=list)  # files waiting to start new traces
    inbox_rejected: list[str] = field(default_factory=list)


#: Makes one trace's row of the list.
RowMaker = Callable[[str], TraceStatus]


def workspace_status(workspace: Workspace, prices: PriceTable) -> WorkspaceStatus:
    """Every trace and both kinds of inbox, read afresh; a broken trace.json is
    reported, not raised (`agentfs/core/listcache.py:ListCache` keeps rows that
    did not change, in a process and across processes)."""
    make = row_maker(workspace, prices)
    return WorkspaceStatus([make(trace_id) for trace_id in workspace.trace_ids()],
                           *inbox_names(workspace.inbox_dir))


def row_maker(workspace: Workspace, prices: PriceTable) -> RowMaker:
    """What makes one trace's row of the list, from its files."""
    places = _Places(workspace.traces_dir, workspace.lock_dir,
                     workspace.summary_path("_").parent, workspace.state_dir / "tmp")

    def make(trace_id: str) -> TraceStatus:
        return _trace_status(workspace, trace_id, prices, places)

    return make


@dataclass(frozen=True)
class _Places:
    """The folders every trace's row looks in, made once per list (pathlib is slow)."""

    traces: Path
    locks: Path
    summaries: Path
    tmp: Path


def _trace_status(workspace: Workspace, trace_id: str, prices: PriceTable,
                  places: _Places) -> TraceStatus:
    folder = places.traces / trace_id  # an id workspace.trace_ids() checked
    rel = f"{TRACES_DIR}/{trace_id}"  # Git paths for the hints, without pathlib's cost
    meta_path = folder / TRACE_FILE
    head = failed = problem = updated = totals = summary = following = None
    queued = linked = False
    try:
        check_trace_folders(folder)  # as opening a trace does
    except AgentfsError as exc:
        problem, linked = str(exc), True
    try:
        if not linked:
            raw, data = read_meta_file(meta_path, f"{rel}/{TRACE_FILE}")
            head, failed, spent = _read_meta(workspace, meta_path, data)
            queued = isinstance(data, dict) and data.get("side_queue") is not None
            following = data.get("next_sequence") if isinstance(data, dict) else None
            updated = _modified(meta_path)
            totals = Totals.of(spent, prices) if spent is not None else None
            file = SummaryFile(places.summaries / trace_id, places.tmp)
            summary = listed_summary(file, workspace, trace_id, raw, head=head, at=updated)
    except AgentfsError as exc:
        problem = str(exc)
    inbox = folder / INBOX_DIR
    # nothing more is read through a linked folder, not even names
    pending = [] if linked else [p.name for p in waiting(inbox)]
    rejected = [] if linked else rejected_names(inbox)
    running = is_locked(places.locks, trace_id)
    approval = None if linked else _waiting_tool(folder / APPROVAL_FILE, f"{rel}/{APPROVAL_FILE}")
    final = summary is not None and summary.final and not pending and not queued
    written = False
    watched: tuple[str, ...] = ()
    if final and type(following) is int:  # a next message written by hand?
        found, looked = names_from(f"{folder}/{MESSAGES_DIR}", following)
        written = bool(found)
        # where one would appear: the folders looked in, and `messages/` for a new one
        watched = (MESSAGES_DIR, *(f"{MESSAGES_DIR}/{name}" for name in looked if name))
    state = trace_state(running=running, approval=approval is not None,
                        failed=failed is not None, final=final, pending=bool(pending),
                        queued=queued, written=written)
    return TraceStatus(
        trace_id, head, running, pending, rejected, problem, failed, approval,
        updated, totals, state,
        last_activity=summary.last_activity if summary else None,
        messages=summary.messages if summary else None,
        title=summary.title if summary else None,
        watched=watched,
    )


def _modified(path: Path) -> str | None:
    try:
        stamp = path.stat().st_mtime
    except OSError:
        return None
    return datetime.fromtimestamp(stamp, UTC).isoformat(timespec="seconds")


def _read_meta(workspace: Workspace, path: Path, data: Any,
               ) -> tuple[int | None, str | None, dict[str, Spent] | None]:
    """`head`, the last run's error (`context.last_error`) and the sums of `usage` by
    model from `trace.json`'s JSON `data` (None when it has none or they are not well
    formed: `agentfs doctor` says what is wrong)."""
    head, failed = _head_and_failure(workspace, path, data)
    usage = data.get("usage") if isinstance(data, dict) else None
    models = usage.get("models") if isinstance(usage, dict) else None
    if not isinstance(models, dict):
        return head, failed, None
    spent = {name: Spent.from_json(entry) for name, entry in models.items()}
    if any(entry is None for entry in spent.values()):
        return head, failed, None
    return head, failed, {name: entry for name, entry in spent.items() if entry is not None}


def _head_and_failure(workspace: Workspace, path: Path, data: Any,
                      ) -> tuple[int | None, str | None]:
    """`head` and the last run's error (`context.last_error`) from `trace.json`'s
    JSON `data`."""
    head = data.get("head") if isinstance(data, dict) else "?"
    context = data.get("context", {}) if isinstance(data, dict) else None
    if not (head is None or type(head) is int) or not isinstance(context, dict):
        from agentfs.store.meta import load_meta  # its error says what is wrong

        meta = load_meta(path, workspace.relpath(path))
        head, context = meta.head, meta.context.model_dump()
    record = context.get("last_error")
    failed = str(record.get("error") or "failed") if isinstance(record, dict) else None
    return head, failed


def _waiting_tool(path: Path, git_path: str) -> str | None:
    """The tool of the call `approval.json` holds unanswered (a broken file says so)."""
    try:
        pending = read_pending(path, git_path)
    except AgentfsError:
        return "? (approval.json cannot be read: agentfs run shows why)"
    return pending.tool if pending is not None and pending.answer is None else None


def record_failure(project: Project, trace_id: str, exc: AgentfsError, *,
                   unattended: bool) -> str | None:
    """Record a run's failure `exc` in its trace if `records_failure` says so
    (`agentfs/store/trace.py:Trace.record_failed_run`); best effort, since the failure
    itself is what the caller reports: returns why the record could not be written,
    or None."""
    if not records_failure(exc, unattended=unattended):
        return None
    try:
        project.trace(trace_id).record_failed_run(str(exc))
    except (AgentfsError, OSError) as problem:
        return str(problem)
    return None


def records_failure(exc: AgentfsError, *, unattended: bool) -> bool:
    """Whether a run's failure `exc` is recorded in its trace, for the list's `failed`
    (`agentfs/store/trace.py:Trace.record_failed_run`): a model that failed after its
    retries, always; any other error (a refused hand edit, a missing script) only for
    a run no one watches (`agentfs watch`), where the record is how the person learns
    of it; never a lock another run holds."""
    if isinstance(exc, TraceLocked):
        return False
    return unattended or isinstance(exc, ModelError)
