"""The bash tool's sandbox: bubblewrap (`bwrap`), so a command cannot read secrets.

The environment allowlist (`agentfs/tools/subprocesses.py`) keeps API keys out
of a command's environment, but a command running as the same user could still
read them from `/proc/<agentfs pid>/environ` or from files in the home
directory. In the sandbox it sees only its own processes (a new PID namespace
with its own `/proc`), an empty home directory and an empty private `/tmp`;
the rest of the file system is read-only, except the workspace, where `.git`
and the control folders stay read-only. It has no network (a network namespace
of its own, with only a loopback nobody listens on), so it cannot reach agentfs's
own API nor other services of the machine, unless `[tools] bash_network = "host"`.

Where bubblewrap does not work, bash calls are refused with how to install it
(`Sandbox.refuses`), unless the person chose `bash_sandbox = "none"`.

Who the sandbox runs as (`sandbox_user`): agentfs's own user; but when agentfs
runs as root and the workspace belongs to another user, that user, so files
only root may read stay unreadable and RLIMIT_NPROC applies. In a workspace of
root it runs as root without capabilities, with the credential files root owns
hidden (`ROOT_SECRET_FILES`, `ROOT_SECRET_FOLDERS`).
"""

from __future__ import annotations

import contextlib
import functools
import glob
import os
import pwd
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agentfs.tools.pids_cgroup import pids_parent
from agentfs.tools.subprocesses import RunAs

__all__ = ["INSTALL_HINT", "ROOT_SECRET_FILES", "ROOT_SECRET_FOLDERS", "SANDBOX_TMP",
           "NetworkMode", "Sandbox",
           "SandboxMode", "choose_sandbox", "sandbox_user"]

#: `tools.bash_sandbox` in agentfs.toml.
SandboxMode = Literal["auto", "bwrap", "none"]
#: `tools.bash_network` in agentfs.toml: none, or the host's network (loopback included).
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


@dataclass(frozen=True)
class Sandbox:
    """How bash commands run: in bubblewrap at `bwrap`, or, when it is None, not at
    all because of `problem`, which `fix` would solve (or without a sandbox, when
    `mode` is `none`). `network` is what a sandboxed command may reach, `user` who
    the sandbox runs as (None: agentfs's own user)."""

    mode: SandboxMode
    bwrap: str | None = None
    problem: str | None = None
    network: NetworkMode = "none"
    user: RunAs | None = None
    fix: str = INSTALL_HINT

    @property
    def refuses(self) -> bool:
        """Commands must not run: a sandbox is required (any mode but `none`) and there is none."""
        return self.mode != "none" and self.bwrap is None

    @property
    def as_root(self) -> bool:
        """Sandboxed commands run as root (without capabilities)."""
        return self.bwrap is not None and (os.getuid() if self.user is None else self.user.uid) == 0

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
            lines.append(
                "bash runs as root: known credential files are hidden, but other files only "
                f"root may read are readable, and {bound}; chown the workspace to a normal "
                "user (the sandbox then runs as that user) or run agentfs as one")
        if self.network == "host":
            lines.append(
                "bash commands reach the host's network (tools.bash_network = \"host\"), "
                "loopback included: services on this machine, such as `agentfs serve`, "
                "answer them")
        return lines

    def arguments(self, root: Path, env: Mapping[str, str],
                  read_only: Iterable[str] = ()) -> list[str]:
        """The `bwrap ...` command line that runs what follows it in the sandbox.

        The command gets the environment bwrap is started with: values given
        with `--setenv` would show in `ps` to every user of the machine.

        Args:
          root: The workspace, resolved; bound read-write, and the working directory.
          env: The environment bwrap is started with; its `HOME` is hidden too, and
            its `TMPDIR`, if set, becomes the private `/tmp`.
          read_only: Workspace paths kept read-only besides `.git`; those that do
            not exist, or lead out of the workspace, are left as they are.
        """
        if self.bwrap is None:
            raise ValueError("no bubblewrap to run commands in")
        args = [self.bwrap, *_isolation(self.network)]
        hidden_files, hidden_dirs = _root_secrets() if self.as_root else ([], [])
        for hidden in hidden_files:
            args += ["--ro-bind", "/dev/null", hidden]
        for hidden in sorted({*_private_dirs(env, self.user), *hidden_dirs}):
            args += ["--tmpfs", hidden]
        args += ["--bind", str(root), str(root)]
        for path in _inside(root, [".git", *read_only]):
            args += ["--ro-bind", path, path]
        if "TMPDIR" in env:
            args += ["--setenv", "TMPDIR", SANDBOX_TMP]
        return [*args, "--chdir", str(root)]


@functools.cache
def choose_sandbox(mode: SandboxMode, network: NetworkMode = "none",
                   root: Path | None = None) -> Sandbox:
    """The sandbox for `mode` and `network` in the workspace at `root` (which decides
    who it runs as, `sandbox_user`); whether bubblewrap works is probed once per
    process for each."""
    if mode == "none":
        return Sandbox(mode, network="host")
    user = sandbox_user(root)
    bwrap, problem = _probe(network, user, root if user is not None else None)
    if bwrap is None and user is not None:
        return Sandbox(mode, None, problem, network, user, fix=(
            f"make bubblewrap work for uid {user.uid} (it needs unprivileged user namespaces, "
            "and a path to the workspace that user may enter)"))
    return Sandbox(mode, bwrap, problem, network, user)


def sandbox_user(root: Path | None) -> RunAs | None:
    """Who the sandbox of the workspace at `root` runs as: None (agentfs's own user),
    except when agentfs runs as root and another user owns the workspace's folder:
    then that user, with their primary group and no other."""
    if os.getuid() != 0 or root is None:
        return None
    owner = os.stat(root)
    if owner.st_uid == 0:
        return None
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
        done = subprocess.run(
            [bwrap, *_isolation(network), *workspace, "true"], stdin=subprocess.DEVNULL,
            capture_output=True, timeout=_PROBE_TIMEOUT, env={}, check=False,
            **RunAs.popen_arguments(user),
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"`{bwrap}` does not work {where}: {exc}"
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return None, f"`{bwrap}` does not work {where}: {said[-1] if said else done.returncode}"
    return bwrap, None


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
