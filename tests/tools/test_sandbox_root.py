"""agentfs run as root: bash never runs as a root that can read root's secrets.

In a workspace another user owns, the sandbox runs as that user; in root's own,
as uid 65534 through an idmapped mount of the workspace, or, where that does not
work, as root without capabilities, with the credential files root owns hidden,
and the person is told at start why. CI runs as root, so these run there;
elsewhere they are skipped (and the sandbox runs as the person's own user,
tests/tools/test_sandbox.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from agentfs.core.project import init_workspace
from agentfs.tools import ToolContext, ToolRegistry
from agentfs.tools.bash import bash_tool
from agentfs.tools.sandbox import ROOT_SECRET_FILES, choose_sandbox
from agentfs.tools.subprocesses import RunAs, safe_environment
from tests.conftest import assert_git_clean, git, run_cli, trust_workspace
from tests.tools.conftest import NOBODY, chown_tree, needs_root

pytestmark = [
    needs_root,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed "
                       "here (apt-get install bubblewrap; .ci/run installs it)"),
]

ROOT_NOTICE = "bash runs as root: known credential files are hidden"


def run_bash(root: Path, commands: list[str], write_script) -> tuple[list[str], str]:
    """`agentfs run` in `root` with bash on, the model running `commands`: (each
    result's text, what the run printed on stderr)."""
    script = write_script([{"tool_calls": [{"name": "bash", "input": {"command": command}}]}
                           for command in commands] + [{"text": "done"}])
    config = root / "agentfs.toml"
    config.write_text(config.read_text() + "\n[tools]\nbash = true\n")
    git(root, "commit", "-qam", "enable bash")
    trust_workspace(root)
    done = run_cli("run", "t", "-m", "go", "--model", f"replay:{script}", cwd=root)
    shown = json.loads(run_cli("show", "t", "--json", cwd=root).stdout)
    results = [m["text"] for m in shown["messages"]
               if m["role"] == "tool" and not m["synthetic"]]
    assert len(results) == len(commands), results
    return results, done.stderr


def secrets() -> dict[str, bytes]:
    """What the credential files of this machine hold (those that are not empty)."""
    found = {}
    for pattern in ROOT_SECRET_FILES:
        for path in Path("/").glob(pattern.lstrip("/")):
            if path.is_file() and path.stat().st_size:
                found[str(path)] = path.read_bytes()
    return found


def test_in_a_workspace_of_root_bash_runs_as_nobody_and_its_changes_are_roots_and_committed(
        workspace, write_script):
    held = secrets()
    assert "/etc/shadow" in held, "this machine has no /etc/shadow to hide"
    (workspace / "old.txt").write_text("old\n")
    (workspace / "gone").mkdir()
    (workspace / "gone" / "x.txt").write_text("x\n")
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "files to edit and delete")
    results, stderr = run_bash(workspace, [
        "id -u; id -G",
        *(f"cat {path}" for path in held),
        "echo data > made.txt && mkdir -p src/deep && echo 'x = 1' > src/deep/a.py",
        "echo new >> old.txt && rm -r gone && mkdir empty && rmdir empty",
        "touch .git/planted; echo '[core]' >> .git/config",
        "git log --oneline | wc -l",
    ], write_script)
    assert results[0] == f"{NOBODY}\n{NOBODY}\n[exit status 0]"  # no other group
    for (path, content), result in zip(held.items(), results[1:], strict=False):
        first_line = content.decode("utf-8", "replace").splitlines()[0]
        assert first_line not in result and "Permission denied" in result, f"bash read {path}"
    made, edited, into_git, log = results[-4:]
    assert made == edited == "[exit status 0]"
    assert "Read-only file system" in into_git and into_git.endswith("[exit status 1]")
    assert not (workspace / ".git" / "planted").exists()
    assert log.endswith("[exit status 0]")  # git in the sandbox trusts the workspace
    for path in ("made.txt", "src", "src/deep", "src/deep/a.py", "old.txt"):
        assert (os.stat(workspace / path).st_uid, os.stat(workspace / path).st_gid) == (0, 0)
    assert (workspace / "old.txt").read_text() == "old\nnew\n"
    assert not (workspace / "gone").exists() and not (workspace / "empty").exists()
    committed = git(workspace, "log", "--name-only", "--format=", "--grep", "t: tool")
    assert {"made.txt", "src/deep/a.py", "old.txt", "gone/x.txt"} <= set(committed.split())
    assert "bash runs as root" not in stderr and "will fail" not in stderr
    assert_git_clean(workspace)


def test_where_idmapped_mounts_do_not_work_bash_runs_as_root_without_credentials_and_says_why(
        workspace):
    held = secrets()
    assert "/etc/shadow" in held, "this machine has no /etc/shadow to hide"
    sandbox = choose_sandbox("auto", "none", workspace,
                             idmap_probe=lambda network, root: (None, "no idmapped mounts here"))
    assert sandbox.as_root and not sandbox.idmapped and not sandbox.refuses
    tool = bash_tool(10, 100_000, safe_environment(os.environ), sandbox=sandbox)
    reads = [f"cat {path}" for path in held] + ["find /root /etc/ssl/private -mindepth 1", "id -u"]
    results = [ToolRegistry([tool]).call("bash", {"command": command},
                                         ToolContext(workspace, "t")).content
               for command in reads]
    for (path, content), result in zip(held.items(), results, strict=False):
        first_line = content.decode("utf-8", "replace").splitlines()[0]
        assert first_line not in result, f"bash read {path}"
        assert "Permission denied" in result
    assert results[-2] == "[exit status 0]"  # root's home and private keys: empty folders
    assert results[-1] == "0\n[exit status 0]"
    notice, = sandbox.notices()
    assert notice.startswith(ROOT_NOTICE) and "(no idmapped mounts here)" in notice
    assert "chown the workspace to a normal user" in notice and "\n" not in notice


def test_a_workspace_of_root_nobody_cannot_reach_falls_back_to_root_and_the_start_says_why(
        write_script):
    """A folder only root may enter, outside the folders the sandbox replaces (`/tmp`,
    the home directories): bubblewrap, as uid 65534, cannot bind the workspace there."""
    parent = Path(tempfile.mkdtemp(prefix="agentfs-locked-", dir="/var/tmp"))
    try:
        root = parent / "ws"
        init_workspace(root)
        results, stderr = run_bash(root, ["id -u", "cat /etc/shadow"], write_script)
        assert results[0] == "0\n[exit status 0]"
        assert "Permission denied" in results[1]
        notice, = [line for line in stderr.splitlines() if line.startswith(ROOT_NOTICE)]
        assert f"it would run as uid {NOBODY} with the workspace idmapped" in notice
        assert "Permission denied" in notice  # bubblewrap's own words
        assert_git_clean(root)
    finally:
        shutil.rmtree(parent)


def test_in_a_workspace_of_another_user_bash_runs_as_that_user(nobodys_workspace,
                                                                write_script):
    root = nobodys_workspace
    results, stderr = run_bash(root, [
        "id -u; id -G",
        "cat /etc/shadow",
        "echo data > made.txt && mkdir -p src && echo 'x = 1' > src/a.py",
        "git log --oneline | wc -l",
    ], write_script)
    assert results[0] == f"{NOBODY}\n{NOBODY}\n[exit status 0]"  # no other group
    assert "Permission denied" in results[1] and results[1].endswith("[exit status 1]")
    for made in ("made.txt", "src", "src/a.py"):
        assert (os.stat(root / made).st_uid, os.stat(root / made).st_gid) == (NOBODY, NOBODY)
    assert results[3].endswith("[exit status 0]")  # git reads the history it owns
    assert ROOT_NOTICE not in stderr and "will fail" not in stderr
    committed = git(root, "log", "--name-only", "--format=", "--grep", "t: tool")
    assert {"made.txt", "src/a.py"} <= set(committed.split())
    assert_git_clean(root)


def test_a_workspace_its_owner_cannot_enter_refuses_bash_rather_than_run_it_as_root(tmp_path):
    """A workspace of uid 65534 in a folder only root may enter."""
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o700)
    root = locked / "ws"
    (root / "sub").mkdir(parents=True)
    chown_tree(root, NOBODY, NOBODY)
    sandbox = choose_sandbox("auto", "none", root)
    assert sandbox.user == RunAs(NOBODY, NOBODY) and sandbox.refuses
    assert f"as uid {NOBODY}, the owner of {root}" in (sandbox.problem or "")
    tool = bash_tool(10, 1000, safe_environment(os.environ), sandbox=sandbox)
    result = ToolRegistry([tool]).call("bash", {"command": "echo x > sub/made"},
                                       ToolContext(root, "t"))
    assert result.is_error and f"make bubblewrap work for uid {NOBODY}" in result.content
    assert not (root / "sub" / "made").exists()
    notice, = sandbox.notices()
    assert notice.startswith("bash commands will fail") and "\n" not in notice


def mounted(root: Path) -> list[str]:
    """The mounts this process sees that are idmapped, or at or in the workspace."""
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    return [line for line in lines if "idmapped" in line.split(" - ")[0] or str(root) in line]


def processes_with(mark: str) -> dict[int, int]:
    """{pid: parent pid} of the processes whose command line holds `mark`."""
    found = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if mark.encode() in (proc / "cmdline").read_bytes():
                found[int(proc.name)] = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return found


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, f"still waiting for {what}"
        time.sleep(0.01)


def test_the_idmapped_mount_is_the_sandboxs_alone_and_goes_with_its_killed_launcher(workspace):
    before = mounted(workspace)
    sandbox = choose_sandbox("bwrap", "none", workspace)
    assert sandbox.idmapped, sandbox.idmap_problem
    tool = bash_tool(60, 1000, safe_environment(os.environ), sandbox=sandbox)
    mark = f"1000.{uuid.uuid4().int % 10**9}"
    results = []
    call = threading.Thread(target=lambda: results.append(ToolRegistry([tool]).call(
        "bash", {"command": f"grep -q idmapped /proc/self/mountinfo && touch seen; sleep {mark}"},
        ToolContext(workspace, "t"))))
    call.start()
    wait_for((workspace / "seen").exists, "the sandbox to see its idmapped mount")
    assert mounted(workspace) == before  # not on the machine, while the call runs
    launcher, = [pid for pid, parent in processes_with(mark).items() if parent == os.getpid()]
    os.kill(launcher, signal.SIGKILL)  # the launcher, which became bwrap
    call.join(60)
    assert results[0].is_error and "SIGKILL" in results[0].content
    wait_for(lambda: not processes_with(mark), "the killed sandbox's processes to end")
    assert mounted(workspace) == before
    again = ToolRegistry([tool]).call("bash", {"command": "echo next > next.txt && cat next.txt"},
                                      ToolContext(workspace, "t"))
    assert again.content == "next\n[exit status 0]"
    assert os.stat(workspace / "next.txt").st_uid == 0


def making_its_user_namespace(launcher: subprocess.Popen, mark: str) -> bool | None:
    """Whether the launcher is between its mount namespace and its idmapped mount (its
    child that makes the user namespace is there), or None once it has gone past."""
    if launcher.poll() is not None:
        return None
    children = [pid for pid, parent in processes_with(mark).items() if parent == launcher.pid]
    program = Path(f"/proc/{launcher.pid}/cmdline").read_bytes().split(b"\0")[0]
    if os.path.basename(program) == b"bwrap":
        return None
    return bool(children)


def became_bwrap(launcher: subprocess.Popen) -> bool:
    """Whether the launcher's process runs bwrap now (or is gone)."""
    try:
        program = Path(f"/proc/{launcher.pid}/cmdline").read_bytes().split(b"\0")[0]
    except OSError:
        return True
    return os.path.basename(program) == b"bwrap"


def kill_all_with(mark: str) -> dict[int, int]:
    """SIGKILL every process whose command line holds `mark`; returns those found."""
    found = processes_with(mark)
    for pid in found:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return found


def test_a_launcher_killed_while_it_sets_the_sandbox_up_leaves_nothing_mounted_or_running(
        workspace):
    before = mounted(workspace)
    sandbox = choose_sandbox("bwrap", "none", workspace)
    assert sandbox.idmapped, sandbox.idmap_problem
    killed_midway = 0
    for _ in range(400):  # the window is a few milliseconds: try until it was hit 3 times
        mark = f"1000.{uuid.uuid4().int % 10**9}"
        with sandbox.command(workspace.resolve(), {}) as (arguments, fds):
            launcher = subprocess.Popen([*arguments, "sleep", mark], env={}, pass_fds=fds,
                                        start_new_session=True, stderr=subprocess.DEVNULL)
        state = making_its_user_namespace(launcher, mark)
        while state is False:
            state = making_its_user_namespace(launcher, mark)
        if state:  # caught midway: stopped there, then killed
            launcher.send_signal(signal.SIGSTOP)
            state = not became_bwrap(launcher)  # it may have gone on before it stopped
            killed_midway += state
        launcher.kill()
        launcher.wait()
        if not state:  # too late, it became bwrap: bubblewrap's own business, not this test's
            # (a bwrap killed in its first milliseconds can leave its sandbox running, and
            # start it after a first look: docs/security.md), so kill until none is left
            wait_for(lambda: not kill_all_with(mark), "bwrap's processes to end")  # noqa: B023
        wait_for(lambda: not processes_with(mark), "the killed launcher's processes to end")  # noqa: B023
        assert mounted(workspace) == before
        if killed_midway == 3:
            break
    if not killed_midway:  # a fast, quiet machine: the race was never won; nothing to judge
        pytest.skip("the launcher was never caught between its namespaces in 400 starts")
