"""Refreshing a few entries of `.git/index` after agentfs commits them.

The index is shared by every process working in the workspace (other traces,
the user's `git`), so each update reads, patches and writes it while holding
Git's own `index.lock` (see `agentfs/store/git/lockfiles.py:GitLockFile`).

An index of `SPLIT_AT` entries or more is written as a split index
(`agentfs/store/git/splitindex.py`): `.git/index` holds only the entries that
differ from a shared index, which is written again once they are more than
`max_changes` of them, so a step writes a few kilobytes, not the whole index.
`core.splitIndex = false` keeps the index whole.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Self

from dulwich.index import IndexEntry, index_entry_from_stat

from agentfs.errors import GitStateError
from agentfs.store.git import rawindex
from agentfs.store.git.lockfiles import GitLockFile
from agentfs.store.git.splitindex import freshen, remove_expired, write_shared

#: An index of this many entries or more is written split.
SPLIT_AT = 1000


def max_changes(entries: int) -> int:
    """How many entries may differ from the shared index before it is written again.

    A step writes about the changed entries (half this, on average) plus the
    whole shared index once in this many steps: √(2·entries) balances the two.
    """
    return max(64, math.isqrt(2 * entries))


class IndexUpdate:
    """Holds Git's `index.lock` while a commit moves the branch, then writes the index.

    Taking the index lock *before* the ref moves (as `git commit` does) means a
    user's `git commit` can never read the new HEAD with the old index, and
    that `main` never moves while another agentfs process holds the lock: what
    HEAD holds, read under the lock, is what the index must hold.
    """

    def __init__(
        self, index_path: Path, state_dir: Path, *, durable: bool = False, split: bool = True
    ) -> None:
        self.index_path = index_path
        self.durable = durable
        self.split = split
        self._lock = GitLockFile(index_path, state_dir, durable=durable)
        self._current = rawindex.RawIndex(version=2)
        self._raw: rawindex.RawIndex | None = None
        self._data: bytes | None = None

    def __enter__(self) -> Self:
        """Take the lock and read the index.

        Raises:
            GitStateError: an index agentfs cannot read (a broken split index, a
                kind dulwich does not read either), found before anything is committed.
        """
        self._lock.acquire()
        try:
            self._current = _load_raw(self.index_path)
        except BaseException:
            self._lock.abort()
            raise
        return self

    def apply(self, changes: Mapping[bytes, IndexEntry | None]) -> None:
        """Set (or with None remove) entries; written into `index.lock` now, in place
        when the block ends. Call once.

        A file set where the index has a folder's entries (or a folder's entry set
        where it has a file) replaces them, as in the commit's tree: Git refuses an
        index holding both `a` and `a/b`.
        """
        assert self._data is None, "apply() is called once per lock"
        if not changes:
            return
        changes = _without_conflicts(changes, self._current.paths, self._current.has)
        self._raw = self._form(self._current.apply(changes))
        self._data = self._raw.encode()
        try:
            self._lock.write(self._data)
        except OSError as exc:  # os.write names no file: say which one
            path = str(self._lock.lock_path)
            raise OSError(exc.errno, exc.strerror or str(exc), path) from exc

    def refresh(self, found: Mapping[str, tuple[os.stat_result, bytes]]) -> None:
        """Record the stat of files found to hold the blob their index entry names
        (`path → (stat taken before reading, blob hex id)`), as `git update-index
        --refresh` does; entries that changed meanwhile, or whose mode differs, are
        left alone. Written when the block ends, like `apply` (call one of them)."""
        changes: dict[bytes, IndexEntry | None] = {}
        for path, (st, blob_id) in found.items():
            known = self._current.entry_stat(path.encode())
            if known is not None and known[1] == blob_id and known[0][4] == st.st_mode & 0o100:
                changes[path.encode()] = index_entry_from_stat(st, blob_id, mode=known[2])
        self.apply(changes)

    def _form(self, index: rawindex.RawIndex) -> rawindex.RawIndex:
        """`index` as it is written: whole, split against its shared index, or split
        against a new shared index (written here, before the index that names it)."""
        if not self.split:
            return index.unsplit() if index.base is not None else index
        if index.base is None and len(index.keys) < SPLIT_AT:
            return index
        if index.base is not None and len(index.delta) <= max_changes(len(index.keys)):
            freshen(self.index_path.parent, index.base[0])
            return index
        git_dir = self.index_path.parent
        sha = write_shared(git_dir, index.encode_shared(), durable=self.durable)
        remove_expired(git_dir, keep=sha)
        return index.rebased(sha)

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None and self._data is not None:
            self._lock.commit()
            if self._raw is not None:
                rawindex.remember(self.index_path, self._raw, self._data)
        else:
            self._lock.abort()


def _without_conflicts(
    changes: Mapping[bytes, IndexEntry | None],
    paths: Callable[[bytes], list[bytes]],
    has: Callable[[bytes], bool],
) -> Mapping[bytes, IndexEntry | None]:
    """`changes` plus the removal of the entries a set entry displaces: those below
    it (a file replaced a folder) and those at a folder above it (a folder replaced
    a file). `paths(prefix)` lists the index's paths starting with `prefix`, `has`
    says whether a path has an entry."""
    removed: dict[bytes, IndexEntry | None] = {}
    for path, entry in changes.items():
        if entry is None:
            continue
        displaced = paths(path + b"/")
        parts = path.split(b"/")
        for depth in range(1, len(parts)):
            folder = b"/".join(parts[:depth])
            if has(folder):
                displaced.append(folder)
        removed.update((p, None) for p in displaced if p not in changes)
    return {**changes, **removed} if removed else changes


def _load_raw(index_path: Path) -> rawindex.RawIndex:
    """The index, parsed (or from this process's cache); an empty one if there is none.

    Raises:
        GitStateError: the index is of a kind agentfs cannot read, with the way out.
    """
    try:
        index, _ = rawindex.load(index_path)
    except FileNotFoundError:
        return rawindex.RawIndex(version=2)
    except rawindex.BrokenSplit as exc:
        raise GitStateError(
            f"{index_path}: a split index agentfs cannot read ({exc})",
            hint="rebuild the index from HEAD with `git read-tree HEAD` "
            "(staged changes are lost), then try again",
        ) from None
    except rawindex.Unsupported as exc:
        if os.path.getsize(index_path) == 0:
            return rawindex.RawIndex(version=2)
        raise GitStateError(
            f"{index_path}: agentfs cannot read this Git index ({exc})",
            hint="run `git update-index --no-split-index` (or `git update-index "
            "--index-version 2`), then try again",
        ) from None
    return index


def staged_changes(
    index_path: Path, prefix: str, committed: Mapping[str, tuple[int, bytes]]
) -> list[tuple[str, str]]:
    """How the index differs from `committed` (path → (mode, blob hex id): the files
    below folder `prefix` at HEAD), as (path, what `git diff --cached` would show)."""
    try:
        index, _ = rawindex.load(index_path)
    except FileNotFoundError:
        index = rawindex.RawIndex(version=2)
    except rawindex.Unsupported:
        return [(prefix, "the index is in a format agentfs cannot compare")]
    found: list[tuple[str, str]] = []
    indexed = set()
    for raw_path in index.paths(prefix.encode() + b"/"):
        path = raw_path.decode(errors="replace")
        indexed.add(path)
        entry = index.entry_stat(raw_path)
        if entry is None:
            found.append((path, "in a merge conflict in the index"))
        elif path not in committed:
            found.append((path, "staged but not committed"))
        elif (entry[1], entry[2]) != (committed[path][1], committed[path][0]):
            found.append((path, "staged differently from HEAD"))
    found += [(path, "missing from the index (staged as deleted)")
              for path in committed if path not in indexed]
    return sorted(found)


class StatCache:
    """What the index knows about files, to skip reading files whose stat has not
    changed since they were committed (as `git status`). Each lookup is a search
    of the index's sorted entries: asking about a few files costs a few lookups,
    however many files the index holds."""

    def __init__(self, index: rawindex.RawIndex | None, index_mtime_ns: int) -> None:
        self._index = index
        self._index_mtime_ns = index_mtime_ns

    def has(self, path: str) -> bool:
        """True if the index has a stage-0 entry for `path`."""
        return self._index is not None and self._index.entry_stat(path.encode()) is not None

    def blob_id(self, path: str, st: os.stat_result) -> bytes | None:
        """The blob id `path` still holds, or None if it must be read to know.

        A file modified in the same clock tick as the index was written could
        keep its recorded stat ("racily clean"); it is read.
        """
        if self._index is None or st.st_mtime_ns >= self._index_mtime_ns:
            return None
        known = self._index.entry_stat(path.encode())
        return known[1] if known is not None and known[0] == rawindex.stat_key(st) else None


def stat_cache(index_path: Path) -> StatCache:
    """The index's stat data."""
    try:
        index, mtime_ns = rawindex.load(index_path)
    except (OSError, rawindex.Unsupported):
        return StatCache(None, 0)
    return StatCache(index, mtime_ns)
