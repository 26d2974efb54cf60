"""What recovery remembers between runs of one process: the folders of a trace's
`messages/` found to hold what a commit holds (`agentfs/store/recovery.py:recover`).

Bounded, least recently used trace out first: a server or watcher that touches
thousands of traces keeps the memory of the last few hundred. Forgetting is
always safe; a forgotten folder is only checked file by file again.

The memory of a trace is also saved beside its parse cache, in the folder
`agentfs/store/workspace.py:Workspace.clean_marks`, so a new process (each
`agentfs run`) starts from it: `folders.json` keeps each folder as its tree id
and a digest of its files' stamps (about a hundred bytes whatever the folder
holds, so reading it costs the number of folders), and `stamps-<folder>.json` the
stamps themselves, read only for a folder whose digest no longer matches: the
files that kept their stamps still hold the remembered tree's blobs, and only
the others are read (`agentfs/store/recovery.py:_since_remembered`). Derived
data like the parse cache: never committed, not fsynced, ignored when
unreadable.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import threading
from collections import OrderedDict
from pathlib import Path

from agentfs.store.atomic import purge_stale_temps, replace_derived
from agentfs.store.stamps import Stamp

__all__ = ["CleanFolders", "Remembered", "load_stamps", "save_stamps", "stamps_digest"]

#: A clean folder: its tree id in the commit, and the digest of its files' stamps then.
Remembered = tuple[bytes, bytes]
#: Bumped when the saved files change shape.
FORMAT = 1
#: The file of the digests in a trace's folder of marks.
FOLDERS = "folders.json"


def stamps_digest(stamps: dict[str, Stamp]) -> bytes:
    """A folder's file names and their stamps (mtime, ctime, size, inode), as 16 bytes."""
    return hashlib.sha1(pickle.dumps(stamps, protocol=4), usedforsecurity=False).digest()


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

    def load(self, trace_dir: str, marks: Path) -> None:
        """Take the folders saved in `marks` (by `save`) when none of `trace_dir` are held."""
        with self._lock:
            if trace_dir in self._by_trace:
                return
        try:
            data = json.loads((marks / FOLDERS).read_bytes())
            folders = {os.path.join(trace_dir, name): (bytes.fromhex(tree), bytes.fromhex(digest))
                       for name, (tree, digest) in data["folders"].items()} \
                if data.get("format") == FORMAT else {}
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return  # none saved, or damaged: every folder is checked file by file once
        with self._lock:
            self._by_trace.setdefault(trace_dir, folders)
            self._by_trace.move_to_end(trace_dir)
            while len(self._by_trace) > self.traces:
                self._by_trace.popitem(last=False)

    def save(self, trace_dir: str, marks: Path) -> None:
        """Save the folders held for `trace_dir` in `marks` (written again only when they
        differ from what is there)."""
        with self._lock:
            folders = dict(self._by_trace.get(trace_dir, {}))
        data = json.dumps({"format": FORMAT, "folders": {
            os.path.relpath(folder, trace_dir): [tree.hex(), digest.hex()]
            for folder, (tree, digest) in sorted(folders.items())
        }}).encode()
        purge_stale_temps(marks)  # left by killed processes (no saved name starts with digits)
        _write(marks / FOLDERS, data)

    def trace_dirs(self) -> list[str]:
        """The traces remembered, least recently used first."""
        with self._lock:
            return list(self._by_trace)


def save_stamps(marks: Path, folder: str, tree: bytes, stamps: dict[str, Stamp]) -> None:
    """Save in `marks` the stamps of the files of `folder` (a name in `messages/`)
    found to hold the tree `tree`."""
    _write(marks / f"stamps-{folder}.json", json.dumps(
        {"format": FORMAT, "tree": tree.hex(), "stamps": stamps}).encode())


def load_stamps(marks: Path, folder: str, tree: bytes) -> tuple[bytes, dict[str, Stamp]] | None:
    """(`tree`, the stamps `save_stamps` saved with it for `folder`), or None (none
    saved with that tree, or unreadable)."""
    try:
        data = json.loads((marks / f"stamps-{folder}.json").read_bytes())
        if data.get("format") != FORMAT or data.get("tree") != tree.hex():
            return None
        return tree, {name: (int(m), int(c), int(size), int(ino))
                      for name, (m, c, size, ino) in data["stamps"].items()}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def _write(path: Path, data: bytes) -> None:
    """Replace a derived file unless it holds `data` already."""
    try:
        if path.read_bytes() == data:
            return
    except OSError:
        path.parent.mkdir(parents=True, exist_ok=True)
    replace_derived(path, data, path.parent)
