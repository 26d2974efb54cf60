"""Every bash command is bounded: in time (nothing it started outlives the call), in
memory, in file size and in processes; each ends with a clear result and the run goes on.
Both with the sandbox and without it, and, when agentfs runs as root, in a workspace of
root's (the sandbox runs as uid 65534, or, where idmapped mounts do not work, as root
without capabilities) and in one of another user's (the sandbox then runs as that user)."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path

import pytest

from agentfs.tools import ToolContext, ToolRegistry
from agentfs.tools.bash import bash_tool
from agentfs.tools.pids_cgroup import pids_parent
from agentfs.tools.sandbox import Sandbox, choose_sandbox
from agentfs.tools.subprocesses import Limits, safe_environment
from tests.tools.conftest import needs_root

MB = 2**20
LIMITS = Limits(processes=64, memory=1024 * MB, file_size=1 * MB)
SYSTEM_PYTHON = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")


def sandboxes() -> list:
    modes = [pytest.param("unsandboxed", id="unsandboxed")]
    marks = [pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap is not installed")]
    return [*modes, pytest.param("bwrap", id="bwrap", marks=marks),
            pytest.param("owner", id="bwrap-as-owner", marks=[*marks, needs_root]),
            pytest.param("root", id="bwrap-as-root-without-idmap", marks=[*marks, needs_root])]


@pytest.fixture(params=sandboxes())
def where(request) -> tuple[Path, Sandbox]:
    """(the workspace, the sandbox commands run in there)."""
    if request.param == "unsandboxed":
        return request.getfixturevalue("workspace"), Sandbox("none", network="host")
    if request.param == "root":  # the fallback where idmapped mounts do not work
        root = request.getfixturevalue("workspace")
        sandbox = choose_sandbox("bwrap", "none", root, idmap_probe=no_idmap)
        assert sandbox.as_root
        return root, sandbox
    root = request.getfixturevalue("workspace" if request.param == "bwrap" else
                                   "nobodys_workspace")
    sandbox = choose_sandbox("bwrap", "none", root)
    assert sandbox.bwrap is not None, sandbox.problem
    return root, sandbox


def no_idmap(network: str, root: Path) -> tuple[None, str]:
    return None, "idmapped mounts do not work (a test)"


def root_without_pids_cgroup(sandbox: Sandbox) -> bool:
    """Commands run as root, and nothing but the time limit bounds their processes."""
    as_root = sandbox.as_root or (sandbox.bwrap is None and os.getuid() == 0)
    return as_root and pids_parent() is None


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


def processes_of(uid: int) -> list[str]:
    """Pids of the processes and threads `uid` runs."""
    found = []
    for task in Path("/proc").glob("[0-9]*/task/[0-9]*"):
        try:
            if task.stat().st_uid == uid:
                found.append(task.name)
        except OSError:
            continue
    return found


def wait_until_gone(mark: str) -> None:
    deadline = time.monotonic() + 30
    while running(mark):
        assert time.monotonic() < deadline, f"still running: {running(mark)}"
        time.sleep(0.05)


def test_nothing_a_command_started_outlives_the_call(where):
    workspace, sandbox = where
    mark = f"1000.{uuid.uuid4().int % 10**9}"
    result = call(workspace, f"nohup sleep {mark} >/dev/null 2>&1 & sleep {mark} & echo started",
                  sandbox)
    assert result.content == "started\n[exit status 0]"  # the call did not wait for them
    wait_until_gone(mark)
    assert call(workspace, "echo next", sandbox).content == "next\n[exit status 0]"


@pytest.mark.skipif(SYSTEM_PYTHON is None, reason="no python3 in /usr/bin")
def test_a_huge_allocation_fails_and_the_next_call_runs(where):
    workspace, sandbox = where
    result = call(workspace, f"{SYSTEM_PYTHON} -c 'x = bytearray(20 * 2**30)'", sandbox)
    assert result.is_error and "MemoryError" in result.content
    assert call(workspace, "echo next", sandbox).content == "next\n[exit status 0]"


def test_a_file_past_the_size_limit_stops_its_writer(where):
    workspace, sandbox = where
    result = call(workspace, "yes > big", sandbox)
    assert result.is_error and "file size limit of 1 MB" in result.content
    assert (workspace / "big").stat().st_size == 1 * MB
    assert call(workspace, "echo next", sandbox).content == "next\n[exit status 0]"


FORKS = """
import os, time
started = 0
try:
    while started < 200:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        started += 1
    print("started", started)
except OSError as exc:
    print("refused after", started, exc.strerror)
"""


@pytest.mark.skipif(SYSTEM_PYTHON is None, reason="no python3 in /usr/bin")
def test_processes_past_the_limit_are_refused_and_none_outlives_the_call(where):
    workspace, sandbox = where
    if root_without_pids_cgroup(sandbox):
        pytest.skip("as root, without a pids cgroup, only the time limit bounds processes")
    (workspace / "forks.py").write_text(FORKS)
    uid = sandbox.user.uid if sandbox.user else os.getuid()
    # RLIMIT_NPROC counts on top of what the user runs already; root's cgroup does not
    allowed = LIMITS.processes + (0 if uid == 0 else len(processes_of(uid)))
    result = call(workspace, f"{SYSTEM_PYTHON} forks.py", sandbox)
    said = result.content.split()
    assert said[:2] == ["refused", "after"], result.content
    assert int(said[2]) < allowed and "Resource temporarily unavailable" in result.content
    wait_until_gone("forks.py")
    if pids_parent() is not None:  # the command's cgroup went with it
        assert not list(pids_parent().glob(f"agentfs-{os.getpid()}-*"))
    assert call(workspace, "echo next", sandbox).content == "next\n[exit status 0]"


def test_a_fork_bomb_ends_and_the_next_call_runs(where):
    workspace, sandbox = where
    if root_without_pids_cgroup(sandbox):
        pytest.skip("as root, without a pids cgroup, the kernel does not limit processes")
    result = call(workspace, "bomb() { bomb | bomb & }; bomb; sleep 1; echo done", sandbox,
                  timeout=20)
    assert "[exit status" in result.content or "(timeout)" in result.content
    assert call(workspace, "echo next", sandbox).content == "next\n[exit status 0]"


def test_endless_output_is_read_and_dropped_past_the_limit(where):
    workspace, sandbox = where
    result = call(workspace, "head -c 50000000 /dev/zero | tr '\\0' a; echo; echo end", sandbox)
    assert "more bytes" in result.content and result.content.endswith("[exit status 0]")
    assert len(result.content) < 11_000
