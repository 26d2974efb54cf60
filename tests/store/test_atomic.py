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


def test_only_temp_files_of_dead_processes_are_purged_not_caches_named_like_them(
        tmp_path: Path) -> None:
    """The caches of a trace named `99999-x` start with digits and a dash, like a temp
    file's pid: they stay, and a folder among them is no error."""
    import subprocess
    import sys

    from agentfs.store.atomic import purge_stale_temps

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (tmp_path / f"{dead}-x.clean").mkdir()
    kept = [f"{dead}-x.names", f"{dead}-x.pickle", f"{dead}-notes.tmp", "12345678901234-abcdef12.tmp",
            f"{os.getpid()}-abcdef12.tmp"]  # its writer (this process) is alive
    for name in kept:
        (tmp_path / name).write_text("kept")
    stale = [f"{dead}-abcdef12.tmp", f"{dead}-abcdef12-trace.json.tmp"]
    for name in stale:
        (tmp_path / name).write_text("left by a killed process")
    purge_stale_temps(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*kept, f"{dead}-x.clean"])


def test_chunks_are_written_whole_and_failed_ones_leave_the_old_file(tmp_path: Path) -> None:
    from agentfs.store.atomic import atomic_write

    path, tmp_dir = tmp_path / "new" / "f.bin", tmp_path / "tmp"
    atomic_write(path, iter([b"one ", b"two ", b"three"]), tmp_dir=tmp_dir)
    assert path.read_bytes() == b"one two three"

    def failing():
        yield b"half"
        raise ValueError("the source broke")

    with pytest.raises(ValueError):
        atomic_write(path, failing(), tmp_dir=tmp_dir)
    assert path.read_bytes() == b"one two three"
    assert os.listdir(tmp_dir) == [] and os.listdir(path.parent) == ["f.bin"]


def test_chunks_for_another_file_system_are_written_once_beside_the_file(tmp_path: Path) -> None:
    """A temp folder on another device cannot be renamed from: chunks, which can be
    read only once, go to a temp file beside the target from the start."""
    from agentfs.store.atomic import atomic_write

    other = Path("/tmp") if os.stat("/tmp").st_dev != os.stat(tmp_path).st_dev else None
    if other is None:
        pytest.skip("no second file system here")
    tmp_dir = other / f"agentfs-test-{os.getpid()}"
    tmp_dir.mkdir(exist_ok=True)
    try:
        atomic_write(tmp_path / "f.bin", iter([b"a", b"b"]), tmp_dir=tmp_dir)
        assert (tmp_path / "f.bin").read_bytes() == b"ab"
        assert os.listdir(tmp_path) == ["f.bin"]
    finally:
        tmp_dir.rmdir()
