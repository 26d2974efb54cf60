"""The bash tool's sandbox: bubblewrap (`bwrap`), so a command cannot read secrets.

The environment allowlist (`agentfs/tools/subprocesses.py`) keeps API keys out
of a command's environment, but a command running as the same user could still
read them from `/proc/<agentfs pid>/environ` or from files in the home
directory. In the sandbox it sees only its own processes (a new PID namespace
with its own `/proc`), an empty home directory and an empty private `/tmp`;
the rest of the file system is read-only, except the workspace, where `.git`
and the control folders stay read-only. It has no network (a network namespace
of its own, with only a loopback nobody listens on, and a seccomp filter that
refuses Unix sockets, which are found by their path: `agentfs/tools/socket_filter.py`),
so it cannot reach agentfs's own API nor other services of the machine, unless
`[tools] bash_network = "host"`.

Where bubblewrap does not work, bash calls are refused with how to install it
(`Sandbox.refuses`), unless the person chose `bash_sandbox = "none"`.

Who the sandbox runs as (`sandbox_user`): agentfs's own user; but when agentfs
runs as root, never root, so files only root may read stay unreadable and
RLIMIT_NPROC applies. In a workspace another user owns, that user. In a
workspace of root, `IDMAPPED_USER`, which sees the workspace through an
idmapped mount (`agentfs/tools/idmap_launcher.py`): its files of root are that
user's there, and what it writes lands on disk as root's. Where idmapped
mounts do not work (`_probe_idmapped` says why), it runs as root without
capabilities, with the credential files root owns hidden (`ROOT_SECRET_FILES`,
`ROOT_SECRET_FOLDERS`), and the start of a run says so.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import os
import platform
import pwd
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agentfs.tools import idmap_launcher, socket_filter
from agentfs.tools.pids_cgroup import pids_parent
from agentfs.tools.subprocesses import RunAs

__all__ = ["IDMAPPED_USER", "INSTALL_HINT", "ROOT_SECRET_FILES", "ROOT_SECRET_FOLDERS",
           "SANDBOX_TMP", "IdmapProbe", "NetworkMode", "Sandbox", "SandboxMode",
           "choose_sandbox", "sandbox_user"]

#: `tools.bash_sandbox` in agentfs.toml.
SandboxMode = Literal["auto", "bwrap", "none"]
#: `tools.bash_network` in agentfs.toml: none, or the host's network (loopback and Unix
#: sockets included).
NetworkMode = Literal["none", "host"]

INSTALL_HINT = "install bubblewrap (Debian and Ubuntu: `apt-get install bubblewrap`)"

#: What every sandbox is, before the workspace is bound into it. `--cap-drop ALL`
#: matters when agentfs runs as root: bwrap keeps root's capabilities otherwise,
#: and a command could unmount the read-only binds.
#: The sandbox's /tmp: a fresh tmpfs for each command, not the machine's /tmp.
SANDBOX_TMP = "/tmp"  # noqa: S108 -- a path inside the sandbox, empty at each start

_ISOLATION = (
    "--ro-bind", "/", "/",
    "--dev", "/dev",
    "--proc", "/proc",
    "--tmpfs", SANDBOX_TMP,
    "--unshare-pid", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
)
_NO_NETWORK = ("--unshare-net",)
_PROBE_TIMEOUT = 10.0

#: Where credentials only root may read are kept, hidden from a sandbox that runs as
#: root: files (glob patterns) it may not read (`/dev/null` bound over them, on a
#: mount without devices), and folders it sees empty. Those that do not exist are
#: left alone.
ROOT_SECRET_FILES = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-",
                     "/etc/sudoers", "/etc/security/opasswd", "/etc/ssh/ssh_host_*_key")
ROOT_SECRET_FOLDERS = ("/etc/sudoers.d", "/etc/ssl/private", "/root", "/var/lib/sudo",
                       "/run/secrets", "/var/run/secrets", "/var/spool/cron")

#: Who the sandbox runs as in a workspace of root, when agentfs runs as root: `nobody`
#: (uid and gid 65534, Debian's `nogroup`), the uid meant to own no file, so it
#: reads only what every user may read; the workspace is its own through the
#: idmapped mount.
IDMAPPED_USER = RunAs(65534, 65534)

#: How choose_sandbox learns whether the idmapped sandbox works for (network, the
#: workspace): (path of `bwrap`, None) or (None, why not). Tests give their own.
IdmapProbe = Callable[[NetworkMode, Path], tuple[str | None, str | None]]


@dataclass(frozen=True)
class Sandbox:
    """How bash commands run: in bubblewrap at `bwrap`, or, when it is None, not at
    all because of `problem`, which `fix` would solve (or without a sandbox, when
    `mode` is `none`). `network` is what a sandboxed command may reach, `user` who
    the sandbox runs as (None: agentfs's own user). `idmapped`: agentfs, root, starts
    the idmap launcher, which shows the workspace to `user` through an idmapped mount
    and becomes `user`; `idmap_problem` says why a sandbox of a workspace of root
    runs as root instead."""

    mode: SandboxMode
    bwrap: str | None = None
    problem: str | None = None
    network: NetworkMode = "none"
    user: RunAs | None = None
    fix: str = INSTALL_HINT
    idmapped: bool = False
    idmap_problem: str | None = None

    @property
    def refuses(self) -> bool:
        """Commands must not run: a sandbox is required (any mode but `none`) and there is none."""
        return self.mode != "none" and self.bwrap is None

    @property
    def as_root(self) -> bool:
        """Sandboxed commands run as root (without capabilities)."""
        return self.bwrap is not None and (os.getuid() if self.user is None else self.user.uid) == 0

    @property
    def socket_filter(self) -> bytes | None:
        """The seccomp program bwrap loads to keep commands off the host's Unix sockets:
        without network, where agentfs knows this machine's system calls."""
        if self.bwrap is None or self.network != "none":
            return None
        return socket_filter.unix_socket_filter(platform.machine())

    def refusal(self) -> str:
        """Why a bash call is refused, and what the person running agentfs can do."""
        return (f"bash runs only in a sandbox (tools.bash_sandbox = \"{self.mode}\"), and "
                f"{self.problem}; the person running agentfs can {self.fix}, or set "
                "tools.bash_sandbox = \"none\" in agentfs.toml to run commands without one")

    def notices(self) -> list[str]:
        """What a person starting a run with bash on should know, one line each; none
        when commands run sandboxed, as a user other than root, without a network."""
        if self.mode == "none":
            return [("bash commands run without a sandbox (tools.bash_sandbox = \"none\"): "
                     "they can read whatever your user can, API keys included, and reach "
                     "the network, services on this machine included")]
        if self.refuses:
            return [(f"bash commands will fail: they run only in a sandbox and {self.problem}; "
                     f"{self.fix}, or set tools.bash_sandbox = \"none\" in agentfs.toml")]
        lines = []
        if self.as_root:
            bound = ("a pids cgroup bounds their processes" if pids_parent() is not None else
                     "only tools.bash_timeout bounds their processes (no pids cgroup here)")
            why = f" ({self.idmap_problem})" if self.idmap_problem else ""
            lines.append(
                "bash runs as root: known credential files are hidden, but other files only "
                f"root may read are readable, and {bound}; it would run as uid "
                f"{IDMAPPED_USER.uid} with the workspace idmapped, but that does not work "
                f"here{why}; chown the workspace to a normal user (the sandbox then runs as "
                "that user) or run agentfs as one")
        if self.network == "host":
            lines.append(
                "bash commands reach the host's network (tools.bash_network = \"host\"), "
                "loopback and Unix sockets included: services on this machine, such as "
                "`agentfs serve`, answer them")
        elif self.socket_filter is None:
            lines.append(
                "bash commands have no network, but can connect to this machine's Unix "
                "sockets (Docker's, D-Bus, databases'): agentfs has no socket filter for "
                f"{platform.machine() or 'this machine'} (only for "
                f"{', '.join(socket_filter.MACHINES)})")
        return lines

    @contextlib.contextmanager
    def command(self, root: Path, env: Mapping[str, str],
                read_only: Iterable[str] = ()) -> Iterator[tuple[list[str], tuple[int, ...]]]:
        """`arguments`, and the descriptors the process started with them must inherit
        (the socket filter bwrap reads), open until the block ends."""
        with socket_filter.readable(self.socket_filter) as fd:
            yield self.arguments(root, env, read_only, filter_fd=fd), () if fd is None else (fd,)

    def arguments(self, root: Path, env: Mapping[str, str],
                  read_only: Iterable[str] = (), filter_fd: int | None = None) -> list[str]:
        """The `bwrap ...` command line that runs what follows it in the sandbox
        (`command` gives it with the descriptor of its socket filter).

        The command gets the environment bwrap is started with: values given
        with `--setenv` would show in `ps` to every user of the machine. When
        `idmapped`, the idmap launcher comes first, and bwrap binds the workspace
        from where the launcher mounted it.

        Args:
          root: The workspace, resolved; bound read-write, and the working directory.
          env: The environment bwrap is started with; its `HOME` is hidden too, and
            its `TMPDIR`, if set, becomes the private `/tmp`.
          read_only: Workspace paths kept read-only besides `.git`; those that do
            not exist, or lead out of the workspace, are left as they are.
          filter_fd: Where bwrap reads `socket_filter` from; required when there is one.
        """
        if self.bwrap is None:
            raise ValueError("no bubblewrap to run commands in")
        if (filter_fd is None) != (self.socket_filter is None):
            raise ValueError("the socket filter's descriptor goes with a sandbox without "
                             "network, and only there: use Sandbox.command")
        args = [self.bwrap, *_isolation(self.network)]
        if filter_fd is not None:
            args += ["--seccomp", str(filter_fd)]
        hidden_files, hidden_dirs = _root_secrets() if self.as_root else ([], [])
        for hidden in hidden_files:
            args += ["--ro-bind", "/dev/null", hidden]
        for hidden in sorted({*_private_dirs(env, self.user), *hidden_dirs}):
            args += ["--tmpfs", hidden]
        source = _idmapped_source(root) if self.idmapped else str
        args += ["--bind", source(str(root)), str(root)]
        for path in _inside(root, [".git", *read_only]):
            args += ["--ro-bind", source(path), path]
        if "TMPDIR" in env:
            args += ["--setenv", "TMPDIR", SANDBOX_TMP]
        args += ["--chdir", str(root)]
        if self.idmapped:
            assert self.user is not None
            return [*_launcher(), str(self.user.uid), str(self.user.gid), str(root), "--", *args]
        return args


@functools.cache
def choose_sandbox(mode: SandboxMode, network: NetworkMode = "none",
                   root: Path | None = None, *, idmap_probe: IdmapProbe | None = None,
                   ) -> Sandbox:
    """The sandbox for `mode` and `network` in the workspace at `root` (which decides
    who it runs as, `sandbox_user`); whether bubblewrap works is probed once per
    process for each. `idmap_probe` replaces the probe of idmapped mounts."""
    if mode == "none":
        return Sandbox(mode, network="host")
    user = sandbox_user(root)
    if user is not None and root is not None and os.stat(root).st_uid == 0:
        bwrap, why = (idmap_probe or _probe_idmapped)(network, root)
        if bwrap is not None:
            return Sandbox(mode, bwrap, None, network, user, idmapped=True)
        bwrap, problem = _probe(network, None, None)  # capless root, credentials hidden
        return Sandbox(mode, bwrap, problem, network, idmap_problem=why)
    bwrap, problem = _probe(network, user, root if user is not None else None)
    if bwrap is None and user is not None:
        return Sandbox(mode, None, problem, network, user, fix=(
            f"make bubblewrap work for uid {user.uid} (it needs unprivileged user namespaces, "
            "and a path to the workspace that user may enter)"))
    return Sandbox(mode, bwrap, problem, network, user)


def sandbox_user(root: Path | None) -> RunAs | None:
    """Who the sandbox of the workspace at `root` runs as: None (agentfs's own user),
    except when agentfs runs as root: then the user who owns the workspace's folder,
    with their primary group and no other, or `IDMAPPED_USER` when that is root."""
    if os.getuid() != 0 or root is None:
        return None
    owner = os.stat(root)
    if owner.st_uid == 0:
        return IDMAPPED_USER
    try:
        gid = pwd.getpwuid(owner.st_uid).pw_gid
    except KeyError:  # a uid with no entry: the folder's group
        gid = owner.st_gid
    return RunAs(owner.st_uid, gid)


def _isolation(network: NetworkMode) -> tuple[str, ...]:
    return _ISOLATION + (_NO_NETWORK if network == "none" else ())


@functools.cache
def _probe(network: NetworkMode, user: RunAs | None,
           root: Path | None) -> tuple[str | None, str | None]:
    """(path of a working `bwrap`, None), or (None, why there is none). With `user`,
    bwrap is tried as that user, in the workspace at `root`."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return None, "`bwrap` is not installed"
    where = "here" if user is None else f"as uid {user.uid}, the owner of {root}"
    workspace = [] if root is None else ["--bind", str(root), str(root), "--chdir", str(root)]
    try:
        with socket_filter.readable(Sandbox("bwrap", bwrap, network=network).socket_filter) as fd:
            loads = [] if fd is None else ["--seccomp", str(fd)]
            done = subprocess.run(
                [bwrap, *_isolation(network), *loads, *workspace, "true"],
                stdin=subprocess.DEVNULL, pass_fds=() if fd is None else (fd,),
                capture_output=True, timeout=_PROBE_TIMEOUT, env={}, check=False,
                **RunAs.popen_arguments(user),
            )
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"`{bwrap}` does not work {where}: {exc}"
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return None, f"`{bwrap}` does not work {where}: {said[-1] if said else done.returncode}"
    return bwrap, None


@functools.cache
def _probe_idmapped(network: NetworkMode, root: Path) -> tuple[str | None, str | None]:
    """(path of `bwrap`, None) when the idmapped sandbox runs in the workspace at
    `root` and may write there, or (None, why not)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return None, "`bwrap` is not installed"
    if not sys.executable:
        return None, "agentfs does not know the path of its Python, to run the launcher with"
    root = root.resolve()
    launcher = _launcher()
    for path in (launcher[0], launcher[-1]):
        if Path(path).is_relative_to(root):  # the sandbox could change what root runs
            return None, f"the launcher runs {path}, which is inside the workspace"
    candidate = Sandbox("bwrap", bwrap, None, network, IDMAPPED_USER, idmapped=True)
    try:
        with candidate.command(root, {}) as (arguments, fds):
            done = subprocess.run(
                [*arguments, "test", "-w", "."], stdin=subprocess.DEVNULL, pass_fds=fds,
                capture_output=True, timeout=_PROBE_TIMEOUT, env={}, check=False,
            )
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"the idmap launcher does not start: {exc}"
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return None, said[-1] if said else "the workspace is not writable through it"
    return bwrap, None


@functools.cache
def _launcher() -> tuple[str, ...]:
    """How agentfs starts the idmap launcher: this Python, isolated from the
    environment and from site-packages (`-I -S`), resolved once, on the file."""
    return (os.path.realpath(sys.executable), "-I", "-S",
            os.path.realpath(idmap_launcher.__file__))


def _idmapped_source(root: Path) -> Callable[[str], str]:
    """Where a path of the workspace at `root` is in the idmapped mount."""
    def source(path: str) -> str:
        inside = os.path.relpath(path, root)
        return idmap_launcher.MOUNT_POINT if inside == "." else os.path.join(
            idmap_launcher.MOUNT_POINT, inside)
    return source


def _private_dirs(env: Mapping[str, str], user: RunAs | None) -> list[str]:
    """Directories replaced by an empty tmpfs: the home directory (the password
    database's and `HOME`), where keys and tokens are kept, and the per-user
    runtime directory, which holds keyring and agent sockets; those of agentfs's
    user and of the sandbox's."""
    found = [env.get("HOME", "")]
    for uid in {os.getuid(), *([user.uid] if user else [])}:
        found.append(f"/run/user/{uid}")
        with contextlib.suppress(KeyError):  # a uid with no entry, as in some containers
            found.append(pwd.getpwuid(uid).pw_dir)
    dirs = {os.path.realpath(d) for d in found if d and os.path.isdir(d)}
    return sorted(dirs - {"/"})


def _root_secrets() -> tuple[list[str], list[str]]:
    """The files and folders of `ROOT_SECRET_FILES` and `ROOT_SECRET_FOLDERS` that exist
    here, as real paths."""
    files = {os.path.realpath(f) for pattern in ROOT_SECRET_FILES for f in glob.glob(pattern)}
    folders = {os.path.realpath(d) for d in ROOT_SECRET_FOLDERS if os.path.isdir(d)}
    return sorted(f for f in files if os.path.isfile(f)), sorted(folders - {"/"})


def _inside(root: Path, paths: Iterable[str]) -> list[str]:
    """The real paths of `paths` (relative to `root`) that exist inside the workspace.

    A symlink out of the workspace is skipped: everything outside is read-only
    already, and binding it could show a hidden directory again.
    """
    found = []
    for path in paths:
        full = os.path.realpath(root / path)
        if os.path.lexists(full) and Path(full).is_relative_to(root):
            found.append(full)
    return sorted(set(found))
