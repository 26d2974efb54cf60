"""Running commands for tools and hooks: an explicit environment, and a timeout
that stops the whole process group, not only the shell. The bash tool puts a
sandbox in front of the command (`agentfs/tools/sandbox.py`).

The environment is passed in (the CLI builds it with `safe_environment`); by
default a command gets only a PATH, so nothing secret can reach what a model
wrote.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

#: Variables a command may see, when present: what shells and tools need to work.
ALLOWED = {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "TMPDIR", "TZ", "LANG", "PWD"}
ALLOWED_PREFIXES = ("LC_",)
MINIMAL = {"PATH": os.defpath}


def safe_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The allowed part of `env`: no keys, tokens or URLs with credentials."""
    return {k: v for k, v in env.items() if k in ALLOWED or k.startswith(ALLOWED_PREFIXES)}


@dataclass
class Completed:
    output: bytes
    returncode: int | None  # None: killed at the timeout


def run_command(
    command: str, *, cwd: Path, timeout: float, env: Mapping[str, str] | None = None,
    sandbox: Sequence[str] = (),
) -> Completed:
    """`bash -c command` in its own process group; stdout and stderr together.

    `sandbox` is a command line that runs what follows it in a sandbox
    (`agentfs/tools/sandbox.py:Sandbox.arguments`); it gets the same environment.
    """
    proc = subprocess.Popen(
        [*sandbox, "bash", "-c", command],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=dict(env) if env is not None else MINIMAL,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=timeout)
        return Completed(output, proc.returncode)
    except subprocess.TimeoutExpired:
        # in a sandbox this kills bwrap; the PID namespace, and all in it, dies with it
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        return Completed(output, None)
    except BaseException:  # Ctrl-C (KeyboardInterrupt): the command must not outlive its step
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
