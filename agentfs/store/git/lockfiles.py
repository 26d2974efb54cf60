"""Git's `<file>.lock` protocol, made safe against agentfs being killed.

Git updates a file (a ref, the index) by creating `<file>.lock` exclusively,
writing the new content into it and renaming it over the file. A process
killed in between leaves the `.lock` behind and every later writer, git
included, is refused until someone deletes it.

agentfs keeps an *owner record* beside every lock it takes
(`.git/agentfs/locks/git-<name>.owner`), holding the lock file's inode, and
holds an `flock` on the record while the lock exists (both kinds of lock, and
the wait, are `agentfs/store/locking.py`'s). A `.lock` whose inode
matches a record nobody holds was left by a dead agentfs process and is
removed; a `.lock` agentfs cannot vouch for (git's own) is waited for.

Just before it renames or deletes its `.lock`, a process adds the file's
ctime to the record: killed after that, it leaves a record whose inode
number may be handed to the next file created, perhaps git's own `.lock`,
and the ctime tells that file apart.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import time
from pathlib import Path
from types import TracebackType
from typing import Self

from agentfs.errors import GitStateError
from agentfs.store.atomic import fsync_dir
from agentfs.store.locking import FileLock, create_exclusive, retry

#: How long to wait for a `.lock` held by another program before giving up.
WAIT_S = 30.0
#: A lock created this soon after a dead process said it was creating one is its.
STALE_CREATE_WINDOW_NS = 1_000_000_000
CLOCK_SLACK_NS = 100_000_000
RECORD_SIZE = 64


@functools.lru_cache(maxsize=64)
def _paths(target: Path, state_dir: Path) -> tuple[Path, Path]:
    """The `.lock` beside `target`, and its owner record in `state_dir/locks`."""
    # The record is named by the path inside `.git` (state_dir's parent), so that
    # processes reaching the workspace by different paths (a symlink, a
    # container's mount) share it.
    name = str(target).removeprefix(str(state_dir.parent) + os.sep)
    digest = hashlib.sha1(name.encode(), usedforsecurity=False).hexdigest()[:12]
    return (
        target.with_name(target.name + ".lock"),
        state_dir / "locks" / f"git-{target.name}-{digest}.owner",
    )


class GitLockFile:
    """`with GitLockFile(target, state_dir) as lock: lock.write(data)` replaces `target`."""

    def __init__(
        self, target: Path, state_dir: Path, *, wait: float = WAIT_S, durable: bool = False
    ) -> None:
        self.target = target
        self.durable = durable
        self.lock_path, self.owner_path = _paths(target, state_dir)
        self.wait = wait
        self._owner: FileLock | None = None
        self._fd: int | None = None

    def __enter__(self) -> Self:
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
        owner = FileLock(self.owner_path, wait=None)  # only agentfs processes take it, briefly
        owner.acquire()
        self._owner = owner
        try:
            self._acquire_lock_file()
        except BaseException:
            self.abort()  # a failed acquire must not keep the record's flock
            raise

    def _acquire_lock_file(self) -> None:
        assert self._owner is not None and self._owner.fd is not None
        previous = os.pread(self._owner.fd, RECORD_SIZE, 0).decode(errors="replace").strip()

        def attempt() -> int | None:
            nonlocal previous
            if os.path.lexists(self.lock_path):
                if not self._remove_if_stale(previous):
                    # held by someone alive: wait, leaving the record as it is (if we
                    # die waiting, the next process must still be able to read it)
                    return None
                previous = ""
            # Say we are about to create it, so a crash right after the create
            # still leaves a record that names this lock as ours.
            self._record(f"creating {time.time_ns()}")
            previous = ""
            try:
                return create_exclusive(self.lock_path)
            except FileExistsError:
                return None  # someone else took it between the check and the create

        fd = retry(attempt, self.wait)
        if fd is None:
            self._release_owner(clear=False)  # keep a dead holder's note
            raise GitStateError(
                f"{self.lock_path} exists and is held by another program",
                hint="if no git command is running, delete that .lock file",
            )
        self._fd = fd
        self._record(f"inode {os.fstat(fd).st_ino}")

    def _record(self, text: str) -> None:
        """Replace the record in one write (a kill never leaves it half-changed)."""
        assert self._owner is not None and self._owner.fd is not None
        os.pwrite(self._owner.fd, text.encode().ljust(RECORD_SIZE), 0)

    def _remove_if_stale(self, record: str) -> bool:
        """Remove the `.lock` if `record`, left by a dead agentfs process (we now hold
        the record's flock), shows that process made it.

        The record names it by inode (and ctime, once the process was about to
        rename or delete it), or, if the process died between creating it and
        noting its inode, says when it was about to create it: a lock made
        within a second after that is taken to be the dead process's.
        """
        kind, _, value = record.strip().partition(" ")
        try:
            st = os.stat(self.lock_path)
        except FileNotFoundError:
            return True
        if kind == "inode":
            inode, _, ctime = value.partition(" ctime ")
            ours = inode.strip() == str(st.st_ino) and (
                not ctime or ctime.strip() == str(st.st_ctime_ns)
            )
        elif kind == "creating" and value.strip().isdigit():
            # file times come from a coarse clock and can read a little earlier
            ours = -CLOCK_SLACK_NS <= st.st_mtime_ns - int(value) < STALE_CREATE_WINDOW_NS
        else:
            ours = False
        if ours:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.lock_path)
        return ours

    def write(self, data: bytes) -> None:
        assert self._fd is not None
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def commit(self) -> None:
        """Rename the new content over the target; when `durable`, fsync it and the
        rename (Git by default does neither for refs and the index)."""
        assert self._fd is not None
        try:
            if self.durable:
                os.fsync(self._fd)
            self._note_last_state()
        except BaseException:
            self.abort()
            raise
        os.close(self._fd)
        self._fd = None
        try:
            os.replace(self.lock_path, self.target)
        except OSError:
            self.lock_path.unlink(missing_ok=True)  # else nobody could vouch for it
            raise
        finally:
            self._release_owner()
        if self.durable:
            fsync_dir(self.target.parent)

    def abort(self) -> None:
        """Drop the lock without touching the target."""
        try:
            if self._fd is not None:
                try:
                    self._note_last_state()
                finally:
                    os.close(self._fd)
                    self._fd = None
                    self.lock_path.unlink(missing_ok=True)
        finally:
            self._release_owner()

    def _note_last_state(self) -> None:
        """Add the `.lock`'s ctime to the record before it is renamed or deleted."""
        assert self._fd is not None
        st = os.fstat(self._fd)
        self._record(f"inode {st.st_ino} ctime {st.st_ctime_ns}")

    def _release_owner(self, *, clear: bool = True) -> None:
        if self._owner is not None:
            if clear:
                self._record("")
            self._owner.release()
            self._owner = None


def clear_stale(target: Path, state_dir: Path, *, wait: float = WAIT_S) -> None:
    """Return once nobody holds `<target>.lock`: one a dead agentfs process left is
    removed, one held by a live process (git's own) is waited for (up to `wait`),
    so that a `git` command run next finds the file free.

    Raises:
      GitStateError: another program kept the lock for `wait` seconds.
    """
    lock = GitLockFile(target, state_dir, wait=wait)
    lock.acquire()
    lock.abort()
