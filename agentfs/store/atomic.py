"""Crash-safe file writes: temp file, fsync, rename (and optionally fsync of the directory)."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path


def atomic_write(
    path: Path, data: bytes | Iterable[bytes], *, tmp_dir: Path | None = None,
    sync_dir: bool = False,
) -> None:
    """Replace `path` with `data` so a reader sees the old or the new bytes, never a mix.

    The temp file is made in `tmp_dir` when given (agentfs passes a folder
    inside `.git`, so a crash never leaves a stray file where Git or the
    user would see it), else beside `path`. The data is fsynced before the
    rename, so the file is never found empty or cut short after a crash;
    with `sync_dir` the rename itself is fsynced too, so the new file also
    survives a power loss that follows at once (see `fsync` in
    docs/configuration.md). `data` may be chunks (a file too big to hold): their
    folders are then made first, as chunks cannot be written twice.
    """
    if not isinstance(data, bytes):
        path.parent.mkdir(parents=True, exist_ok=True)
        if tmp_dir is not None:
            tmp_dir.mkdir(parents=True, exist_ok=True)
    for attempt in range(2):
        try:
            _write(path, data, tmp_dir, sync_dir)
            return
        except FileNotFoundError:
            if attempt or not isinstance(data, bytes):
                raise
            # the folders are made on first use only: mkdir costs a syscall per write
            path.parent.mkdir(parents=True, exist_ok=True)
            if tmp_dir is not None:
                tmp_dir.mkdir(parents=True, exist_ok=True)


def _write(path: Path, data: bytes | Iterable[bytes], tmp_dir: Path | None, sync_dir: bool) -> None:
    chunks = not isinstance(data, bytes)
    if tmp_dir is not None and not (  # chunks are written once: the device checked first
            chunks and os.stat(tmp_dir).st_dev != os.stat(path.parent).st_dev):
        try:
            _write_via(tmp_dir / _temp_name(path), path, data, sync_dir)
            return
        except OSError as exc:
            if exc.errno != errno.EXDEV or chunks:  # another filesystem: a temp beside it
                raise
    _write_via(path.with_name("." + _temp_name(path)), path, data, sync_dir)


def _temp_name(path: Path) -> str:
    return f"{os.getpid()}-{os.urandom(4).hex()}-{path.name}.tmp"


#: The names of the temp files made here (`_temp_name`, `replace_derived`).
_TEMP = re.compile(r"([0-9]{1,9})-[0-9a-f]{8}(?:-.+)?\.tmp", re.DOTALL)


def _fill(fd: int, data: bytes | Iterable[bytes], mode: int) -> None:
    """Give the new file `fd` its mode and all of `data`, on disk before it is renamed."""
    os.fchmod(fd, mode)
    for chunk in [data] if isinstance(data, bytes) else data:
        view = memoryview(chunk)
        while view:
            view = view[os.write(fd, view) :]
    os.fsync(fd)


def _write_via(tmp: Path, path: Path, data: bytes | Iterable[bytes], sync_dir: bool) -> None:
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)  # keep an executable bit
    except FileNotFoundError:
        mode = 0o644
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        _fill(fd, data, mode)
    except OSError as exc:  # os.write names no file (a full disk): say which one
        tmp.unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
    except BaseException:  # chunks that failed to come
        tmp.unlink(missing_ok=True)
        raise
    finally:
        os.close(fd)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sync_dir:
        fsync_dir(path.parent)


def atomic_write_at(dir_fd: int, name: str, data: bytes, *, tmp_dir: Path | None = None) -> None:
    """`atomic_write` of the file `name` in the open folder `dir_fd`: the file
    replaced is the one in that folder, wherever its path leads by now.

    The temp file is made in `tmp_dir` when given and on the same file system,
    else beside the file (a hidden name), never through a symlink.
    """
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        mode = stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) else 0o644
    except FileNotFoundError:
        mode = 0o644
    temp = _temp_name(Path(name))
    if tmp_dir is not None:
        tmp_dir.mkdir(parents=True, exist_ok=True)
        tmp_fd = os.open(tmp_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            _write_at(tmp_fd, temp, dir_fd, name, data, mode=mode)
            return
        except OSError as exc:
            if exc.errno != errno.EXDEV:  # another filesystem: fall back to a temp beside it
                raise
        finally:
            os.close(tmp_fd)
    _write_at(dir_fd, "." + temp, dir_fd, name, data, mode=mode)


def _write_at(tmp_fd: int, temp: str, dir_fd: int, name: str, data: bytes, *,
              mode: int) -> None:
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600, dir_fd=tmp_fd)
    try:
        try:
            _fill(fd, data, mode)
        finally:
            os.close(fd)
        os.rename(temp, name, src_dir_fd=tmp_fd, dst_dir_fd=dir_fd)
    except OSError:  # not renamed: the temp file goes (a rename that happened stays)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=tmp_fd)
        raise


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


def replace_derived(path: Path, data: bytes, tmp_dir: Path) -> bool:
    """Replace `path` with `data` through a temp file in `tmp_dir`, not fsynced: for
    files agentfs derives and can rebuild (caches), where a crash may leave the old
    bytes or a damaged file, never a mix in place. False if it could not be written
    (a cache that cannot be written is not an error)."""
    tmp = tmp_dir / f"{os.getpid()}-{os.urandom(4).hex()}.tmp"
    for attempt in range(2):
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
            return True
        except FileNotFoundError:
            if attempt:
                break
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp_dir.mkdir(parents=True, exist_ok=True)
        except OSError:
            break
    with contextlib.suppress(OSError):
        tmp.unlink(missing_ok=True)
    return False


def purge_stale_temps(tmp_dir: Path) -> None:
    """Delete temp files in `tmp_dir` whose writing process no longer exists: only
    names as this module makes them (`<pid>-<8 hex digits>[-<name>].tmp`), since the
    folder may hold other files whose names start with digits and a dash (the caches
    of a trace named `2024-notes`)."""
    try:
        names = os.listdir(tmp_dir)
    except FileNotFoundError:
        return
    for name in names:
        made = _TEMP.fullmatch(name)
        if made is not None and not alive(int(made[1])):
            with contextlib.suppress(OSError):  # gone meanwhile, or not a file after all
                (tmp_dir / name).unlink()


def alive(pid: int) -> bool:
    """Whether process `pid` exists (one we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
