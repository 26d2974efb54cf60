"""agentfs run as root: bash never runs as a root that can read root's secrets.

In a workspace another user owns, the sandbox runs as that user; in root's own,
as root without capabilities, with the credential files root owns hidden, and the
person is told at start. CI runs as root, so these run there; elsewhere they are
skipped (and the sandbox runs as the person's own user, tests/tools/test_sandbox.py).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

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


def test_in_a_workspace_of_root_bash_cannot_read_credential_files_and_the_start_says_so(
        workspace, write_script):
    held = secrets()
    assert "/etc/shadow" in held, "this machine has no /etc/shadow to hide"
    reads = [f"cat {path}" for path in held] + ["find /root /etc/ssl/private -mindepth 1", "id -u"]
    results, stderr = run_bash(workspace, reads, write_script)
    for (path, content), result in zip(held.items(), results, strict=False):
        first_line = content.decode("utf-8", "replace").splitlines()[0]
        assert first_line not in result, f"bash read {path}"
        assert "Permission denied" in result
    assert results[-2] == "[exit status 0]"  # root's home and private keys: empty folders
    assert results[-1] == "0\n[exit status 0]"
    notices = [line for line in stderr.splitlines() if line.startswith(ROOT_NOTICE)]
    assert notices == choose_sandbox("auto", "none", workspace).notices()
    assert "chown the workspace to a normal user" in notices[0]
    assert_git_clean(workspace)


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
