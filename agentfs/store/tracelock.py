"""One runner per trace: an advisory lock that dies with its process.

The lock is a `agentfs/store/locking.py:FileLock` (an flock) on
`.git/agentfs/locks/<trace>.lock`, so a crashed run never leaves a trace
stuck; the file itself may stay and only records who held it last.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from agentfs.errors import TraceLocked
from agentfs.store.locking import FileLock, Lock, is_held

#: How long to try for a trace's lock: `is_locked` probes hold it for an instant.
PATIENCE = 0.2


class TraceLock(Lock):
    """Exclusive lock for running one trace (`with TraceLock(...):`)."""

    def __init__(self, lock_dir: Path, trace_id: str, *, patience: float = PATIENCE) -> None:
        self.path = lock_dir / f"{trace_id}.lock"
        self.trace_id = trace_id
        self._lock = FileLock(self.path, wait=patience)  # seconds to wait for a holder

    def acquire(self) -> None:
        """Take the lock or raise `TraceLocked` naming the holder."""
        if not self._lock.acquire():
            holder = read_holder(self.path)
            who = f" by pid {holder['pid']} on {holder['host']}" if holder else ""
            # a run holds it until it ends; a post, rewind, edit or fork for a moment
            raise TraceLocked(
                f"trace {self.trace_id!r} is in use{who}",
                hint="a run holds it until it ends: wait, or stop it (Ctrl-C); a post, "
                "rewind or edit only for a moment: try again", trace_id=self.trace_id,
            ) from None
        record = {"pid": os.getpid(), "host": os.uname().nodename, "since": time.time()}
        assert self._lock.fd is not None
        os.ftruncate(self._lock.fd, 0)
        os.pwrite(self._lock.fd, json.dumps(record).encode(), 0)

    def release(self) -> None:
        self._lock.release()


def is_locked(lock_dir: Path | str, trace_id: str) -> bool:
    """True while some process holds the trace's lock (a stale file does not count)."""
    return is_held(f"{lock_dir}/{trace_id}.lock")  # a string: the trace list asks per trace


def read_holder(path: Path) -> dict | None:
    """Who took the lock last, as recorded in the lock file."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
