"""Git's split index: most entries in a shared file, the changes in `.git/index`.

With a split index, `.git/index` holds only the entries that differ from a
shared index `.git/sharedindex.<sha>` and a `link` extension naming it, with
two EWAH bitmaps over the shared entries: which are deleted and which are
replaced (a replacing entry is stored with an empty name, in bitmap order);
the other entries of `.git/index` are added. Git reads, writes and keeps this
form (`git update-index --split-index`; see gitformat-index(5)), so agentfs
can rewrite a small `.git/index` each step and the shared file only once
the changes grow (`agentfs/store/git/rawindex.py:RawIndex.encode`).

Shared index files are never changed once written (they are named by their
checksum). One is deleted only when the index no longer names it and it is
older than `SHARED_EXPIRE_S`, so a reader that has just read the old
`.git/index` still finds it (Git itself keeps them two weeks).
"""

from __future__ import annotations

import os
import struct
import time
from pathlib import Path

from dulwich.bitmap import EWAHBitmap

from agentfs.store.atomic import fsync_dir, open_creating

__all__ = ["SHARED_EXPIRE_S", "decode_ewah", "encode_ewah", "remove_expired", "write_shared"]

#: Shared index files not named by the index are deleted once this old (seconds).
SHARED_EXPIRE_S = 600


def encode_ewah(bits: list[int]) -> bytes:
    """The EWAH serialization Git reads (ewah/ewah_io.c) of the set `bits`, as
    dulwich writes it for pack bitmaps (the same format)."""
    bitmap = EWAHBitmap()
    bitmap.bits = set(bits)
    return bitmap.encode()


def decode_ewah(data: bytes, offset: int) -> tuple[list[int], int]:
    """The set bits of the EWAH bitmap at `offset`, and the offset after it.

    Raises:
        ValueError: the bitmap is cut short or does not fit its own size.
    """
    if len(data) < offset + 8:
        raise ValueError("EWAH bitmap cut short")
    (count,) = struct.unpack_from(">L", data, offset + 4)
    end = offset + 8 + 8 * count + 4
    if len(data) < end:
        raise ValueError("EWAH bitmap cut short")
    return sorted(EWAHBitmap(data[offset:end]).bits), end


def shared_path(git_dir: Path, sha: bytes) -> Path:
    """The shared index file of checksum `sha` (20 bytes)."""
    return git_dir / f"sharedindex.{sha.hex()}"


def write_shared(git_dir: Path, data: bytes, *, durable: bool) -> bytes:
    """Write a shared index (a whole index whose last 20 bytes are its checksum) under
    its name, unless it exists; returns the checksum."""
    sha = data[-20:]
    target = shared_path(git_dir, sha)
    if target.exists():
        os.utime(target)  # in use again: not expired
        return sha
    tmp = git_dir / f"sharedindex.{sha.hex()}.{os.getpid()}.tmp"
    fd = open_creating(tmp, os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, target)
    if durable:
        fsync_dir(git_dir)
    return sha


def freshen(git_dir: Path, sha: bytes) -> None:
    """Mark the shared index `sha` as in use now, as Git does when it writes a split
    index against it, so that no process expires it while an index names it."""
    path = shared_path(git_dir, sha)
    try:
        if time.time() - os.stat(path).st_mtime > SHARED_EXPIRE_S / 4:
            os.utime(path)
    except FileNotFoundError:
        pass  # the index that names it is refused on read, with a hint


def remove_expired(git_dir: Path, keep: bytes) -> None:
    """Delete shared index files other than `keep` (a checksum) older than
    `SHARED_EXPIRE_S`, and temp files of writers that died."""
    now = time.time()
    try:
        names = os.listdir(git_dir)
    except FileNotFoundError:
        return
    for name in names:
        if not name.startswith("sharedindex.") or name == f"sharedindex.{keep.hex()}":
            continue
        path = git_dir / name
        try:
            if now - os.stat(path).st_mtime > SHARED_EXPIRE_S:
                path.unlink()
        except FileNotFoundError:
            pass
