"""Git pack files: written whole under temp names, read entry by entry, and deltas.

This module knows the formats only (pack version 2, index version 2, delta
instructions); which objects go into which pack is `packing.py`'s business.

A pack is installed the way Git installs one: the `.pack` and its `.idx` are
written under temp names in `objects/pack/`, fsynced, and renamed into place,
the `.idx` last. Git and dulwich find packs only through their `.idx`, so no
reader ever sees a pack that is not complete, and a process killed while
writing leaves only temp files (named after its pid, so they can be swept).
"""

from __future__ import annotations

import hashlib
import mmap
import os
import secrets
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from agentfs.store.atomic import fsync_dir

COMMIT, TREE, BLOB, TAG = 1, 2, 3, 4
OFS_DELTA, REF_DELTA = 6, 7
TYPE_NAMES = {COMMIT: b"commit", TREE: b"tree", BLOB: b"blob", TAG: b"tag"}
TYPE_NUMBERS = {name: number for number, name in TYPE_NAMES.items()}

#: zlib level of objects in packs: Git's default (`core.compression` -1) ...
PACK_COMPRESSION = zlib.Z_DEFAULT_COMPRESSION
#: ... but objects this big get the fastest level: a long trace's `messages/` tree
#: (470 KB at 10,000 messages) took 10 ms at the default level and 5 ms at this one,
#: for 3% more bytes (its ids do not compress), and a big file a tool wrote must not
#: hold up a step either.
BIG_OBJECT, BIG_OBJECT_COMPRESSION = 64 * 1024, 1

#: Prefixes of the temp files a pack and its index are written to, as Git's. They
#: have no `.pack` or `.idx` ending: Git and dulwich take any `<name>.pack` beside a
#: `<name>.idx` for a pack, and would read a half-written one.
TEMP_PREFIXES = ("tmp_pack_", "tmp_idx_")

_IDX_MAGIC = b"\377tOc"
#: Pack offsets from here on go in the index's table of 64-bit offsets (packs over 2 GiB).
_LARGE_OFFSET = 0x80000000
_MAX_COPY = 0xFFFF
#: A copy's offset has 4 bytes: what a base holds past 4 GiB can only be inserted.
_MAX_OFFSET = 1 << 32
_MAX_INSERT = 0x7F
#: Git reads no shorter delta (`DELTA_SIZE_MIN`); only one to an empty object is.
_MIN_DELTA = 4
_BLOCK = 4096


class PackFormatError(Exception):
    """A pack or index this module cannot read (another version, or damaged)."""


# --- deltas ----------------------------------------------------------------


def make_delta(base: bytes, target: bytes) -> bytes:
    """Git delta instructions that rebuild `target` from `base`.

    Only the longest common prefix and suffix are copied; what lies between
    is inserted. That is exact for the changes agentfs makes (a directory
    gains entries at the end, one entry changes, a JSON file changes in one
    place), takes a memcmp over both buffers, and never has the quadratic
    worst case of a general matcher (dulwich's took seconds on 500 KB of
    unrelated bytes).
    """
    prefix = min(common_prefix(base, target), _MAX_OFFSET)
    limit = min(len(base), len(target)) - prefix
    suffix = _common_suffix(base, target, limit) if len(base) <= _MAX_OFFSET else 0
    out = bytearray(_varint(len(base)) + _varint(len(target)))
    _copy(out, 0, prefix)
    middle = memoryview(target)[prefix : len(target) - suffix]
    for start in range(0, len(middle), _MAX_INSERT):
        chunk = middle[start : start + _MAX_INSERT]
        out.append(len(chunk))
        out += chunk
    _copy(out, len(base) - suffix, suffix)
    return bytes(out)


def _copy(out: bytearray, start: int, length: int) -> None:
    while length > 0:
        size = min(length, _MAX_COPY)
        op = bytearray([0x80])
        for i in range(4):
            byte = (start >> (8 * i)) & 0xFF
            if byte:
                op.append(byte)
                op[0] |= 1 << i
        for i in range(2):
            byte = (size >> (8 * i)) & 0xFF
            if byte:
                op.append(byte)
                op[0] |= 1 << (4 + i)
        out += op
        start += size
        length -= size


def common_prefix(a: bytes, b: bytes) -> int:
    """Length of the longest common prefix of `a` and `b`.

    Halves are compared as bytes (a memcmp; comparing memoryviews goes item by
    item, twenty times slower) down to a block, where the first differing byte
    is the highest set bit of the two blocks' XOR.
    """
    end = min(len(a), len(b))
    if a[:end] == b[:end]:
        return end
    low, high = 0, end  # a[:low] == b[:low], and a[:high] != b[:high]
    while high - low > _BLOCK:
        mid = (low + high) // 2
        if a[low:mid] == b[low:mid]:
            low = mid
        else:
            high = mid
    diff = int.from_bytes(a[low:high], "big") ^ int.from_bytes(b[low:high], "big")
    return high - 1 - (diff.bit_length() - 1) // 8


def _common_suffix(a: bytes, b: bytes, limit: int) -> int:
    """Length of the longest common suffix of `a` and `b`, at most `limit`."""
    la, lb = len(a), len(b)
    if a[la - limit :] == b[lb - limit :]:
        return limit
    low, high = 0, limit  # the last `low` bytes are equal, the last `high` are not
    while high - low > _BLOCK:
        mid = (low + high) // 2
        if a[la - mid : la - low] == b[lb - mid : lb - low]:
            low = mid
        else:
            high = mid
    block_a, block_b = a[la - high : la - low], b[lb - high : lb - low]
    diff = int.from_bytes(block_a, "little") ^ int.from_bytes(block_b, "little")
    return high - 1 - (diff.bit_length() - 1) // 8


def _varint(size: int) -> bytes:
    out = bytearray()
    while True:
        byte = size & 0x7F
        size >>= 7
        if size:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


# --- reading ---------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One object of a pack, as stored: its header, and where its zlib data lies."""

    sha: bytes  # binary id
    offset: int
    end: int  # where the next entry (or the trailer) starts
    type_num: int
    size: int  # inflated size of the object, or of the delta
    data_start: int
    base_offset: int | None = None  # OFS_DELTA: the base's offset in this pack
    base_sha: bytes | None = None  # REF_DELTA: the base's binary id

    @property
    def is_delta(self) -> bool:
        return self.type_num in (OFS_DELTA, REF_DELTA)


class PackReader:
    """A pack and its version 2 index, opened for copying entries out of it.

    Raises:
        PackFormatError: the index is not version 2, or the files disagree.
        FileNotFoundError: the pack was removed (another process merged it).
    """

    def __init__(self, base: Path) -> None:
        self.base = base
        try:
            self._open(base)
        except (struct.error, ValueError, IndexError) as exc:  # cut short, or empty
            if hasattr(self, "_data"):
                self.close()
            raise PackFormatError(f"{base}.pack or .idx is damaged: {exc}") from exc

    def _open(self, base: Path) -> None:
        idx = Path(f"{base}.idx").read_bytes()
        if idx[:8] != _IDX_MAGIC + struct.pack(">L", 2):
            raise PackFormatError(f"{base}.idx: not a version 2 pack index")
        count = struct.unpack(">L", idx[8 + 255 * 4 : 8 + 256 * 4])[0]
        names_at = 8 + 256 * 4
        crcs_at = names_at + 20 * count
        offsets_at = crcs_at + 4 * count
        large_at = offsets_at + 4 * count
        crcs = struct.unpack(f">{count}L", idx[crcs_at:offsets_at])
        offsets = struct.unpack(f">{count}L", idx[offsets_at:large_at])
        self.checksum = idx[-40:-20]
        with open(f"{base}.pack", "rb") as f:
            self._data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        if self._data[-20:] != self.checksum or self._data[:4] != b"PACK":
            self.close()
            raise PackFormatError(f"{base}.pack does not match its index")
        located = []
        self._crcs: dict[int, int] = {}  # by offset
        for i, offset in enumerate(offsets):
            if offset & 0x80000000:
                at = large_at + 8 * (offset & 0x7FFFFFFF)
                offset = struct.unpack(">Q", idx[at : at + 8])[0]
            located.append((offset, idx[names_at + 20 * i : names_at + 20 * i + 20]))
            self._crcs[offset] = crcs[i]
        located.sort()
        ends = [offset for offset, _ in located[1:]] + [len(self._data) - 20]
        self.entries = [
            self._entry(sha, offset, end) for (offset, sha), end in zip(located, ends, strict=True)
        ]
        self.by_offset = {entry.offset: entry for entry in self.entries}
        self.by_sha = {entry.sha: entry for entry in self.entries}

    def _entry(self, sha: bytes, offset: int, end: int) -> Entry:
        data = self._data
        byte = data[offset]
        type_num, size, shift, at = (byte >> 4) & 7, byte & 15, 4, offset + 1
        while byte & 0x80:
            byte = data[at]
            size |= (byte & 0x7F) << shift
            shift += 7
            at += 1
        if type_num == OFS_DELTA:
            byte = data[at]
            distance = byte & 0x7F
            at += 1
            while byte & 0x80:
                byte = data[at]
                distance = ((distance + 1) << 7) | (byte & 0x7F)
                at += 1
            return Entry(sha, offset, end, type_num, size, at, base_offset=offset - distance)
        if type_num == REF_DELTA:
            return Entry(sha, offset, end, type_num, size, at + 20,
                         base_sha=bytes(data[at : at + 20]))
        return Entry(sha, offset, end, type_num, size, at)

    def compressed(self, entry: Entry) -> bytes:
        """An entry's zlib data, checked against the CRC32 its index holds (so that a
        damaged entry is never copied into another pack, as if it were whole).

        Raises:
            PackFormatError: the entry is damaged.
        """
        if zlib.crc32(self._data[entry.offset : entry.end]) != self._crcs[entry.offset]:
            raise PackFormatError(f"{self.base}.pack: object {entry.sha.hex()} is damaged")
        return self._data[entry.data_start : entry.end]

    def inflate(self, entry: Entry) -> bytes:
        """The object (or delta) an entry holds, uncompressed."""
        return zlib.decompress(self.compressed(entry))

    def base_of(self, entry: Entry) -> Entry | None:
        """The entry a delta is based on, in this pack; None for a whole object."""
        try:
            if entry.base_offset is not None:
                return self.by_offset[entry.base_offset]
            if entry.base_sha is not None:
                return self.by_sha[entry.base_sha]
        except KeyError:
            raise PackFormatError(f"{self.base}.pack: a delta's base is not in it") from None
        return None

    def close(self) -> None:
        self._data.close()


def object_count(index: Path) -> int:
    """How many objects a version 2 `.idx` lists, from its header alone."""
    with open(index, "rb") as f:
        head = f.read(8 + 256 * 4)
    if len(head) < 8 + 256 * 4 or head[:8] != _IDX_MAGIC + struct.pack(">L", 2):
        raise PackFormatError(f"{index}: not a version 2 pack index")
    return int(struct.unpack(">L", head[-4:])[0])


# --- writing ---------------------------------------------------------------


class PackWriter:
    """Writes a pack of a known number of objects to a temp file, then installs it.

    Entries are added in pack order; a delta's base must be added first.
    Nothing is visible to Git until `install` renames the `.idx` into place.
    """

    def __init__(self, pack_dir: Path, count: int) -> None:
        self.pack_dir = pack_dir
        self.count = count
        self.offsets: dict[bytes, int] = {}
        self._crcs: dict[bytes, int] = {}
        self._ref_bases: set[bytes] = set()  # bases of REF_DELTA entries, due later
        token = f"{os.getpid()}_{secrets.token_hex(4)}"
        self._tmp_pack = pack_dir / f"{TEMP_PREFIXES[0]}{token}"
        self._tmp_idx = pack_dir / f"{TEMP_PREFIXES[1]}{token}"
        self._hash = hashlib.sha1()
        pack_dir.mkdir(parents=True, exist_ok=True)
        self._file = open(self._tmp_pack, "xb")  # noqa: SIM115 — closed in install/abort
        self._at = 0
        self._write(b"PACK" + struct.pack(">LL", 2, count))

    def __contains__(self, sha: bytes) -> bool:
        return sha in self.offsets

    def add_object(self, sha: bytes, type_num: int, data: bytes) -> None:
        """A whole object, compressed here."""
        level = PACK_COMPRESSION if len(data) < BIG_OBJECT else BIG_OBJECT_COMPRESSION
        self.add_compressed(sha, type_num, len(data), zlib.compress(data, level))

    def add_delta(self, sha: bytes, base: bytes, delta: bytes) -> None:
        """An object stored as `delta` against `base`, which this pack already holds."""
        self.add_compressed(sha, OFS_DELTA, len(delta), zlib.compress(delta, PACK_COMPRESSION),
                            base=base)

    def add_compressed(self, sha: bytes, type_num: int, size: int, data: bytes,
                       *, base: bytes | None = None) -> None:
        """An entry whose zlib data is ready (copied from another pack, say).

        A delta (`type_num` OFS_DELTA or REF_DELTA) names its base by binary id;
        it is written as OFS_DELTA when the base is already in this pack.
        """
        if sha in self.offsets:
            raise PackFormatError(f"object {sha.hex()} is already in this pack")
        if type_num in (OFS_DELTA, REF_DELTA) and size < _MIN_DELTA:
            raise PackFormatError(f"object {sha.hex()}: Git reads no delta under 4 bytes")
        header = bytearray()
        byte, size = (type_num << 4) | (size & 15), size >> 4
        while size:
            header.append(byte | 0x80)
            byte, size = size & 0x7F, size >> 7
        header.append(byte)
        if type_num in (OFS_DELTA, REF_DELTA):
            assert base is not None
            if base in self.offsets:
                header[0] = (header[0] & 0x8F) | (OFS_DELTA << 4)
                header += _ofs_distance(self._at - self.offsets[base])
            else:
                header[0] = (header[0] & 0x8F) | (REF_DELTA << 4)
                header += base
                self._ref_bases.add(base)
        self.offsets[sha] = self._at
        self._crcs[sha] = zlib.crc32(data, zlib.crc32(header))
        self._write(bytes(header))
        self._write(data)

    def _write(self, data: bytes) -> None:
        self._hash.update(data)
        self._file.write(data)
        self._at += len(data)

    def install(self) -> str:
        """Finish the pack and its index, fsync both, and rename them into place,
        the `.idx` last. Returns the pack's name (`pack-<checksum>`).

        The pack is fsynced whatever the `fsync` setting: what it replaces (loose
        objects, older packs) is deleted next, and may already be on disk.
        """
        if len(self.offsets) != self.count:
            raise PackFormatError(f"pack holds {len(self.offsets)} objects, not {self.count}")
        if not self._ref_bases <= self.offsets.keys():
            raise PackFormatError("a delta's base is missing from the pack")
        checksum = self._hash.digest()
        self._file.write(checksum)
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        with open(self._tmp_idx, "xb") as f:
            f.write(_index(self.offsets, self._crcs, checksum))
            f.flush()
            os.fsync(f.fileno())
        name = f"pack-{checksum.hex()}"
        os.chmod(self._tmp_pack, 0o444)
        os.chmod(self._tmp_idx, 0o444)
        os.replace(self._tmp_pack, self.pack_dir / f"{name}.pack")
        os.replace(self._tmp_idx, self.pack_dir / f"{name}.idx")
        fsync_dir(self.pack_dir)
        return name

    def abort(self) -> None:
        """Close and remove the temp files (after an error)."""
        if not self._file.closed:
            self._file.close()
        self._tmp_pack.unlink(missing_ok=True)
        self._tmp_idx.unlink(missing_ok=True)


def _ofs_distance(distance: int) -> bytes:
    out = [distance & 0x7F]
    distance >>= 7
    while distance:
        distance -= 1
        out.insert(0, 0x80 | (distance & 0x7F))
        distance >>= 7
    return bytes(out)


def _index(offsets: dict[bytes, int], crcs: dict[bytes, int], checksum: bytes) -> bytes:
    names = sorted(offsets)
    fanout = [0] * 256
    for name in names:
        fanout[name[0]] += 1
    total = 0
    for i in range(256):
        total += fanout[i]
        fanout[i] = total
    large: list[int] = []
    small: list[int] = []
    for name in names:
        offset = offsets[name]
        if offset < _LARGE_OFFSET:
            small.append(offset)
        else:
            small.append(0x80000000 | len(large))
            large.append(offset)
    parts = [
        _IDX_MAGIC, struct.pack(">L", 2), struct.pack(">256L", *fanout), b"".join(names),
        struct.pack(f">{len(names)}L", *(crcs[name] for name in names)),
        struct.pack(f">{len(small)}L", *small), struct.pack(f">{len(large)}Q", *large),
        checksum,
    ]
    body = b"".join(parts)
    return body + hashlib.sha1(body).digest()
