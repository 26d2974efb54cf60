"""Refreshing a few entries of `.git/index` after agentfs commits them.

The index is shared by every process working in the workspace (other traces,
the user's `git`), so each update reads, patches and writes it while holding
Git's own `index.lock`, retrying while somebody else holds it.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Mapping
from pathlib import Path

from dulwich.file import FileLocked, GitFile
from dulwich.index import (
    IndexChecksumReader,
    IndexChecksumWriter,
    IndexEntry,
    read_index_dict_with_version,
    write_index_dict,
)

from agentfs.errors import GitStateError

#: How long to wait for another process's `index.lock` before giving up.
LOCK_TIMEOUT_S = 30.0

# The cache-tree (TREE) and untracked-cache (UNTR) extensions describe
# directories; after we change entries they may be stale, and Git rebuilds them.
_DROP_EXTENSIONS = {b"TREE", b"UNTR"}


def update_index(index_path: Path, changes: Mapping[bytes, IndexEntry | None]) -> None:
    """Set (or with None remove) the given index entries, atomically and under Git's lock."""
    if not changes:
        return
    deadline = time.monotonic() + LOCK_TIMEOUT_S
    delay = 0.001
    while True:
        try:
            lock = GitFile(index_path, "wb")
            break
        except FileLocked:
            if time.monotonic() > deadline:
                raise GitStateError(
                    f"{index_path}.lock has been held for {LOCK_TIMEOUT_S:.0f}s",
                    hint="if no git process is running, delete the stale .git/index.lock",
                ) from None
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 0.05)
    try:
        entries, version, extensions = _read(index_path)
        for path, entry in changes.items():
            if entry is None:
                entries.pop(path, None)
            else:
                entries[path] = entry
        writer = IndexChecksumWriter(lock)
        write_index_dict(
            writer,
            entries,
            version=version,
            extensions=[e for e in extensions if _signature(e) not in _DROP_EXTENSIONS],
        )
        writer.close()
    except BaseException:
        lock.abort()
        raise


def _read(index_path: Path) -> tuple[dict, int | None, list]:
    if not index_path.exists() or os.path.getsize(index_path) == 0:
        return {}, None, []
    with open(index_path, "rb") as f:
        reader = IndexChecksumReader(f)
        entries, version, extensions = read_index_dict_with_version(reader)
        reader.check_checksum(allow_empty=True)
    return entries, version, extensions


def _signature(extension: object) -> bytes:
    return getattr(extension, "signature", b"")
