"""Running commands for tools and hooks: no secrets in their environment, and a
timeout that stops the whole process group, not only the shell."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

SECRET = re.compile(r"(API_?KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL)", re.IGNORECASE)


def scrubbed_env(env: Mapping[str, str]) -> dict[str, str]:
    """`env` without variables that look like secrets (the model writes these commands)."""
    return {k: v for k, v in env.items() if not SECRET.search(k)}


@dataclass
class Completed:
    output: bytes
    returncode: int | None  # None: killed at the timeout


def run_command(command: str, *, cwd: Path, timeout: float) -> Completed:
    """`bash -c command` in its own process group; stdout and stderr together."""
    proc = subprocess.Popen(
        ["bash", "-c", command],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=scrubbed_env(os.environ),
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=timeout)
        return Completed(output, proc.returncode)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        return Completed(output, None)
