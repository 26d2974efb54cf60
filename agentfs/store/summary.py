"""A trace's summary for the trace list: `.git/agentfs/summaries/<trace>/<digest>.json`.

The trace list (`agentfs status`, `GET /api/traces`) shows per trace a title,
how many message files it has, whether its head is a final answer and when its
last step was, without reading a message file. Each commit on `main` through
`agentfs/store/trace.py:Trace.commit_step` brings the summary up to date from
the messages it committed (O(1) per step); the list reads it back.

It is derived data, like the parse cache: never committed, not fsynced, and
valid only for the exact bytes of `trace.json` it was written beside: the file
is named after their digest, so a `trace.json` changed any other way (a hand
edit, a checkout, a pull, an older agentfs) finds no summary, and a missing or
damaged one is built again from the message file names and the two files it
needs (the head, the first user message): `build_summary`. An edit of a message
file that leaves `trace.json` alone is committed by recovery, which forgets the
summary (`forget`). Each step writes a file of a new name and removes the
previous one: renaming over an existing file would make ext4 flush the new
one's data at once (its `auto_da_alloc`), about 8 ms a step measured here.

This module imports neither pydantic nor YAML until it has to build one.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentfs.store.atomic import replace_derived

if TYPE_CHECKING:
    from agentfs.store.message_dir import MessageDir
    from agentfs.store.messages import Message
    from agentfs.store.workspace import Workspace

__all__ = ["TITLE_LENGTH", "Summary", "SummaryFile", "build_summary", "listed_summary", "title_of"]

#: Bumped when the file's fields change: an older file is built again (2: the count of
#: the model's turns moved to `trace.json`'s `iterations`).
VERSION = 2
#: Characters of the first user message's first line kept as the title.
TITLE_LENGTH = 80


@dataclass(frozen=True)
class Summary:
    """What the trace list shows of a trace beside `trace.json`'s own fields."""

    title: str | None  # first line of the first user message (None: no user message yet)
    messages: int  # message files in messages/ (on the path or off it)
    highest: int  # the highest sequence counted: later steps count only newer files
    final: bool  # the head is a final answer (`agentfs/store/history.py:is_final_answer`)
    last_activity: str | None  # when the last step was committed (ISO 8601 UTC)

    def after(self, messages: Iterable[Message], *, final: bool, at: str) -> Summary:
        """This summary once a step committed `messages` (new ones counted, rewrites
        not) and left a head that is a final answer or not."""
        new = [m for m in messages if m.sequence > self.highest]
        return replace(
            self, messages=self.messages + len(new),
            highest=max([self.highest, *(m.sequence for m in new)]),
            title=self.title if self.title is not None else title_of(new),
            final=final, last_activity=at,
        )


def title_of(messages: Iterable[Message]) -> str | None:
    """The first line of the first user message a person wrote among `messages`."""
    for message in messages:
        if message.role == "user" and not message.synthetic:
            line = next((ln.strip() for ln in message.text.splitlines() if ln.strip()), "")
            return line[:TITLE_LENGTH]
    return None


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class SummaryFile:
    """The summary of one trace: a folder holding (normally) one file, named after
    the digest of the `trace.json` it describes."""

    def __init__(self, folder: Path, tmp_dir: Path) -> None:
        self.folder = folder
        self.tmp_dir = tmp_dir

    def read(self, meta_bytes: bytes) -> Summary | None:
        """The summary, if one was written beside these bytes of `trace.json`."""
        try:
            data = json.loads((self.folder / _name(meta_bytes)).read_bytes())
        except (OSError, ValueError, RecursionError):
            return None
        if not isinstance(data, dict) or data.get("version") != VERSION:
            return None
        return _from_json(data)

    def write(self, summary: Summary, meta_bytes: bytes, *, replaces: bytes | None) -> None:
        """Keep `summary` for these bytes of `trace.json`, and drop the one kept for
        `replaces` (the bytes it had before; None: drop every other one)."""
        record = {"version": VERSION, **asdict(summary)}
        name = _name(meta_bytes)
        replace_derived(self.folder / name, json.dumps(record, ensure_ascii=False).encode(),
                        self.tmp_dir)
        stale = [_name(replaces)] if replaces is not None else self._names()
        for old in stale:
            if old != name:
                (self.folder / old).unlink(missing_ok=True)

    def forget(self) -> None:
        """Drop the summary: the next reader builds it again."""
        for name in self._names():
            (self.folder / name).unlink(missing_ok=True)

    def _names(self) -> list[str]:
        try:
            return os.listdir(self.folder)
        except (FileNotFoundError, NotADirectoryError):
            return []


def build_summary(message_dir: MessageDir, head: int | None, *, at: str | None) -> Summary:
    """The summary of the message files as they are: their names, the head's file and
    the first user messages' (a file that cannot be read counts as no title, or as
    a head that is not a final answer: `agentfs run` and `agentfs doctor` report it)."""
    from agentfs.errors import AgentfsError
    from agentfs.store.history import is_final_answer

    roles = message_dir.roles()
    title = None
    for sequence in (s for s, role in roles.items() if role == "user"):
        try:
            message = message_dir.one(sequence)
        except AgentfsError:
            continue
        title = title_of([message] if message is not None else [])
        if title is not None:
            break
    try:
        last = message_dir.one(head) if head is not None else None
    except AgentfsError:
        last = None
    return Summary(title=title, messages=len(roles), highest=max(roles, default=0),
                   final=last is not None and is_final_answer(last), last_activity=at)


def listed_summary(file: SummaryFile, workspace: Workspace, trace_id: str, meta_bytes: bytes,
                   *, head: int | None, at: str | None) -> Summary:
    """The summary the trace list shows: the one kept in `file` beside these bytes of
    `trace.json`, else built now and kept (`at`: the last activity to record then,
    as well as can be told without Git, e.g. when trace.json was written)."""
    summary = file.read(meta_bytes)
    if summary is None:
        from agentfs.store.message_dir import MessageDir
        from agentfs.store.workspace import MESSAGES_DIR

        messages = MessageDir(workspace.trace_dir(trace_id) / MESSAGES_DIR,
                              workspace.parse_cache(trace_id), file.tmp_dir, durable=False,
                              names_path=workspace.folder_names(trace_id))
        summary = build_summary(messages, head, at=at)
        file.write(summary, meta_bytes, replaces=None)
    return summary


def _name(meta_bytes: bytes) -> str:
    return hashlib.blake2b(meta_bytes, digest_size=16).hexdigest() + ".json"


def _from_json(data: dict[str, Any]) -> Summary | None:
    title, at = data.get("title"), data.get("last_activity")
    messages, highest, final = data.get("messages"), data.get("highest"), data.get("final")
    if not (isinstance(title, str | None) and isinstance(at, str | None)
            and type(messages) is int and type(highest) is int and type(final) is bool):
        return None
    return Summary(title=title, messages=messages, highest=highest, final=final,
                   last_activity=at)
