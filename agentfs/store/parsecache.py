"""Parsed message files kept across processes, so a long trace opens fast.

Parsing YAML frontmatter costs about 150 µs per file: 1.5 s for a trace of
10,000 messages, paid again by every `agentfs run`. Parsed messages are kept
per folder of `messages/`, in `.git/agentfs/cache/<trace>.parsed/<folder>.pickle`
(`_loose.pickle` for files directly in `messages/`), with each file's stat stamp
(mtime, ctime, size, inode); the next process reuses every entry whose file
still has that stamp. A folder's file is loaded when a read first wants many of
its files, so a read of a few folders (the path of a compressed trace, a page of
a view) loads those, not the whole trace, and a read of one file (a trace's head
for the trace list) parses that file. It is derived data: deleting it only costs
one slow load, and an unreadable or outdated file is ignored.

A file changed within the same clock tick as the cache was written could
keep its stamp; as Git does for its index ("racily clean" entries), an
entry whose file is not older than the cache file is not trusted.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Container
from pathlib import Path
from typing import Any

import pydantic

from agentfs.store.atomic import purge_stale_temps, replace_derived
from agentfs.store.stamps import Stamp

__all__ = ["SAVE_AFTER", "ParseCache", "load", "save"]

#: Bumped when what is pickled changes shape (the versions below are checked too).
FORMAT = 6
#: A folder's file is loaded for a read of this many of its files, and written again
#: once this many of its entries changed.
SAVE_AFTER = 32
#: The file of the message files directly in `messages/` (no folder's name).
_LOOSE = "_loose"

#: A folder's entries: file name → (its stamp, its parsed message).
Entries = dict[str, tuple[Stamp, Any]]


class ParseCache:
    """The parsed message files of one trace's `messages/`, by folder ("" for files
    directly in it) and file name. A folder's saved file is loaded the first time a
    read wants many of its files (`SAVE_AFTER`): a read of one or a few (a trace's
    head, its title) parses them instead of loading a thousand. `save` writes the
    loaded folders that changed enough."""

    def __init__(self, folder: Path) -> None:
        self.dir = folder
        self._folders: dict[str, Entries] = {}  # loaded from their files, and added to
        self._strays: dict[str, Entries] = {}  # parsed while their folder was not loaded
        self._changed: dict[str, int] = {}  # folder → entries changed since loaded or saved

    def entries(self, folder: str, *, wanted: int) -> Entries:
        """The entries of `folder` for a read of `wanted` of its files: its saved
        file's (loaded now if the read is large) with those parsed since, or, for a
        small read of a folder not loaded, those parsed in this process."""
        loaded = self._folders.get(folder)
        if loaded is None and wanted >= SAVE_AFTER:
            loaded = self._folders[folder] = load(self._path(folder))
            strays = self._strays.pop(folder, {})
            loaded.update(strays)  # parsed by this process: as fresh as any
            if strays:
                self._changed[folder] = self._changed.get(folder, 0) + len(strays)
        if loaded is not None:
            return loaded
        return self._strays.setdefault(folder, {})

    def put(self, folder: str, name: str, stamp: Stamp, message: Any) -> None:
        loaded = self._folders.get(folder)
        if loaded is None:
            self._strays.setdefault(folder, {})[name] = (stamp, message)
            return
        loaded[name] = (stamp, message)
        self._changed[folder] = self._changed.get(folder, 0) + 1

    def held(self) -> int:
        """How many parsed files it holds."""
        return (sum(len(entries) for entries in list(self._folders.values()))
                + sum(len(entries) for entries in list(self._strays.values())))

    def keep_only(self, folder: str, names: Container[str]) -> None:
        """Drop the entries of `folder` whose file is not among `names` (gone)."""
        _drop_missing(self._strays.get(folder, {}), names)
        gone = _drop_missing(self._folders.get(folder, {}), names)
        if gone:
            self._changed[folder] = self._changed.get(folder, 0) + gone

    def save(self) -> None:
        """Write each loaded folder with at least `SAVE_AFTER` entries changed since it
        was loaded or written (fewer are parsed again by the next process: cheaper
        than writing a folder's file at every step)."""
        for folder, changed in list(self._changed.items()):
            if changed >= SAVE_AFTER:
                self._changed.pop(folder, None)
                # a copy: another thread of a server may add to the folder meanwhile
                save(self._path(folder), dict(self._folders[folder]))
                # the one file of every folder an older agentfs kept: never read again
                self.dir.with_suffix(".pickle").unlink(missing_ok=True)

    def _path(self, folder: str) -> Path:
        return self.dir / f"{folder or _LOOSE}.pickle"


def _drop_missing(entries: Entries, names: Container[str]) -> int:
    """Drop the entries not among `names`; returns how many."""
    stale = [name for name in list(entries) if name not in names]  # a copy: see `save`
    for name in stale:
        del entries[name]
    return len(stale)


def load(path: Path) -> Entries:
    """Trusted entries of the saved file at `path`; {} if none."""
    try:
        with open(path, "rb") as f:
            written_ns = os.fstat(f.fileno()).st_mtime_ns
            data = pickle.load(f)  # noqa: S301 -- agentfs' own file in .git/, as trusted as hooks
    except FileNotFoundError:
        return {}
    except Exception:  # noqa: BLE001 — any damage or version skew: start afresh
        return {}
    if not isinstance(data, dict) or data.get("key") != _key():
        return {}
    entries = data.get("entries")
    if not isinstance(entries, dict):
        return {}
    return {name: entry for name, entry in entries.items() if entry[0][0] < written_ns}


def save(path: Path, entries: Entries) -> None:
    """Replace the saved file at `path` (atomically, not fsynced: it can be rebuilt;
    its temp file beside the trace's folder of them, among no names of its own)."""
    tmp_dir = path.parent.parent
    purge_stale_temps(tmp_dir)  # left by processes killed while saving
    data = pickle.dumps({"key": _key(), "entries": entries}, protocol=pickle.HIGHEST_PROTOCOL)
    replace_derived(path, data, tmp_dir)


def _key() -> tuple[object, ...]:
    """What a cache must have been written by to be read."""
    from agentfs import __version__  # at call time: agentfs/__init__ imports the store

    return ("agentfs-parse-cache", FORMAT, __version__, pydantic.VERSION)
