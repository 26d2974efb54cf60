"""Refreshing a few entries of `.git/index` after agentfs commits them.

The index is shared by every process working in the workspace (other traces,
the user's `git`), so each update reads, patches and writes it while holding
Git's own `index.lock` (see `agentfs/store/gitlocks.py:GitLockFile`).
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from pathlib import Path

from dulwich.index import (
    IndexChecksumReader,
    IndexChecksumWriter,
    IndexEntry,
    read_index_dict_with_version,
    write_index_dict,
)

from agentfs.errors import GitStateError
from agentfs.store import rawindex
from agentfs.store.gitlocks import GitLockFile

_DROP_EXTENSIONS = rawindex.DROPPED_EXTENSIONS


def update_index(
    index_path: Path, state_dir: Path, changes: Mapping[bytes, IndexEntry | None]
) -> None:
    """Set (or with None remove) the given index entries, atomically and under Git's lock."""
    if not changes:
        return
    with GitLockFile(index_path, state_dir) as lock:
        raw = _load_raw(index_path)
        if raw is not None:
            try:
                raw.apply(changes)
                lock.write(raw.encode())
            except BaseException:
                rawindex.forget(index_path)
                raise
        else:
            lock.write(_rewrite_with_dulwich(index_path, changes))
    if raw is not None:
        rawindex.remember(index_path, raw)


def _load_raw(index_path: Path) -> rawindex.RawIndex | None:
    """The index for the fast path, or None when only dulwich can rewrite it."""
    if not index_path.exists() or os.path.getsize(index_path) == 0:
        return rawindex.RawIndex(version=2)
    try:
        return rawindex.load(index_path)
    except rawindex.Unsupported:
        return None


def _rewrite_with_dulwich(index_path: Path, changes: Mapping[bytes, IndexEntry | None]) -> bytes:
    entries, version, extensions = _read(index_path)
    for path, entry in changes.items():
        if entry is None:
            entries.pop(path, None)
        else:
            entries[path] = entry
    buffer = io.BytesIO()
    writer = IndexChecksumWriter(buffer)
    write_index_dict(
        writer,
        entries,
        version=version,
        extensions=[e for e in extensions if _signature(e) not in _DROP_EXTENSIONS],
    )
    writer.write_checksum()
    return buffer.getvalue()


def check_index(index_path: Path) -> None:
    """Refuse, before anything is committed, an index agentfs cannot update."""
    _read(index_path)


def _read(index_path: Path) -> tuple[dict, int | None, list]:
    if not index_path.exists() or os.path.getsize(index_path) == 0:
        return {}, None, []
    try:
        with open(index_path, "rb") as f:
            reader = IndexChecksumReader(f)
            entries, version, extensions = read_index_dict_with_version(reader)
            reader.check_checksum(allow_empty=True)
    except Exception as exc:  # dulwich raises several types for formats it cannot read
        raise GitStateError(
            f"{index_path}: agentfs cannot read this Git index ({type(exc).__name__})",
            hint="a split index is not supported: run `git config core.splitIndex false` "
            "and `git update-index --no-split-index`",
        ) from None
    return entries, version, extensions


def _signature(extension: object) -> bytes:
    return getattr(extension, "signature", b"")
