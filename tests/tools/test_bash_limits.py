"""Every bash command is bounded: in time (nothing it started outlives the call), in
memory, in file size and in processes; each ends with a clear result and the run goes on.
Both with the sandbox and without it."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path

import pytest

from agentfs.tools import ToolContext, ToolRegistry
from agentfs.tools.bash import bash_tool
from agentfs.tools.sandbox import Sandbox, choose_sandbox
from agentfs.tools.subprocesses import Limits, safe_environment

MB = 2**20
LIMITS = Limits(processes=64, memory=1024 * MB, file_size=1 * MB)
SYSTEM_PYTHON = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")


def sandboxes() -> list:
    modes = [pytest.param(Sandbox("none", network="host"), id="unsandboxed")]
    marks = [pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap is not installed")]
    return [*modes, pytest.param("bwrap", id="bwrap", marks=marks)]


@pytest.fixture(params=sandboxes())
def sandbox(request) -> Sandbox:
    return choose_sandbox("bwrap") if request.param == "bwrap" else request.param


def call(root: Path, command: str, sandbox: Sandbox, timeout: float = 30.0):
    tool = bash_tool(timeout, 10_000, safe_environment(os.environ), sandbox=sandbox,
                     limits=LIMITS)
    return ToolRegistry([tool]).call("bash", {"command": command}, ToolContext(root, "t"))


def running(mark: str) -> list[str]:
    """Pids of processes whose command line holds `mark`."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if mark.encode() in cmdline.read_bytes():
                found.append(cmdline.parent.name)
        except OSError:
            continue
    return found


def wait_until_gone(mark: str) -> None:
    deadline = time.monotonic() + 30
    while running(mark):
        assert time.monotonic() < deadline, f"still running: {running(mark)}"
        time.sleep(0.05)


def test_nothing_a_command_started_outlives_the_call(workspace, sandbox):
    mark = f"1000.{uuid.uuid4().int % 10**9}"
    result = call(workspace, f"nohup sleep {mark} >/dev/null 2>&1 & sleep {mark} & echo started",
                  sandbox)
    assert result.content == "started\n[exit status 0]"  # the call did not wait for them
    wait_until_gone(mark)
    assert call(workspace, "echo next", sandbox).content == "next\n[exit status 0]"


@pytest.mark.skipif(SYSTEM_PYTHON is None, reason="no python3 in /usr/bin")
def test_a_huge_allocation_fails_and_the_next_call_runs(workspace, sandbox):
    result = call(workspace, f"{SYSTEM_PYTHON} -c 'x = bytearray(20 * 2**30)'", sandbox)
    assert result.is_error and "MemoryError" in result.content
    assert call(workspace, "echo next", sandbox).content == "next\n[exit status 0]"


def test_a_file_past_the_size_limit_stops_its_writer(workspace, sandbox):
    result = call(workspace, "yes > big", sandbox)
    assert result.is_error and "file size limit of 1 MB" in result.content
    assert (workspace / "big").stat().st_size == 1 * MB
    assert call(workspace, "echo next", sandbox).content == "next\n[exit status 0]"


@pytest.mark.skipif(os.getuid() == 0, reason="the kernel does not limit root's processes")
def test_a_fork_bomb_ends_and_the_next_call_runs(workspace, sandbox):
    result = call(workspace, "bomb() { bomb | bomb & }; bomb; sleep 1; echo done", sandbox,
                  timeout=20)
    assert "[exit status" in result.content or "(timeout)" in result.content
    assert call(workspace, "echo next", sandbox).content == "next\n[exit status 0]"


def test_endless_output_is_read_and_dropped_past_the_limit(workspace, sandbox):
    result = call(workspace, "head -c 50000000 /dev/zero | tr '\\0' a; echo; echo end", sandbox)
    assert "more bytes" in result.content and result.content.endswith("[exit status 0]")
    assert len(result.content) < 11_000
