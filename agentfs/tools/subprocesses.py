"""Running commands for tools and hooks: an explicit environment, and a timeout
that stops the whole process group, not only the shell. The bash tool puts a
sandbox in front of the command (`agentfs/tools/sandbox.py`), and may run it as
another user (`RunAs`).

The environment is passed in (the CLI builds it with `safe_environment`); by
default a command gets only a PATH, so nothing secret can reach what a model
wrote.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentfs.tools.pids_cgroup import PidsCgroup

#: Variables a command may see, when present: what shells and tools need to work.
ALLOWED = {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "TMPDIR", "TZ", "LANG", "PWD"}
ALLOWED_PREFIXES = ("LC_",)
MINIMAL = {"PATH": os.defpath}
#: Added for the commands of agentfs.toml that run outside the sandbox (context hooks,
#: stdio MCP servers) in the workspace, where the model writes files: Python then puts
#: no folder on `sys.path` by itself, so `python3 -m tool` cannot import a `tool/` the
#: model wrote into the workspace instead of the installed one (Python 3.11 and later).
UNSANDBOXED = {"PYTHONSAFEPATH": "1"}


def safe_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The allowed part of `env`: no keys, tokens or URLs with credentials."""
    return {k: v for k, v in env.items() if k in ALLOWED or k.startswith(ALLOWED_PREFIXES)}


#: After a command's shell exits, how long what it left behind may still hold its
#: output open (a process that left the process group) before agentfs stops reading.
DRAIN_GRACE = 1.0
_CHUNK = 64 * 1024
#: Processes in a sandboxed command's cgroup that are not the command's: bwrap (first
#: the shell that joins the cgroup) and bwrap's init of the PID namespace.
_SANDBOX_PROCESSES = 2


@dataclass(frozen=True)
class RunAs:
    """The user a command runs as, with `gid` its only group (no supplementary groups)."""

    uid: int
    gid: int

    @staticmethod
    def popen_arguments(user: RunAs | None) -> dict[str, Any]:
        """What `subprocess.Popen` takes to start a process as `user` (None: as agentfs)."""
        if user is None:
            return {}
        return {"user": user.uid, "group": user.gid, "extra_groups": []}


@dataclass(frozen=True)
class Limits:
    """What one command may use; None: no limit.

    `processes` counts the processes and threads the command starts, on top of
    those its user already runs (RLIMIT_NPROC counts all of them); the kernel
    does not apply it to root, so for root a pids cgroup holds it where the
    machine offers one (`agentfs/tools/pids_cgroup.py:PidsCgroup`). `memory` is
    the address space of each process (RLIMIT_AS), `file_size` the largest file a
    process may write (RLIMIT_FSIZE; a write past it ends the process with
    SIGXFSZ), `output` the bytes of output kept (the rest is read and dropped, so
    the command is not blocked).
    """

    processes: int | None = None
    memory: int | None = None
    file_size: int | None = None
    output: int | None = None

    def ulimit(self, uid: int) -> str:
        """The `ulimit` options that set these limits in bash for a command of `uid`, soft
        and hard (a command cannot raise them again), or "" for none. RLIMIT_NPROC counts
        every process of the user, so `processes` is added to those running now."""
        options = []
        if self.memory is not None:
            options.append(f"-v {self.memory // 1024}")  # bash counts KiB
        if self.file_size is not None:
            options.append(f"-f {self.file_size // 1024}")  # and 1024-byte blocks
        nproc = _nproc_limit(self.processes, uid)
        if nproc is not None:
            options.append(f"-u {nproc}")
        return " ".join(options)


NO_LIMITS = Limits()


@dataclass
class Completed:
    output: bytes
    returncode: int | None  # None: killed at the timeout
    dropped: int = 0  # bytes of output past `Limits.output`, read and dropped


def run_command(  # noqa: PLR0913 -- keyword-only options, each with its default
    command: str, *, cwd: Path, timeout: float, env: Mapping[str, str] | None = None,
    sandbox: Sequence[str] = (), limits: Limits = NO_LIMITS, user: RunAs | None = None,
    sandbox_sets_user: bool = False, pass_fds: Sequence[int] = (),
) -> Completed:
    """`bash -c command` in its own process group; stdout and stderr together.

    The call returns when the shell exits, and nothing it started outlives it:
    its process group is killed then, and at the timeout (in a sandbox, the PID
    namespace ends with the shell, and everything in it; in a pids cgroup, every
    process left in it).

    `sandbox` is a command line that runs what follows it in a sandbox
    (`agentfs/tools/sandbox.py:Sandbox.arguments`); it gets the same environment.
    The command runs as `user` (default: agentfs's own): agentfs starts it as that
    user, or, with `sandbox_sets_user`, starts the sandbox as itself and the
    sandbox becomes `user` (the idmap launcher, `agentfs/tools/idmap_launcher.py`).
    `pass_fds` are descriptors the sandbox reads (its socket filter).
    """
    uid = os.getuid() if user is None else user.uid
    options = limits.ulimit(uid)
    # the limits are set by the shell that then runs the command (inside the sandbox,
    # so bwrap itself is not limited): its line numbers in errors stay the command's
    shell = ["bash", "-c", f'ulimit {options} || exit 125; exec bash -c "$1"', "bash", command]
    cgroup = None
    if uid == 0 and limits.processes is not None:  # where RLIMIT_NPROC does not apply
        cgroup = PidsCgroup.make(limits.processes + (_SANDBOX_PROCESSES if sandbox else 0))
    try:
        proc = subprocess.Popen(
            [*(cgroup.enter() if cgroup else []), *sandbox,
             *(shell if options else ["bash", "-c", command])],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else MINIMAL,
            start_new_session=True,
            pass_fds=tuple(pass_fds),
            **RunAs.popen_arguments(None if sandbox_sets_user else user),
        )
        return _finish(proc, timeout, limits.output)
    finally:
        if cgroup is not None:
            cgroup.close()


def _finish(proc: subprocess.Popen, timeout: float, cap: int | None) -> Completed:
    """The command's output and status, once it and all it started are gone."""
    try:
        output, dropped, timed_out = _collect(proc, time.monotonic() + timeout, cap)
    except BaseException:  # Ctrl-C (KeyboardInterrupt): the command must not outlive its step
        _kill_group(proc)
        proc.wait()
        raise
    finally:
        assert proc.stdout is not None
        proc.stdout.close()
    proc.wait()
    return Completed(output, None if timed_out else proc.returncode, dropped)


def _collect(proc: subprocess.Popen, deadline: float,
             cap: int | None) -> tuple[bytes, int, bool]:
    """Read the command's output until the shell exited and the pipe closed, or the
    deadline: (the bytes kept, how many were dropped past `cap`, whether it timed out)."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    kept = bytearray()
    dropped = 0
    exited_at: float | None = None
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            now = time.monotonic()
            if now >= deadline:
                _kill_group(proc)
                _drain_for(fd, kept, cap)
                return bytes(kept), dropped, True
            if exited_at is None and proc.poll() is not None:
                exited_at = now
                _kill_group(proc)  # what the shell left running, `nohup ... &` included
            if exited_at is not None and now - exited_at > DRAIN_GRACE:
                break  # held open by a process that left the group: stop listening
            wait = min(deadline - now, 0.05 if exited_at is None else DRAIN_GRACE)
            if not selector.select(wait):
                continue
            chunk = os.read(fd, _CHUNK)
            if not chunk:
                break
            room = len(chunk) if cap is None else max(0, cap - len(kept))
            kept += chunk[:room]
            dropped += len(chunk) - min(room, len(chunk))
    return bytes(kept), dropped, False


def _drain_for(fd: int, kept: bytearray, cap: int | None) -> None:
    """What the killed command had written but agentfs not yet read."""
    os.set_blocking(fd, False)
    try:
        while cap is None or len(kept) < cap:
            chunk = os.read(fd, _CHUNK)
            if not chunk:
                break
            kept += chunk
    except BlockingIOError:
        pass
    if cap is not None:
        del kept[cap:]


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # all gone already
        os.killpg(proc.pid, signal.SIGKILL)


def _nproc_limit(processes: int | None, uid: int) -> int | None:
    """RLIMIT_NPROC for a command of `uid` that may start `processes` more: the kernel
    counts every process and thread of the user, so it is what they run now plus that."""
    if processes is None or uid == 0:  # the kernel does not count root's
        return None
    running = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid == uid:
                running += len(os.listdir(f"/proc/{entry.name}/task"))
        except OSError:  # gone meanwhile
            continue
    return running + processes
