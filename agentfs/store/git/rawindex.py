"""A fast path for patching a few entries of a Git index, whole or split.

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

A split index (`agentfs/store/git/splitindex.py`) is read as the whole
index it stands for, and remembers the shared index it is written against
and which entries differ from it, so writing it again costs in proportion to
those entries, not to the whole index.
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

from dulwich.index import IndexEntry, Stage, read_index_dict_with_version, write_cache_entry

from agentfs.store.git.splitindex import decode_ewah, encode_ewah, shared_path

HEADER = struct.Struct(">4sLL")
FLAG_EXTENDED = 0x4000
NAME_MASK = 0x0FFF
# The cache-tree (TREE) and untracked-cache (UNTR) extensions describe
# directories; after entries change they may be stale, and Git rebuilds them.
DROPPED_EXTENSIONS = {b"TREE", b"UNTR"}


class Unsupported(Exception):
    """An index agentfs cannot read (a bad checksum, a lowercase extension it does not
    know, which Git says not to ignore, ...)."""


class BrokenSplit(Unsupported):
    """A split index whose shared index is missing or does not fit it: nothing else
    can read it either (dulwich would take its few entries for the whole index)."""


Key = tuple[bytes, int]  # (path, stage)


@dataclass
class RawIndex:
    version: int
    keys: list[Key] = field(default_factory=list)  # sorted
    raws: list[bytes] = field(default_factory=list)
    extensions: list[tuple[bytes, bytes]] = field(default_factory=list)
    #: Written as a split index: the shared index's checksum and entries ...
    base: tuple[bytes, RawIndex] | None = field(default=None, repr=False)
    #: ... and the entries that differ from it (None: deleted).
    delta: dict[Key, bytes | None] = field(default_factory=dict, repr=False)
    #: The `link` extension of a split index as read, until `load` resolves it.
    link: bytes | None = field(default=None, repr=False)

    def apply(self, changes: Mapping[bytes, IndexEntry | None]) -> RawIndex:
        """A copy in which every stage of each path is replaced by a stage-0 entry (or
        with None removed). `self` is left as it is: it may be the cached parse of
        the file on disk, shared by this process's threads."""
        new = RawIndex(self.version, list(self.keys), list(self.raws), list(self.extensions),
                       base=self.base, delta=dict(self.delta))
        for path, entry in changes.items():
            start = bisect.bisect_left(new.keys, (path, 0))
            end = start
            while end < len(new.keys) and new.keys[end][0] == path:
                end += 1
            for key in new.keys[start:end]:
                new._forget(key)
            del new.keys[start:end], new.raws[start:end]
            if entry is not None:
                raw = encode_entry(path, entry, new.version)
                new.keys.insert(start, (path, 0))
                new.raws.insert(start, raw)
                if new.base is not None:
                    new.delta[(path, 0)] = raw
        return new

    def has(self, path: bytes) -> bool:
        """True if `path` has an entry (at any stage)."""
        at = bisect.bisect_left(self.keys, (path, 0))
        return at < len(self.keys) and self.keys[at][0] == path

    def paths(self, prefix: bytes) -> list[bytes]:
        """Paths of the entries starting with `prefix` (a search: the keys, sorted by
        bytes, keep them together)."""
        start = bisect.bisect_left(self.keys, (prefix, 0))
        found: list[bytes] = []
        for path, _ in self.keys[start:]:
            if not path.startswith(prefix):
                break
            if not found or found[-1] != path:
                found.append(path)
        return found

    def _forget(self, key: Key) -> None:
        if self.base is None:
            return
        if _position(self.base[1].keys, key) is None:
            self.delta.pop(key, None)
        else:
            self.delta[key] = None

    def rebased(self, sha: bytes) -> RawIndex:
        """The same index written against a shared index of all its entries, whose
        checksum (`encode_shared`'s last 20 bytes) is `sha`."""
        shared = RawIndex(self.version, self.keys, self.raws)
        return RawIndex(self.version, self.keys, self.raws, self.extensions, base=(sha, shared))

    def unsplit(self) -> RawIndex:
        """The same index, to be written whole."""
        return RawIndex(self.version, self.keys, self.raws, self.extensions)

    def encode_shared(self) -> bytes:
        """All entries as a shared index: no extensions (as Git writes them)."""
        body = b"".join([HEADER.pack(b"DIRC", self.version, len(self.raws)), *self.raws])
        return body + hashlib.sha1(body, usedforsecurity=False).digest()

    def entry_stat(self, path: bytes) -> tuple[tuple[int, ...], bytes, int] | None:
        """(`stat_key`, blob hex id, mode) of the stage-0 entry of `path`, or None."""
        at = _position(self.keys, (path, 0))
        return None if at is None else _unpack_stat(self.raws[at])

    def encode(self) -> bytes:
        """The index file: whole, or as a split index when it has a `base`."""
        extensions = [sig + struct.pack(">L", len(data)) + data for sig, data in self.extensions]
        if self.base is None:
            body = b"".join(
                [HEADER.pack(b"DIRC", self.version, len(self.raws)), *self.raws, *extensions]
            )
            return body + hashlib.sha1(body, usedforsecurity=False).digest()
        sha, shared = self.base
        replaced: list[tuple[int, bytes]] = []
        deleted: list[int] = []
        added: list[tuple[Key, bytes]] = []
        for key, raw in self.delta.items():
            at = _position(shared.keys, key)
            if at is None:
                if raw is not None:
                    added.append((key, raw))
            elif raw is None:
                deleted.append(at)
            else:
                replaced.append((at, raw))
        replaced.sort()
        added.sort()
        link = sha + encode_ewah(sorted(deleted)) + encode_ewah([at for at, _ in replaced])
        entries = [_without_name(raw) for _, raw in replaced] + [raw for _, raw in added]
        body = b"".join(
            [HEADER.pack(b"DIRC", self.version, len(entries)), *entries,
             b"link" + struct.pack(">L", len(link)) + link, *extensions]
        )
        return body + hashlib.sha1(body, usedforsecurity=False).digest()


def _unpack_stat(raw: bytes) -> tuple[tuple[int, ...], bytes, int]:
    """(`stat_key`, blob hex id, mode) of a raw entry."""
    ctime_s, ctime_ns, mtime_s, mtime_ns, _dev, ino, mode, _uid, _gid, size, sha = (
        STAT.unpack_from(raw, 0)
    )
    key = (mtime_s * 10**9 + mtime_ns, ctime_s * 10**9 + ctime_ns, size, ino, mode & 0o100)
    return key, sha.hex().encode(), mode


def _position(keys: list[Key], key: Key) -> int | None:
    at = bisect.bisect_left(keys, key)
    return at if at < len(keys) and keys[at] == key else None


def _header_size(raw: bytes) -> tuple[int, int]:
    """(size of the fixed part, flags) of a raw entry."""
    (flags,) = struct.unpack_from(">H", raw, 60)
    return 62 + (2 if flags & FLAG_EXTENDED else 0), flags


def _without_name(raw: bytes) -> bytes:
    """A raw entry with an empty name, as a split index stores a replacing entry."""
    size, flags = _header_size(raw)
    return (raw[:60] + struct.pack(">H", flags & ~NAME_MASK) + raw[62:size]
            + b"\0" * (((size + 8) & ~7) - size))


def _with_name(raw: bytes, name: bytes) -> bytes:
    size, flags = _header_size(raw)
    flags = (flags & ~NAME_MASK) | min(len(name), NAME_MASK)
    padded = ((size + len(name) + 8) & ~7) - size - len(name)
    return raw[:60] + struct.pack(">H", flags) + raw[62:size] + name + b"\0" * padded


def _resolve(index: RawIndex, git_dir: Path) -> RawIndex:
    """The whole index a split index stands for (its shared index read from `git_dir`).

    Raises:
        Unsupported: the shared index is missing, damaged or not a v2/v3 index, or
            the link extension does not fit it.
    """
    assert index.link is not None
    sha = index.link[:20]
    try:
        if len(index.link) > 20:
            deleted, at = decode_ewah(index.link, 20)
            replaced, at = decode_ewah(index.link, at)
            if at != len(index.link):
                raise ValueError("garbage after the bitmaps")
        else:
            deleted, replaced = [], []
    except ValueError as exc:
        raise BrokenSplit(f"link extension: {exc}") from None
    shared = _shared(git_dir, sha)
    if len(replaced) > len(index.raws) or any(p >= len(shared.keys) for p in deleted + replaced):
        raise BrokenSplit("link extension does not fit its shared index")
    keys, raws = list(shared.keys), list(shared.raws)
    delta: dict[Key, bytes | None] = {}
    for n, at in enumerate(replaced):
        raws[at] = _with_name(index.raws[n], shared.keys[at][0])
        delta[shared.keys[at]] = raws[at]
    if deleted:
        gone = set(deleted)
        for at in gone:
            delta[shared.keys[at]] = None
        keys = [k for n, k in enumerate(keys) if n not in gone]
        raws = [r for n, r in enumerate(raws) if n not in gone]
    for key, raw in zip(index.keys[len(replaced):], index.raws[len(replaced):], strict=True):
        at = bisect.bisect_left(keys, key)
        if at < len(keys) and keys[at] == key:
            raws[at] = raw
        else:
            keys.insert(at, key)
            raws.insert(at, raw)
        delta[key] = raw
    return RawIndex(index.version, keys, raws, index.extensions, base=(sha, shared), delta=delta)


#: Shared indexes read by this process, by checksum (they never change).
_shared_cache: dict[bytes, RawIndex] = {}


def _shared(git_dir: Path, sha: bytes) -> RawIndex:
    found = _shared_cache.get(sha)
    if found is None:
        try:
            data = shared_path(git_dir, sha).read_bytes()
        except FileNotFoundError:
            raise BrokenSplit(f"shared index {sha.hex()} is missing") from None
        try:
            found = parse(data)
        except Unsupported as exc:
            raise BrokenSplit(f"shared index {sha.hex()}: {exc}") from None
        if found.link is not None or data[-20:] != sha:
            raise BrokenSplit(f"shared index {sha.hex()} is not one")
        _shared_cache.clear()  # one at a time is all a workspace needs
        _shared_cache[sha] = found
    return found


def encode_entry(path: bytes, entry: IndexEntry, version: int,
                 stage: Stage = Stage.NORMAL) -> bytes:
    buffer = io.BytesIO()
    write_cache_entry(buffer, entry.serialize(path, stage), version=version)
    return buffer.getvalue()


def parse(data: bytes) -> RawIndex:
    """Entry boundaries and extensions of an index (version 4 is read through dulwich)."""
    if len(data) < HEADER.size + 20:
        raise Unsupported("index too short")
    signature, version, count = HEADER.unpack_from(data, 0)
    if hashlib.sha1(data[:-20], usedforsecurity=False).digest() != data[-20:]:
        raise Unsupported("index checksum mismatch")
    if signature == b"DIRC" and version == 4:
        return _parse_version_4(data)
    if signature != b"DIRC" or version not in (2, 3):
        raise Unsupported(f"index version {version}")
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
        if signature == b"link":
            index.link = data[offset + 8 : offset + 8 + size]
        elif not signature.isupper():
            raise Unsupported(f"index extension {signature!r}")  # one Git says not to ignore
        elif signature not in DROPPED_EXTENSIONS:
            index.extensions.append((signature, data[offset + 8 : offset + 8 + size]))
        offset += 8 + size
    return index


_STAGES = (Stage.MERGE_CONFLICT_ANCESTOR, Stage.MERGE_CONFLICT_THIS, Stage.MERGE_CONFLICT_OTHER)


def _parse_version_4(data: bytes) -> RawIndex:
    """A version 4 index (its paths prefix-compressed, as Git writes it under
    `feature.manyFiles`) read by dulwich, as the version 3 index it is written back as
    (Git reads both), so that its entries are raw bytes like any other index's."""
    f = io.BytesIO(data)
    try:
        entries, _, extensions = read_index_dict_with_version(f)
    except Exception as exc:  # noqa: BLE001 — dulwich raises several types for what it cannot read
        raise Unsupported(f"index version 4 ({type(exc).__name__})") from None
    if f.tell() < len(data) - 20:
        raise Unsupported("index extension dulwich cannot read")  # e.g. `link`, `sdir`
    index = RawIndex(3)
    for path, entry in sorted(entries.items()):
        if isinstance(entry, IndexEntry):
            index.keys.append((path, 0))
            index.raws.append(encode_entry(path, entry, 3))
            continue
        for stage, side in zip(_STAGES, (entry.ancestor, entry.this, entry.other), strict=True):
            if side is not None:
                index.keys.append((path, stage.value))
                index.raws.append(encode_entry(path, side, 3, stage))
    index.extensions = [(e.signature, e.to_bytes()) for e in extensions
                        if e.signature not in DROPPED_EXTENSIONS]
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
    if index.link is not None:
        index = _resolve(index, path.parent)
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
    """What an index entry records of a file's stat, as `RawIndex.entry_stat` gives it
    (Git keeps the low 32 bits of sizes and inode numbers)."""
    return (st.st_mtime_ns, st.st_ctime_ns, st.st_size & MASK, st.st_ino & MASK,
            st.st_mode & 0o100)
