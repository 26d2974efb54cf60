"""Where the file tools may go: paths confined to the workspace (no `.git`), the
control folders read-only (`[tools] read_only`), one writer per file at a time,
and files opened without surprises: regular files only, and exactly the path
that was checked. A path is checked with its symlinks resolved
(`resolve_path`), then opened one component at a time from the workspace root
without following any symlink (`confined_dir`): a symlink swapped in between
the check and the open (by a bash command running beside the tools, say) makes
the call fail instead of leading it outside."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
import stat
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from agentfs.config import DEFAULT_READ_ONLY
from agentfs.errors import ConfigError
from agentfs.store.locking import FileLock
from agentfs.store.workspace import Workspace
from agentfs.tools.base import ToolContext, ToolFailure

__all__ = [
    "FILE_TOOL_TIMEOUT",
    "GIT_DIR",
    "WritePolicy",
    "change_lock",
    "confined_dir",
    "is_git_path",
    "open_folder",
    "open_regular",
    "open_regular_at",
    "resolve_path",
]

#: Seconds one `list_files` or `grep` call may take, walk and search together,
#: and how long a write waits for another writer of the same file.
FILE_TOOL_TIMEOUT = 10.0
GIT_DIR = ".git"
#: Paths share this many lock files, by a hash of the path, so their folder never grows.
LOCK_STRIPES = 64


def is_git_path(rel: PurePosixPath) -> bool:
    """Whether `rel` is in (or is) a `.git` directory at any depth, in any letter case."""
    return any(part.casefold() == GIT_DIR for part in rel.parts)


@dataclass(frozen=True)
class WritePolicy:
    """Which workspace paths the file tools may change: all but `.git` and `read_only`.

    `read_only` holds paths relative to the workspace root (`[tools] read_only`
    in agentfs.toml). A folder covers everything below it, and `.` the whole
    workspace. They are compared in any letter case, as `.git` is, so a
    case-insensitive disk gives no way round them.

    Raises:
        ConfigError: an entry is empty, absolute or climbs out with `..`.
    """

    read_only: tuple[str, ...] = DEFAULT_READ_ONLY
    _folded: tuple[tuple[str, ...], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_folded", tuple(_entry_parts(e) for e in self.read_only))

    def refusal(self, rel: PurePosixPath) -> str | None:
        """Why the file tools may not change `rel` (resolved, relative to the root), or None."""
        if is_git_path(rel):
            return ".git directories are off limits"
        folded = tuple(part.casefold() for part in rel.parts)
        for entry, parts in zip(self.read_only, self._folded, strict=True):
            if folded[: len(parts)] == parts:
                return (f"{entry} is read-only: the file tools may read it but not change it "
                        "(a person can change that with `[tools] read_only` in agentfs.toml)")
        return None


def _entry_parts(entry: Any) -> tuple[str, ...]:
    path = PurePosixPath(entry.strip()) if isinstance(entry, str) else None
    if path is None or not entry.strip() or path.is_absolute() or ".." in path.parts:
        raise ConfigError(
            f"[tools] read_only: {entry!r} is not a path inside the workspace",
            hint='give paths relative to the workspace root, such as "inbox" or "docs/final"',
        )
    return tuple(part.casefold() for part in path.parts)


def resolve_path(context: ToolContext, raw: Any, policy: WritePolicy | None = None) -> Path:
    """The absolute path `raw` leads to, with `..` and symlinks followed.

    Args:
        context: The tool's context; paths are relative to its root.
        raw: The path the model gave.
        policy: For a path about to be changed: what the tools may change.

    Returns:
        The resolved path, inside the workspace.

    Raises:
        ToolFailure: `raw` leads outside the workspace or into a `.git`
            directory, or `policy` refuses to let it change.
    """
    if not isinstance(raw, str) or not raw.strip():
        raise ToolFailure("'path' must be a non-empty string relative to the workspace")
    root = context.root.resolve()
    candidate = Path(raw)
    try:
        full = (candidate if candidate.is_absolute() else root / candidate).resolve()
    except (OSError, RuntimeError, ValueError) as exc:  # a symlink loop, a NUL character
        raise ToolFailure(f"{raw}: cannot be resolved ({exc})") from None
    try:
        rel = PurePosixPath(full.relative_to(root).as_posix())
    except ValueError:
        raise ToolFailure(f"{raw}: outside the workspace") from None
    if policy is not None:
        problem = policy.refusal(rel)
    else:
        problem = ".git directories are off limits" if is_git_path(rel) else None
    if problem is not None:
        raise ToolFailure(f"{raw}: {problem}")
    return full


# --- one change at a time ------------------------------------------------------------

_THREAD_LOCKS = tuple(threading.Lock() for _ in range(LOCK_STRIPES))


@contextmanager
def change_lock(root: Path, path: Path, timeout: float = FILE_TOOL_TIMEOUT) -> Iterator[None]:
    """Hold the lock for changing the workspace file `path`, for a read-modify-write.

    Threads of this process wait on a lock in memory; other processes (two
    runs of different traces) on `fcntl.flock` of a lock file in
    `.git/agentfs/locks/file-tools/`, which the kernel releases if the holder
    dies. Without a `.git` folder (not a workspace) only threads are kept apart.

    Raises:
        ToolFailure: another writer held the lock for `timeout` seconds.
    """
    root = root.resolve()
    rel = path.relative_to(root).as_posix()
    stripe = int.from_bytes(hashlib.sha256(rel.encode()).digest()[:4], "big") % LOCK_STRIPES
    busy = f"{rel}: another tool call is changing it; try again"
    deadline = time.monotonic() + timeout
    if not _THREAD_LOCKS[stripe].acquire(timeout=timeout):
        raise ToolFailure(busy)
    try:
        if not (root / GIT_DIR).is_dir():
            yield
            return
        lock_file = Workspace(root).lock_dir / "file-tools" / f"{stripe:02d}.lock"
        with FileLock(lock_file, wait=max(deadline - time.monotonic(), 0)) as lock:
            if not lock.held:
                raise ToolFailure(busy)
            yield
    finally:
        _THREAD_LOCKS[stripe].release()



# --- opening files -------------------------------------------------------------------

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC


def _swapped(raw: str) -> ToolFailure:
    return ToolFailure(f"{raw}: changed while it was being opened (a symlink took the place "
                       "of a folder or file on its way); try again")


def _open_child_dir(parent: int, name: str, raw: str, create: bool) -> int:
    """The folder `name` of the open folder `parent`, never through a symlink."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        if not create:
            raise
        # made meanwhile: opened below, if it is a real folder
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, dir_fd=parent)
        return _open_child_dir(parent, name, raw, create=False)
    except NotADirectoryError:  # O_DIRECTORY says this of a symlink too
        if stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
            raise _swapped(raw) from None
        raise FileNotFoundError(errno.ENOENT, f"{name} is not a folder") from None


def _parts(root: Path, path: Path) -> tuple[str, ...]:
    return path.relative_to(root).parts


@contextmanager
def confined_dir(root: Path, path: Path, raw: str, *,
                 create: bool = False) -> Iterator[tuple[int, str]]:
    """The folder holding `path`, open, and the name of `path` in it.

    Args:
        root: The workspace root; trusted, so followed if it is a symlink.
        path: A path `resolve_path` checked: resolved, inside `root`.
        raw: The path as the model gave it, for errors.
        create: Make the missing folders on the way.

    Yields:
        (folder descriptor, name); the name is `.` for the root itself.

    Raises:
        ToolFailure: a folder on the way is now a symlink.
        FileNotFoundError: a folder on the way is missing, or not a folder.
    """
    root = root.resolve()
    parts = _parts(root, path)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            child = _open_child_dir(fd, part, raw, create)
            os.close(fd)
            fd = child
        yield fd, parts[-1] if parts else "."
    finally:
        os.close(fd)


def open_folder(root: Path, path: Path, raw: str) -> int:
    """The folder `path` (checked by `resolve_path`), opened as `confined_dir` opens
    folders; the caller closes the descriptor."""
    with confined_dir(root, path, raw) as (parent, name):
        if name == ".":
            return os.dup(parent)
        return _open_child_dir(parent, name, raw, create=False)


def open_regular(root: Path, path: Path, raw: str) -> io.BufferedReader:
    """`path` (checked by `resolve_path`) opened for reading, exactly that file: a
    symlink swapped in on its way is refused (`confined_dir`). A directory, FIFO or
    device is refused too: a FIFO would block the run forever. A missing file
    raises `FileNotFoundError`."""
    with confined_dir(root, path, raw) as (parent, name):
        return open_regular_at(parent, name, raw)


def open_regular_at(parent: int, name: str, raw: str) -> io.BufferedReader:
    """The regular file `name` of the open folder `parent` (from `confined_dir`),
    opened for reading as `open_regular` opens it."""
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=parent)
    except NotADirectoryError:
        raise FileNotFoundError(errno.ENOENT, name) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a symlink
            raise _swapped(raw) from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        what = "is a directory; use list_files" if stat.S_ISDIR(mode) else "not a regular file"
        raise ToolFailure(f"{raw}: {what}")
    return os.fdopen(fd, "rb")
