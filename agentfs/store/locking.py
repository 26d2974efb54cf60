"""Every lock agentfs takes on a file, stated once.

There are two kinds, and every lock is one of them:

- **An flock on a lock file** (`FileLock`): the trace lock, the packing lock,
  the file tools' locks, index intents, the owner records of Git lock files.
  The kernel releases an flock when its process exits in any way, SIGKILL
  included, so such a lock is never stale; the file may stay behind and
  means nothing by itself.
- **A file created exclusively** (`create_exclusive`, `O_EXCL`): Git's
  `<file>.lock`, which `git` itself also takes. The file's existence is the
  lock, so one a killed holder left stays; telling such a lock from a live
  one is the caller's business (`agentfs/store/git/lockfiles.py`, which
  pairs it with an flock of the first kind).

A lock that is taken waits in one way (`retry`): attempts with a randomized
exponential backoff (1 ms doubling up to 50 ms) until a deadline. A wait of
0 tries once; a `FileLock` with no deadline (None) blocks in the kernel
instead, which wakes it the moment the lock is free.
"""

from __future__ import annotations

import fcntl
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Self, TypeVar

from agentfs.store.atomic import open_creating

__all__ = ["FileLock", "Lock", "create_exclusive", "is_held", "retry", "try_flock"]

T = TypeVar("T")

#: First pause between two attempts, and the longest one.
FIRST_DELAY, MAX_DELAY = 0.001, 0.05


def retry(attempt: Callable[[], T | None], wait: float | None) -> T | None:
    """Call `attempt` until it returns something other than None, pausing with a
    randomized exponential backoff; None once `wait` seconds have passed (never,
    when `wait` is None)."""
    deadline = None if wait is None else time.monotonic() + wait
    delay = FIRST_DELAY
    while True:
        got = attempt()
        if got is not None:
            return got
        if deadline is not None and time.monotonic() >= deadline:
            return None
        time.sleep(delay * (1 + random.random()))
        delay = min(delay * 2, MAX_DELAY)


def try_flock(fd: int, *, shared: bool = False) -> bool:
    """Take an flock on `fd` if nobody holds a conflicting one (never waits)."""
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def create_exclusive(path: Path, flags: int = os.O_RDWR, mode: int = 0o644) -> int:
    """Create `path` (and its missing folders) and open it; `FileExistsError` if it
    exists: the file is then someone's lock (or a killed holder's)."""
    return open_creating(path, flags | os.O_EXCL, mode)


class Lock:
    """`with` for a lock with `acquire()` and `release()`."""

    def acquire(self) -> object:
        raise NotImplementedError

    def release(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


class FileLock(Lock):
    """An exclusive flock on a lock file, created if missing.

    `with FileLock(path, wait=...) as lock:` holds it (`lock.held` says whether
    it was got within `wait` seconds); `fd` is the open lock file, for a record
    of the holder.
    """

    def __init__(self, path: Path, *, wait: float | None = 0.0) -> None:
        self.path = path
        self.wait = wait
        self.fd: int | None = None

    @property
    def held(self) -> bool:
        return self.fd is not None

    def acquire(self) -> bool:
        """Take the lock, waiting up to `wait` seconds; whether it was got."""
        fd = open_creating(self.path, os.O_RDWR)
        try:
            if self.wait is None:
                fcntl.flock(fd, fcntl.LOCK_EX)  # woken by the kernel as soon as it is free
                got = True
            else:
                got = retry(lambda: try_flock(fd) or None, self.wait) is not None
        except BaseException:
            os.close(fd)
            raise
        if got:
            self.fd = fd
            return True
        os.close(fd)
        return False

    def release(self) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def is_held(path: Path | str) -> bool:
    """True while some process holds an flock on `path` (a file left behind does not
    count)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        return not try_flock(fd, shared=True)
    finally:
        os.close(fd)
