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
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agentfs.errors import AgentfsError, MessageFileError
from agentfs.store.inbox import (
    SettleClock,
    Staged,
    is_hidden_drop,
    post_key,
    reject,
    stage,
    staged_in,
    unstage,
    waiting,
)
from agentfs.store.messages import (
    CONTROL_CHARACTERS,
    Message,
    authored_fields,
    load_dropped,
    parse_dropped,
)
from agentfs.store.meta import remember_post
from agentfs.store.trace import Trace
from agentfs.store.tracelock import TraceLock
from agentfs.store.unicode import LONE_SURROGATE
from agentfs.store.workspace import TRACE_ID, Workspace

__all__ = [
    "FIRST_USER_SEQUENCE",
    "Dropped",
    "IngestReport",
    "PostFound",
    "Rejected",
    "SettingsCheck",
    "claim_new",
    "claimed_traces",
    "commit_staged",
    "dropped",
    "find_post",
    "finish_staged",
    "parse_dropped_text",
    "pending_new",
    "read_dropped",
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
    "stop_reason", "usage", "timing", "thinking", "files_changed", "blocks", "source_branch",
    "answered",
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


#: Frontmatter a dropped file may hold beyond its own `role: user`: the goal its message
#: belongs to, and the settings of the trace it starts (they apply only then).
MESSAGE_KEYS = ("goal_id",)
TRACE_SETTINGS = ("preset", "model", "inject_skills")


@dataclass(frozen=True)
class Dropped:
    """A dropped file read through the one door: its user message and the settings
    it asks of a trace it starts."""

    origin: str  # where it was dropped (errors name it)
    content: Any
    fields: dict[str, Any]  # what it sets on its message (`MESSAGE_KEYS`)
    preset: str | None = None
    model: str | None = None
    inject_skills: tuple[str, ...] = ()


#: The check of a dropped file's trace settings against the workspace (the preset and
#: the skills exist): the agent's side knows them (`agentfs/core/project.py`).
SettingsCheck = Callable[[Dropped], None]


def dropped(message: Message, origin: Path | str) -> Dropped:
    """The one rule for a dropped file's frontmatter, whatever the door: a message's
    identity and place and the fields agentfs owns are dropped (so a file copied
    out of `messages/` is usable), `MESSAGE_KEYS` and `TRACE_SETTINGS` are kept when
    well formed, and any other key is refused.

    Raises:
        MessageFileError: naming `origin` and the keys to fix.
    """
    fields = authored_fields(message)
    for key in _OWNED_FIELDS:
        fields.pop(key, None)
    unknown = sorted(k for k in fields if k not in MESSAGE_KEYS + TRACE_SETTINGS)
    if unknown:
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        raise MessageFileError(
            origin, f"unknown frontmatter key(s): {', '.join(unknown[:5])}{more}",
            hint=f"a dropped file may set {', '.join(MESSAGE_KEYS + TRACE_SETTINGS)}; "
            "remove the others",
        )
    for key in ("preset", "model"):
        if key in fields and not (isinstance(fields[key], str) and fields[key]):
            raise MessageFileError(origin, f"{key} must be a name, not {fields[key]!r}",
                                   hint=f"write `{key}: NAME` or remove the line")
    goal = fields.get("goal_id")
    if goal is not None and CONTROL_CHARACTERS.search(goal):  # a message's goal_id is a str
        raise MessageFileError(  # it becomes a commit trailer: one line, no NUL
            origin, f"goal_id must be one line without control characters, not {goal!r:.80}",
            hint="write `goal_id: ID` on one line (e.g. 1.2) or remove the line")
    skills = fields.get("inject_skills", [])
    skills = [skills] if isinstance(skills, str) else skills
    if not isinstance(skills, list) or not all(isinstance(s, str) and s for s in skills):
        raise MessageFileError(
            origin, f"inject_skills must be a list of skill names, not {skills!r}",
            hint="write `inject_skills: [name, ...]` or remove the line",
        )
    kept = {k: fields[k] for k in MESSAGE_KEYS if k in fields}
    return Dropped(str(origin), message.content, kept, fields.get("preset"), fields.get("model"),
                   tuple(skills))


def read_dropped(path: Path, origin: Path | str | None = None) -> Dropped:
    """Read a file as a dropped user message (`load_dropped`, then `dropped`); errors
    name `origin` (default: the file) as the place it was dropped at."""
    origin = path if origin is None else Path(origin)
    try:
        return dropped(load_dropped(path), origin)
    except MessageFileError as exc:
        problem = exc.message.removeprefix(f"{path}: ")
        raise MessageFileError(origin, problem, hint=exc.hint) from None


def parse_dropped_text(label: str, data: str | bytes) -> Dropped:
    """Text given as a message (`-m`, standard input, the API) read as a dropped file
    is; errors name `label` (e.g. `<-m>`). Text holding a lone surrogate (bytes of an
    argument that are not UTF-8, a JSON escape such as "\\ud800") is refused as a
    file that is not UTF-8 is."""
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")  # kept, for the reader to refuse
    return dropped(parse_dropped(Path(label), data), label)


def read_staged(staged: Staged, origin: Path) -> Dropped:
    """Read a file claimed from an inbox (`read_dropped`); errors name where it was
    dropped. A hidden name is refused: it waited only to be put aside
    (`agentfs/store/inbox.py:is_hidden_drop`)."""
    if is_hidden_drop(origin.name):
        raise MessageFileError(origin, "a hidden file name (it starts with a dot)",
                               hint="save it under a name without the leading dot")
    if LONE_SURROGATE.search(origin.name):  # Git and the message files hold UTF-8
        raise MessageFileError(origin, "its name is not valid UTF-8",
                               hint="save it under a name in UTF-8")
    return read_dropped(staged.file, origin)


def reject_claim(staged: Staged, origin: Path, error: AgentfsError) -> Rejected:
    """Put a claimed file aside in its origin's `.rejected/`, saying why (`error`, less
    the file name it starts with), and drop the claim."""
    reason = error.message.removeprefix(f"{origin}: ")
    if error.hint:
        reason += f" ({error.hint})"
    moved = reject(staged.file, origin, reason)
    unstage(staged)
    return Rejected(origin, moved, reason)


def commit_staged(trace: Trace, staged: Staged, *, goal_id: str | None = None,
                  check: SettingsCheck | None = None) -> Message | Rejected:
    """Commit a claimed file as user message `staged.sequence` (or put it aside if
    it is unusable or `check` refuses its settings), then drop the claim. The
    caller holds the trace's lock."""
    origin = trace.workspace.root / (staged.origin or f"{trace.rel(trace.inbox_dir)}/unknown.md")
    try:
        probe = read_staged(staged, origin)
        if check is not None:
            check(probe)
    except AgentfsError as exc:
        return reject_claim(staged, origin, exc)
    message = Message(
        id=f"msg-{staged.sequence:06d}",
        sequence=staged.sequence,
        parent_sequence=trace.meta.head,
        role="user",
        content=probe.content,
        **{"goal_id": goal_id, **probe.fields},
    )
    extra = [staged.origin] if staged.origin else []
    key = post_key(staged.origin)
    if key is not None:  # a post's idempotency key: a retry finds its message here
        remember_post(trace.meta, key, staged.sequence)
    trace.commit_step("user", [message], extra_paths=extra)
    unstage(staged)
    return message


def take_waiting(trace: Trace, clock: SettleClock, *, goal_id: str | None = None,
                 check: SettingsCheck | None = None) -> IngestReport:
    """Take the files of the trace's `inbox/` that are ready, in name order; files
    still being written stay (`unsettled`). The caller holds the trace's lock."""
    report = IngestReport()
    for path in waiting(trace.inbox_dir):
        if not clock.ready(path):
            report.unsettled.append(path)
            continue
        clock.forget(path)
        outcome = take_file(trace, path, goal_id=goal_id, check=check)
        if outcome is not None:
            _note(report, path.name, outcome)
    return report


def take_file(trace: Trace, path: Path, *, goal_id: str | None = None,
              check: SettingsCheck | None = None) -> Message | Rejected | None:
    """Take one file of the trace's `inbox/` now, settled or not (its writer knows it
    is complete, e.g. it was written atomically): claimed, then committed as the next
    user message or put aside. None if another process took it first. The caller
    holds the trace's lock."""
    staged = stage(path, _folder(trace), trace.next_sequence(), trace.rel(path))
    if staged is None:
        return None
    return commit_staged(trace, staged, goal_id=goal_id, check=check)


def finish_staged(trace: Trace, check: SettingsCheck | None = None) -> IngestReport:
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
            _note(report, Path(staged.origin).name, commit_staged(trace, staged, check=check))
    return report


@dataclass(frozen=True)
class PostFound:
    """Where the message of a post with an idempotency key is (`find_post`): a file
    `waiting` in the inbox, `claimed` by a process committing it, or `committed`."""

    status: Literal["waiting", "claimed", "committed"]
    file: str | None = None  # the inbox file, relative to the workspace (not committed)
    sequence: int | None = None  # the message it became (committed)


def find_post(trace: Trace, key: str) -> PostFound | None:
    """Where the post with idempotency `key` went, if one came to `trace`; None if
    none did (or it was refused). Looked for where its file goes next, in turn: the
    inbox, the claims, then `trace.json` as on disk (`TraceMeta.posted`, written by
    the commit before its claim is dropped), so a file moving on meanwhile is seen.
    While a claim is there it is `claimed`, whatever `trace.json` says: the commit
    may not have happened (a process killed between writing `trace.json` and
    committing it), and only the trace's lock can tell."""
    for path in waiting(trace.inbox_dir):
        if post_key(path.name) == key:
            return PostFound("waiting", trace.rel(path))
    claimed = next((staged.origin for staged in staged_in(_folder(trace), tidy=False)
                    if post_key(staged.origin) == key), None)
    if claimed is not None:
        return PostFound("claimed", claimed)
    trace.reload()
    sequence = (trace.meta.posted or {}).get(key)
    return None if sequence is None else PostFound("committed", sequence=sequence)


#: The lock (`agentfs/store/tracelock.py`) that new-trace claims are made under: not
#: a trace id (those start with a letter or digit).
NEW_TRACES_LOCK = "_new-traces"
#: Seconds a claim waits for another process's claim (each takes milliseconds).
CLAIM_PATIENCE = 30.0


def _claiming(workspace: Workspace) -> TraceLock:
    return TraceLock(workspace.lock_dir, NEW_TRACES_LOCK, patience=CLAIM_PATIENCE)


def claim_new(workspace: Workspace, path: Path) -> tuple[str, Staged] | None:
    """Claim a file of the workspace `inbox/` for a new trace named after it.

    Claims are made one at a time across processes (a lock that dies with its
    holder), so concurrent watchers agree: the file gets the first id that is
    neither a trace nor another file's claim. A staging folder left empty by a
    claimer killed before it moved its file in holds no claim and is reused, so
    a file always becomes the trace its name says. None if the file is gone.
    """
    with _claiming(workspace):
        if not os.path.lexists(path):
            return None  # another process took it
        taken = set(workspace.trace_ids())
        for trace_id in _candidate_ids(path.stem):
            if trace_id in taken or workspace.trace_dir(trace_id).exists():
                continue
            folder = workspace.ingest_dir / trace_id
            if staged_in(folder):  # another file's claim: its trace is on its way
                continue
            staged = stage(path, folder, FIRST_USER_SEQUENCE, workspace.relpath(path))
            if staged is None:
                return None
            return trace_id, staged
    raise AssertionError("unreachable: ids are unbounded")


def _claim_folders(workspace: Workspace, *, trace_exists: bool) -> list[str]:
    """Trace ids with a folder in the staging area whose trace exists (or not)."""
    try:
        names = sorted(os.listdir(workspace.ingest_dir))
    except FileNotFoundError:
        return []
    return [n for n in names if TRACE_ID.fullmatch(n)
            and (workspace.trace_dir(n) / "trace.json").exists() == trace_exists]


def pending_new(workspace: Workspace) -> list[tuple[str, Staged]]:
    """Claims for traces whose creation a crash cut short (the trace does not exist)."""
    candidates = _claim_folders(workspace, trace_exists=False)
    if not candidates:
        return []
    found = []
    with _claiming(workspace):  # not while a claim is half made (see `staged_in`)
        for name in candidates:
            claims = staged_in(workspace.ingest_dir / name)
            if claims:
                found.append((name, claims[0]))
    return found


def claimed_traces(workspace: Workspace) -> list[str]:
    """Existing traces holding claimed files that no commit took yet (a run was cut
    short after claiming them): a run of each finishes them."""
    return [n for n in _claim_folders(workspace, trace_exists=True)
            if _has_claim(workspace.ingest_dir / n)]


def _has_claim(folder: Path) -> bool:
    """Cheap: a claim's subfolder exists (`staged_in` tells leftovers apart)."""
    try:
        return any(name.isdigit() for name in os.listdir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return False


def _folder(trace: Trace) -> Path:
    return trace.workspace.ingest_dir / trace.id


def _note(report: IngestReport, name: str, outcome: Message | Rejected) -> None:
    if isinstance(outcome, Rejected):
        report.rejected.append(outcome)
    else:
        report.taken.append((name, outcome))


def _candidate_ids(stem: str) -> Iterator[str]:
    """A trace id from a file name, then the same with -2, -3, ...: accents dropped
    (`résumé.md` is trace `resume`), every other run of characters an id cannot hold
    made one `-`."""
    plain = "".join(c for c in unicodedata.normalize("NFKD", stem) if not unicodedata.combining(c))
    base = re.sub(r"[^A-Za-z0-9_-]+", "-", plain).strip("-_")[:56] or "trace"
    if not TRACE_ID.fullmatch(base):
        base = f"t-{base}"[:56]
    yield base
    number = 2
    while True:
        yield f"{base}-{number}"
        number += 1
