"""Atomic writes into an open folder (`atomic_write_at`, the file tools' writes): the
file is either the old one or the new one, and no temp file is left either way."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from agentfs.store.atomic import atomic_write_at


class Killed(BaseException):
    """Stands for the process dying: no handler of the code under test may see it."""


def _folder(path: Path) -> int:
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY)


def test_a_write_killed_right_after_its_rename_leaves_the_new_file(tmp_path, monkeypatch):
    (tmp_path / "f.md").write_text("old")
    real = os.rename

    def rename_then_die(*args, **kwargs):
        real(*args, **kwargs)
        raise Killed

    monkeypatch.setattr(os, "rename", rename_then_die)
    fd = _folder(tmp_path)
    try:
        with pytest.raises(Killed):  # not turned into an OSError by the cleanup
            atomic_write_at(fd, "f.md", b"new")
    finally:
        os.close(fd)
    assert (tmp_path / "f.md").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.md"]


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path, monkeypatch):
    (tmp_path / "f.md").write_text("old")

    def disk_full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", disk_full)
    fd = _folder(tmp_path)
    try:
        with pytest.raises(OSError, match="No space left"):
            atomic_write_at(fd, "f.md", b"new")
    finally:
        os.close(fd)
    assert (tmp_path / "f.md").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.md"]
