"""Run a command as an unprivileged uid that reads and writes a workspace root owns.

When agentfs runs as root in a workspace root owns, the bash sandbox should not
run as root (root reads every file of the machine), yet a uid that is not root
cannot write a workspace only root may write. An idmapped mount joins the two:
the workspace seen through it has its files of uid 0 shown as the sandbox's
uid, and what the sandbox's uid writes there lands on disk as root's. The rest
of the machine stays as it is: `/etc/shadow` is still root's, and unreadable.

agentfs runs this file as root, with `python -I`, in front of bubblewrap:

    python -I idmap_launcher.py UID GID WORKSPACE -- bwrap ...

It moves itself into a mount namespace of its own (so nothing it mounts is seen
by, or outlives on, the machine: the namespace ends with its last process),
mounts the workspace, idmapped, at `MOUNT_POINT` there, gives up root for
`UID`/`GID` with no supplementary groups, and executes what follows `--`, which
binds `MOUNT_POINT` where the workspace is (`agentfs/tools/sandbox.py:Sandbox.arguments`).
It exits with `FAILED` and a line on stderr when any step fails; nothing runs then.

It imports nothing from agentfs, so it starts fast and runs the same whatever
the installed package holds; the kernel's interfaces are called through ctypes
(Python 3.11 has no `os.unshare`, and none of the new mount API).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

#: Where the idmapped workspace is mounted in the launcher's own mount namespace:
#: the machine's `/tmp`, covered there only (the sandbox has a `/tmp` of its own).
MOUNT_POINT = "/tmp"  # noqa: S108 -- a mount point in a private mount namespace
#: The exit status when the launcher could not set the sandbox up.
FAILED = 126

# unshare(2): new namespaces for the calling process.
CLONE_NEWNS = 0x00020000  # a mount namespace, a copy of the current one
CLONE_NEWUSER = 0x10000000  # a user namespace, to describe the idmapping with
# prctl(2): the signal this process gets when its parent (agentfs) ends.
PR_SET_PDEATHSIG = 1
# mount(2) flags, to make every mount of the new namespace private: mounts and
# unmounts made in it do not propagate to the machine's namespace.
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
# open_tree(2): a detached copy of the workspace's mount tree, submounts included.
OPEN_TREE_CLONE = 1
OPEN_TREE_CLOEXEC = os.O_CLOEXEC
AT_RECURSIVE = 0x8000
AT_EMPTY_PATH = 0x1000  # the path is "": act on the descriptor itself
AT_FDCWD = -100
# mount_setattr(2): idmap the detached tree through a user namespace's uid and gid maps.
MOUNT_ATTR_IDMAP = 0x00100000
# move_mount(2): attach the detached tree, given by descriptor, at a path.
MOVE_MOUNT_F_EMPTY_PATH = 0x4

#: The system call numbers of the new mount API (Linux 5.2; mount_setattr 5.12), the
#: same on every architecture since the tables were unified (x86-64 and aarch64
#: alike; alpha alone adds 110). On an older kernel they fail with ENOSYS, and
#: agentfs falls back (`agentfs/tools/sandbox.py:_probe_idmapped`).
SYS_OPEN_TREE = 428
SYS_MOVE_MOUNT = 429
SYS_MOUNT_SETATTR = 442

_libc = ctypes.CDLL(None, use_errno=True)


class _MountAttr(ctypes.Structure):
    """`struct mount_attr` of mount_setattr(2)."""

    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


class LaunchError(Exception):
    """A step of setting the sandbox up failed."""


def _checked(result: int, what: str) -> int:
    if result < 0:
        errno = ctypes.get_errno()
        raise LaunchError(f"{what}: {os.strerror(errno)} (errno {errno})")
    return result


def user_namespace(uid: int, gid: int) -> int:
    """A descriptor of a new user namespace whose uid and gid 0 are `uid` and `gid`.

    A namespace needs a process to be made: a child makes it, waits until its maps
    are written, and exits (also when the launcher is killed: its pipe closes)."""
    ready_read, ready_write = os.pipe()
    done_read, done_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no Python cleanup, only _exit
        status = 1
        try:
            os.close(ready_read)
            os.close(done_write)
            if _libc.unshare(CLONE_NEWUSER) == 0:
                os.write(ready_write, b"1")
                os.read(done_read, 1)  # until the maps are written, or the launcher is gone
                status = 0
        finally:
            os._exit(status)
    os.close(ready_write)
    os.close(done_read)
    try:
        if os.read(ready_read, 1) != b"1":
            raise LaunchError("unshare(CLONE_NEWUSER) failed in the launcher's child")
        for name, text in (("uid_map", f"0 {uid} 1\n"), ("setgroups", "deny\n"),
                           ("gid_map", f"0 {gid} 1\n")):
            with open(f"/proc/{pid}/{name}", "w") as file:
                file.write(text)
        return os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.close(ready_read)
        os.close(done_write)
        os.waitpid(pid, 0)


def mount_idmapped(source: str, target: str, uid: int, gid: int) -> None:
    """Mount `source`, with its submounts, at `target`, with uid and gid 0 shown as
    `uid` and `gid` (and written as 0 when those write)."""
    userns = user_namespace(uid, gid)
    try:
        tree = _checked(_libc.syscall(SYS_OPEN_TREE, AT_FDCWD, os.fsencode(source),
                                      OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE),
                        f"open_tree({source})")
        try:
            attr = _MountAttr(attr_set=MOUNT_ATTR_IDMAP, userns_fd=userns)
            _checked(_libc.syscall(SYS_MOUNT_SETATTR, tree, b"", AT_EMPTY_PATH | AT_RECURSIVE,
                                   ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr))),
                     f"idmapping {source} (mount_setattr)")
            _checked(_libc.syscall(SYS_MOVE_MOUNT, tree, b"", AT_FDCWD, os.fsencode(target),
                                   MOVE_MOUNT_F_EMPTY_PATH), f"move_mount to {target}")
        finally:
            os.close(tree)
    finally:
        os.close(userns)


def _die_with(parent: int) -> None:
    """Be killed when agentfs ends, and end now if it has already (then the launcher's
    parent is another process: bwrap's own `--die-with-parent` would not see it)."""
    _checked(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent:
        raise LaunchError("agentfs ended while the launcher started")


def launch(uid: int, gid: int, workspace: str, command: list[str]) -> None:
    """Set the sandbox up (see the module's docstring) and execute `command`."""
    if os.getuid() != 0:
        raise LaunchError("the launcher must run as root")
    parent = os.getppid()
    _die_with(parent)
    _checked(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _checked(_libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None),
             "making / private")
    mount_idmapped(workspace, MOUNT_POINT, uid, gid)
    os.chdir("/")
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)  # from root to a uid that is not: every capability goes too
    _die_with(parent)  # a change of uid clears it; exec keeps it, until bwrap sets its own
    for number in (signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores them; exec keeps that
        signal.signal(number, signal.SIG_DFL)
    os.execv(command[0], command)  # noqa: S606 -- bwrap, by the absolute path agentfs gave


def main(argv: list[str]) -> int:
    if len(argv) < 5 or argv[3] != "--":
        print("usage: idmap_launcher.py UID GID WORKSPACE -- COMMAND...", file=sys.stderr)
        return FAILED
    try:
        launch(int(argv[0]), int(argv[1]), argv[2], argv[4:])
    except (LaunchError, OSError, ValueError) as exc:
        print(f"agentfs sandbox launcher: {exc}", file=sys.stderr)
    return FAILED


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
