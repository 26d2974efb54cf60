"""A trace on disk: `trace.json`, `messages/`, `inbox/`, and the commits that record them.

This is the storage API the agent core uses: a thin front over the modules
that each own one part (`meta.py` for trace.json, `message_dir.py` for the
message files, `history.py` for the main path, `inflight.py` for a tool step
in progress, `recovery.py` for adopting what is on disk). It knows messages,
sequences, paths and commits; it knows nothing about models or tools.
"""

from __future__ import annotations

import shlex
import shutil
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agentfs.errors import AgentfsError, NoSuchMessage, TraceExists, TraceNotFound
from agentfs.store.approval import APPROVAL_FILE, PendingApproval, read_pending, write_pending
from agentfs.store.atomic import atomic_write
from agentfs.store.commits import Step, usage_trailer
from agentfs.store.filenames import names_from
from agentfs.store.filerewind import FileRewind, plan_file_rewind
from agentfs.store.git.remote import git
from agentfs.store.git.repo import Change, GitRepo
from agentfs.store.history import (
    PathMemo,
    Tally,
    follows_previous,
    is_final_answer,
    is_model_turn,
    last_assistant,
    path_to,
    step_end,
    unanswered_calls,
    walk_back,
)
from agentfs.store.inbox import staged_in, waiting
from agentfs.store.inflight import InFlight, InFlightRecord
from agentfs.store.message_dir import MessageDir, WindowReader
from agentfs.store.messages import Message, ToolCall, render_message
from agentfs.store.meta import (
    FORMAT_VERSION,
    LastError,
    Spending,
    TraceMeta,
    load_meta,
    save_meta,
)
from agentfs.store.recovery import recover
from agentfs.store.regularfile import check_real_folders, check_trace_folders, read_trace_file
from agentfs.store.steplog import lineage_log, lineage_step_of_message
from agentfs.store.summary import SummaryFile, build_summary, now
from agentfs.store.tracelock import TraceLock, is_locked
from agentfs.store.unicode import escaped
from agentfs.store.wording import counted
from agentfs.store.workspace import (
    INBOX_DIR,
    MESSAGES_DIR,
    TRACE_FILE,
    Workspace,
    check_trace_id,
)

__all__ = ["FORMAT_VERSION", "Fold", "InFlight", "PathSlice", "Rewind", "Trace", "TraceMeta", "TraceView"]

#: Messages read at once by a walk back without a limit (`Trace.path_slice`).
WALK_CHUNK = 256


@dataclass(frozen=True)
class Rewind:
    """What a `rewind` commit did."""

    commit: bytes
    files: list[str]  # workspace files the commit restored (or deleted)


@dataclass(frozen=True)
class PathSlice:
    """Consecutive messages of the main path, read without the rest of the trace."""

    messages: list[Message]
    #: `before` for the messages of the path before these: the first one's sequence;
    #: None when the first one begins the path (or the slice is empty).
    older: int | None


#: A slice's run of more off-path files than this between two path messages is
#: folded (`Fold`), not read (`Trace.view`).
FOLD_AT = 20


@dataclass(frozen=True)
class Fold:
    """Message files a slice leaves out (`Trace.view`): more than `FOLD_AT` off the
    path with sequences between two of its path messages, such as the originals a
    compression summary replaced or the messages a rewind left behind."""

    #: The path message below them (by sequence), None if they come before the first.
    after: int | None
    #: The path message above them, None if they come after the slice's last.
    before: int | None
    #: Their lowest and highest sequence, and how many files they are.
    first: int
    last: int
    count: int

    def record(self) -> dict[str, int | None]:
        return {"after": self.after, "before": self.before, "first": self.first,
                "last": self.last, "count": self.count}


@dataclass(frozen=True)
class TraceView:
    """What a view shows of a trace: the main path, or a slice of it (`Trace.view`)."""

    #: The main path's messages shown, in order.
    path: list[Message]
    #: Every message file with a sequence in the slice's span, by sequence: the path's,
    #: and those off the path that hang beside them (all the trace's for a whole view),
    #: but for the folded ones.
    messages: dict[int, Message]
    #: As `PathSlice.older`; None for a whole view.
    older: int | None
    #: The runs of off-path files the slice leaves out (none for a whole view).
    folds: tuple[Fold, ...] = ()


class Trace:
    """One trace directory, its messages and its commits on `main`.

    Callers that change a trace hold its lock (`with trace.lock():`).
    """

    def __init__(self, workspace: Workspace, repo: GitRepo, trace_id: str) -> None:
        self.workspace = workspace
        self.repo = repo
        self.id = check_trace_id(trace_id)
        self.dir = workspace.trace_dir(trace_id)
        self.messages_dir = self.dir / MESSAGES_DIR
        self.inbox_dir = self.dir / INBOX_DIR
        self.meta_path = self.dir / TRACE_FILE
        self._meta: TraceMeta | None = None
        self.message_dir = MessageDir(
            self.messages_dir, workspace.parse_cache(self.id),
            self.tmp_dir, durable=repo.durable, names_path=workspace.folder_names(self.id),
        )
        self.summary_file = SummaryFile(workspace.summary_path(self.id), self.tmp_dir)
        self._in_flight = InFlightRecord(
            workspace.state_dir / "in-flight" / f"{self.id}.json", self.tmp_dir,
            durable=repo.durable,
        )
        # Carried from step to step of a run: each looks only at what was added.
        self._path_memo = PathMemo()
        self._tallies: dict[Callable[[Message], bool], Tally] = {}

    # --- metadata ----------------------------------------------------------

    @classmethod
    def create(cls, workspace: Workspace, repo: GitRepo, meta: TraceMeta) -> Trace:
        """Make the directory and `trace.json` of a new trace (not yet committed)."""
        trace = cls(workspace, repo, meta.id)
        trace.refuse_existing()
        trace.refuse_orphaned()
        trace.check_folders()
        if trace.messages_dir.is_dir():  # left by a creation that never got committed
            shutil.rmtree(trace.messages_dir)
        trace.messages_dir.mkdir(parents=True, exist_ok=True)
        trace._meta = meta  # trace.json is written by the first commit_step
        return trace

    def refuse_existing(self) -> None:
        """Refuse to create this trace where one exists (its `trace.json` is there).

        Raises:
            TraceExists: naming the trace's folder.
        """
        if self.meta_path.exists():
            raise TraceExists(
                f"trace {self.id!r} already exists ({self.dir})",
                hint=f"choose another id, or continue it with `agentfs run {self.id}`",
            )

    def refuse_orphaned(self) -> None:
        """Refuse a trace folder whose `trace.json` is gone while its other files are
        committed (deleted by hand: no new trace may take their place).

        Raises:
            AgentfsError: naming the folder and the `git checkout` that restores it.
        """
        if not self.meta_path.exists() and self.repo.walk(self.repo.head(),
                                                          self.rel(self.dir)):
            meta = shlex.quote(self.rel(self.meta_path))
            raise AgentfsError(
                f"{self.rel(self.dir)} has committed files but no {TRACE_FILE}",
                hint=f"restore it with `git checkout -- {meta}`, or choose another id",
            )

    @property
    def meta(self) -> TraceMeta:
        if self._meta is None:
            self.check_folders()
            try:
                self._meta = load_meta(self.meta_path, self.rel(self.meta_path))
            except TraceNotFound:
                raise
            except AgentfsError as exc:  # e.g. conflict markers a stopped `git revert` left
                exc.hint = f"{self.unfinished_note()}{exc.hint}" if exc.hint else exc.hint
                raise
        return self._meta

    def unfinished_note(self) -> str:
        """The start of a hint naming the command that undoes a Git command stopped
        halfway in the workspace (`agentfs/store/git/repo.py:GitRepo.unfinished`),
        which may be what left a file in the state refused; '' if none did."""
        abort = self.repo.unfinished()
        return f"`{abort}` undoes the unfinished `{abort.split()[1]}`, or " if abort else ""

    def check_folders(self) -> None:
        """Refuse the trace if `traces/`, its folder or its `messages/` is a symlink
        (`agentfs/store/regularfile.py:check_trace_folders`).

        Raises:
            MessageFileError: naming the link.
        """
        check_trace_folders(self.dir)

    def reload(self) -> None:
        """Forget cached metadata (files may have changed on disk)."""
        self._meta = None

    def save_meta(self) -> bool:
        """Write `trace.json` (in the current format) if its bytes change; True if
        written. One read in an older format gets its `iterations` counted from the
        message files first (`turns_counted`): before format 4 it could lag."""
        if self.meta.format_version < FORMAT_VERSION:
            self.meta.iterations = self.turns_counted()
        return save_meta(self.meta_path, self.meta, tmp_dir=self.tmp_dir,
                         durable=self.repo.durable)

    def lock(self) -> TraceLock:
        return TraceLock(self.workspace.lock_dir, self.id)

    def is_running(self) -> bool:
        return is_locked(self.workspace.lock_dir, self.id)

    @property
    def tmp_dir(self) -> Path:
        """Where agentfs makes temp files for atomic writes (inside `.git`)."""
        return self.workspace.state_dir / "tmp"

    def rel(self, path: Path) -> str:
        return self.workspace.relpath(path)

    # --- tool calls in flight (see agentfs/store/inflight.py) ----------------

    def in_flight(self) -> InFlight:
        """Tool calls received, begun, and files they announced, not yet committed."""
        return self._in_flight.load()

    def mark_received(self, calls: list[ToolCall]) -> None:
        """Record durably, before the turn is committed, the tool calls agentfs is about
        to run, in order, with what each does: only such calls are run on resume (an
        edit, a checkout or a pull cannot make agentfs run calls it did not receive,
        nor change what a received call does), and the first of them without a result
        is answered "interrupted" (`agentfs/store/inflight.py`)."""
        self._in_flight.mark_received(calls)

    def mark_taken_over(self, call_ids: list[str]) -> None:
        """Record that the tool calls at the head were received by a process that is
        gone, which may have run any of them: each is answered "interrupted"."""
        self._in_flight.mark_all_started(call_ids)

    def record_change(self, call_id: str, path: str) -> None:
        """Record durably that a running tool call is about to change a workspace file."""
        self._in_flight.record_change(call_id, path)

    def clear_in_flight(self) -> None:
        self._in_flight.clear()

    # --- a call waiting for approval (see agentfs/store/approval.py) ---------

    @property
    def approval_path(self) -> Path:
        return self.dir / APPROVAL_FILE

    def pending_approval(self) -> PendingApproval | None:
        """The call written to `approval.json` to wait for the person, if any."""
        return read_pending(self.approval_path, self.rel(self.approval_path))

    def awaits_approval(self) -> bool:
        """True while `approval.json` holds a call the person has not answered: the
        trace stops there (a broken file does not count: a run reports it)."""
        try:
            pending = self.pending_approval()
        except AgentfsError:
            return False
        return pending is not None and pending.answer is None

    def mark_waiting(self, call_id: str | None) -> None:
        """Record durably that a received call waits for approval and has not started
        (or, with None, that it is about to run or be refused)."""
        self._in_flight.mark_waiting(call_id)

    def write_approval(self, pending: PendingApproval) -> None:
        """Write `approval.json` (not committed: the caller's step commits it)."""
        write_pending(self.approval_path, self.id, pending, tmp_dir=self.tmp_dir,
                      durable=self.repo.durable)

    def approval_committed(self) -> bool:
        """True if `approval.json` on disk is what the last commit holds."""
        try:
            data = read_trace_file(self.approval_path)
        except FileNotFoundError:
            data = None
        return data == self.repo.read_file(self.repo.head(), self.rel(self.approval_path))

    def drop_approval(self) -> list[str]:
        """Remove `approval.json`; its Git path, for the commit that records the removal
        (empty if there was nothing to remove or record)."""
        path = self.rel(self.approval_path)
        if not self.approval_path.exists() and self.repo.read_file(
                self.repo.head(), path) is None:
            return []
        self.approval_path.unlink(missing_ok=True)
        return [path]

    # --- messages ----------------------------------------------------------

    def messages(self, *, refresh: bool = False) -> dict[int, Message]:
        """Every message file in `messages/` by sequence (see
        `agentfs/store/message_dir.py:MessageDir.messages`)."""
        return self.message_dir.messages(refresh=refresh)

    def path_to(self, sequence: int | None, messages: dict[int, Message] | None = None) -> list[Message]:
        """Messages from the first one to `sequence`, following parents (see
        `agentfs/store/history.py:path_to`)."""
        messages = self.messages() if messages is None else messages
        return path_to(messages, sequence, where=str(self.messages_dir))

    def main_path(self, messages: dict[int, Message] | None = None) -> list[Message]:
        """The main path: from the first message to the head in `trace.json`.

        Without `messages`, of the message files as they are now, found again from
        the path of the last call (`agentfs/store/history.py:PathMemo`), so a run
        pays for the messages it added, not for the whole trace; a new run reads
        only the files on the path (`agentfs/store/message_dir.py:MessageDir.lookup`).
        """
        if messages is not None:
            return self.path_to(self.meta.head, messages)
        return self._path_memo.path(self.message_dir.lookup(), self.meta.head,
                                    parent=self.parent, where=str(self.messages_dir))

    def path_and_messages(self) -> tuple[list[Message], dict[int, Message]]:
        """The main path and every message file, read in the order a step writes them
        backwards: `trace.json`'s head first, then the files (a step writes its files,
        then `trace.json`), so a step another process commits between the two reads
        is off the path, never a parent found missing."""
        head = self.meta.head
        messages = self.messages()
        return self.path_to(head, messages), messages

    def path_slice(self, limit: int | None = None, *, before: int | None = None,
                   since: int = 0, get: WindowReader | None = None) -> PathSlice:
        """The last `limit` messages (all without) of the main path before message
        `before` (to the head without), none below sequence `since`: parents are
        followed back from there, reading only the messages passed
        (`agentfs/store/message_dir.py:MessageDir.reader`), so the cost is what is
        returned, not the trace's length. `before` is meant to be a main-path message
        (the `older` of a slice read before); for another message this is the
        history that led to it. `get` reads the messages (a new reader without).

        Raises:
          NoSuchMessage: no message `before`.
          BrokenPath: a parent is missing or the parents make a cycle.
        """
        # `before` and the `limit` messages before it, read at once
        get = get or self.message_dir.reader((limit or WALK_CHUNK) + 1, since)
        start = self.meta.head
        if before is not None:
            at = get(before)
            if at is None:
                raise NoSuchMessage(
                    f"trace {self.id!r} has no message #{before} to read the messages before",
                    hint="use the `older` of the page after them, or no `before` for the latest",
                )
            start = self.parent(at)
        path, rest = walk_back(get, self.parent, start, limit=limit, since=since,
                               where=str(self.messages_dir))
        return PathSlice(path, path[0].sequence if path and rest is not None else None)

    def view(self, limit: int | None = None, *, before: int | None = None,
             since: int = 0) -> TraceView:
        """The main path and every message file (no bound given), or a slice of the
        path (`path_slice`) with the messages whose sequences lie in its span: from
        its first message (from 0 if it begins the path) up to `before` (to the
        newest file without), read through `agentfs/store/message_dir.py:MessageDir.window`.
        The spans of slices read one before another (`older`) cover every sequence
        once, so paging back through a trace shows every message once.

        Raises:
          NoSuchMessage, BrokenPath: as `path_slice`.
        """
        if limit is None and before is None and not since:
            return TraceView(*self.path_and_messages(), None)
        get = self.message_dir.reader((limit or WALK_CHUNK) + 1, since)
        found = self.path_slice(limit, before=before, since=since, get=get)
        first = max(found.messages[0].sequence if found.older is not None else 0, since)
        folds = _folds([m.sequence for m in found.messages],
                       self.message_dir.sequences(first, before))
        window: dict[int, Message] = {}
        for start, end in _unfolded(first, before, folds):
            window.update(get.window(start, end))
        window.update((m.sequence, m) for m in found.messages)
        return TraceView(found.messages, dict(sorted(window.items())), found.older, folds)

    def files_from(self, first: int, end: int | None, limit: int) -> tuple[list[Message], int | None]:
        """The first `limit` message files with `first` <= sequence < `end` (to the
        newest without), and the sequence the next ones begin at (None: no more): what
        a `Fold` leaves out, read a page at a time through `MessageDir.window`."""
        found = self.message_dir.sequences(first, end, limit)
        if not found:
            return [], None
        shown = found[:limit]
        window = self.message_dir.window(shown[0], shown[-1] + 1)
        return list(window.values()), found[limit] if len(found) > limit else None

    def parent(self, message: Message) -> int | None:
        """The message's parent; without `parent_sequence`, the file before it
        (`agentfs/store/history.py:parent_of`, found by name)."""
        if not follows_previous(message):
            return message.parent_sequence
        return self.message_dir.previous(message.sequence)

    def count(self, test: Callable[[Message], bool]) -> int:
        """How many message files pass `test`, counted again only for the files added
        since the last call with the same `test` (`agentfs/store/history.py:Tally`)."""
        tally = self._tallies.setdefault(test, Tally(test))
        return tally.count(self.message_dir.current())

    def model_turns(self) -> int:
        """How many message files are turns of the model
        (`agentfs/store/history.py:is_model_turn`): a request's `call_index`. Kept
        exact in `trace.json` as `iterations` at every commit (the runner adds its
        turn; recovery counts the files again after a crash or a hand edit), so a run
        reads no message file for it; counted over every file only for a `trace.json`
        of a format that did not keep it exact (before 4, not upgraded yet)."""
        if self.meta.format_version < FORMAT_VERSION:
            return self.count(is_model_turn)
        return self.meta.iterations

    def turns_counted(self) -> int:
        """The turns of the model among the message files that `usage` has counted
        through (all of them, without `usage`): what `iterations` is once the files
        above that sequence, which their commit adds (`count_usage`), are left out."""
        usage = self.meta.usage
        if usage is None:
            return self.count(is_model_turn)
        return sum(is_model_turn(m) for s, m in self.message_dir.current().items()
                   if s <= usage.through)

    def iterations_problem(self) -> str | None:
        """What is wrong with `trace.json`'s `iterations`, if it differs from the turns
        of the model counted over every message file (a commit agentfs did not make:
        files committed with git by hand); read by `agentfs doctor`."""
        if self.meta.format_version < FORMAT_VERSION:
            return None  # counted from the files until its upgrade
        turns = self.count(is_model_turn)
        if self.meta.iterations == turns or self._uncommitted():
            return None  # files not committed yet: the run that commits them counts again
        return (f"{self.rel(self.meta_path)}: iterations is {self.meta.iterations}, but the "
                f"message files hold {turns} turn(s) of the model (a commit made without "
                f"agentfs?); set it to {turns}: a run's `call_index` and its context "
                f"injections count from it")

    def _uncommitted(self) -> bool:
        """Whether a file under the trace differs from its last commit, as `git status`
        tells (asked of Git itself: `agentfs doctor` commits nothing to find out)."""
        listed = git(self.workspace.root, "status", "--porcelain", "-z", "-uall", "--",
                     self.rel(self.dir)).stdout
        return bool(listed.strip(b"\0"))

    def next_sequence(self) -> int:
        return max(self.meta.next_sequence, self.message_dir.highest() + 1)

    def new_message(self, role: str, content: Any = "", **fields: Any) -> Message:
        """A message with the next sequence, parented on the head (not yet written)."""
        sequence = self.next_sequence()
        self.meta.next_sequence = sequence + 1
        return Message(
            id=f"msg-{sequence:06d}",
            sequence=sequence,
            parent_sequence=self.meta.head,
            role=role,  # type: ignore[arg-type]
            content=content,
            **fields,
        )

    def message_path(self, message: Message) -> Path:
        return self.message_dir.path_of(message)

    def write_message(self, message: Message) -> Path:
        return self.message_dir.write(message)

    # --- steps (one commit each) -------------------------------------------

    def commit_step(  # noqa: PLR0913 -- keyword-only options, each with its default
        self,
        kind: str,
        messages: Sequence[Message] = (),
        *,
        extra_paths: Iterable[str] = (),
        summary: str | None = None,
        body: str = "",
        move_head: bool = True,
        written: bool = False,
        extra_parents: Sequence[bytes] = (),
    ) -> bytes:
        """Write `messages`, move the head to the last one, commit it all as one step.

        Order matters for crash safety: message files first (`written`: the
        caller already wrote them), then `trace.json`, then the commit;
        `recover()` adopts what a crash left.
        """
        paths = [
            self.rel(self.message_path(m) if written else self.write_message(m)) for m in messages
        ]
        if messages and move_head:
            self.meta.head = messages[-1].sequence
        if messages:
            self.meta.next_sequence = max(self.meta.next_sequence, messages[-1].sequence + 1)
        self.count_usage(messages)
        before = self._meta_bytes()
        self.save_meta()
        paths.append(self.rel(self.meta_path))
        last = messages[-1] if messages else None
        step = Step(
            trace_id=self.id,
            kind=kind,
            sequence=last.sequence if last else self.meta.head,
            summary=summary if summary is not None else (_summary_of(messages) if messages else ""),
            goal_id=last.goal_id if last else None,
            body=body,
            usage=_usage_of(messages),
        )
        commit = self.repo.commit_worktree(
            [*paths, *extra_paths], step.message(), extra_parents=extra_parents
        )
        self._summarize(before, messages)
        return commit

    def _meta_bytes(self) -> bytes | None:
        try:
            return read_trace_file(self.meta_path)
        except FileNotFoundError:
            return None

    def _summarize(self, before: bytes | None, committed: Sequence[Message]) -> None:
        """Bring the trace list's summary up to date after a step that committed
        `committed` (`agentfs/store/summary.py`): from the one written beside
        trace.json as it was before the step, else built again."""
        after = read_trace_file(self.meta_path)
        head = self.meta.head
        previous = self.summary_file.read(before) if before is not None else None
        if previous is None:
            summary = build_summary(self.message_dir, head, at=now())
        else:
            last = committed[-1] if committed and committed[-1].sequence == head else None
            if last is None and head is not None:
                try:
                    last = self.message_dir.one(head)
                except AgentfsError:
                    last = None
            summary = previous.after(committed, final=last is not None and is_final_answer(last),
                                     at=now())
        self.summary_file.write(summary, after, replaces=before)

    def count_usage(self, messages: Iterable[Message]) -> None:
        """Add what `messages` used to `meta.usage`, and their turns of the model to
        `meta.iterations` (saved by the next commit): each message once, by the
        sequence `usage` has counted through, so a step a crash cut short and
        recovery adopts is not counted twice. A trace an older agentfs wrote is
        counted first from its message files, once."""
        if self.meta.usage is None:
            self.meta.usage = Spending()
            messages = [*self.message_dir.current().values(), *messages]
            self.meta.iterations = 0
        self.meta.iterations += sum(map(is_model_turn, self.meta.usage.count(messages)))

    def record_error(self, error: str) -> bytes:
        """Leave a visible record of a failed run: `context.last_error` in trace.json,
        committed as kind `error`. The caller holds the lock."""
        self.reload()
        error = escaped(error)  # it may quote a file name that is not UTF-8
        self.meta.context.last_error = LastError(
            at=datetime.now(UTC).isoformat(timespec="seconds"), error=error)
        return self.commit_step("error", [], summary=error)

    def record_failed_run(self, error: str) -> None:
        """Record that a run of this trace failed (`record_error`, under the trace's
        lock), what `agentfs status` and the API show as `failed`; not while
        `trace.json` holds the person's uncommitted edit (the failure may be that
        edit: committing it with the error would commit what was just refused).

        Raises:
            TraceLocked: another run holds the trace (it will say how it went).
            AgentfsError, OSError: the record could not be written.
        """
        with self.lock():
            if not self.meta_uncommitted():
                self.record_error(error)

    def commit_to_branch(self, branch: str, messages: Sequence[Message], kind: str = "branch",
                         *, files: dict[str, bytes] | None = None,
                         summary: str | None = None) -> bytes:
        """Commit message files (and `files`: workspace path → bytes) on side branch
        `branch` only: the work tree, the index and `main` are not touched."""
        changes = [
            Change(self.rel(self.message_path(m)), render_message(m)) for m in messages
        ] + [Change(path, data) for path, data in (files or {}).items()]
        step = Step(self.id, kind, messages[-1].sequence if messages else self.meta.head,
                    summary=summary if summary is not None else _summary_of(messages),
                    usage=_usage_of(messages))
        return self.repo.commit_changes(b"refs/heads/" + branch.encode(), changes, step.message())

    def write_file(self, path: str, data: bytes) -> None:
        """Write a workspace file (a Git path) atomically, before a step commits it;
        never through a folder that is a link (`check_real_folders`)."""
        check_real_folders(self.workspace.root, path)
        atomic_write(self.workspace.root / path, data, tmp_dir=self.tmp_dir,
                     sync_dir=self.repo.durable)

    # --- state of the work ---------------------------------------------------

    def meta_uncommitted(self) -> bool:
        """True if trace.json on disk differs from its last commit (an edit, or a step
        a crash cut short). Raises FileNotFoundError without a trace.json."""
        return read_trace_file(self.meta_path) != self.repo.read_file(
            self.repo.head(), self.rel(self.meta_path))

    def unfinished(self) -> bool:
        """True if a run has work here without any new file: the head is a user
        message (not the summary of a conversation that ended in an answer,
        `agentfs/store/history.py:is_final_answer`), a claimed file waits in staging,
        a tool step was in flight, a side-branch queue is unfinished, or trace.json is
        ahead of its commit. Not while a tool call waits for the person's approval.
        Cheap: trace.json and file names, and the head's file if it is a user's."""
        if self.awaits_approval():
            return False
        # without the lock: a claim being made must not be taken for a leftover
        if self._in_flight.exists() or staged_in(self.workspace.ingest_dir / self.id,
                                                 tidy=False):
            return True
        try:  # killed between writing trace.json and committing it: recovery has work
            if self.meta_uncommitted():
                return True
        except FileNotFoundError:
            return False
        if self.meta.side_queue is not None:
            return True
        head = self.meta.head
        if head is None or self.message_dir.role_on_disk(head) != "user":
            return False
        try:
            message = self.message_dir.one(head)
        except AgentfsError:
            return True  # the run reads it, and says what is wrong
        return message is None or not is_final_answer(message)

    def waits_for_user(self) -> bool:
        """True when a run would only find the trace ending in an answer, with nothing
        waiting: no new file, no unfinished work, no tool call pending (the rule the
        runner stops by, `agentfs/store/history.py:is_final_answer`); or stopped at a
        tool call that waits for the person's approval (`awaits_approval`), which
        files in the inbox wait behind."""
        if self.awaits_approval():
            return True
        if self.pending_inbox() or self.unfinished() or self.meta.head is None:
            return False
        try:  # the head's file alone, as it is now: the rest of the trace is not read
            head = self.message_dir.one(self.meta.head)
            if self._written_by_hand():
                return False
        except AgentfsError:
            return False  # let the run report it
        return head is not None and is_final_answer(head)

    def _written_by_hand(self) -> bool:
        """True if a message file past those agentfs numbered (at or past `next_sequence`,
        `agentfs/store/filenames.py:names_from`) is not committed: the next run adopts
        it (`agentfs/store/recovery.py:recover`). Only `messages/` and the folder of that
        sequence are listed; normally they hold no such file."""
        found, _ = names_from(str(self.messages_dir), self.meta.next_sequence)
        commit = self.repo.head() if found else None
        messages = self.rel(self.messages_dir)
        return any(self.repo.tree_lookup(commit, f"{messages}/{path}") is None for path in found)

    def pending_inbox(self) -> list[Path]:
        """Files waiting in this trace's `inbox/`, in name order (see
        `agentfs/store/inbox.py:waiting`)."""
        return waiting(self.inbox_dir)

    def recover(self) -> list[str]:
        """Commit what is on disk but not committed under the trace; returns the kinds
        (see `agentfs/store/recovery.py:recover`)."""
        return recover(self)

    def head_target(self, sequence: int, messages: dict[int, Message] | None = None,
                    *, verb: str = "rewind to") -> list[Message]:
        """The main path there would be with message `sequence` as the head (what a
        rewind or a fork checks before it moves or copies anything; `verb` begins
        the hints).

        Raises:
          AgentfsError: no such message, a side branch's, or a head that would leave
            tool calls without results (the hint names the sequences to use instead).
        """
        messages = self.messages() if messages is None else messages
        target = messages.get(sequence)
        if target is None:
            raise AgentfsError(
                f"trace {self.id!r} has no message #{sequence}",
                hint=f"`agentfs show {self.id} --all` lists the sequences",
            )
        if target.branch_type:
            raise AgentfsError(
                f"message #{sequence} belongs to a {target.branch_type} side branch",
                hint=f"{verb} a message of the main history",
            )
        path = self.path_to(sequence, messages)  # the new path must be complete
        unanswered = [c.name for c in unanswered_calls(path)]
        if unanswered:
            end = step_end(path, messages)
            before = path[last_assistant(path)].parent_sequence
            options = [f"#{end} (its last result)"] if end is not None else []
            options.append(f"#{before} (before the call)")
            raise AgentfsError(
                f"at message #{sequence} the tool call(s) {', '.join(unanswered)} have no result; "
                "the next run would have to run them again",
                hint=f"{verb} " + " or ".join(options),
            )
        return path

    def rewind(self, sequence: int, *, files: bool = False) -> Rewind | None:
        """Move the head to `sequence` (a message of this trace) as a `rewind` commit, and
        the files beside the messages (goals.json) back to what they were then. With
        `files`, the workspace files the trace's steps changed after it are put back
        too (`agentfs/store/filerewind.py:plan_file_rewind`), in the same commit.
        Returns what it committed, or None if there was nothing to do.

        Raises:
          AgentfsError: see `head_target`; with `files`, no step of the trace
            committed `sequence`.
          FilesChangedSince: with `files`, a file to restore was changed since the
            agent wrote it; nothing is written.
        """
        path = self.head_target(sequence)
        plan = self._plan_files(sequence) if files else FileRewind(b"")
        plan.apply(self.repo, self.tmp_dir)
        head = self.repo.head()
        changed = [p for p in plan.paths if self.repo.tree_lookup(head, p) != plan.restore[p]]
        if sequence == self.meta.head and not changed:
            return None  # nothing to move: no empty commit
        side = self._restore_side_files(sequence) + self.drop_approval()
        self.meta.head = sequence
        summary = f"head moved to #{sequence} ({path[-1].role})"
        if changed:
            summary += f", {counted(len(changed), 'file')} restored"
        body = (f"Files restored as they were at #{sequence}:\n"
                + "\n".join(f"  {p}" for p in changed)) if changed else ""
        commit = self.commit_step("rewind", [], summary=summary, body=body,
                                  extra_paths=[*side, *changed])
        return Rewind(commit, changed)

    def _plan_files(self, sequence: int) -> FileRewind:
        traces = self.rel(self.workspace.traces_dir)
        found = lineage_step_of_message(self.repo, traces, self.id, sequence)
        if found is None:
            raise AgentfsError(
                f"trace {self.id!r}: no commit on main added message #{sequence}, so the "
                "workspace files at that step are not known; nothing was changed",
                hint=f"rewind without --files: `agentfs rewind {self.id} {sequence}`",
                api_hint='rewind with "files": false',
            )
        return plan_file_rewind(self.repo, traces, self.id, found[1].commit.encode())

    def _restore_side_files(self, sequence: int) -> list[str]:
        """Put the files beside the messages (e.g. goals.json) back as they were when
        `sequence` was the head, so state kept in them follows the main path; returns
        the paths changed. Found along `main` through the commits' trailers; for a
        message a fork copied, in the trace it was copied from (`lineage_log`), whose
        folder held them then."""
        traces, here = self.rel(self.workspace.traces_dir), self.rel(self.dir)
        found = next(((owner, step.commit) for owner, step
                      in lineage_log(self.repo, traces, self.id) if step.sequence == sequence),
                     None)
        if found is None:
            return []
        owner, commit = found[0], found[1].encode()
        there = f"{traces}/{owner}"
        then = {here + p[len(there):]: (e, p) for p, e in self.repo.walk(commit, there).items()
                if self._is_side_file(here + p[len(there):])}
        now = {p: e for p, e in self.repo.walk(self.repo.head(), here).items()
               if self._is_side_file(p)}
        changed = []
        for path in sorted(set(then) | set(now)):
            if path in then and then[path][0] == now.get(path):
                continue
            full = self.workspace.root / path
            data = self.repo.read_file(commit, then[path][1]) if path in then else None
            if data is None:
                full.unlink(missing_ok=True)
            else:
                atomic_write(full, data, tmp_dir=self.tmp_dir, sync_dir=self.repo.durable)
            changed.append(path)
        return changed

    def _is_side_file(self, path: str) -> bool:
        """A file of the trace other than trace.json, messages/ and inbox/."""
        name = path[len(self.rel(self.dir)) + 1:]
        return "/" not in name and name != TRACE_FILE


def _folds(path: list[int], files: list[int]) -> tuple[Fold, ...]:
    """The runs of more than `FOLD_AT` of `files` (sorted sequences) off `path`
    between two of its sequences (by sequence order)."""
    bounds = sorted(set(path))
    folds = []
    for at in range(len(bounds) + 1):
        below = bounds[at - 1] if at else None
        above = bounds[at] if at < len(bounds) else None
        low = bisect_right(files, below) if below is not None else 0
        high = bisect_left(files, above) if above is not None else len(files)
        if high - low > FOLD_AT:
            folds.append(Fold(below, above, files[low], files[high - 1], high - low))
    return tuple(folds)


def _unfolded(first: int, end: int | None,
              folds: Sequence[Fold]) -> list[tuple[int, int | None]]:
    """The spans of sequences from `first` to `end` outside `folds` (in order)."""
    spans: list[tuple[int, int | None]] = []
    start = first
    for fold in folds:
        if fold.first > start:
            spans.append((start, fold.first))
        start = fold.last + 1
    if end is None or start < end:
        spans.append((start, end))
    return spans


def _usage_of(messages: Sequence[Message]) -> str:
    """The `Agentfs-Usage` trailer of a step whose last message is a model's turn."""
    last = messages[-1] if messages else None
    return usage_trailer(last) if last is not None and last.role == "assistant" else ""


def _summary_of(messages: Sequence[Message]) -> str:
    if not messages:
        return ""
    last = messages[-1]
    if last.tool_calls and not last.text.strip():
        return "calls " + ", ".join(c.name for c in last.tool_calls)
    if last.role == "tool" and len(messages) > 1:
        return f"{len(messages)} tool results"
    return last.text
