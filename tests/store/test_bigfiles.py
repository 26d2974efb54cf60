"""Big work-tree files (a bash command may write files of a gigabyte) are committed,
packed, diffed and restored a chunk at a time: what agentfs holds in memory does not
grow with the file. Checked with the real `git`."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentfs.errors import GitStateError
from agentfs.store.git import objects, packing
from agentfs.store.git import repo as gitrepo
from agentfs.store.git.objects import FileChangedError
from agentfs.store.git.repo import GitRepo, init_repo
from tests.conftest import assert_git_clean, git


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    init_repo(root)
    return root


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files over 64 bytes count as big, and are read 7 bytes at a time."""
    monkeypatch.setattr(gitrepo, "STREAM_BYTES", 64)
    monkeypatch.setattr(objects, "HASH_CHUNK", 7)


def content(n: int) -> bytes:
    return b"".join(b"line %d of a big file\n" % i for i in range(n))


#: Commits a 256 MB file (sparse: all zeros) with 128 MB of address space to spare.
LIMITED = r"""
import resource, sys
from pathlib import Path
from agentfs.store.git.repo import GitRepo
root = Path(sys.argv[1])
repo = GitRepo(root)
with open("/proc/self/status") as f:
    size = next(int(line.split()[1]) for line in f if line.startswith("VmSize:")) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + 128 * 2**20, resource.RLIM_INFINITY))
print(repo.commit_worktree(["big.bin"], b"big\n").decode())
"""


def test_a_file_bigger_than_the_memory_left_is_committed(root: Path) -> None:
    with open(root / "big.bin", "wb") as f:
        f.truncate(256 * 2**20)
    done = subprocess.run([sys.executable, "-c", LIMITED, str(root)], capture_output=True,
                          text=True, check=False, cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr[-2000:]
    assert git(root, "rev-parse", "main").strip() == done.stdout.strip()
    assert git(root, "cat-file", "-s", "main:big.bin").strip() == str(256 * 2**20)
    assert_git_clean(root)


def test_a_big_file_is_committed_byte_for_byte_with_its_mode(
    root: Path, small_chunks: None
) -> None:
    (root / "big.txt").write_bytes(content(40))
    (root / "run.sh").write_bytes(b"#!/bin/sh\n" + content(10))
    (root / "run.sh").chmod(0o755)
    (root / "small.txt").write_bytes(b"small\n")
    repo = GitRepo(root)
    repo.commit_worktree(["big.txt", "run.sh", "small.txt"], b"files\n")
    assert subprocess.run(["git", "cat-file", "blob", "main:big.txt"], cwd=root,
                          capture_output=True, check=True).stdout == content(40)
    assert "100755" in git(root, "ls-tree", "main", "run.sh")
    assert_git_clean(root)  # the index entries hold the blobs' ids and the files' stat
    written = repo.objects.written
    repo.commit_worktree(["big.txt"], b"again\n")  # unchanged: no new blob
    assert repo.objects.written == written + 1  # the commit: blob and tree exist
    repo.close()


def test_a_big_file_cut_short_while_it_is_stored_is_refused_and_leaves_no_temp(
    root: Path,
) -> None:
    writer = GitRepo(root).objects
    with pytest.raises(FileChangedError, match="cut short"):
        writer.add_stream(io.BytesIO(b"only this"), 100)
    objects_dir = root / ".git" / "objects"
    assert not [p for p in objects_dir.rglob("tmp_obj_*")]
    assert writer.written == 0


def test_a_stored_big_blob_has_the_id_git_gives_it(root: Path, small_chunks: None) -> None:
    writer = GitRepo(root).objects
    data = content(30)
    sha = writer.add_stream(io.BytesIO(data), len(data))
    (root / "f").write_bytes(data)
    assert sha.decode() == git(root, "hash-object", "--no-filters", "f").strip()
    assert subprocess.run(["git", "cat-file", "blob", sha], cwd=root, capture_output=True,
                          check=True).stdout == data


def test_objects_too_big_to_pack_stay_loose_and_readable(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(packing, "PACK_OBJECT_MAX", 1000)
    (root / "big.txt").write_bytes(content(200))
    (root / "small.txt").write_bytes(b"small\n")
    repo = GitRepo(root)
    repo.commit_worktree(["big.txt", "small.txt"], b"files\n")
    big = git(root, "rev-parse", "main:big.txt").strip()
    small = git(root, "rev-parse", "main:small.txt").strip()
    report = repo.pack()
    assert report is not None and report.packed >= 3  # commit, tree, small blob
    loose = packing.loose_objects(root / ".git" / "objects")[0]
    assert big.encode() in loose and small.encode() not in loose
    assert repo.objects.read_raw(big.encode())[1] == content(200)
    repo.close()
    assert_git_clean(root)


@pytest.mark.parametrize("with_git", [True, False], ids=["git", "dulwich"])
def test_a_merge_of_packs_leaves_big_objects_loose(
    root: Path, monkeypatch: pytest.MonkeyPatch, with_git: bool
) -> None:
    """Merging packs rewrites only what the packs hold: a big file's object stays
    loose (a step must not wait while it is compressed again)."""
    monkeypatch.setattr(packing, "PACK_OBJECT_MAX", 1000)
    monkeypatch.setattr(packing, "MIN_PACKS", 2)
    if not with_git:
        monkeypatch.setattr(packing, "GIT", None)
    repo = GitRepo(root)
    repo.packer.after_commit = lambda: None  # type: ignore[method-assign]
    (root / "big.txt").write_bytes(content(200))
    repo.commit_worktree(["big.txt"], b"big\n")
    big = git(root, "rev-parse", "main:big.txt").strip().encode()
    merged = []
    for n in range(3):
        (root / "small.txt").write_bytes(b"small %d\n" % n)
        repo.commit_worktree(["small.txt"], b"small\n")
        report = repo.pack()
        assert report is not None
        merged += report.merged
    assert merged  # the packs were merged ...
    assert big in packing.loose_objects(root / ".git" / "objects")[0]  # ... not the big one
    assert not any(big.decode() in git(root, "verify-pack", "-v", str(idx))
                   for idx in (root / ".git" / "objects" / "pack").glob("*.idx"))
    repo.close()
    assert_git_clean(root)


def test_a_blob_is_read_back_a_chunk_at_a_time_and_a_damaged_one_is_refused(
    root: Path, small_chunks: None
) -> None:
    repo = GitRepo(root)
    (root / "big.txt").write_bytes(content(50))
    repo.commit_worktree(["big.txt"], b"big\n")
    sha = git(root, "rev-parse", "main:big.txt").strip().encode()
    chunks = list(repo.objects.blob_chunks(sha))
    assert len(chunks) > 2 and b"".join(chunks) == content(50)
    repo.pack()  # packed now (small): read whole
    assert b"".join(repo.objects.blob_chunks(sha)) == content(50)
    other = repo.objects.add_stream(io.BytesIO(content(60)), len(content(60)))
    path = root / ".git" / "objects" / other[:2].decode() / other[2:].decode()
    path.chmod(0o644)
    path.write_bytes(zlib.compress(b"blob 5\0hello"))  # an object of other content
    with pytest.raises(GitStateError, match="damaged"):
        b"".join(repo.objects.blob_chunks(other))
    repo.close()


def test_a_big_file_the_repository_has_is_hashed_not_stored_again(
    root: Path, small_chunks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As `git hash-object -w`: a file whose blob exists (touched, or written again with
    the same bytes) is only hashed, never compressed and written again."""
    (root / "big.txt").write_bytes(content(40))
    repo = GitRepo(root)
    repo.commit_worktree(["big.txt"], b"big\n")

    def no_compression(*args: object) -> None:
        raise AssertionError("compressed again")

    monkeypatch.setattr(objects.zlib, "compressobj", no_compression)
    (root / "big.txt").write_bytes(content(40))
    repo.commit_worktree(["big.txt"], b"again\n")
    assert_git_clean(root)
    repo.close()


def test_a_big_file_rewritten_while_it_is_stored_is_read_again(
    root: Path, small_chunks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file cut short and written again while a step commits it (a program
    rewriting its output) is read again from its start: the commit holds what the
    file holds once it could be read whole."""
    (root / "big.txt").write_bytes(content(40))
    read = objects._next_bytes
    rewrites = [content(30), content(35)]

    def rewritten_meanwhile(f: io.BufferedReader, size: int) -> Iterator[bytes]:
        for n, chunk in enumerate(read(f, size)):
            if n == 2 and rewrites:
                (root / "big.txt").write_bytes(rewrites.pop(0))
            yield chunk

    monkeypatch.setattr(objects, "_next_bytes", rewritten_meanwhile)
    repo = GitRepo(root)
    repo.commit_worktree(["big.txt"], b"big\n")
    assert not rewrites
    assert subprocess.run(["git", "cat-file", "blob", "main:big.txt"], cwd=root,
                          capture_output=True, check=True).stdout == content(35)
    assert_git_clean(root)
    repo.close()


def test_a_big_file_that_keeps_shrinking_fails_the_commit_naming_it(
    root: Path, small_chunks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    (root / "big.txt").write_bytes(content(400))
    read = objects._next_bytes

    def shrinking(f: io.BufferedReader, size: int) -> Iterator[bytes]:
        for n, chunk in enumerate(read(f, size)):
            if n == 1:
                os.truncate(root / "big.txt", os.stat(root / "big.txt").st_size - 10)
            yield chunk

    monkeypatch.setattr(objects, "_next_bytes", shrinking)
    repo = GitRepo(root)
    with pytest.raises(FileChangedError, match="big.txt: .*commit it again"):
        repo.commit_worktree(["big.txt"], b"big\n")
    assert repo.head() is None
    assert not list((root / ".git" / "objects").rglob("tmp_obj_*"))
    repo.close()


@pytest.mark.parametrize("swapped_for", ["folder", "symlink"])
def test_a_file_swapped_while_it_is_read_is_committed_as_what_it_is_then(
    root: Path, small_chunks: None, monkeypatch: pytest.MonkeyPatch, swapped_for: str
) -> None:
    """Swapped between its `lstat` and its opening: a folder there means the file is
    gone; a symlink is committed as a symlink (it is never followed)."""
    (root / "big.txt").write_bytes(content(40))
    repo = GitRepo(root)
    repo.commit_worktree(["big.txt"], b"big\n")
    real_stat = os.stat
    swaps = [swapped_for]

    def swapped_after(path: object, *args: object, **kwargs: object) -> os.stat_result:
        got = real_stat(path, *args, **kwargs)  # type: ignore[arg-type]
        if path == "big.txt" and swaps:
            (root / "big.txt").unlink()
            if swaps.pop() == "folder":
                (root / "big.txt").mkdir()
            else:
                (root / "big.txt").symlink_to("/etc/passwd")
        return got

    monkeypatch.setattr(os, "stat", swapped_after)
    repo.commit_worktree(["big.txt"], b"swapped\n")
    monkeypatch.undo()
    listed = git(root, "ls-tree", "main").strip()
    if swapped_for == "folder":
        assert listed == ""
    else:
        assert listed.startswith("120000 blob")
        assert git(root, "cat-file", "blob", "main:big.txt") == "/etc/passwd"
    repo.close()


#: The size and content of a 256 MB blob, read with 128 MB of address space to spare.
BLOB_READ = r"""
import hashlib, resource, sys
from pathlib import Path
from agentfs.store.git.repo import GitRepo
repo = GitRepo(Path(sys.argv[1]))
sha = sys.argv[2].encode()
with open("/proc/self/status") as f:
    size = next(int(line.split()[1]) for line in f if line.startswith("VmSize:")) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + 128 * 2**20, resource.RLIM_INFINITY))
digest = hashlib.sha256()
for chunk in repo.objects.blob_chunks(sha):
    digest.update(chunk)
print(repo.objects.size(sha), digest.hexdigest())
"""


def test_a_big_blob_loose_or_packed_by_git_gc_is_sized_and_read_a_chunk_at_a_time(
    root: Path,
) -> None:
    """However well it compressed: a megabyte of the object file may hold hundreds."""
    data = bytes(range(256)) * (2**20)  # 256 MB
    (root / "big.bin").write_bytes(data)
    GitRepo(root).commit_worktree(["big.bin"], b"big\n")
    sha = git(root, "rev-parse", "main:big.bin").strip()
    expected = [str(len(data)), hashlib.sha256(data).hexdigest()]
    for packed in (False, True):
        if packed:
            git(root, "gc", "-q")
            assert not packing.loose_objects(root / ".git" / "objects")[0]
        done = subprocess.run([sys.executable, "-c", BLOB_READ, str(root), sha],
                              capture_output=True, text=True, check=False,
                              cwd=Path(__file__).parents[2])
        assert done.returncode == 0, (packed, done.stderr[:2000])
        assert done.stdout.split() == expected


def test_packed_blobs_and_deltas_are_sized_and_read_back(root: Path) -> None:
    """Whole entries and deltas (OFS and REF), read back from packs Git wrote."""
    repo = GitRepo(root)
    versions = [content(400), content(400) + b"one more line\n", content(399)]
    shas = []
    for data in versions:
        (root / "f.txt").write_bytes(data)
        repo.commit_worktree(["f.txt"], b"version\n")
        shas.append(git(root, "rev-parse", "main:f.txt").strip().encode())
    for options in (["gc", "-q"],  # deltas against an offset in the pack
                    ["-c", "repack.useDeltaBaseOffset=false", "repack", "-a", "-d", "-f", "-q"]):
        git(root, *options)
        for sha, data in zip(shas, versions, strict=True):
            assert repo.objects.size(sha) == len(data)
            assert b"".join(repo.objects.blob_chunks(sha)) == data
    repo.close()
