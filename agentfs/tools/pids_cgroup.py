"""A pids cgroup around one command, to bound its processes where RLIMIT_NPROC does not.

The kernel does not apply RLIMIT_NPROC to root, so a fork bomb run as root
would be bounded only by the time limit. A cgroup's `pids.max` applies to root
as well. agentfs makes one cgroup per command, below the cgroup it runs in,
when the machine offers one it may create: a cgroup v1 `pids` hierarchy, or a
cgroup v2 group that hands the `pids` controller to its children. Elsewhere
there is none, and the time limit stays the only bound.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import time
import uuid
from pathlib import Path

__all__ = ["PidsCgroup", "pids_parent"]

#: How long removing a command's cgroup may wait for what was killed in it to be gone.
_REMOVE_WITHIN = 5.0


class PidsCgroup:
    """The cgroup of one command: at most `limit` processes and threads, counted from
    the process that joins it (`enter`); `close` kills what is left and removes it."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @classmethod
    def make(cls, limit: int) -> PidsCgroup | None:
        """A new cgroup for `limit` processes, or None where the machine offers none."""
        parent = pids_parent()
        if parent is None:
            return None
        directory = parent / f"agentfs-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        try:
            directory.mkdir()
        except OSError:
            return None
        made = cls(directory)
        try:
            (directory / "pids.max").write_text(f"{limit}\n")
        except OSError:
            made.close()
            return None
        return made

    def enter(self) -> list[str]:
        """A command line that moves itself into the cgroup, then runs what follows it
        (exit status 125 when it cannot: nothing runs unbounded)."""
        return ["sh", "-c", 'echo $$ > "$0" || exit 125; exec "$@"',
                str(self.directory / "cgroup.procs")]

    def close(self) -> None:
        """Kill every process still in the cgroup and remove it; a cgroup that cannot be
        removed in time (a process stuck in the kernel) is left, empty of work."""
        deadline = time.monotonic() + _REMOVE_WITHIN
        while True:
            _kill_all(self.directory)
            try:
                self.directory.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:  # busy until the killed processes are reaped
                if time.monotonic() > deadline:
                    return
                time.sleep(0.001)


def _kill_all(directory: Path) -> None:
    kill = directory / "cgroup.kill"  # cgroup v2: the kernel kills them all at once
    if kill.exists():
        with contextlib.suppress(OSError):
            kill.write_text("1\n")
    try:
        pids = (directory / "cgroup.procs").read_text().split()
    except OSError:
        return
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(int(pid), signal.SIGKILL)


@functools.cache
def pids_parent() -> Path | None:
    """The cgroup directory agentfs makes its commands' cgroups in (the one it runs in,
    in a hierarchy with the `pids` controller), or None when there is none it can write."""
    own = _own_cgroups()
    for root, point, fstype, options in _cgroup_mounts():
        if fstype == "cgroup" and "pids" in options.split(","):
            path = own.get("pids")
        elif fstype == "cgroup2":
            path = own.get("")
        else:
            continue
        if path is None or not Path(path).is_relative_to(root):
            continue  # agentfs's cgroup is not visible in this mount
        directory = Path(point) / Path(path).relative_to(root)
        if fstype == "cgroup2" and "pids" not in _words(directory / "cgroup.subtree_control"):
            continue  # a child would have no pids.max
        if os.access(directory, os.W_OK):
            return directory
    return None


def _own_cgroups() -> dict[str, str]:
    """The cgroup path of this process for each controller (cgroup v2's under "")."""
    found: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            found[controller] = path
    return found


def _cgroup_mounts() -> list[tuple[str, str, str, str]]:
    """(root in the hierarchy, mount point, file system type, super options) of each cgroup mount."""
    mounts: list[tuple[str, str, str, str]] = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return mounts
    for line in lines:
        fields, _, rest = line.partition(" - ")
        before, after = fields.split(), rest.split()
        if len(before) >= 5 and len(after) >= 3 and after[0] in ("cgroup", "cgroup2"):
            mounts.append((_unescape(before[3]), _unescape(before[4]), after[0], after[2]))
    return mounts


def _unescape(path: str) -> str:
    """mountinfo writes a space, tab, newline and backslash in a path as octal escapes."""
    for escaped, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        path = path.replace(escaped, char)
    return path


def _words(path: Path) -> list[str]:
    try:
        return path.read_text().split()
    except OSError:
        return []
