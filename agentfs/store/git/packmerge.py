"""Merging small packs into bigger ones, and the hints that let merges make deltas.

Packing a few hundred loose objects at a time (`packing.py`) makes many
small packs; Git looks an object up pack by pack, so they are merged, a few
at a time, keeping their sizes in a geometric progression (as
`git repack --geometric=2` does). A merge copies each entry as it is,
deltas included, so it costs little more than reading and writing the
bytes.

A pack's delta chains cannot start outside it (Git does not allow a pack
on disk to lean on another), so the first version of each path in a pack
is stored whole. Which earlier object it continues is written beside the
pack, in `.git/agentfs/packs/<pack>.bases` (it is inside `.git/agentfs`
because Git reports unknown files in `objects/pack` as garbage). When that
pack is merged with the one holding the earlier object, the first version
becomes a delta after all, against a version chosen by skip-deltas over
the packs' first versions, so chains stay short. The file is only a hint:
a pack without it (made by `git gc`, or by a process killed before it wrote
it) is merged as it is.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from agentfs.store.git.lineage import skip_delta_bases
from agentfs.store.git.packfile import (
    Entry,
    PackFormatError,
    PackReader,
    PackWriter,
    make_delta,
    object_count,
)

#: Merges wait until there are this many packs that may be merged.
MIN_PACKS = 8
#: Objects a merge may write at most; bigger packs are left as they are.
MERGE_LIMIT = 40_000
#: Deltas a reader may have to apply to rebuild an object of a merged pack.
MAX_DEPTH = 50
#: A delta is kept only if it is smaller than this share of its object ...
DELTA_WORTH = 0.5
#: ... and none is tried for objects smaller than this (a state file, a small
#: folder): it would save a few dozen bytes for the time of a larger one.
DELTA_MIN = 512

#: Prefix of a `.bases` file being written.
HINT_TEMP = "tmp_bases_"


def packs_to_merge(pack_dir: Path) -> list[str]:
    """The small packs to merge so that, sorted by size, each pack holds at least
    twice as many objects as all smaller ones together; [] if none are due.

    Packs with a `.keep`, `.promisor` or `.mtimes` file are never merged, nor any
    pack while a `multi-pack-index` lists them, and a merge never writes more than
    `MERGE_LIMIT` objects.
    """
    try:
        files = set(os.listdir(pack_dir))
    except FileNotFoundError:
        return []
    if "multi-pack-index" in files:
        return []
    sized = []
    for file in files:
        name = file[:-4]
        if not file.endswith(".idx") or f"{name}.pack" not in files:
            continue
        if any(f"{name}{ext}" in files for ext in (".keep", ".promisor", ".mtimes")):
            continue
        try:
            sized.append((object_count(pack_dir / file), name))
        except (OSError, PackFormatError):
            continue
    if len(sized) < MIN_PACKS:
        return []
    sized.sort()
    total, upto = 0, 0
    for i, (count, _) in enumerate(sized):
        if total + count > MERGE_LIMIT:
            break
        if i and count < 2 * total:
            upto = i + 1
        total += count
    return [name for _, name in sized[:upto]] if upto >= 2 else []


def merge_packs(git_dir: Path, names: list[str]) -> str | None:
    """Write one pack holding every object of the packs `names`, then delete them.

    Entries are copied as they are, deltas included. The first version of a
    path in each pack, stored whole there, becomes a delta against an earlier
    version in another of the packs when its `.bases` hint names one (with
    skip-deltas over those first versions, so chains stay short). Returns the
    new pack's name; None if one of the packs is gone (another process merged
    it first), and then nothing is changed.
    """
    pack_dir = git_dir / "objects" / "pack"
    readers: list[PackReader] = []
    try:
        for name in names:
            readers.append(PackReader(pack_dir / name))
    except FileNotFoundError:
        for reader in readers:
            reader.close()
        return None
    try:
        merged = _merge(git_dir, readers)
    finally:
        for reader in readers:
            reader.close()
    for name in names:
        if name != merged:
            remove_pack(git_dir, name)
    return merged


def _merge(git_dir: Path, readers: list[PackReader]) -> str:
    hints: dict[bytes, bytes] = {}  # binary ids
    whole: dict[bytes, tuple[PackReader, int]] = {}  # object stored whole → its reader, entry
    reader_of: dict[bytes, PackReader] = {}
    for reader in readers:
        for sha, back in read_bases(git_dir, reader.base.name).items():
            hints[bytes.fromhex(sha.decode())] = bytes.fromhex(back.decode())
        for at, entry in enumerate(reader.entries):
            reader_of.setdefault(entry.sha, reader)
            if not entry.is_delta:
                whole.setdefault(entry.sha, (reader, at))
    # Link each whole object to the first version of its path's chain, in the
    # pack holding the object it continues.
    link: dict[bytes, bytes] = {}
    for sha in whole:
        hinted = hints.get(sha)
        if hinted is None or hinted not in reader_of:
            continue
        first = _chain_start(reader_of[hinted], hinted)
        if first is not None and first != sha and first in whole:
            link[sha] = first
    bases, _ = skip_delta_bases(link, whole)
    order = _packs_in_order(readers, bases, reader_of)
    heights = {id(reader): _height(reader) for reader in readers}
    count = len(reader_of)
    writer = PackWriter(git_dir / "objects" / "pack", count)
    depth: dict[bytes, int] = {}
    written_whole = set()
    try:
        for reader in order:
            for entry in reader.entries:
                if entry.sha in writer:
                    continue
                if entry.is_delta:
                    base = reader.base_of(entry)
                    assert base is not None
                    writer.add_compressed(entry.sha, entry.type_num, entry.size,
                                          reader.compressed(entry), base=base.sha)
                    depth[entry.sha] = depth.get(base.sha, 0) + 1
                    continue
                if _add_as_delta(writer, reader, entry, [bases.get(entry.sha), link.get(entry.sha)],
                                 whole, depth, heights[id(reader)]):
                    continue
                writer.add_compressed(entry.sha, entry.type_num, entry.size,
                                      reader.compressed(entry))
                written_whole.add(entry.sha)
        name = writer.install()
    except BaseException:
        writer.abort()
        raise
    write_bases(git_dir, name, {
        sha.hex().encode(): back.hex().encode()
        for sha, back in hints.items() if sha in written_whole and back not in writer
    })
    return name


def _add_as_delta(
    writer: PackWriter, reader: PackReader, entry: Entry, candidates: list[bytes | None],
    whole: dict[bytes, tuple[PackReader, int]], depth: dict[bytes, int], height: int,
) -> bool:
    """Write a whole object as a delta against the first candidate base that is in
    the new pack already, of its type (a delta takes its base's; the hints are only
    hints), keeps chains within `MAX_DEPTH`, and makes a delta worth it (the
    skip-delta base first, then the version it continues)."""
    if entry.size < DELTA_MIN:
        return False
    data = None
    for base in dict.fromkeys(candidates):
        if base is None or base not in writer or depth.get(base, 0) + 1 + height > MAX_DEPTH:
            continue
        base_reader, at = whole[base]
        if base_reader.entries[at].type_num != entry.type_num:
            continue
        if data is None:
            data = reader.inflate(entry)
        delta = make_delta(base_reader.inflate(base_reader.entries[at]), data)
        if len(delta) < DELTA_WORTH * len(data):
            writer.add_delta(entry.sha, base, delta)
            depth[entry.sha] = depth.get(base, 0) + 1
            return True
    return False


def _chain_start(reader: PackReader, sha: bytes) -> bytes | None:
    """The object at the start of `sha`'s delta chain in `reader` (stored whole)."""
    entry = reader.by_sha.get(sha)
    for _ in range(10 * MAX_DEPTH):
        if entry is None:
            return None
        if not entry.is_delta:
            return entry.sha
        entry = reader.base_of(entry)
    return None


def _height(reader: PackReader) -> int:
    """The longest delta chain in a pack."""
    depth: dict[int, int] = {}

    def of(entry_offset: int) -> int:
        chain = []
        at: int | None = entry_offset
        while at is not None and at not in depth:
            chain.append(at)
            base = reader.base_of(reader.by_offset[at])
            at = None if base is None else base.offset
        known = 0 if at is None else depth[at] + 1
        for offset in reversed(chain):
            depth[offset] = known
            known += 1
        return depth[entry_offset]

    return max((of(entry.offset) for entry in reader.entries), default=0)


def _packs_in_order(
    readers: list[PackReader], bases: dict[bytes, bytes], reader_of: dict[bytes, PackReader]
) -> list[PackReader]:
    """The packs, each after the packs holding the bases its first versions need
    (a loop, which real histories do not make, is broken anywhere)."""
    needs: dict[int, set[int]] = {id(reader): set() for reader in readers}
    for sha, base in bases.items():
        mine, theirs = reader_of[sha], reader_of[base]
        if mine is not theirs:
            needs[id(mine)].add(id(theirs))
    order: list[PackReader] = []
    placed: set[int] = set()
    remaining = list(readers)
    while remaining:
        ready = [r for r in remaining if needs[id(r)] <= placed] or remaining[:1]
        for reader in ready:
            order.append(reader)
            placed.add(id(reader))
        remaining = [r for r in remaining if id(r) not in placed]
    return order


# --- hints ------------------------------------------------------------------------


def bases_dir(git_dir: Path) -> Path:
    """Where the `.bases` hints of the packs are kept."""
    return git_dir / "agentfs" / "packs"


def _bases_path(git_dir: Path, name: str) -> Path:
    return bases_dir(git_dir) / f"{name}.bases"


def write_bases(git_dir: Path, name: str, bases: dict[bytes, bytes]) -> None:
    """Record which objects outside pack `name` its whole objects continue (hex ids)."""
    if not bases:
        return
    path = _bases_path(git_dir, name)
    tmp = path.with_name(f"{HINT_TEMP}{os.getpid()}_{secrets.token_hex(4)}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    with open(fd, "wb") as f:  # a hint: not fsynced, and half of one is still one
        f.write(b"".join(sha + b" " + back + b"\n" for sha, back in sorted(bases.items())))
    os.replace(tmp, path)


def read_bases(git_dir: Path, name: str) -> dict[bytes, bytes]:
    try:
        text = _bases_path(git_dir, name).read_bytes()
    except FileNotFoundError:
        return {}
    bases = {}
    for line in text.splitlines():
        sha, _, back = line.partition(b" ")
        if len(sha) == 40 and len(back) == 40:
            bases[sha] = back
    return bases


def remove_pack(git_dir: Path, name: str) -> None:
    """Delete a pack whose objects another pack holds: `.idx` first, so that it
    disappears for new readers at once; readers that have it open keep reading."""
    pack_dir = git_dir / "objects" / "pack"
    for ext in (".idx", ".pack", ".rev", ".bitmap"):
        (pack_dir / f"{name}{ext}").unlink(missing_ok=True)
    _bases_path(git_dir, name).unlink(missing_ok=True)
