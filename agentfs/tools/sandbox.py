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
"""

from __future__ import annotations

import contextlib
import functools
import os
import pwd
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = ["INSTALL_HINT", "SANDBOX_TMP", "NetworkMode", "Sandbox", "SandboxMode", "choose_sandbox"]

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


@dataclass(frozen=True)
class Sandbox:
    """How bash commands run: in bubblewrap at `bwrap`, or, when it is None, not at
    all because of `problem` (or without a sandbox, when `mode` is `none`).
    `network` is what a sandboxed command may reach."""

    mode: SandboxMode
    bwrap: str | None = None
    problem: str | None = None
    network: NetworkMode = "none"

    @property
    def refuses(self) -> bool:
        """Commands must not run: a sandbox is required (any mode but `none`) and there is none."""
        return self.mode != "none" and self.bwrap is None

    def refusal(self) -> str:
        """Why a bash call is refused, and what the person running agentfs can do."""
        return (f"bash runs only in a sandbox (tools.bash_sandbox = \"{self.mode}\"), and "
                f"{self.problem}; the person running agentfs can {INSTALL_HINT}, or set "
                "tools.bash_sandbox = \"none\" in agentfs.toml to run commands without one")

    def notice(self) -> str | None:
        """One line for a person starting a run with bash on, or None: commands run
        sandboxed, without a network."""
        if self.mode == "none":
            return ("bash commands run without a sandbox (tools.bash_sandbox = \"none\"): "
                    "they can read whatever your user can, API keys included, and reach "
                    "the network, services on this machine included")
        if self.refuses:
            return (f"bash commands will fail: they run only in a sandbox and {self.problem}; "
                    f"{INSTALL_HINT}, or set tools.bash_sandbox = \"none\" in agentfs.toml")
        if self.network == "host":
            return ("bash commands reach the host's network (tools.bash_network = \"host\"), "
                    "loopback included: services on this machine, such as `agentfs serve`, "
                    "answer them")
        return None

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
        for hidden in _private_dirs(env):
            args += ["--tmpfs", hidden]
        args += ["--bind", str(root), str(root)]
        for path in _inside(root, [".git", *read_only]):
            args += ["--ro-bind", path, path]
        if "TMPDIR" in env:
            args += ["--setenv", "TMPDIR", SANDBOX_TMP]
        return [*args, "--chdir", str(root)]


@functools.cache
def choose_sandbox(mode: SandboxMode, network: NetworkMode = "none") -> Sandbox:
    """The sandbox for `mode` and `network`; whether bubblewrap works is probed once
    per process."""
    if mode == "none":
        return Sandbox(mode, network="host")
    bwrap, problem = _probe(network)
    return Sandbox(mode, bwrap, problem, network)


def _isolation(network: NetworkMode) -> tuple[str, ...]:
    return _ISOLATION + (_NO_NETWORK if network == "none" else ())


@functools.cache
def _probe(network: NetworkMode) -> tuple[str | None, str | None]:
    """(path of a working `bwrap`, None), or (None, why there is none)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return None, "`bwrap` is not installed"
    try:
        done = subprocess.run(
            [bwrap, *_isolation(network), "true"], stdin=subprocess.DEVNULL,
            capture_output=True, timeout=_PROBE_TIMEOUT, env={}, check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"`{bwrap}` does not work here: {exc}"
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return None, f"`{bwrap}` does not work here: {said[-1] if said else done.returncode}"
    return bwrap, None


def _private_dirs(env: Mapping[str, str]) -> list[str]:
    """Directories replaced by an empty tmpfs: the home directory (the password
    database's and `HOME`), where keys and tokens are kept, and the per-user
    runtime directory, which holds keyring and agent sockets."""
    uid = os.getuid()
    found = [f"/run/user/{uid}", env.get("HOME", "")]
    with contextlib.suppress(KeyError):  # a uid with no entry, as in some containers
        found.append(pwd.getpwuid(uid).pw_dir)
    dirs = {os.path.realpath(d) for d in found if d and os.path.isdir(d)}
    return sorted(dirs - {"/"})


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
