"""Git's `<file>.lock` protocol, made safe against agentfs being killed.

Git updates a file (a ref, the index) by creating `<file>.lock` exclusively,
writing the new content into it and renaming it over the file. A process
killed in between leaves the `.lock` behind and every later writer, git
included, is refused until someone deletes it.

agentfs keeps an *owner record* beside every lock it takes
(`.git/agentfs/locks/git-<name>.owner`), holding the lock file's inode, and
holds an `flock` on the record while the lock exists. A `.lock` whose inode
matches a record nobody holds was left by a dead agentfs process and is
removed; a `.lock` agentfs cannot vouch for (git's own) is waited for.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import random
import time
from pathlib import Path
from types import TracebackType

from agentfs.errors import GitStateError

#: How long to wait for a `.lock` held by another program before giving up.
WAIT_S = 30.0


class GitLockFile:
    """`with GitLockFile(target, state_dir) as lock: lock.write(data)` replaces `target`."""

    def __init__(self, target: Path, state_dir: Path, *, wait: float = WAIT_S) -> None:
        self.target = target
        self.lock_path = target.with_name(target.name + ".lock")
        digest = hashlib.sha1(str(target).encode()).hexdigest()[:12]
        self.owner_path = state_dir / "locks" / f"git-{target.name}-{digest}.owner"
        self.wait = wait
        self._owner_fd: int | None = None
        self._fd: int | None = None

    def __enter__(self) -> GitLockFile:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None and self._fd is not None:
            self.commit()
        else:
            self.abort()

    def acquire(self) -> None:
        self.owner_path.parent.mkdir(parents=True, exist_ok=True)
        owner = os.open(self.owner_path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(owner, fcntl.LOCK_EX)  # only agentfs processes take it, briefly
        self._owner_fd = owner
        deadline = time.monotonic() + self.wait
        delay = 0.001
        while True:
            try:
                fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
                break
            except FileExistsError:
                if self._remove_if_ours_and_stale():
                    continue
                if time.monotonic() > deadline:
                    self._release_owner()
                    raise GitStateError(
                        f"{self.lock_path} exists and is held by another program",
                        hint="if no git command is running, delete that .lock file",
                    ) from None
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 0.05)
        os.pwrite(owner, str(os.fstat(fd).st_ino).encode().ljust(24), 0)
        self._fd = fd

    def _remove_if_ours_and_stale(self) -> bool:
        """Remove the `.lock` if a dead agentfs process made it (we hold the record)."""
        assert self._owner_fd is not None
        recorded = os.pread(self._owner_fd, 64, 0).strip()
        try:
            inode = os.stat(self.lock_path).st_ino
        except FileNotFoundError:
            return True
        if recorded and recorded == str(inode).encode():
            try:
                os.unlink(self.lock_path)
            except FileNotFoundError:
                pass
            return True
        return False

    def write(self, data: bytes) -> None:
        assert self._fd is not None
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def commit(self) -> None:
        """fsync the new content and rename it over the target."""
        assert self._fd is not None
        try:
            os.fsync(self._fd)
        finally:
            os.close(self._fd)
            self._fd = None
        try:
            os.replace(self.lock_path, self.target)
        finally:
            self._release_owner()

    def abort(self) -> None:
        """Drop the lock without touching the target."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            try:
                os.unlink(self.lock_path)
            except OSError as exc:
                if exc.errno != errno.ENOENT:
                    raise
        self._release_owner()

    def _release_owner(self) -> None:
        if self._owner_fd is not None:
            os.ftruncate(self._owner_fd, 0)
            fcntl.flock(self._owner_fd, fcntl.LOCK_UN)
            os.close(self._owner_fd)
            self._owner_fd = None
