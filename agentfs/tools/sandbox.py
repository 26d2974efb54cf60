"""The bash tool's sandbox: bubblewrap (`bwrap`), so a command cannot read secrets.

The environment allowlist (`agentfs/tools/subprocesses.py`) keeps API keys out
of a command's environment, but a command running as the same user could still
read them from `/proc/<agentfs pid>/environ` or from files in the home
directory. In the sandbox it sees only its own processes (a new PID namespace
with its own `/proc`), an empty home directory and an empty private `/tmp`;
the rest of the file system is read-only, except the workspace, where `.git`
and the control folders stay read-only. The network is shared with the host.

Where bubblewrap does not work, `auto` runs commands without a sandbox and
says so (`Sandbox.notice`); `bwrap` refuses to run them.
"""

from __future__ import annotations

import functools
import os
import pwd
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = ["INSTALL_HINT", "Sandbox", "SandboxMode", "choose_sandbox"]

#: `tools.bash_sandbox` in agentfs.toml.
SandboxMode = Literal["auto", "bwrap", "none"]

INSTALL_HINT = "install bubblewrap (Debian and Ubuntu: `apt-get install bubblewrap`)"

#: What every sandbox is, before the workspace is bound into it. `--cap-drop ALL`
#: matters when agentfs runs as root: bwrap keeps root's capabilities otherwise,
#: and a command could unmount the read-only binds.
_ISOLATION = (
    "--ro-bind", "/", "/",
    "--dev", "/dev",
    "--proc", "/proc",
    "--tmpfs", "/tmp",
    "--unshare-pid", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
)
_PROBE_TIMEOUT = 10.0


@dataclass(frozen=True)
class Sandbox:
    """How bash commands run: in bubblewrap at `bwrap`, or, when it is None, without
    a sandbox because of `problem` (or because `mode` is `none`)."""

    mode: SandboxMode
    bwrap: str | None = None
    problem: str | None = None

    @property
    def refuses(self) -> bool:
        """Commands must not run: a sandbox is required and there is none."""
        return self.mode == "bwrap" and self.bwrap is None

    def notice(self) -> str | None:
        """One line for a person starting a run with bash on; None when commands are sandboxed."""
        if self.bwrap is not None:
            return None
        if self.mode == "none":
            return ("bash commands run without a sandbox (tools.bash_sandbox = \"none\"): "
                    "they can read whatever your user can, API keys included")
        if self.refuses:
            return (f"bash commands will fail: tools.bash_sandbox = \"bwrap\" but {self.problem}; "
                    f"{INSTALL_HINT}")
        return (f"bash commands run without a sandbox ({self.problem}): they can read whatever "
                f"your user can, API keys included; {INSTALL_HINT}, or set "
                "tools.bash_sandbox = \"none\" to say that is intended")

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
        args = [self.bwrap, *_ISOLATION]
        for hidden in _private_dirs(env):
            args += ["--tmpfs", hidden]
        args += ["--bind", str(root), str(root)]
        for path in _inside(root, [".git", *read_only]):
            args += ["--ro-bind", path, path]
        if "TMPDIR" in env:
            args += ["--setenv", "TMPDIR", "/tmp"]
        return [*args, "--chdir", str(root)]


@functools.cache
def choose_sandbox(mode: SandboxMode) -> Sandbox:
    """The sandbox for `mode`; whether bubblewrap works is probed once per process."""
    if mode == "none":
        return Sandbox(mode)
    bwrap, problem = _probe()
    return Sandbox(mode, bwrap, problem)


@functools.cache
def _probe() -> tuple[str | None, str | None]:
    """(path of a working `bwrap`, None), or (None, why there is none)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return None, "`bwrap` is not installed"
    try:
        done = subprocess.run(
            [bwrap, *_ISOLATION, "true"], stdin=subprocess.DEVNULL,
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
    try:
        found.append(pwd.getpwuid(uid).pw_dir)
    except KeyError:  # a uid with no entry, as in some containers
        pass
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
