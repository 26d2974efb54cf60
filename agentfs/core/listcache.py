"""The trace list with each trace's row kept while the files it was made from keep
their stamps: in a long-lived process (`agentfs serve`) and, through a file beside
the other caches, from one `agentfs status` to the next.

A row (`agentfs/core/status.py:TraceStatus`, kept as its JSON text, what both
`--json` and the HTTP API print) comes from `trace.json` (and the summary named after
its digest), the trace's folder, its `inbox/` and `inbox/.rejected/`,
`approval.json` and whether its lock is held. A kept row costs a `stat` of each
of those and the lock's check: far less than reading and parsing them, which made
the list of 1,000 traces miss its budget (docs/performance.md). A file that changed
in the last clock ticks may change again without its stamp changing (as Git says
of its index's "racily clean" entries): such a trace's row is made again each time,
and so is a row whose stamps moved while it was being made (a run took the lock).

The saved rows (`agentfs/store/workspace.py:Workspace.trace_list`) are derived
data like the parse cache: a line per trace (id, stamp, row's JSON text) under a
head that names the prices, the format and a digest of the lines; replaced
atomically, not fsynced, never committed, and ignored whole when unreadable,
damaged, or written for other prices or by another version of the row (`_key`).
A row whose stamps no longer match is made again.
Rows of traces that are gone are dropped at every list, so the cache holds at
most one row per trace.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentfs import __version__
from agentfs.prices import PriceTable
from agentfs.store.approval import APPROVAL_FILE
from agentfs.store.atomic import replace_derived
from agentfs.store.inbox import REJECTED_DIR, inbox_names
from agentfs.store.stamps import RACY_NS, settled, stamp_of
from agentfs.store.tracelock import is_locked
from agentfs.store.workspace import INBOX_DIR, TRACE_FILE, Workspace

if TYPE_CHECKING:
    from agentfs.core.status import RowMaker

__all__ = ["FORMAT", "ListCache", "Listing", "Row"]

#: Bumped when the saved file, a row or its stamp changes shape
#: (tests/core/test_listcache.py pins a row's shape, so a change to
#: `TraceStatus.record()` is caught). 2: the folders a row watches (`_WATCHED`).
FORMAT = 2
#: A row as `--json` and the API give it: `TraceStatus.record()`.
Row = dict[str, Any]
#: Whether the lock is held ("L" or "-"), then `mtime.ctime.size.inode` of each
#: path the row was made from ("-" where there is none), joined by spaces.
_Stamp = str
#: How the saved rows start: this, the key (`_key`) and a digest of the rest.
_MAGIC = "agentfs trace list"
#: What comes before each watched folder's path and stamp in a row's stamp.
_WATCHED = " @"


@dataclass(frozen=True)
class Listing:
    """The trace list: each trace's row as JSON text (what `--json` and the API
    print, joined without being parsed again), and the workspace's inbox files."""

    ids: list[str]
    texts: list[str]  # each trace's row, `json.dumps(TraceStatus.record())`
    inbox: list[str]  # files waiting in inbox/ to start new traces
    inbox_rejected: list[str]  # files put aside in inbox/.rejected/

    def rows(self) -> list[Row]:
        """The rows, parsed (new dicts each call; in one document: one call to the
        parser instead of one per row)."""
        rows: list[Row] = json.loads(f"[{','.join(self.texts)}]")
        return rows

    @property
    def broken(self) -> bool:
        """Whether a trace's trace.json cannot be read (its row has an `error`). Only
        as a key can `"error":` stand in JSON text (in a string its quote is escaped)."""
        return any("error" in json.loads(text) for text in self.texts if '"error":' in text)

    def document(self, workspace: str,
                 extra: Callable[[str], dict[str, Any]] | None = None) -> str:
        """The list as one JSON document: `{"workspace", "traces", "inbox",
        "inbox_rejected"}`, the rows' texts joined as they are; `extra(trace)` gives
        fields added to each row (the server's `server_run`)."""
        texts = self.texts if extra is None else [
            f"{text[:-1]}, {json.dumps(extra(trace_id))[1:]}"
            for trace_id, text in zip(self.ids, self.texts, strict=True)]
        head = json.dumps({"workspace": workspace})[:-1]
        tail = json.dumps({"inbox": self.inbox, "inbox_rejected": self.inbox_rejected})[1:]
        return f'{head}, "traces": [{", ".join(texts)}], {tail}'


class ListCache:
    """The trace list of one workspace, with its rows kept between lists and, when
    `saved` is given, in that file between processes."""

    def __init__(self, workspace: Workspace, prices: PriceTable, *,
                 saved: Path | None = None) -> None:
        self.workspace = workspace
        self.prices = prices
        self.saved = saved
        self._make: RowMaker | None = None
        self._traces = str(workspace.traces_dir)
        self._locks = str(workspace.lock_dir)
        self._summaries = str(workspace.summary_path("_").parent)
        #: trace → (the stamp its row was made at, the row's JSON text)
        self._rows: dict[str, tuple[_Stamp, str]] = {}
        self._loaded = saved is None
        self._changed = False  # rows differ from the saved file
        self._racy_after = 0
        self._lock = threading.Lock()  # the server lists from several threads

    def listed(self) -> Listing:
        """Every trace's row (kept ones reused) and both kinds of inbox."""
        with self._lock:
            if not self._loaded:
                self._rows, self._loaded = self._load(), True
            self._racy_after = time.time_ns() - RACY_NS
            files = self.workspace.trace_files()
            ids = [trace_id for trace_id, _ in files]
            texts = [self._row(trace_id, meta) for trace_id, meta in files]
            gone = self._rows.keys() - set(ids)
            for trace_id in gone:
                del self._rows[trace_id]
            self._changed |= bool(gone)
        return Listing(ids, texts, *inbox_names(self.workspace.inbox_dir))

    def save(self) -> bool:
        """Write the rows to `saved` if they changed since it was read or written;
        True if it was written."""
        with self._lock:
            if self.saved is None or not self._changed:
                return False
            body = "".join(f"{trace_id}\t{stamp}\t{text}\n"
                           for trace_id, (stamp, text) in self._rows.items()).encode()
            head = json.dumps([_MAGIC, self._key(), _digest(body)]).encode()
            self._changed = not replace_derived(self.saved, head + b"\n" + body,
                                                self.saved.parent)
            return not self._changed

    def _row(self, trace_id: str, meta: os.stat_result) -> str:
        kept = self._rows.get(trace_id)
        before = kept[0].split(_WATCHED) if kept is not None else None
        stamp = self._stamp(trace_id, meta, before)
        if stamp is not None and kept is not None and kept[0] == stamp:
            return kept[1]
        text, watched = self._made(trace_id)
        after = self._stamp(trace_id, None, [""] + list(watched))
        if stamp is not None and after is not None \
                and after.split(_WATCHED)[0] == stamp.split(_WATCHED)[0]:
            self._rows[trace_id] = (after, text)
            self._changed = True
        elif self._rows.pop(trace_id, None) is not None:
            self._changed = True
        return text

    def _made(self, trace_id: str) -> tuple[str, tuple[str, ...]]:
        """The row made afresh from the trace's files, as JSON text, and the folders
        below the trace's it also depends on (`TraceStatus.watched`)."""
        if self._make is None:
            # Imported here: a list whose rows are all kept does without reading
            # trace.json, summaries and prices (docs/performance.md).
            from agentfs.core.status import row_maker

            self._make = row_maker(self.workspace, self.prices)
        row = self._make(trace_id)
        # ASCII: printable on any terminal encoding, and a lone surrogate survives
        return json.dumps(row.record()), row.watched

    def _stamp(self, trace_id: str, meta: os.stat_result | None,
               kept: list[str] | None = None) -> _Stamp | None:
        """What the row was made from, or None if one of its files may still change
        unseen (or `trace.json` is gone). `meta`: the `stat` of `trace.json`, if just
        taken. `kept`: the kept row's stamp split at `_WATCHED`, whose watched folders
        (`TraceStatus.watched`) are stamped too. A path that the kept stamp found
        absent is not looked at: had it appeared, the folder holding it, whose stamp
        is part of this one, would have changed."""
        folder = f"{self._traces}/{trace_id}"
        inbox = f"{folder}/{INBOX_DIR}"
        before = kept[0].split(" ") if kept is not None and kept[0] else None
        parts = ["L" if is_locked(self._locks, trace_id) else "-"]
        # (path, whether its folder is in the stamp before it)
        # The summary's folder too: an edit committed without a change to trace.json
        # drops the summary (`SummaryFile.forget`), and the title may change with it.
        for path, held in ((f"{folder}/{TRACE_FILE}", False), (folder, False), (inbox, True),
                           (f"{inbox}/{REJECTED_DIR}", True), (f"{folder}/{APPROVAL_FILE}", True),
                           (f"{self._summaries}/{trace_id}", False)):
            if held and before is not None and before[len(parts)] == "-":
                parts.append("-")
                continue
            # followed: a linked trace folder's row says it is refused while it stays
            part = self._stamp_of(path, meta if len(parts) == 1 else None)
            if part is None:
                return None
            parts.append(part)
        if parts[1] == "-":
            return None
        for watched in [] if kept is None else [part.partition(" ")[0] for part in kept[1:]]:
            part = self._stamp_of(f"{folder}/{watched}")
            if part is None:
                return None
            parts[-1] += f"{_WATCHED}{watched} {part}"
        return " ".join(parts)

    def _stamp_of(self, path: str, found: os.stat_result | None = None) -> str | None:
        """One path's part of a stamp ("-" if there is none), from `found` if its
        `stat` was just taken; None if it may still change unseen."""
        try:
            found = found or os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return "-"
        except OSError:
            return None
        if not settled(max(found.st_mtime_ns, found.st_ctime_ns), self._racy_after):
            return None
        return "{}.{}.{}.{}".format(*stamp_of(found))

    def _key(self) -> list[object]:
        """What the saved rows were made with besides their files: the shape of the
        file and of a row, the agentfs that made them (its rules, its messages), the
        prices their costs come from and the workspace's place (errors name paths)."""
        return [FORMAT, __version__, self.prices.fingerprint(), str(self.workspace.root)]

    def _load(self) -> dict[str, tuple[_Stamp, str]]:
        """The rows saved in `saved` for these prices and this row's shape; {} if none
        or the file cannot be used (every row is then made again)."""
        assert self.saved is not None
        try:
            head, _, body = self.saved.read_bytes().partition(b"\n")
            if json.loads(head) != [_MAGIC, self._key(), _digest(body)]:
                return {}
            rows: dict[str, tuple[_Stamp, str]] = {}
            for line in body.decode().split("\n")[:-1]:  # not splitlines: U+2028 is text
                trace_id, stamp, text = line.split("\t")
                rows[trace_id] = (stamp, text)
            return rows
        except (OSError, ValueError):
            return {}




def _digest(body: bytes) -> str:
    """What tells a saved file's rows are whole: they are never parsed again before
    being printed."""
    return hashlib.blake2b(body, digest_size=16).hexdigest()
