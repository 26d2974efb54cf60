"""What recovery remembers between runs of one process: the folders of a trace's
`messages/` found to hold what a commit holds (`agentfs/store/recovery.py:recover`).

Bounded, least recently used trace out first: a server or watcher that touches
thousands of traces keeps the memory of the last few hundred. Forgetting is
always safe; a forgotten folder is only checked file by file again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from agentfs.store.parsecache import Stamp

__all__ = ["CleanFolders", "Remembered"]

#: A clean folder: its tree id in the commit, and the stamps of its files then.
Remembered = tuple[bytes, dict[str, Stamp]]


class CleanFolders:
    """Clean folders by trace directory, then by folder path; at most `traces` traces."""

    def __init__(self, traces: int = 256) -> None:
        if traces < 1:
            raise ValueError("CleanFolders keeps at least one trace")
        self.traces = traces
        self._by_trace: OrderedDict[str, dict[str, Remembered]] = OrderedDict()
        self._lock = threading.Lock()  # runs of several traces recover on their threads

    def get(self, trace_dir: str, folder: str) -> Remembered | None:
        with self._lock:
            folders = self._by_trace.get(trace_dir)
            if folders is None:
                return None
            self._by_trace.move_to_end(trace_dir)
            return folders.get(folder)

    def forget(self, trace_dir: str, folder: str) -> None:
        with self._lock:
            folders = self._by_trace.get(trace_dir)
            if folders is not None:
                folders.pop(folder, None)

    def remember(self, trace_dir: str, folder: str, clean: Remembered) -> None:
        with self._lock:
            folders = self._by_trace.setdefault(trace_dir, {})
            self._by_trace.move_to_end(trace_dir)
            folders[folder] = clean
            while len(self._by_trace) > self.traces:
                self._by_trace.popitem(last=False)

    def trace_dirs(self) -> list[str]:
        """The traces remembered, least recently used first."""
        with self._lock:
            return list(self._by_trace)
