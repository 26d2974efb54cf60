"""One runner per trace: an advisory lock that dies with its process.

The lock is `fcntl.flock` on `.git/agentfs/locks/<trace>.lock`. The kernel
releases it when the holder exits for any reason (including SIGKILL), so a
crashed run never leaves a trace stuck; the file itself may stay and only
records who held it last.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path
from types import TracebackType
from typing import Self

from agentfs.errors import TraceLocked


class TraceLock:
    """Exclusive lock for running one trace (`with TraceLock(...):`)."""

    def __init__(self, lock_dir: Path, trace_id: str, *, patience: float = 0.2) -> None:
        self.path = lock_dir / f"{trace_id}.lock"
        self.trace_id = trace_id
        self.patience = patience  # seconds to wait for a holder to let go
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise `TraceLocked` naming the holder."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        if not _flock_briefly(fd, self.patience):
            os.close(fd)
            holder = read_holder(self.path)
            who = f" by pid {holder['pid']} on {holder['host']}" if holder else ""
            raise TraceLocked(
                f"trace {self.trace_id!r} is being run{who}",
                hint="wait for that run to finish, or stop it (Ctrl-C) first",
            ) from None
        record = {"pid": os.getpid(), "host": os.uname().nodename, "since": time.time()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

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


def _flock_briefly(fd: int, patience: float = 0.2) -> bool:
    """Try for the exclusive lock a little while: `is_locked` probes hold it for an instant."""
    deadline = time.monotonic() + patience
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)


def is_locked(lock_dir: Path, trace_id: str) -> bool:
    """True while some process holds the trace's lock (a stale file does not count)."""
    path = lock_dir / f"{trace_id}.lock"
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def read_holder(path: Path) -> dict | None:
    """Who took the lock last, as recorded in the lock file."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
