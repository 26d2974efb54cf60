"""The blob id of a file in the work tree, as Git gives it (`file_blob_id`)."""

from __future__ import annotations

import io
import os
import zlib
from pathlib import Path

import pytest

from agentfs.store.git import objects
from agentfs.store.git.objects import NULL_ID, file_blob_id, stated_size
from agentfs.store.git.repo import init_repo
from tests.conftest import git


@pytest.mark.parametrize("size", [0, 1, 6, 7, 8, 50])
def test_a_file_hashed_a_chunk_at_a_time_has_the_id_git_gives_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    monkeypatch.setattr(objects, "HASH_CHUNK", 7)  # several chunks, and a last short one
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(range(size)))
    assert file_blob_id(path, os.lstat(path)).decode() == git(
        tmp_path, "hash-object", "--no-filters", "f.bin").strip()


def test_a_symlink_has_the_id_git_stores_for_it(tmp_path: Path) -> None:
    init_repo(tmp_path)
    (tmp_path / "link").symlink_to("no/such/target")
    git(tmp_path, "add", "link")
    staged = git(tmp_path, "ls-files", "-s", "link").split()[1]
    assert file_blob_id(tmp_path / "link", os.lstat(tmp_path / "link")).decode() == staged


def test_a_file_swapped_for_a_fifo_or_a_link_after_its_lstat_is_not_read(tmp_path: Path) -> None:
    """The `lstat` said a regular file; what is opened then is a FIFO (whose read would
    block) or a link (which would be followed): neither is read."""
    path = tmp_path / "f"
    path.write_text("x")
    st = os.lstat(path)
    path.unlink()
    os.mkfifo(path)
    assert file_blob_id(path, st) == NULL_ID
    path.unlink()
    (tmp_path / "target").write_text("x")
    path.symlink_to("target")
    with pytest.raises(OSError):
        file_blob_id(path, st)


@pytest.mark.parametrize(("raw", "size"), [
    (b"blob 12\0hello world!", 12),
    (b"blob 40000000\0", 40_000_000),
    (b"blob 40", None),  # cut before its NUL: the digits so far are no size
    (b"blob 12", None),
    (b"", None),
])
def test_a_loose_objects_stated_size_needs_its_whole_header(raw: bytes, size: int | None) -> None:
    f = io.BytesIO(zlib.compress(raw))
    assert stated_size(f) == size
    assert f.tell() == 0
    assert stated_size(io.BytesIO(b"not zlib")) is None
