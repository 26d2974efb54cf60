"""A trace on disk: `trace.json`, `messages/`, `inbox/`, and the commits that record them.

This is the storage API the agent core uses. It knows messages, sequences,
paths and commits; it knows nothing about models or tools.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dulwich.objects import Blob
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentfs.errors import AgentfsError, MessageFileError, TraceNotFound, validation_problems
from agentfs.store import parsecache
from agentfs.store.atomic import atomic_write, purge_stale_temps
from agentfs.store.commits import Step
from agentfs.store.gcpause import gc_paused
from agentfs.store.gitrepo import Change, GitRepo
from agentfs.store.lock import TraceLock, is_locked
from agentfs.store.messages import (
    Message,
    authored_fields,
    load_dropped,
    load_message,
    parse_file_name,
    render_message,
)
from agentfs.store.workspace import (
    INBOX_DIR,
    MESSAGES_DIR,
    TRACE_FILE,
    Workspace,
    check_trace_id,
)

#: Version of the on-disk trace format this agentfs writes and reads.
FORMAT_VERSION = 1


class InjectedSkill(BaseModel):
    """Where a declared skill was last injected."""

    message_id: str
    sequence: int


class InFlight(BaseModel):
    """Tool calls of the current step that started, and the files they announced."""

    started: list[str] = Field(default_factory=list)
    files: dict[str, list[str]] = Field(default_factory=dict)


class TraceMeta(BaseModel):
    """Contents of `trace.json`: the trace's metadata and runtime context."""

    model_config = ConfigDict(extra="allow")

    format_version: int = Field(default=FORMAT_VERSION, description="On-disk format version")
    id: str
    head: int | None = Field(default=None, description="Last message of the main path")
    next_sequence: int = Field(default=1, description="Sequence the next message will get")
    created_at: str = Field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    model: str | None = Field(default=None, description="Model used when none is given")
    preset: str | None = None
    iterations: int = Field(default=0, description="Model calls made on the main path")
    injected_skills: dict[str, InjectedSkill] = Field(default_factory=dict)
    context: dict[str, Any] = Field(default_factory=dict, description="Free-form runtime state")


#: A file modified this recently (ns) may change again without its stamp changing;
#: with whole-second timestamps (a coarse filesystem), this much more.
RACY_NS = 100_000_000
COARSE_NS = 2_000_000_000

#: Parsed message files of each messages directory this process has read.
_parsed: dict[str, dict[str, tuple[parsecache.Stamp, Message]]] = {}


#: Hidden files, editor backups (`x~`), Emacs auto-saves (`#x#`), swap and temp
#: files, and vim's `4913` probe. One regex: it runs on every file of a trace.
_IGNORED = re.compile(r"\A(?:\..*|.*~|#(?:.*#)?|.*\.(?:swp|swo|swx|tmp|part)|4913)\Z", re.DOTALL)


def is_ignored_name(name: str) -> bool:
    """Editor and agentfs temporary files that are never messages or edits."""
    return _IGNORED.match(name) is not None


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
        # Parsed files by name, shared by every Trace of this directory in the process.
        self._cache = _parsed.setdefault(str(self.messages_dir), {})
        self._snapshot: dict[int, Message] | None = None
        self._snapshot_key: tuple[int, int] | None = None
        # recover() stats every file anyway; the next scan of messages/ reuses that
        # listing if the directory has not changed since: (directory key, listing).
        self._stat_hint: tuple[tuple[int, int] | None, dict[str, os.stat_result]] | None = None

    # --- metadata ----------------------------------------------------------

    @classmethod
    def create(cls, workspace: Workspace, repo: GitRepo, meta: TraceMeta) -> Trace:
        """Make the directory and `trace.json` of a new trace (not yet committed)."""
        trace = cls(workspace, repo, meta.id)
        if trace.meta_path.exists():
            raise AgentfsError(
                f"trace {meta.id!r} already exists ({trace.dir})",
                hint="choose another id, or continue it with `agentfs run`",
            )
        if repo.walk(repo.head(), trace.rel(trace.dir)):
            raise AgentfsError(
                f"{trace.dir} has committed files but no trace.json",
                hint="restore trace.json with git, or choose another id",
            )
        if trace.messages_dir.is_dir():  # left by a creation that never got committed
            for leftover in trace.messages_dir.iterdir():
                leftover.unlink()
        trace.messages_dir.mkdir(parents=True, exist_ok=True)
        trace._meta = meta  # trace.json is written by the first commit_step
        return trace

    @property
    def meta(self) -> TraceMeta:
        if self._meta is None:
            self._meta = self._load_meta()
        return self._meta

    def reload(self) -> None:
        """Forget cached metadata (files may have changed on disk)."""
        self._meta = None

    def _load_meta(self) -> TraceMeta:
        try:
            data = json.loads(self.meta_path.read_bytes())
        except FileNotFoundError:
            raise TraceNotFound(f"{self.meta_path}: missing", hint="is this a trace?") from None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise AgentfsError(
                f"{self.meta_path}: not valid JSON ({exc})",
                hint="fix it, or restore it with `git checkout -- " f"{self.rel(self.meta_path)}`",
            ) from None
        version = data.get("format_version", FORMAT_VERSION) if isinstance(data, dict) else None
        if isinstance(version, int) and version > FORMAT_VERSION:
            raise AgentfsError(
                f"{self.meta_path}: written by a newer agentfs (format {version})",
                hint="upgrade agentfs to read this trace",
            )
        try:
            return TraceMeta.model_validate(data)
        except ValidationError as exc:
            raise AgentfsError(
                f"{self.meta_path}: invalid fields: {validation_problems(exc)}"
            ) from None

    def save_meta(self) -> None:
        data = self.meta.model_dump(mode="json")
        atomic_write(
            self.meta_path,
            (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode(),
            tmp_dir=self.tmp_dir,
            sync_dir=self.repo.durable,
        )

    def lock(self) -> TraceLock:
        return TraceLock(self.workspace.state_dir / "locks", self.id)

    def is_running(self) -> bool:
        return is_locked(self.workspace.state_dir / "locks", self.id)

    # --- tool calls in flight ----------------------------------------------

    @property
    def _in_flight_path(self) -> Path:
        return self.workspace.state_dir / "in-flight" / f"{self.id}.json"

    def in_flight(self) -> InFlight:
        """Tool calls that began running, and files they announced, not yet committed."""
        try:
            return InFlight.model_validate_json(self._in_flight_path.read_bytes())
        except (FileNotFoundError, ValidationError):
            return InFlight()

    def mark_started(self, call_id: str) -> None:
        """Record durably that a tool call is about to run (so a crash never re-runs it)."""
        record = self.in_flight()
        record.started.append(call_id)
        self._save_in_flight(record)

    def record_change(self, call_id: str, path: str) -> None:
        """Record durably that a running tool call is about to change a workspace file."""
        record = self.in_flight()
        files = record.files.setdefault(call_id, [])
        if path not in files:
            files.append(path)
            self._save_in_flight(record)

    def _save_in_flight(self, record: InFlight) -> None:
        atomic_write(
            self._in_flight_path, record.model_dump_json().encode(),
            tmp_dir=self.tmp_dir, sync_dir=self.repo.durable,
        )

    def clear_in_flight(self) -> None:
        self._in_flight_path.unlink(missing_ok=True)

    @property
    def tmp_dir(self) -> Path:
        """Where agentfs makes temp files for atomic writes (inside `.git`)."""
        return self.workspace.state_dir / "tmp"

    def record_error(self, error: str) -> bytes:
        """Leave a visible record of a failed run: `context.last_error` in trace.json,
        committed as kind `error`. The caller holds the lock."""
        self.reload()
        self.meta.context["last_error"] = {
            "at": datetime.now(UTC).isoformat(timespec="seconds"), "error": error,
        }
        return self.commit_step("error", [], summary=error)

    def commit_to_branch(self, branch: str, messages: Sequence[Message], kind: str = "branch") -> bytes:
        """Commit message files on side branch `branch` only: the work tree, the index
        and `main` are not touched."""
        changes = [
            Change(self.rel(self.message_path(m)), render_message(m)) for m in messages
        ]
        step = Step(self.id, kind, messages[-1].sequence, summary=_summary_of(messages))
        return self.repo.commit_changes(b"refs/heads/" + branch.encode(), changes, step.message())

    def rel(self, path: Path) -> str:
        return self.workspace.relpath(path)

    # --- messages ----------------------------------------------------------

    def messages(self, *, refresh: bool = False) -> dict[int, Message]:
        """Every message file in `messages/` by sequence.

        Only files whose stat changed are parsed again. Without `refresh`, the
        directory is not even listed while its mtime shows no file was added,
        removed or renamed (a run holding the lock writes the only new files);
        `recover()` refreshes, so in-place edits are seen by the next run.
        """
        return dict(self._current(refresh))

    def _current(self, refresh: bool = False) -> dict[int, Message]:
        """The snapshot behind `messages()`, brought up to date (not a copy)."""
        key = self._dir_key()
        if not refresh and self._snapshot is not None and key == self._snapshot_key:
            return self._snapshot
        with gc_paused():
            return self._scan(key)

    def _scan(self, key: tuple[int, int] | None) -> dict[int, Message]:
        if not self._cache:
            self._cache.update(parsecache.load(self._cache_path))
        found: dict[int, Message] = {}
        seen: set[str] = set()
        parsed = 0
        racy_after = time.time_ns() - RACY_NS
        hint, self._stat_hint = self._stat_hint, None
        listing = hint[1] if hint is not None and hint[0] == key else self._list_messages()
        for name, st in listing.items():
            stamp = (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)
            cached = self._cache.get(name)
            if cached is not None and cached[0] == stamp:
                message = cached[1]
            else:
                message = load_message(self.messages_dir / name)
                parsed += 1
                if stamp[0] < racy_after and (
                    stamp[0] % 1_000_000_000 or stamp[0] < racy_after - COARSE_NS
                ):
                    self._cache[name] = (stamp, message)
                # else: changed within the last clock ticks; a second change in the same
                # tick could keep its stamp, so it is parsed again next time (as Git does)
            seen.add(name)
            if message.sequence in found:
                raise MessageFileError(
                    self.messages_dir / name,
                    f"sequence {message.sequence} is also used by "
                    f"{found[message.sequence].file_name()}",
                    hint="each sequence number may be used by one file only; rename one",
                )
            found[message.sequence] = message
        for stale in set(self._cache) - seen:
            del self._cache[stale]
        if parsed >= parsecache.SAVE_AFTER:
            parsecache.save(self._cache_path, self._cache)
        self._snapshot = dict(sorted(found.items()))
        self._snapshot_key = key
        return self._snapshot

    def _list_messages(self) -> dict[str, os.stat_result]:
        """The message files of `messages/` and their stat (symlinks refused)."""
        listing: dict[str, os.stat_result] = {}
        try:
            entries = list(os.scandir(self.messages_dir))
        except FileNotFoundError:
            return listing
        for entry in entries:
            if is_ignored_name(entry.name) or not entry.is_file(follow_symlinks=False):
                if entry.is_symlink():
                    raise MessageFileError(
                        Path(entry.path), "is a symlink", hint="message files must be regular files"
                    )
                continue
            listing[entry.name] = entry.stat(follow_symlinks=False)
        return listing

    @property
    def _cache_path(self) -> Path:
        return self.workspace.state_dir / "cache" / f"{self.id}.pickle"

    def _dir_key(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.messages_dir)
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_mtime_ns

    def parent_of(self, message: Message, ordered: Sequence[int]) -> int | None:
        """The message's parent; without `parent_sequence`, the file before it."""
        if message.parent_sequence is not None:
            return message.parent_sequence
        earlier = [s for s in ordered if s < message.sequence]
        return earlier[-1] if earlier else None

    def path_to(self, sequence: int | None, messages: dict[int, Message] | None = None) -> list[Message]:
        """Messages from the first one to `sequence`, following parents."""
        messages = self.messages() if messages is None else messages
        ordered = list(messages)
        path: list[Message] = []
        seen: set[int] = set()
        current = sequence
        while current is not None:
            message = messages.get(current)
            if message is None:
                child = path[-1].file_name() if path else TRACE_FILE
                raise AgentfsError(
                    f"{self.dir}: the main path needs message #{current} "
                    f"(parent of {child}) but there is no such file",
                    hint="restore it with git, or `agentfs rewind` to an existing message",
                )
            if current in seen:
                raise AgentfsError(
                    f"{self.messages_dir / message.file_name()}: parent_sequence makes a cycle",
                    hint="fix parent_sequence so it points at an earlier message",
                )
            seen.add(current)
            path.append(message)
            current = self.parent_of(message, ordered)
        path.reverse()
        return path

    def main_path(self, messages: dict[int, Message] | None = None) -> list[Message]:
        """The main path: from the first message to the head in `trace.json`."""
        return self.path_to(self.meta.head, messages)

    def next_sequence(self) -> int:
        highest = next(reversed(self._current()), 0)
        return max(self.meta.next_sequence, highest + 1)

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
        return self.messages_dir / message.file_name()

    def write_message(self, message: Message) -> Path:
        path = self.message_path(message)
        self._stat_hint = None
        was_current = self._snapshot is not None and self._snapshot_key == self._dir_key()
        atomic_write(
            path, render_message(message), tmp_dir=self.tmp_dir, sync_dir=self.repo.durable
        )
        if was_current and self._snapshot is not None:
            newest = message.sequence > next(reversed(self._snapshot), 0)
            self._snapshot[message.sequence] = message
            if not newest:  # new messages come last; only a rewrite can be out of order
                self._snapshot = dict(sorted(self._snapshot.items()))
            self._snapshot_key = self._dir_key()
        return path

    # --- steps (one commit each) -------------------------------------------

    def commit_step(
        self,
        kind: str,
        messages: Sequence[Message] = (),
        *,
        extra_paths: Iterable[str] = (),
        summary: str | None = None,
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
        self.save_meta()
        paths.append(self.rel(self.meta_path))
        last = messages[-1] if messages else None
        step = Step(
            trace_id=self.id,
            kind=kind,
            sequence=last.sequence if last else self.meta.head,
            summary=summary if summary is not None else (_summary_of(messages) if messages else ""),
            goal_id=last.goal_id if last else None,
        )
        return self.repo.commit_worktree(
            [*paths, *extra_paths], step.message(), extra_parents=extra_parents
        )

    def ingest(self, source: Path, *, kind: str = "user", goal_id: str | None = None) -> Message:
        """Take a dropped file (e.g. from `inbox/`) as the next user message, exactly once.

        The file is validated, then renamed into agentfs' staging folder named
        after the sequence it gets: from that instant it can neither be lost
        nor taken twice. The message file is written and committed (with the
        source's removal), then the staged copy goes; `recover()` finishes a
        step a crash cut short.
        """
        probe = load_dropped(source)
        fields = {"goal_id": goal_id, **authored_fields(probe)}
        message = self.new_message("user", probe.content, **fields)
        staged = self._staging_dir / f"{message.sequence:06d}-{source.name}"
        staged.parent.mkdir(parents=True, exist_ok=True)
        os.rename(source, staged)
        self.commit_step(kind, [message], extra_paths=[self.workspace.relpath(source)])
        staged.unlink()
        return message

    @property
    def _staging_dir(self) -> Path:
        return self.workspace.ingest_dir / self.id

    def _staged_ingests(self) -> list[tuple[int, Path]]:
        """(sequence, staged file) of ingests a crash interrupted."""
        try:
            names = sorted(os.listdir(self._staging_dir))
        except FileNotFoundError:
            return []
        staged = []
        for name in names:
            number, _, rest = name.partition("-")
            if number.isdigit() and rest:
                staged.append((int(number), self._staging_dir / name))
        return staged

    def _staged_source(self, staged: Path) -> str:
        """The inbox path a staged file came from (its removal is part of the step)."""
        return self.rel(self.inbox_dir / staged.name.partition("-")[2])

    def _finish_staged_ingests(self) -> bool:
        """Ingest staged files whose message was never written; drop the others.
        True if a message was ingested."""
        written = set(self.messages())
        ingested = False
        for sequence, staged in self._staged_ingests():
            if sequence not in written:
                probe = load_dropped(staged)
                message = self.new_message("user", probe.content, **authored_fields(probe))
                self.commit_step("user", [message], extra_paths=[self._staged_source(staged)])
                ingested = True
            staged.unlink()
        return ingested

    def pending_inbox(self) -> list[Path]:
        """Files waiting in this trace's `inbox/`, oldest name first."""
        if not self.inbox_dir.is_dir():
            return []
        return sorted(
            p for p in self.inbox_dir.iterdir() if p.is_file() and not is_ignored_name(p.name)
        )

    def recover(self) -> list[str]:
        """Commit what is on disk but not committed under the trace; returns the kinds.

        New message files that continue the committed head (an interrupted
        step, or a file the user added to `messages/`) are adopted onto the
        main path as kind `recover`; any other change is the user's and
        becomes `edit`. Files waiting in `inbox/` are left for `ingest`.
        """
        self.repo.check_on_main()
        purge_stale_temps(self.tmp_dir)
        self.repo.repair_index()
        head_commit = self.repo.head()
        prefix = self.rel(self.dir)
        with gc_paused():
            committed = self._committed_files(head_commit)
            on_disk = self._worktree_files()
        inbox = f"{prefix}/{INBOX_DIR}/"
        changed = sorted(
            path
            for path in set(committed) | set(on_disk)
            if not (path.startswith(inbox) and path in on_disk)  # pending drops wait for ingest
            and (path not in on_disk or path not in committed or on_disk[path] != committed[path][1])
        )
        staged = self._staged_ingests()
        sources = {sequence: self._staged_source(path) for sequence, path in staged}
        changed = [p for p in changed if p not in sources.values()]
        if not changed and not staged:
            return []
        kinds: list[str] = []
        adopted = self._adopt(committed, head_commit)
        if adopted:
            self.meta.head = adopted[-1].sequence
            extra = [f for m in adopted for f in (m.files_changed or [])]
            extra += [sources[m.sequence] for m in adopted if m.sequence in sources]
            self.commit_step(
                "recover",
                adopted,
                extra_paths=extra,
                summary=f"adopted {len(adopted)} uncommitted message file(s)",
            )
            kinds.append("recover")
            done = {self.rel(self.message_path(m)) for m in adopted} | {self.rel(self.meta_path)}
            changed = [p for p in changed if p not in done]
        if changed:
            self.reload()
            shown = [p[len(prefix) + 1 :] for p in changed]
            step = Step(
                self.id,
                "edit",
                self.meta.head,
                summary=", ".join(shown[:3]) + (f" and {len(shown) - 3} more" if len(shown) > 3 else ""),
            )
            self.repo.commit_worktree(changed, step.message())
            kinds.append("edit")
        if staged and self._finish_staged_ingests():
            kinds.append("user")
        return kinds

    def _adopt(self, committed: dict[str, tuple[int, bytes]], head_commit: bytes | None) -> list[Message]:
        """Uncommitted new message files continuing the committed head, in order."""
        messages = self.messages(refresh=True)
        messages_prefix = self.rel(self.messages_dir) + "/"
        committed_sequences = [
            parsed[0]
            for path in committed
            if path.startswith(messages_prefix)
            and (parsed := parse_file_name(path[len(messages_prefix) :])) is not None
        ]
        newest_committed = max(committed_sequences, default=0)
        head = self._committed_head(head_commit)
        adopted: list[Message] = []
        for sequence, message in messages.items():
            if sequence <= newest_committed:
                continue
            if message.parent_sequence not in (None, head):
                continue
            if message.parent_sequence is None and head is not None:
                message = message.model_copy(update={"parent_sequence": head})
            adopted.append(message)
            head = sequence
        return adopted

    def _committed_head(self, head_commit: bytes | None) -> int | None:
        """The head recorded in the committed `trace.json` (the disk may be ahead)."""
        data = self.repo.read_file(head_commit, self.rel(self.meta_path))
        if data is None:
            return None  # the trace itself was never committed
        try:
            return TraceMeta.model_validate_json(data).head
        except ValidationError:
            return self.meta.head

    def _committed_files(self, head_commit: bytes | None) -> dict[str, tuple[int, bytes]]:
        """Committed files under the trace, with the same names left out as on disk."""
        prefix = self.rel(self.dir)
        ignored_dirs: dict[str, bool] = {}
        files: dict[str, tuple[int, bytes]] = {}
        for path, entry in self.repo.walk(head_commit, prefix).items():
            directory, _, name = path[len(prefix) + 1 :].rpartition("/")
            if directory not in ignored_dirs:
                ignored_dirs[directory] = any(is_ignored_name(p) for p in directory.split("/") if p)
            if not ignored_dirs[directory] and not is_ignored_name(name):
                files[path] = entry
        return files

    def _worktree_files(self) -> dict[str, bytes]:
        """Files under the trace directory (editor temp files left out): path → blob id.

        Like `git status`, a file whose stat matches its index entry is taken to
        hold the entry's blob without being read, unless it changed in the same
        clock tick as the index was written ("racily clean").
        """
        prefix = self.rel(self.dir)
        known = self.repo.stat_cache(prefix)
        files: dict[str, bytes] = {}
        messages_key = self._dir_key()
        listing: dict[str, os.stat_result] | None = None
        pending = [(str(self.dir), prefix)]
        while pending:
            directory, rel_dir = pending.pop()
            in_messages = directory == str(self.messages_dir)
            if in_messages:
                listing = {}
            with os.scandir(directory) as entries:
                for entry in entries:
                    if is_ignored_name(entry.name):
                        continue
                    rel = f"{rel_dir}/{entry.name}"
                    if entry.is_dir(follow_symlinks=False):
                        pending.append((entry.path, rel))
                        continue
                    st = entry.stat(follow_symlinks=False)
                    if in_messages and listing is not None:
                        if entry.is_symlink():
                            listing = None  # let the scan of messages/ report it
                        else:
                            listing[entry.name] = st
                    blob_id = known.blob_id(rel, st)
                    if blob_id is not None:
                        files[rel] = blob_id
                    elif entry.is_symlink():
                        files[rel] = Blob.from_string(os.readlink(entry.path).encode()).id
                    else:
                        with open(entry.path, "rb") as f:
                            files[rel] = Blob.from_string(f.read()).id
        if listing is not None and self._dir_key() == messages_key:
            self._stat_hint = (messages_key, listing)
        return files

    def rewind(self, sequence: int) -> bytes:
        """Move the head to `sequence` (a message of this trace) as a `rewind` commit."""
        messages = self.messages()
        target = messages.get(sequence)
        if target is None:
            raise AgentfsError(
                f"trace {self.id!r} has no message #{sequence}",
                hint="`agentfs show --all` lists the sequences",
            )
        if target.branch_type:
            raise AgentfsError(
                f"message #{sequence} belongs to a {target.branch_type} side branch",
                hint="rewind to a message of the main history",
            )
        path = self.path_to(sequence, messages)  # the new path must be complete
        unanswered = _unanswered_calls(path)
        if unanswered:
            end = _step_end(path, messages)
            before = path[_last_assistant(path)].parent_sequence
            options = [f"#{end} (its last result)"] if end is not None else []
            options.append(f"#{before} (before the call)")
            raise AgentfsError(
                f"at message #{sequence} the tool call(s) {', '.join(unanswered)} have no result; "
                "the next run would have to run them again",
                hint="rewind to " + " or ".join(options),
            )
        self.meta.head = sequence
        return self.commit_step(
            "rewind", [], summary=f"head moved to #{sequence} ({target.role})"
        )


def _last_assistant(path: list[Message]) -> int:
    return max((i for i, m in enumerate(path) if m.role == "assistant"), default=-1)


def _unanswered_calls(path: list[Message]) -> list[str]:
    """Names of the last assistant turn's tool calls without a result on `path`."""
    at = _last_assistant(path)
    if at < 0 or not path[at].tool_calls or any(m.role != "tool" for m in path[at + 1 :]):
        return []
    answered = {m.tool_call_id for m in path[at + 1 :]}
    return [c.name for c in path[at].tool_calls or [] if c.id not in answered]


def _step_end(path: list[Message], messages: dict[int, Message]) -> int | None:
    """Sequence at which the path's last tool step has all its results, if it exists."""
    calls = {c.id for c in path[_last_assistant(path)].tool_calls or []}
    answered = {m.tool_call_id for m in path[_last_assistant(path) + 1 :]}
    current = path[-1].sequence
    while not calls <= answered:
        child = next(
            (
                m
                for m in messages.values()
                if m.parent_sequence == current and m.role == "tool" and m.tool_call_id in calls
            ),
            None,
        )
        if child is None:
            return None
        answered.add(child.tool_call_id)
        current = child.sequence
    return current


def _summary_of(messages: Sequence[Message]) -> str:
    last = messages[-1]
    if last.tool_calls and not last.text.strip():
        return "calls " + ", ".join(c.name for c in last.tool_calls)
    if last.role == "tool" and len(messages) > 1:
        return f"{len(messages)} tool results"
    return last.text
