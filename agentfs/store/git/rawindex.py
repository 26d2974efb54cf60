"""A fast path for patching a few entries of a version 2/3 Git index.

Reading and re-encoding every entry through dulwich costs tens of
microseconds per entry, which dominated each step in a large trace. Here
entries stay as their raw bytes: parsing only finds their boundaries, a
change replaces the bytes of the changed paths, and the file is the join of
the pieces. The parsed form is kept between updates while the file on disk
still holds the same bytes, so a run that commits step after step does not
re-parse it.

Whether it does is decided by the file's size and its trailing checksum (the
SHA-1 of everything before it), read with one `pread`. Inode numbers and
mtimes are not enough: other processes replace the index all the time, a
freed inode number is handed out again at once, and two writes within one
tick of the file-time clock get the same mtime (see docs/decisions.md).
"""

from __future__ import annotations

import bisect
import hashlib
import io
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dulwich.index import IndexEntry, Stage, write_cache_entry

HEADER = struct.Struct(">4sLL")
FLAG_EXTENDED = 0x4000
NAME_MASK = 0x0FFF
# The cache-tree (TREE) and untracked-cache (UNTR) extensions describe
# directories; after entries change they may be stale, and Git rebuilds them.
DROPPED_EXTENSIONS = {b"TREE", b"UNTR"}


class Unsupported(Exception):
    """An index this fast path does not handle (version 4, split index, ...)."""


@dataclass
class RawIndex:
    version: int
    keys: list[tuple[bytes, int]] = field(default_factory=list)  # (path, stage), sorted
    raws: list[bytes] = field(default_factory=list)
    extensions: list[tuple[bytes, bytes]] = field(default_factory=list)
    #: `stat_keys` results by prefix (an instance is never changed once built).
    memo: dict[bytes, dict[str, tuple[tuple[int, ...], bytes]]] = field(
        default_factory=dict, repr=False, compare=False
    )

    def apply(self, changes: Mapping[bytes, IndexEntry | None]) -> RawIndex:
        """A copy in which every stage of each path is replaced by a stage-0 entry (or
        with None removed). `self` is left as it is: it may be the cached parse of
        the file on disk, shared by this process's threads."""
        new = RawIndex(self.version, list(self.keys), list(self.raws), list(self.extensions))
        for path, entry in changes.items():
            start = bisect.bisect_left(new.keys, (path, 0))
            end = start
            while end < len(new.keys) and new.keys[end][0] == path:
                end += 1
            del new.keys[start:end], new.raws[start:end]
            if entry is not None:
                raw = encode_entry(path, entry, new.version)
                new.keys.insert(start, (path, 0))
                new.raws.insert(start, raw)
        return new

    def stat_keys(self, prefix: bytes) -> dict[str, tuple[tuple[int, ...], bytes]]:
        """For the stage-0 entries below directory `prefix`: path → (the `stat_key` a
        file must have to still hold the entry's blob, the blob's hex id)."""
        found = self.memo.get(prefix)
        if found is None:
            start = bisect.bisect_left(self.keys, (prefix + b"/", 0))
            end = bisect.bisect_left(self.keys, (prefix + b"0", 0))  # '0' follows '/'
            found = {}
            for (path, stage), raw in zip(self.keys[start:end], self.raws[start:end]):
                if stage == 0:
                    ctime_s, ctime_ns, mtime_s, mtime_ns, _dev, ino, mode, _uid, _gid, size, sha = (
                        STAT.unpack_from(raw, 0)
                    )
                    key = (mtime_s * 10**9 + mtime_ns, ctime_s * 10**9 + ctime_ns, size, ino,
                           mode & 0o100)
                    found[path.decode()] = (key, sha.hex().encode())
            self.memo[prefix] = found
        return found

    def encode(self) -> bytes:
        body = b"".join(
            [HEADER.pack(b"DIRC", self.version, len(self.raws)), *self.raws]
            + [sig + struct.pack(">L", len(data)) + data for sig, data in self.extensions]
        )
        return body + hashlib.sha1(body).digest()


def encode_entry(path: bytes, entry: IndexEntry, version: int) -> bytes:
    buffer = io.BytesIO()
    write_cache_entry(buffer, entry.serialize(path, Stage.NORMAL), version=version)
    return buffer.getvalue()


def parse(data: bytes) -> RawIndex:
    """Entry boundaries and extensions of a version 2/3 index."""
    if len(data) < HEADER.size + 20:
        raise Unsupported("index too short")
    signature, version, count = HEADER.unpack_from(data, 0)
    if signature != b"DIRC" or version not in (2, 3):
        raise Unsupported(f"index version {version}")
    if hashlib.sha1(data[:-20]).digest() != data[-20:]:
        raise Unsupported("index checksum mismatch")
    index = RawIndex(version)
    offset = HEADER.size
    for _ in range(count):
        (flags,) = struct.unpack_from(">H", data, offset + 60)
        name_at = offset + 62 + (2 if flags & FLAG_EXTENDED else 0)
        length = flags & NAME_MASK
        if length == NAME_MASK:
            length = data.index(b"\0", name_at) - name_at
        size = (name_at - offset + length + 8) & ~7
        index.keys.append((data[name_at : name_at + length], (flags >> 12) & 3))
        index.raws.append(data[offset : offset + size])
        offset += size
    end = len(data) - 20
    while offset < end:
        signature = data[offset : offset + 4]
        (size,) = struct.unpack_from(">L", data, offset + 4)
        if not signature.isupper():
            raise Unsupported(f"index extension {signature!r}")  # e.g. 'link': split index
        if signature not in DROPPED_EXTENSIONS:
            index.extensions.append((signature, data[offset + 8 : offset + 8 + size]))
        offset += 8 + size
    return index


#: Per index path: (size, trailing checksum) of the file the parse came from, the parse.
_cache: dict[str, tuple[tuple[int, bytes], RawIndex]] = {}


def load(path: Path) -> tuple[RawIndex, int]:
    """The index at `path`, parsed or from this process's cache, and the file's mtime (ns).

    Raises:
        Unsupported: the fast path cannot handle this index.
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        size = st.st_size
        trailer = os.pread(fd, 20, size - 20) if size >= 20 else b""
        cached = _cache.get(str(path))
        if cached is not None and cached[0] == (size, trailer):
            return cached[1], st.st_mtime_ns
        with open(fd, "rb", closefd=False) as f:
            data = f.read()  # the same file as the fstat, even if it is replaced meanwhile
    finally:
        os.close(fd)
    index = parse(data)  # checks the checksum: only real SHA-1s are ever cached
    _cache[str(path)] = (_identity(data), index)
    return index, st.st_mtime_ns


def remember(path: Path, index: RawIndex, data: bytes) -> None:
    """Record that `index`, encoded as `data`, was written to `path`.

    The key comes from `data`, not from the file: by the time this runs,
    another process may already have replaced it.
    """
    _cache[str(path)] = (_identity(data), index)


def _identity(data: bytes) -> tuple[int, bytes]:
    return len(data), data[-20:]


STAT = struct.Struct(">LLLLLLLLLL20s")
MASK = 0xFFFFFFFF


def stat_key(st: os.stat_result) -> tuple[int, ...]:
    """What an index entry records of a file's stat, as `RawIndex.stat_keys` gives it
    (Git keeps the low 32 bits of sizes and inode numbers)."""
    return (st.st_mtime_ns, st.st_ctime_ns, st.st_size & MASK, st.st_ino & MASK,
            st.st_mode & 0o100)
