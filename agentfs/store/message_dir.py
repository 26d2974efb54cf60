"""One trace's `messages/` folder: listing, parsing (with caches) and writing.

Parsed files are kept per process and on disk (`agentfs/store/parsecache.py`),
keyed by each file's stat, so a long trace opens fast and a run re-reads only
what changed. Message files are read through `agentfs/store/messages.py`, the
one reader and writer of their format.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from agentfs.errors import MessageFileError
from agentfs.store import parsecache
from agentfs.store.atomic import atomic_write
from agentfs.store.gcpause import gc_paused
from agentfs.store.inbox import is_ignored_name
from agentfs.store.messages import Message, load_message, render_message

__all__ = ["COARSE_NS", "RACY_NS", "DirKey", "MessageDir"]

#: A file modified this recently (ns) may change again without its stamp changing;
#: with whole-second timestamps (a coarse filesystem), this much more.
RACY_NS = 100_000_000
COARSE_NS = 2_000_000_000

DirKey = tuple[int, int] | None

#: Parsed message files of each messages directory this process has read.
_parsed: dict[str, dict[str, tuple[parsecache.Stamp, Message]]] = {}


class MessageDir:
    """The message files of one trace, by sequence."""

    def __init__(self, path: Path, cache_path: Path, tmp_dir: Path, *, durable: bool) -> None:
        self.path = path
        self.cache_path = cache_path
        self.tmp_dir = tmp_dir
        self.durable = durable
        # Parsed files by name, shared by every MessageDir of this folder in the process.
        self._cache = _parsed.setdefault(str(path), {})
        self._snapshot: dict[int, Message] | None = None
        self._snapshot_key: DirKey = None
        # Recovery stats every file anyway; the next scan reuses that listing if
        # the folder has not changed since: (folder key, listing).
        self._stat_hint: tuple[DirKey, dict[str, os.stat_result]] | None = None

    def messages(self, *, refresh: bool = False) -> dict[int, Message]:
        """Every message file by sequence (a copy).

        Only files whose stat changed are parsed again. Without `refresh`, the
        folder is not even listed while its mtime shows no file was added,
        removed or renamed (a run holding the lock writes the only new files);
        recovery refreshes, so in-place edits are seen by the next run.
        """
        return dict(self.current(refresh))

    def current(self, refresh: bool = False) -> dict[int, Message]:
        """The snapshot behind `messages()`, brought up to date (not a copy).

        While it stays the same object it only gains messages newer than all it
        holds; any other change makes a new one (what `agentfs/store/history.py:PathMemo`
        relies on)."""
        key = self.key()
        if not refresh and self._snapshot is not None and key == self._snapshot_key:
            return self._snapshot
        with gc_paused():
            return self._scan(key)

    def highest(self) -> int:
        """The highest sequence of any message file, or 0."""
        return next(reversed(self.current()), 0)

    def path_of(self, message: Message) -> Path:
        return self.path / message.file_name()

    def write(self, message: Message) -> Path:
        """Write one message file atomically, keeping the snapshot current."""
        path = self.path_of(message)
        self._stat_hint = None
        was_current = self._snapshot is not None and self._snapshot_key == self.key()
        atomic_write(path, render_message(message), tmp_dir=self.tmp_dir, sync_dir=self.durable)
        if was_current and self._snapshot is not None:
            newest = message.sequence > next(reversed(self._snapshot), 0)
            self._snapshot[message.sequence] = message
            if not newest:  # new messages come last; only a rewrite can be out of order
                self._snapshot = dict(sorted(self._snapshot.items()))
            self._snapshot_key = self.key()
        return path

    def hint(self, key: DirKey, listing: dict[str, os.stat_result]) -> None:
        """A listing of the folder someone just made (with its key), for the next scan."""
        self._stat_hint = (key, listing)

    def key(self) -> DirKey:
        """(inode, mtime) of the folder: changes when a file is added, removed or renamed."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_mtime_ns

    def _scan(self, key: DirKey) -> dict[int, Message]:
        if not self._cache:
            self._cache.update(parsecache.load(self.cache_path))
        found: dict[int, Message] = {}
        seen: set[str] = set()
        parsed = 0
        racy_after = time.time_ns() - RACY_NS
        hint, self._stat_hint = self._stat_hint, None
        listing = hint[1] if hint is not None and hint[0] == key else self._list()
        for name, st in listing.items():
            stamp = (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)
            cached = self._cache.get(name)
            if cached is not None and cached[0] == stamp:
                message = cached[1]
            else:
                message = load_message(self.path / name)
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
                    self.path / name,
                    f"sequence {message.sequence} is also used by "
                    f"{found[message.sequence].file_name()}",
                    hint="each sequence number may be used by one file only; rename one",
                )
            found[message.sequence] = message
        for stale in set(self._cache) - seen:
            del self._cache[stale]
        if parsed >= parsecache.SAVE_AFTER:
            parsecache.save(self.cache_path, self._cache)
        self._snapshot = dict(sorted(found.items()))
        self._snapshot_key = key
        return self._snapshot

    def _list(self) -> dict[str, os.stat_result]:
        """The message files and their stat (symlinks refused)."""
        listing: dict[str, os.stat_result] = {}
        try:
            entries = list(os.scandir(self.path))
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
