"""A fast path for patching a few entries of a version 2/3 Git index.

Reading and re-encoding every entry through dulwich costs tens of
microseconds per entry, which dominated each step in a large trace. Here
entries stay as their raw bytes: parsing only finds their boundaries, a
change replaces the bytes of the changed paths, and the file is the join of
the pieces. The parsed form is kept between updates while the file on disk
is the one this process wrote (same inode, size and mtime), so a run that
commits step after step does not re-parse it.
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
    #: `stat_keys` results by prefix, valid until the next `apply`.
    memo: dict[bytes, dict[str, tuple[tuple[int, ...], bytes]]] = field(
        default_factory=dict, repr=False, compare=False
    )

    def apply(self, changes: Mapping[bytes, IndexEntry | None]) -> None:
        """Replace (or with None remove) every stage of each path by a stage-0 entry."""
        self.memo.clear()
        for path, entry in changes.items():
            start = bisect.bisect_left(self.keys, (path, 0))
            end = start
            while end < len(self.keys) and self.keys[end][0] == path:
                end += 1
            del self.keys[start:end], self.raws[start:end]
            if entry is not None:
                raw = encode_entry(path, entry, self.version)
                self.keys.insert(start, (path, 0))
                self.raws.insert(start, raw)

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


_cache: dict[str, tuple[tuple[int, int, int], RawIndex]] = {}


def load(path: Path) -> RawIndex:
    """The index at `path`, parsed, or from this process's cache if unchanged."""
    st = os.stat(path)
    key = (st.st_ino, st.st_size, st.st_mtime_ns)
    cached = _cache.get(str(path))
    if cached is not None and cached[0] == key:
        return cached[1]
    index = parse(path.read_bytes())
    _cache[str(path)] = (key, index)
    return index


def remember(path: Path, index: RawIndex) -> None:
    """Record that `path` now holds `index` (called after writing it)."""
    st = os.stat(path)
    _cache[str(path)] = ((st.st_ino, st.st_size, st.st_mtime_ns), index)


def forget(path: Path) -> None:
    _cache.pop(str(path), None)


STAT = struct.Struct(">LLLLLLLLLL20s")
MASK = 0xFFFFFFFF


def stat_key(st: os.stat_result) -> tuple[int, ...]:
    """What an index entry records of a file's stat, as `RawIndex.stat_keys` gives it
    (Git keeps the low 32 bits of sizes and inode numbers)."""
    return (st.st_mtime_ns, st.st_ctime_ns, st.st_size & MASK, st.st_ino & MASK,
            st.st_mode & 0o100)
