"""The trace list of a long-lived process (`agentfs serve`): each trace's row is kept
and given again while the files it was made from keep their stamps.

A row (`agentfs/core/status.py:TraceStatus`) comes from `trace.json` (and the summary
named after its digest), the trace's folder, its `inbox/` and `inbox/.rejected/`,
`approval.json` and whether its lock is held. A kept row costs a `stat` of each of
those and the lock's check: far less than reading and parsing them, which made the
list of 1,000 traces miss its budget (docs/performance.md). A file that changed in
the last clock ticks may change again without its stamp changing (as Git says of
its index's "racily clean" entries): such a trace's row is made again each time.
Rows of traces that are gone are dropped at every list, so the cache holds at most
one row per trace.
"""

from __future__ import annotations

import os
import time

from agentfs.core.status import RowMaker, TraceStatus, WorkspaceStatus, workspace_status
from agentfs.prices import PriceTable
from agentfs.store.approval import APPROVAL_FILE
from agentfs.store.inbox import REJECTED_DIR
from agentfs.store.message_dir import RACY_NS, settled, stamp_of
from agentfs.store.tracelock import is_locked
from agentfs.store.workspace import INBOX_DIR, TRACE_FILE, Workspace

__all__ = ["ListCache"]

_Stamp = tuple[object, ...]


class ListCache:
    """The trace list of one workspace, with its rows kept between lists."""

    def __init__(self, workspace: Workspace, prices: PriceTable) -> None:
        self.workspace = workspace
        self.prices = prices
        self._traces = str(workspace.traces_dir)
        self._rows: dict[str, tuple[_Stamp, TraceStatus]] = {}
        self._racy_after = 0

    def status(self) -> WorkspaceStatus:
        """What `agentfs/core/status.py:workspace_status` gives, with kept rows reused."""
        self._racy_after = time.time_ns() - RACY_NS
        listed = workspace_status(self.workspace, self.prices, rows=self._row)
        for gone in self._rows.keys() - {row.trace for row in listed.traces}:
            del self._rows[gone]
        return listed

    def _row(self, trace_id: str, make: RowMaker) -> TraceStatus:
        stamp = self._stamp(trace_id)
        kept = self._rows.get(trace_id)
        if stamp is not None and kept is not None and kept[0] == stamp:
            return kept[1]
        row = make(trace_id)
        if stamp is None:
            self._rows.pop(trace_id, None)
        else:
            self._rows[trace_id] = (stamp, row)
        return row

    def _stamp(self, trace_id: str) -> _Stamp | None:
        """What the row was made from, or None if one of its files may still change
        unseen (or `trace.json` is gone)."""
        folder = f"{self._traces}/{trace_id}"
        inbox = f"{folder}/{INBOX_DIR}"
        parts: list[object] = [is_locked(self.workspace.lock_dir, trace_id)]
        for path in (f"{folder}/{TRACE_FILE}", folder, inbox, f"{inbox}/{REJECTED_DIR}",
                     f"{folder}/{APPROVAL_FILE}"):
            try:
                found = os.lstat(path)
            except FileNotFoundError:
                parts.append(None)
                continue
            except OSError:
                return None
            if not settled(max(found.st_mtime_ns, found.st_ctime_ns), self._racy_after):
                return None
            parts.append(stamp_of(found))
        return None if parts[1] is None else tuple(parts)
