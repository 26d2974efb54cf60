"""The one door through which a dropped file becomes a user message.

A file waiting in a trace's `inbox/` (or the workspace `inbox/`, for a new
trace) is claimed by renaming it into the staging area
(`agentfs/store/inbox.py:stage`), read from there without following links
and within the size and frontmatter limits, then committed as the message
with the sequence it was staged under. A file that cannot be used is put
aside once in `.rejected/` with a note and never blocks the files beside it.

Killed at any instant, the next holder of the trace finishes the claim
(`finish_staged`): the message is committed exactly once, and the staged
file goes only after its message is in a commit.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentfs.errors import AgentfsError, MessageFileError
from agentfs.store.inbox import (
    SettleClock,
    Staged,
    reject,
    reserve,
    stage,
    staged_in,
    unstage,
    waiting,
)
from agentfs.store.messages import Message, authored_fields, load_dropped
from agentfs.store.trace import Trace
from agentfs.store.workspace import TRACE_ID, Workspace

__all__ = [
    "FIRST_USER_SEQUENCE",
    "IngestReport",
    "Rejected",
    "claim_new",
    "commit_staged",
    "finish_staged",
    "pending_new",
    "read_staged",
    "reject_claim",
    "take_file",
    "take_waiting",
]

#: A new trace is its system message (#1), then the file that started it.
FIRST_USER_SEQUENCE = 2

#: Fields agentfs itself owns on a message: a dropped file cannot set them.
_OWNED_FIELDS = (
    "tool_calls", "tool_call_id", "is_error", "synthetic", "branch_type", "branch_id",
    "stop_reason", "usage", "thinking", "files_changed", "blocks", "source_branch",
    "provider_data",
)


@dataclass(frozen=True)
class Rejected:
    """A dropped file that cannot become a message, and where it was put."""

    origin: Path
    moved_to: Path
    reason: str


@dataclass
class IngestReport:
    """What one pass over an inbox did."""

    taken: list[tuple[str, Message]] = field(default_factory=list)  # (file name, message)
    rejected: list[Rejected] = field(default_factory=list)
    unsettled: list[Path] = field(default_factory=list)


def read_staged(staged: Staged, origin: Path) -> Message:
    """Parse a claimed file as a dropped user message; errors name where it was dropped."""
    try:
        return load_dropped(staged.file)
    except MessageFileError as exc:
        problem = exc.message.removeprefix(f"{staged.file}: ")
        raise MessageFileError(origin, problem, hint=exc.hint) from None


def dropped_fields(message: Message) -> dict[str, Any]:
    """The fields a dropped file may set on its message (not agentfs' own)."""
    fields = authored_fields(message)
    for key in _OWNED_FIELDS:
        fields.pop(key, None)
    return fields


def reject_claim(staged: Staged, origin: Path, error: AgentfsError) -> Rejected:
    """Put a claimed file aside in its origin's `.rejected/`, saying why (`error`, less
    the file name it starts with), and drop the claim."""
    reason = error.message.removeprefix(f"{origin}: ")
    if error.hint:
        reason += f" ({error.hint})"
    moved = reject(staged.file, origin, reason)
    unstage(staged)
    return Rejected(origin, moved, reason)


def commit_staged(trace: Trace, staged: Staged, *, goal_id: str | None = None) -> Message | Rejected:
    """Commit a claimed file as user message `staged.sequence` (or put it aside),
    then drop the claim. The caller holds the trace's lock."""
    origin = trace.workspace.root / (staged.origin or f"{trace.rel(trace.inbox_dir)}/unknown.md")
    try:
        probe = read_staged(staged, origin)
    except MessageFileError as exc:
        return reject_claim(staged, origin, exc)
    message = Message(
        id=f"msg-{staged.sequence:06d}",
        sequence=staged.sequence,
        parent_sequence=trace.meta.head,
        role="user",
        content=probe.content,
        **{"goal_id": goal_id, **dropped_fields(probe)},
    )
    extra = [staged.origin] if staged.origin else []
    trace.commit_step("user", [message], extra_paths=extra)
    unstage(staged)
    return message


def take_waiting(trace: Trace, clock: SettleClock, *, goal_id: str | None = None) -> IngestReport:
    """Take the files of the trace's `inbox/` that are ready, in name order; files
    still being written stay (`unsettled`). The caller holds the trace's lock."""
    report = IngestReport()
    for path in waiting(trace.inbox_dir):
        if not clock.ready(path):
            report.unsettled.append(path)
            continue
        clock.forget(path)
        outcome = take_file(trace, path, goal_id=goal_id)
        if outcome is not None:
            _note(report, path.name, outcome)
    return report


def take_file(trace: Trace, path: Path, *, goal_id: str | None = None) -> Message | Rejected | None:
    """Take one file of the trace's `inbox/` now, settled or not (its writer knows it
    is complete, e.g. it was written atomically): claimed, then committed as the next
    user message or put aside. None if another process took it first. The caller
    holds the trace's lock."""
    staged = stage(path, _folder(trace), trace.next_sequence(), trace.rel(path))
    if staged is None:
        return None
    return commit_staged(trace, staged, goal_id=goal_id)


def finish_staged(trace: Trace) -> IngestReport:
    """Finish claims a crash cut short: commit the ones whose message was never
    written, drop the others (their message is committed or adopted by recovery)."""
    report = IngestReport()
    claims = staged_in(_folder(trace))
    if not claims:
        return report
    written = set(trace.messages(refresh=True))
    for staged in claims:
        if staged.sequence in written:
            unstage(staged)
        else:
            _note(report, Path(staged.origin).name, commit_staged(trace, staged))
    return report


def claim_new(workspace: Workspace, path: Path) -> tuple[str, Staged] | None:
    """Claim a file of the workspace `inbox/` for a new trace named after it.

    The id is reserved by creating its staging folder exclusively, so two
    watchers never give one id to two files. None if the file is gone.
    """
    taken = set(workspace.trace_ids())
    for trace_id in _candidate_ids(path.stem):
        if trace_id in taken or workspace.trace_dir(trace_id).exists():
            continue
        folder = workspace.ingest_dir / trace_id
        if not reserve(folder):
            continue
        staged = stage(path, folder, FIRST_USER_SEQUENCE, workspace.relpath(path))
        if staged is None:
            shutil.rmtree(folder, ignore_errors=True)
            return None
        return trace_id, staged
    raise AssertionError("unreachable: ids are unbounded")


def pending_new(workspace: Workspace) -> list[tuple[str, Staged]]:
    """Claims for traces whose creation a crash cut short (the trace does not exist)."""
    found = []
    try:
        names = sorted(os.listdir(workspace.ingest_dir))
    except FileNotFoundError:
        return []
    for name in names:
        if not TRACE_ID.fullmatch(name) or (workspace.trace_dir(name) / "trace.json").exists():
            continue
        claims = staged_in(workspace.ingest_dir / name)
        if claims:
            found.append((name, claims[0]))
    return found


def _folder(trace: Trace) -> Path:
    return trace.workspace.ingest_dir / trace.id


def _note(report: IngestReport, name: str, outcome: Message | Rejected) -> None:
    if isinstance(outcome, Rejected):
        report.rejected.append(outcome)
    else:
        report.taken.append((name, outcome))


def _candidate_ids(stem: str) -> Iterator[str]:
    """A trace id from a file name, then the same with -2, -3, ..."""
    base = re.sub(r"[^A-Za-z0-9_-]+", "-", stem).strip("-_")[:56] or "trace"
    if not TRACE_ID.fullmatch(base):
        base = f"t-{base}"[:56]
    yield base
    number = 2
    while True:
        yield f"{base}-{number}"
        number += 1
