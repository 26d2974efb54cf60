"""What a person does to a trace between runs, each under the trace's lock, the
same way from the command line and from `agentfs serve`: post a user message,
rewind, fork, edit a message."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from agentfs.core.goals import GoalTree
from agentfs.errors import AgentfsError, MessageFileError, TraceExists, TraceLocked, TraceNotFound
from agentfs.store.atomic import atomic_write
from agentfs.store.fork import default_fork_id, fork_trace
from agentfs.store.frontmatter import FrontmatterError, replace_body
from agentfs.store.history import unanswered_calls
from agentfs.store.inbox import save_in_inbox
from agentfs.store.ingest import (
    Rejected,
    SettingsCheck,
    find_post,
    finish_staged,
    parse_dropped_text,
    take_file,
)
from agentfs.store.messages import Message, utf8
from agentfs.store.trace import Trace
from agentfs.store.tracelock import TraceLock
from agentfs.store.workspace import GOALS_FILE

__all__ = ["Edited", "Posted", "Rewound", "edit_message", "fork", "post_message", "rewind"]


@dataclass(frozen=True)
class Posted:
    """Where a posted message is: `committed` as message `sequence`, `queued` in the
    inbox for the run that holds the trace, or `taken` by that run already."""

    status: Literal["committed", "queued", "taken"]
    # the inbox file it was written to, relative to the workspace; None for a retry of
    # a post committed before (the file is gone)
    file: str | None
    sequence: int | None = None
    repeated: bool = False  # the answer is about an earlier post with the same key


@dataclass(frozen=True)
class Rewound:
    previous: int | None  # the head before
    sequence: int  # the head now
    moved: bool  # False: the head was there already
    files: list[str] = field(default_factory=list)  # workspace files restored (--files)


@dataclass(frozen=True)
class Edited:
    file: str  # the message file, relative to the workspace
    committed: bool  # False: the text was the file's already


def post_message(trace: Trace, text: str, *, patience: float = 10.0,
                 run_holds_it: Callable[[], bool] = lambda: False,
                 check: SettingsCheck | None = None, origin: str = "<message>",
                 key: str | None = None) -> Posted:
    """Post a user message through the inbox's door: written atomically into
    `traces/ID/inbox/`, then taken at once as the next user message (one `user`
    commit), as `agentfs run` takes inbox files.

    If a run holds the trace (`run_holds_it()`, or the lock stays taken for
    `patience` seconds), the file stays in the inbox and that run takes it at its
    next step; it is never lost. Likewise if the head waits for tool results (the
    next run finishes that step first). The text is read as a dropped file is:
    frontmatter optional, its trace settings checked by `check`
    (`agentfs/core/project.py:Project.drop_check`), before anything is written:
    text that cannot be a message is refused whether or not a run holds the
    trace. A post refused once written (recovery refused an edit of the trace)
    leaves nothing in the inbox.

    With an idempotency `key` (`agentfs/store/inbox.py:POST_KEY`), a post made
    before with that key is not made again: its answer is about that one
    (`repeated`), and its file is taken now if it still waits. The look and the
    write are made under a lock of the trace's posts, so two posts with one key
    at once write one file.

    Raises:
      MessageFileError: the text cannot be a message; errors name `origin`.
      AgentfsError: recovery refused an edit of the trace, or the file was put
        aside all the same (`inbox/.rejected/`, with a note).
    """
    first = parse_dropped_text(origin, text)
    if check is not None:
        check(first)
    if key is None:
        return _deliver(trace, _save(trace, text), patience=patience,
                        run_holds_it=run_holds_it, check=check)
    with TraceLock(trace.workspace.lock_dir, f"{POSTS_LOCK}{trace.id}", patience=patience):
        found = find_post(trace, key)
        name = _save(trace, text, key) if found is None else found.file
    if found is not None and found.status == "committed":  # the file is gone
        return Posted("committed", None, found.sequence, repeated=True)
    assert name is not None  # written now, or waiting or claimed: a file either way
    posted = _deliver(trace, name, patience=patience, run_holds_it=run_holds_it, check=check,
                      key=key, own=found is None)
    return dataclasses.replace(posted, repeated=found is not None)


#: The lock of a trace's posts with a key is named this and the trace's id: a name no
#: trace has (ids start with a letter or digit).
POSTS_LOCK = "_posts-"


def _save(trace: Trace, text: str, key: str | None = None) -> str:
    """Write a post into the trace's inbox; its path relative to the workspace."""
    return trace.rel(save_in_inbox(trace.inbox_dir, text, key=key, tmp_dir=trace.tmp_dir,
                                   durable=trace.repo.durable))


def _deliver(trace: Trace, name: str, *, patience: float, run_holds_it: Callable[[], bool],
             check: SettingsCheck | None, key: str | None = None,
             own: bool = True) -> Posted:
    """Take the posted inbox file `name` as the next user message, or leave it queued
    for the run that holds the trace. A post with a `key` whose file another process
    claimed waits for the trace as a post does, finishing the claim if that process
    died (`_take`), so it can say which message the file became."""
    file = trace.workspace.root / name
    deadline = time.monotonic() + patience
    while True:
        if key is None and not file.exists():
            return Posted("taken", name)
        try:
            with trace.lock():
                posted = _take(trace, file, name, check, own=own)
        except TraceLocked:
            if run_holds_it() or time.monotonic() > deadline:
                return Posted("queued" if file.exists() else "taken", name)
            time.sleep(0.02)  # another post or a short command (rewind) holds it
            continue
        if posted.status == "taken" and key is not None:
            found = find_post(trace, key)
            if found is not None and found.status == "committed":
                return Posted("committed", name, found.sequence)
        return posted


def _take(trace: Trace, file, name: str, check: SettingsCheck | None, *,
          own: bool = True) -> Posted:
    """Take the posted file under the trace's lock; refused (recovery refused an
    edit), a file this post wrote (`own`) is removed, so a retry never finds it taken
    twice later. A file an earlier post with the same key wrote, and was answered
    `queued` for, stays: it is that post's."""
    trace.reload()
    try:
        trace.recover()
        finish_staged(trace, check)
    except Exception:
        if own:
            file.unlink(missing_ok=True)
        raise
    if trace.meta.side_queue is not None or unanswered_calls(trace.main_path()):
        # A tool step or a side-branch queue comes first (a new head would abandon the
        # queue): the next run finishes it, then takes the file.
        return Posted("queued", name)
    focus = GoalTree.load(trace.dir / GOALS_FILE).focus
    outcome = take_file(trace, file, goal_id=focus, check=check)
    if outcome is None:
        return Posted("taken", name)
    if isinstance(outcome, Rejected):
        raise AgentfsError(f"the message was not taken: {outcome.reason}",
                           hint=f"it was put aside in {trace.rel(outcome.moved_to)}")
    return Posted("committed", name, outcome.sequence)


def rewind(trace: Trace, sequence: int, *, files: bool = False) -> Rewound:
    """Move the trace's head back to message `sequence` (a `rewind` commit), after
    committing what is on disk; with `files`, also put back the workspace files the
    trace's steps changed since (see `agentfs/store/trace.py:Trace.rewind`)."""
    with trace.lock():
        trace.reload()
        trace.recover()
        previous = trace.meta.head
        done = trace.rewind(sequence, files=files)
    return Rewound(previous, sequence, previous != sequence,
                   done.files if done is not None else [])


def fork(source: Trace, at: int | None = None, new_id: str | None = None) -> Trace:
    """A new trace whose messages are `source`'s main path up to message `at` (default:
    its head), committed as one `create` step that names where it came from (see
    `agentfs/store/fork.py:fork_trace`). The source's pending edits are committed
    first; the source is not changed otherwise. `new_id` defaults to
    `SOURCE-fork-N`."""
    workspace = source.workspace
    with source.lock():
        source.reload()
        source.recover()
        if at is None:
            at = source.meta.head
            if at is None:
                raise AgentfsError(f"trace {source.id!r} has no messages to fork")
        taken = set(workspace.trace_ids())
        if new_id in taken:
            raise TraceExists(f"trace {new_id!r} already exists",
                              hint="choose another id for the fork")
        new_id = new_id or default_fork_id(source.id, taken)
        with Trace(workspace, source.repo, new_id).lock():
            return fork_trace(source, new_id, at)


def edit_message(trace: Trace, sequence: int, text: str) -> Edited:
    """Replace message `sequence`'s text as a person editing its file would, and
    commit it the way their edit is committed: `recover` (`agentfs/store/recovery.py`)
    finds the change and makes it an `edit` step, with the refusals a hand edit
    meets. A Markdown file keeps its frontmatter lines byte for byte; a JSON
    file's `content` is replaced (parsed as JSON when it held JSON data).

    Pending changes under the trace are committed first (their own `edit`). A
    refused edit puts the file's bytes back: nothing is left uncommitted.

    Raises:
      TraceNotFound: the trace has no message `sequence` in its files.
      TraceLocked: a run or another command holds the trace.
      AgentfsError: the edit is refused (the recovery's message and hint).
    """
    with trace.lock():
        trace.reload()
        trace.recover()
        message = trace.messages(refresh=True).get(sequence)
        if message is None:
            raise TraceNotFound(f"trace {trace.id!r} has no message #{sequence} in its files",
                                hint=f"agentfs show {trace.id} --all lists them")
        path = trace.message_path(message)
        before = path.read_bytes()
        after = _edited_bytes(path.name, message, before, text)
        if after == before:
            return Edited(trace.rel(path), committed=False)
        atomic_write(path, after, tmp_dir=trace.tmp_dir, sync_dir=trace.repo.durable)
        try:
            trace.recover()
        except AgentfsError as exc:
            atomic_write(path, before, tmp_dir=trace.tmp_dir, sync_dir=trace.repo.durable)
            trace.reload()
            exc.hint = f"{trace.rel(path)} has its text of before again; send another text"
            raise
    return Edited(trace.rel(path), committed=True)


def _edited_bytes(name: str, message: Message, before: bytes, text: str) -> bytes:
    """The file `name` with its text replaced, as an editor would save it."""
    if message.file_ext == "md":
        try:
            return utf8(replace_body(before.decode(), text), name)
        except FrontmatterError as exc:
            raise MessageFileError(name, exc.message, hint=exc.hint) from None
    content: object = text
    if not isinstance(message.content, str):
        try:
            content = json.loads(text)
        except ValueError as exc:
            raise MessageFileError(name, f"holds JSON data, and the new text is not JSON: "
                                   f"{exc}", hint="send JSON, or edit the file") from None
    fields = json.loads(before)
    fields["content"] = content
    return utf8(json.dumps(fields, indent=2, ensure_ascii=False) + "\n", name)
