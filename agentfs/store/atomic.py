"""Crash-safe file writes: temp file, fsync, rename (and optionally fsync of the directory)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


def atomic_write(
    path: Path, data: bytes, *, tmp_dir: Path | None = None, sync_dir: bool = False
) -> None:
    """Replace `path` with `data` so a reader sees the old or the new bytes, never a mix.

    The temp file is made in `tmp_dir` when given (agentfs passes a folder
    inside `.git`, so a crash never leaves a stray file where Git or the
    user would see it), else beside `path`. The data is fsynced before the
    rename, so the file is never found empty or cut short after a crash;
    with `sync_dir` the rename itself is fsynced too, so the new file also
    survives a power loss that follows at once (see `fsync` in
    docs/configuration.md).
    """
    for attempt in range(2):
        try:
            _write(path, data, tmp_dir, sync_dir)
            return
        except FileNotFoundError:
            if attempt:
                raise
            # the folders are made on first use only: mkdir costs a syscall per write
            path.parent.mkdir(parents=True, exist_ok=True)
            if tmp_dir is not None:
                tmp_dir.mkdir(parents=True, exist_ok=True)


def _write(path: Path, data: bytes, tmp_dir: Path | None, sync_dir: bool) -> None:
    if tmp_dir is not None:
        try:
            _write_via(tmp_dir / _temp_name(path), path, data, sync_dir)
            return
        except OSError as exc:
            if exc.errno != errno.EXDEV:  # another filesystem: fall back to a temp beside it
                raise
    _write_via(path.with_name("." + _temp_name(path)), path, data, sync_dir)


def _temp_name(path: Path) -> str:
    return f"{os.getpid()}-{os.urandom(4).hex()}-{path.name}.tmp"


def _write_via(tmp: Path, path: Path, data: bytes, sync_dir: bool) -> None:
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)  # keep an executable bit
    except FileNotFoundError:
        mode = 0o644
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sync_dir:
        fsync_dir(path.parent)


#: Creates of a file whose folder another process keeps removing (see `open_creating`).
CREATE_ATTEMPTS = 50


def open_creating(path: Path, flags: int, mode: int = 0o644) -> int:
    """`os.open` with `os.O_CREAT`, making the missing parent folders on the way.

    Git removes empty folders inside `.git` at any time (`git gc` prunes empty
    `objects/xx/` folders, `pack-refs` empty ref folders), also between our
    `mkdir` and our create: the folder is then made again. Once the file exists
    its folder is not empty and stays.
    """
    for _ in range(CREATE_ATTEMPTS):
        try:
            return os.open(path, flags | os.O_CREAT, mode)
        except FileNotFoundError:
            path.parent.mkdir(parents=True, exist_ok=True)
    return os.open(path, flags | os.O_CREAT, mode)  # removed every time: the error says so


def fsync_dir(directory: Path) -> None:
    """Make a rename or unlink inside `directory` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def purge_stale_temps(tmp_dir: Path) -> None:
    """Delete temp files in `tmp_dir` whose writing process no longer exists."""
    try:
        names = os.listdir(tmp_dir)
    except FileNotFoundError:
        return
    for name in names:
        pid_text = name.split("-", 1)[0]
        if pid_text.isdigit() and not alive(int(pid_text)):
            (tmp_dir / name).unlink(missing_ok=True)


def alive(pid: int) -> bool:
    """Whether process `pid` exists (one we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
