"""Git deltas as agentfs makes them, and packs written through dulwich's writers.

agentfs pairs each new object with an earlier version of its path
(`lineage.py`) and stores it as a delta of the common prefix and suffix
(`make_delta`); dulwich's `write_pack_data` and `write_pack_index` write the
pack and its index (version 2) around those deltas.

A pack is installed the way Git installs one: the `.pack` and its `.idx` are
written under temp names in `objects/pack/`, fsynced, and renamed into place,
the `.idx` last. Git and dulwich find packs only through their `.idx`, so no
reader ever sees a pack that is not complete, and a process killed while
writing leaves only temp files (named after its pid, so they can be swept).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable, Iterator
from pathlib import Path

from dulwich.object_format import DEFAULT_OBJECT_FORMAT
from dulwich.pack import REF_DELTA, UnpackedObject, write_pack_data, write_pack_index

from agentfs.store.atomic import fsync_dir

#: Prefixes of the temp files a pack and its index are written to, as Git's. They
#: have no `.pack` or `.idx` ending: Git and dulwich take any `<name>.pack` beside a
#: `<name>.idx` for a pack, and would read a half-written one.
TEMP_PREFIXES = ("tmp_pack_", "tmp_idx_")

_MAX_COPY = 0xFFFF
#: A copy's offset has 4 bytes: what a base holds past 4 GiB can only be inserted.
_MAX_OFFSET = 1 << 32
_MAX_INSERT = 0x7F
_BLOCK = 4096


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


# --- writing ---------------------------------------------------------------


def whole(sha: bytes, type_num: int, data: bytes) -> UnpackedObject:
    """A pack entry holding an object whole (`sha` binary)."""
    return UnpackedObject(type_num, sha=sha, decomp_chunks=[data])


def delta(sha: bytes, base: bytes, instructions: bytes) -> UnpackedObject:
    """A pack entry holding an object as a delta against `base` (binary ids); it is
    written as an offset delta when `base` comes earlier in the pack."""
    return UnpackedObject(REF_DELTA, sha=sha, delta_base=base, decomp_chunks=[instructions])


def install_pack(pack_dir: Path, entries: Iterable[UnpackedObject], count: int) -> str:
    """Write `count` entries as a pack and its index, fsync both, and rename them into
    place, the `.idx` last. Returns the pack's name (`pack-<checksum>`).

    A delta's base must be among the entries. The pack is fsynced whatever the
    `fsync` setting: what it replaces (loose objects, older packs) is deleted
    next, and may already be on disk.
    """
    token = f"{os.getpid()}_{secrets.token_hex(4)}"
    tmp_pack, tmp_idx = (pack_dir / f"{prefix}{token}" for prefix in TEMP_PREFIXES)
    pack_dir.mkdir(parents=True, exist_ok=True)
    bases: set[bytes | int] = set()

    def noting_bases() -> Iterator[UnpackedObject]:
        for entry in entries:
            if entry.delta_base is not None:
                bases.add(entry.delta_base)
            yield entry

    try:
        with open(tmp_pack, "xb") as f:
            offsets, checksum = write_pack_data(f, noting_bases(), DEFAULT_OBJECT_FORMAT,
                                                num_records=count)
            if not bases <= offsets.keys():
                raise ValueError("a delta's base is missing from the pack")
            f.flush()
            os.fsync(f.fileno())
        with open(tmp_idx, "xb") as f:
            rows = sorted((sha, offset, crc) for sha, (offset, crc) in offsets.items())
            write_pack_index(f, rows, checksum, version=2)
            f.flush()
            os.fsync(f.fileno())
        name = f"pack-{checksum.hex()}"
        os.chmod(tmp_pack, 0o444)
        os.chmod(tmp_idx, 0o444)
        os.replace(tmp_pack, pack_dir / f"{name}.pack")
        os.replace(tmp_idx, pack_dir / f"{name}.idx")
    except BaseException:
        tmp_pack.unlink(missing_ok=True)
        tmp_idx.unlink(missing_ok=True)
        raise
    fsync_dir(pack_dir)
    return name
