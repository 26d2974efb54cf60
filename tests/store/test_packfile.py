"""agentfs's deltas in packs written through dulwich's writers, checked against the
real `git`: delta instructions, OFS_DELTA and REF_DELTA bases, the `.idx`.

Each pack written here is read back by `git index-pack` (whose `.idx` must be
byte for byte the one written), `git verify-pack`, `git cat-file` and dulwich.
Deltas are also decoded by a strict decoder written from the format's text.
"""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
from pathlib import Path

import pytest
from dulwich.objects import Blob, Commit, Tag, Tree
from dulwich.pack import apply_delta
from dulwich.repo import Repo
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentfs.store.git import packfile, packing
from agentfs.store.git.packfile import (
    _common_suffix,
    common_prefix,
    delta,
    install_pack,
    make_delta,
    whole,
)
from tests.conftest import git

BLOB, COMMIT, TAG, TREE = (kind.type_num for kind in (Blob, Commit, Tag, Tree))
TYPE_NAMES = {kind.type_num: kind.type_name for kind in (Blob, Commit, Tag, Tree)}

#: Sizes where an encoding changes: the 4 bits of an entry header's first byte, a
#: varint's 7 bits, a copy's 16 bits (0x10000 is its "size 0"), the prefix search's block.
BOUNDARY_SIZES = [0, 1, 15, 16, 127, 128, 2047, 2048, 4095, 4096, 4097,
                  0xFFFF, 0x10000, 0x10001, 0x1FFFF, 0x20000]


def strict_apply(base: bytes, delta: bytes, copies: list[int] | None = None) -> bytes:
    """A delta applied as `gitformat-pack` describes it, refusing anything Git would:
    wrong sizes, the reserved opcode 0, a copy outside the base, a short insert.
    The offsets copies start at are added to `copies`."""
    at = 0

    def varint() -> int:
        nonlocal at
        value = shift = 0
        while True:
            byte = delta[at]
            at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    assert varint() == len(base), "source size"
    size = varint()
    out = bytearray()
    while at < len(delta):
        op = delta[at]
        at += 1
        if op & 0x80:
            offset = length = 0
            for i in range(4):
                if op & (1 << i):
                    offset |= delta[at] << (8 * i)
                    at += 1
            for i in range(3):
                if op & (0x10 << i):
                    length |= delta[at] << (8 * i)
                    at += 1
            length = length or 0x10000
            if copies is not None:
                copies.append(offset)
            assert offset + length <= len(base), "copy outside the base"
            out += base[offset : offset + length]
        else:
            assert op, "opcode 0 is reserved"
            assert at + op <= len(delta), "insert past the delta's end"
            out += delta[at : at + op]
            at += op
    assert len(out) == size, "target size"
    return bytes(out)


def check_delta(base: bytes, target: bytes) -> bytes:
    delta = make_delta(base, target)
    assert strict_apply(base, delta) == target
    rebuilt = apply_delta(base, delta)
    assert (b"".join(rebuilt) if isinstance(rebuilt, list) else rebuilt) == target
    return delta


def edited(base: bytes, edits: list[tuple[int, int, bytes]]) -> bytes:
    target = bytearray(base)
    for offset, cut, insert in edits:
        at = min(offset, len(target))
        target[at : at + cut] = insert
    return bytes(target)


# --- deltas --------------------------------------------------------------------------


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(size=st.sampled_from(BOUNDARY_SIZES), seed=st.integers(0, 2**32), edits=st.lists(
    st.tuples(st.integers(0, 0x20000), st.integers(0, 300), st.binary(max_size=300)),
    max_size=4))
def test_edits_of_bases_of_boundary_sizes_round_trip(size: int, seed: int, edits) -> None:
    base = random.Random(seed).randbytes(size)
    check_delta(base, edited(base, edits))


@settings(max_examples=200, deadline=None)
@given(base=st.binary(max_size=600), target=st.binary(max_size=600))
def test_unrelated_bytes_round_trip(base: bytes, target: bytes) -> None:
    check_delta(base, target)


@pytest.mark.parametrize("at", [0, 1, 0xFFFE, 0xFFFF, 0x10000, 0x10001, 0x1FFFE, 0x1FFFF,
                                0x20000, 0x2FFFF])
def test_copies_around_the_64k_boundary_round_trip(at: int) -> None:
    base = random.Random(at).randbytes(0x30000)
    for target in (base[:at] + b"!" + base[at + 1 :], base[:at] + base[at + 1 :],
                   base[:at] + b"inserted" + base[at:], base[:at], base[at:]):
        delta = check_delta(base, target)
        assert len(delta) < 200  # copies, not the base inserted again


def test_no_copy_starts_past_what_its_32_bit_offset_holds(monkeypatch) -> None:
    """A copy's offset has 4 bytes: in a base over 4 GiB (here, over the limit
    lowered to 5,000 bytes) what lies past them is inserted, never copied from an
    offset cut to 32 bits."""
    monkeypatch.setattr(packfile, "_MAX_OFFSET", 5000)
    base = random.Random(3).randbytes(0x12000)
    for target in (base[:100] + b"x" + base[101:], base[:7000] + b"x" + base[7001:], base + b"x"):
        copies: list[int] = []
        assert strict_apply(base, make_delta(base, target), copies) == target
        assert copies and max(copies) < 5000


def test_inserts_are_cut_at_127_bytes() -> None:
    for size in (126, 127, 128, 254, 255, 1000):
        delta = check_delta(b"", bytes(range(256)) * 4)
        delta = check_delta(b"x", b"y" * size)
        assert delta.count(0x7F) >= size // 127


@settings(max_examples=300, deadline=None)
@given(common=st.integers(0, 20000), tail_a=st.binary(max_size=3), tail_b=st.binary(max_size=3),
       seed=st.integers(0, 2**32))
def test_common_prefix_and_suffix_are_the_naive_ones(common, tail_a, tail_b, seed) -> None:
    shared = random.Random(seed).randbytes(common)
    a, b = shared + tail_a, shared + tail_b
    naive = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                 min(len(a), len(b)))
    assert common_prefix(a, b) == naive
    ra, rb = a[::-1], b[::-1]
    assert _common_suffix(ra, rb, min(len(a), len(b))) == naive
    assert _common_suffix(ra, rb, naive // 2) == naive // 2


# --- packs read by git ----------------------------------------------------------------


def raw_id(type_num: int, data: bytes) -> bytes:
    header = b"%s %d\0" % (TYPE_NAMES[type_num], len(data))
    return hashlib.sha1(header + data, usedforsecurity=False).digest()


class Built:
    """A pack written by `install_pack` into a bare repository, and what it should hold."""

    def __init__(self, tmp_path: Path) -> None:
        self.repo = tmp_path / "repo.git"
        if not self.repo.exists():
            git(tmp_path, "init", "-q", "--bare", str(self.repo))
        self.pack_dir = self.repo / "objects" / "pack"
        self.objects: dict[bytes, tuple[int, bytes]] = {}
        self.entries: list[tuple] = []  # ("whole", sha) or ("delta", sha, base, delta)

    def whole(self, type_num: int, data: bytes) -> bytes:
        sha = raw_id(type_num, data)
        if sha not in self.objects:
            self.objects[sha] = (type_num, data)
            self.entries.append(("whole", sha))
        return sha

    def delta(self, base: bytes, data: bytes) -> bytes:
        """A delta, as `packing.py` makes them: never for an empty object (Git reads
        no delta under 4 bytes; `packing.DELTA_MIN` keeps them far longer)."""
        type_num = self.objects[base][0]
        if not data:
            return self.whole(type_num, data)
        sha = raw_id(type_num, data)
        if sha not in self.objects:
            self.objects[sha] = (type_num, data)
            self.entries.append(("delta", sha, base, make_delta(self.objects[base][1], data)))
        return sha

    def write(self) -> Path:
        entries = [whole(entry[1], *self.objects[entry[1]]) if entry[0] == "whole"
                   else delta(entry[1], entry[2], entry[3]) for entry in self.entries]
        return self.pack_dir / install_pack(self.pack_dir, entries, len(entries))


def check_with_git(built: Built, base: Path, *, index_version: str = "2") -> None:
    """Git reads the pack: its own index of it is ours, byte for byte, `verify-pack`
    and `fsck` pass, and `cat-file` gives every object back."""
    theirs = base.parent.parent.parent.parent / f"git-{base.name}.idx"
    git(base.parent, "index-pack", "--strict", f"--index-version={index_version}",
        "-o", str(theirs), f"{base}.pack")
    assert theirs.read_bytes() == Path(f"{base}.idx").read_bytes()
    theirs.unlink()
    listed = git(built.repo, "verify-pack", "-v", f"{base}.idx")
    assert f"{base}.pack: ok" in listed
    git(built.repo, "fsck", "--strict", "--no-dangling")
    ids = list(built.objects)
    done = subprocess.run(["git", "cat-file", "--batch"], cwd=built.repo, check=True,
                          capture_output=True, input=b"".join(s.hex().encode() + b"\n" for s in ids))
    out, at = done.stdout, 0
    for sha in ids:
        end = out.index(b"\n", at)
        name, kind, size = out[at:end].split()
        type_num, data = built.objects[sha]
        assert (name, kind, int(size)) == (sha.hex().encode(), TYPE_NAMES[type_num], len(data))
        assert out[end + 1 : end + 1 + len(data)] == data
        at = end + 1 + len(data) + 1
    store = Repo(str(built.repo)).object_store  # dulwich, agentfs's own reader
    try:
        for pack in store.packs:
            pack.check()
        for sha in ids:
            assert store.get_raw(sha.hex().encode()) == built.objects[sha]
    finally:
        store.close()


def a_tree_commit_and_tag(built: Built, blobs: list[bytes]) -> None:
    entries = sorted((b"f%05d" % i, sha) for i, sha in enumerate(blobs))
    tree = built.whole(TREE, b"".join(b"100644 " + name + b"\0" + sha for name, sha in entries))
    commit = built.whole(COMMIT, b"tree %s\nauthor a <a@a> 1 +0000\ncommitter a <a@a> 1 +0000"
                         b"\n\nm\n" % tree.hex().encode())
    built.whole(TAG, b"object %s\ntype commit\ntag v\ntagger a <a@a> 1 +0000\n\nt\n"
                % commit.hex().encode())


def test_objects_of_boundary_sizes_and_deltas_between_them_are_read_by_git(
    tmp_path: Path
) -> None:
    built = Built(tmp_path)
    rng = random.Random(7)
    blobs = []
    for size in [*BOUNDARY_SIZES, 16 * 1024 * 1024 + 1]:
        blob = built.whole(BLOB, rng.randbytes(size))
        blobs.append(blob)
        data = built.objects[blob][1]
        for at in {0, size // 2, max(size - 1, 0), 0xFFFF, 0x10000} if size < 2**20 else {size // 2}:
            blobs.append(built.delta(blob, data[:at] + b"changed" + data[at + 1 :]))
        if size < 2**20:
            blobs.append(built.delta(blobs[-1], built.objects[blobs[-1]][1] + b"chained"))
    a_tree_commit_and_tag(built, blobs)
    check_with_git(built, built.write())


def test_a_pack_of_thousands_of_objects_fills_every_fanout_bucket(tmp_path: Path) -> None:
    built = Built(tmp_path)
    blobs = [built.whole(BLOB, b"%d\n" % n) for n in range(3000)]
    assert len({sha[0] for sha in blobs}) == 256
    a_tree_commit_and_tag(built, blobs)
    check_with_git(built, built.write())


def test_git_packs_with_large_offsets_and_ref_deltas_are_read_and_merged(tmp_path: Path) -> None:
    """Packs made by Git: REF_DELTA entries, a 64-bit offset table, objects in two
    packs at once; merged through dulwich, every object is still there for Git."""
    work = tmp_path / "work"
    git(tmp_path, "init", "-q", str(work))
    lines = [f"line {n} " + "x" * 60 + "\n" for n in range(400)]
    for n in range(12):
        lines[n * 7] = f"changed in {n}\n"
        (work / "f.txt").write_text("".join(lines))
        (work / f"g{n}.txt").write_text(f"{n}\n" * 300)
        git(work, "add", "-A")
        git(work, "commit", "-q", "-m", f"c{n}")
    objects = git(work, "rev-list", "--objects", "--all")
    pack_dir = work / ".git" / "objects" / "pack"
    ids = [line.split()[0] for line in objects.splitlines()]
    half = len(ids) // 2  # the second half is in both packs
    for part, extra in ((ids, []), (ids[half:], ["--delta-base-offset"])):
        made = subprocess.run(["git", "pack-objects", *extra, str(pack_dir / "pack")], cwd=work,
                              input="\n".join(part) + "\n", text=True, capture_output=True,
                              check=True).stdout.strip()
        idx = pack_dir / f"pack-{made}.idx"
        idx.chmod(0o644)
        git(work, "index-pack", "--index-version=2,100", "-o", str(idx),
            str(pack_dir / f"pack-{made}.pack"))
    git(work, "prune-packed")
    names = sorted(p.stem for p in pack_dir.glob("*.idx"))
    merged = packing.merge_with_dulwich(work / ".git", names)
    assert [p.stem for p in pack_dir.glob("*.idx")] == [merged]
    git(work, "fsck", "--strict", "--no-dangling")
    done = subprocess.run(["git", "cat-file", "--batch-check"], cwd=work, text=True, check=True,
                          input="\n".join(ids) + "\n", capture_output=True).stdout
    assert "missing" not in done and len(done.splitlines()) == len(ids)


def test_a_ref_delta_may_come_before_its_base_but_not_without_it(tmp_path: Path) -> None:
    built = Built(tmp_path)
    base_data = random.Random(1).randbytes(5000)
    base, target = raw_id(BLOB, base_data), raw_id(BLOB, base_data + b"tail")
    built.objects = {base: (BLOB, base_data), target: (BLOB, base_data + b"tail")}
    instructions = make_delta(base_data, base_data + b"tail")
    entries = [delta(target, base, instructions), whole(base, BLOB, base_data)]
    check_with_git(built, built.pack_dir / install_pack(built.pack_dir, entries, 2))

    with pytest.raises(ValueError, match="base is missing"):
        install_pack(built.pack_dir, [delta(target, base, instructions)], 1)
    assert not [p for p in os.listdir(built.pack_dir) if p.startswith("tmp_")]


def packs_of_random_objects(tmp_path: Path, data) -> None:
    built = Built(tmp_path)
    rng = random.Random(data.draw(st.integers(0, 2**32)))
    for _ in range(data.draw(st.integers(1, 12))):
        shas = list(built.objects)
        if shas and data.draw(st.booleans()):
            base = data.draw(st.sampled_from(shas))
            edits = data.draw(st.lists(st.tuples(
                st.integers(0, 0x12000), st.integers(0, 0x11000),
                st.binary(max_size=400)), min_size=1, max_size=3))
            built.delta(base, edited(built.objects[base][1], edits))
        else:
            size = data.draw(st.sampled_from([*BOUNDARY_SIZES, 0x12345]))
            built.whole(BLOB, rng.randbytes(size))
    check_with_git(built, built.write())
    for path in built.pack_dir.iterdir():
        path.unlink()


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_random_objects_and_deltas_in_a_pack_are_read_by_git(tmp_path: Path, data) -> None:
    packs_of_random_objects(tmp_path, data)


@pytest.mark.slow
@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_many_random_packs_are_read_by_git(tmp_path: Path, data) -> None:
    packs_of_random_objects(tmp_path, data)
