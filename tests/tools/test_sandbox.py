"""The bash tool's sandbox: a command cannot read the API key, nor change the host.

Most tests run the real bubblewrap; they are skipped only where `bwrap` is not
installed (`.ci/run` installs it, so CI never skips them).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from agentfs.config import DEFAULT_READ_ONLY
from agentfs.tools import ToolContext, ToolRegistry
from agentfs.tools.bash import bash_tool
from agentfs.tools.sandbox import Sandbox, choose_sandbox
from agentfs.tools.subprocesses import safe_environment
from tests.conftest import assert_git_clean, git, run_cli, trust_workspace

KEY = "sk-test-SECRET"
needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None,
    reason="bubblewrap is not installed here (apt-get install bubblewrap; .ci/run installs it)",
)

# Run by a fresh Python process that has the key in its environment from the start, as
# `agentfs run` has: /proc/<pid>/environ shows a process's initial environment, which
# monkeypatch.setenv in the test process would not change.
AGENT = """
import json, os, sys
from pathlib import Path
from agentfs.config import DEFAULT_READ_ONLY
from agentfs.tools import ToolContext, ToolRegistry
from agentfs.tools.bash import bash_tool
from agentfs.tools.sandbox import choose_sandbox
from agentfs.tools.subprocesses import safe_environment

root, mode, commands = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
tool = bash_tool(20, 1_000_000, safe_environment(os.environ),
                 sandbox=choose_sandbox(mode, "none", root.resolve()), read_only=DEFAULT_READ_ONLY)
answers = []
for command in commands:
    context = ToolContext(root, "t")
    result = ToolRegistry([tool]).call("bash", {"command": command.format(pid=os.getpid())},
                                       context)
    answers.append({"content": result.content, "changed": sorted(context.changed)})
print(json.dumps(answers))
"""

READS = [
    "env",
    "tr '\\0' '\\n' </proc/$PPID/environ",
    "cat /proc/1/environ",
    "for f in /proc/*/environ; do tr '\\0' '\\n' <$f; done",
    "cat /proc/{pid}/environ",  # the agentfs process, by its real pid
    "cat ~/.secret",
    "cat $HOME/.secret",
    "ps e; ps axeww",
]


@pytest.fixture
def home():
    """A home directory holding the key in a file. Not under /tmp: the sandbox hides
    all of /tmp, so a home there would not show that the home directory is hidden."""
    parent = "/var/tmp" if os.access("/var/tmp", os.W_OK) else None
    path = Path(tempfile.mkdtemp(prefix="agentfs-home-", dir=parent))
    (path / ".secret").write_text(f"ANTHROPIC_API_KEY={KEY}\n")
    yield path
    shutil.rmtree(path)


def run_as_agent(root: Path, home: Path, mode: str, commands: list[str]) -> list[dict]:
    """Run `commands` with the bash tool in a process that holds the key, as agentfs does."""
    done = subprocess.run(
        [sys.executable, "-c", AGENT, str(root), mode, json.dumps(commands)],
        env={**os.environ, "ANTHROPIC_API_KEY": KEY, "HOME": str(home)},
        capture_output=True, text=True, timeout=120, check=True,
    )
    return json.loads(done.stdout)


@needs_bwrap
def test_bwrap_works_here():
    sandbox = choose_sandbox("bwrap")
    assert sandbox.bwrap is not None, f"bwrap is installed but {sandbox.problem}"
    if os.getuid() != 0:  # as root, the start says bash runs as root (test_sandbox_root.py)
        assert sandbox.notices() == []


@needs_bwrap
def test_no_command_can_read_the_api_key(workspace, home):
    answers = run_as_agent(workspace, home, "auto", READS)
    for command, answer in zip(READS, answers, strict=True):
        assert KEY not in answer["content"], f"{command!r} read the key:\n{answer['content']}"
    shown = dict(zip(READS, answers, strict=True))
    assert "ANTHROPIC_API_KEY" not in shown["env"]["content"]
    assert f"HOME={home}" in shown["env"]["content"]  # the same environment as before
    assert "No such file" in shown["cat ~/.secret"]["content"]


def test_without_the_sandbox_the_same_commands_do_read_the_key(workspace, home):
    """The check above can fail: this is the leak the sandbox closes."""
    answers = run_as_agent(workspace, home, "none", READS[:2] + ["cat ~/.secret"])
    assert KEY not in answers[0]["content"]  # the environment allowlist still holds
    assert KEY in answers[1]["content"] and KEY in answers[2]["content"]


@needs_bwrap
def test_commands_change_the_workspace_but_nothing_else(workspace, home):
    name = f"agentfs-sandbox-{uuid.uuid4().hex}"
    git_config = (workspace / ".git" / "config").read_bytes()
    config = (workspace / "agentfs.toml").read_bytes()
    commands = [
        "echo x >> .git/config",
        "umount .git; mount -o remount,rw .git; echo x >> .git/config",  # as root, too
        "echo x > .git/refs/heads/evil",
        "echo 'model = \"x\"' >> agentfs.toml",
        "mkdir -p traces/t && echo x > traces/t/forged.md",
        f"echo x > /tmp/{name}; cat /tmp/{name}",
        f"echo x > /etc/{name}",
        f"echo x > {home}/.secret; echo x > ~/.profile",
        "echo data > made.txt; git log --oneline | wc -l",
    ]
    answers = run_as_agent(workspace, home, "auto", commands)
    assert (workspace / ".git" / "config").read_bytes() == git_config
    assert not (workspace / ".git" / "refs" / "heads" / "evil").exists()
    assert (workspace / "agentfs.toml").read_bytes() == config
    assert not (workspace / "traces" / "t" / "forged.md").exists()
    assert not Path(f"/tmp/{name}").exists()
    assert answers[5]["content"].startswith("x\n")  # /tmp works, privately
    assert not Path(f"/etc/{name}").exists()
    assert (home / ".secret").read_text() == f"ANTHROPIC_API_KEY={KEY}\n"
    assert not (home / ".profile").exists()
    assert (workspace / "made.txt").read_text() == "data\n"
    assert answers[-1]["changed"] == ["made.txt"]
    assert answers[-1]["content"].endswith("[exit status 0]")  # git can still read history


def call(root: Path, command: str, sandbox: Sandbox, timeout: float = 10.0):
    tool = bash_tool(timeout, 10_000, safe_environment(os.environ), sandbox=sandbox,
                     read_only=DEFAULT_READ_ONLY)
    context = ToolContext(root, "t")
    return tool, ToolRegistry([tool]).call("bash", {"command": command}, context), context


@needs_bwrap
def test_the_timeout_kills_every_process_in_the_sandbox(workspace):
    mark = f"100.{uuid.uuid4().int % 10**9}"  # an argument no other process has

    def sleepers() -> list[str]:
        found = []
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                if cmdline.read_bytes().split(b"\0")[:2] == [b"sleep", mark.encode()]:
                    found.append(cmdline.parent.name)
            except OSError:
                continue
        return found

    _, result, _ = call(workspace, f"sleep {mark} & sleep {mark}; echo never",
                        choose_sandbox("bwrap", "none", workspace), timeout=1.0)
    assert result.is_error and "killed after 1s (timeout)" in result.content
    assert "never" not in result.content
    deadline = time.monotonic() + 10
    while sleepers():
        assert time.monotonic() < deadline, f"still running: {sleepers()}"
        time.sleep(0.05)


@needs_bwrap
def test_tmpdir_points_at_the_private_tmp(workspace):
    env = {**safe_environment(os.environ), "TMPDIR": "/var/tmp"}
    tool = bash_tool(10, 1000, env, sandbox=choose_sandbox("bwrap"))
    result = ToolRegistry([tool]).call("bash", {"command": "echo $TMPDIR"},
                                       ToolContext(workspace, "t"))
    assert result.content == "/tmp\n[exit status 0]"
    assert "It runs in a sandbox" in tool.description


def test_bwrap_mode_without_bubblewrap_refuses_and_says_how_to_install_it(workspace):
    missing = Sandbox("bwrap", None, "`bwrap` is not installed")
    tool, result, context = call(workspace, "echo data > made.txt", missing)
    assert result.is_error and "apt-get install bubblewrap" in result.content
    assert not (workspace / "made.txt").exists() and not context.changed
    assert "unavailable" in tool.description
    assert "apt-get install bubblewrap" in missing.notices()[0]


def test_auto_without_bubblewrap_refuses_and_says_how_to_install_it_or_choose_none(workspace):
    missing = Sandbox("auto", None, "`bwrap` is not installed")
    tool, result, context = call(workspace, "echo data > made.txt", missing)
    assert result.is_error and "apt-get install bubblewrap" in result.content
    assert 'tools.bash_sandbox = "none"' in result.content
    assert not (workspace / "made.txt").exists() and not context.changed
    assert "unavailable" in tool.description
    notice, = missing.notices()
    assert "bash commands will fail" in notice and "`bwrap` is not installed" in notice
    assert "apt-get install bubblewrap" in notice and "\n" not in notice


def test_a_missing_bwrap_is_found_by_the_probe(tmp_path):
    code = "from agentfs.tools.sandbox import choose_sandbox; print(choose_sandbox('auto'))"
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PATH": str(tmp_path)},
                          capture_output=True, text=True, check=True)
    assert "bwrap=None, problem='`bwrap` is not installed'" in done.stdout


def _enable_bash(root: Path, sandbox: str) -> None:
    config = root / "agentfs.toml"
    config.write_text(config.read_text() + f'\n[tools]\nbash = true\nbash_sandbox = "{sandbox}"\n')
    git(root, "commit", "-qam", "enable bash")
    trust_workspace(root)


@needs_bwrap
def test_agentfs_run_keeps_its_key_from_bash(workspace, write_script):
    """The reported leak, end to end: `agentfs run` holds the key; bash reads its /proc."""
    script = write_script([{"tool_calls": [{"name": "bash", "input": {"command": command}}]}
                           for command in READS[:4] + ["echo data > made.txt"]]
                          + [{"text": "done"}])
    _enable_bash(workspace, "auto")
    done = run_cli("new", "t", "-m", "go", cwd=workspace)
    done = run_cli("run", "t", "--model", f"replay:{script}", cwd=workspace, isolated=True,
                   env={"ANTHROPIC_API_KEY": KEY})
    assert "will fail" not in done.stderr and "without a sandbox" not in done.stderr
    shown = json.loads(run_cli("show", "t", "--json", cwd=workspace).stdout)
    results = [m["text"] for m in shown["messages"] if m["role"] == "tool"]
    assert len([text for text in results if "[exit status 0]" in text]) == 5
    assert not any(KEY in text for text in results)
    assert "made.txt" in git(workspace, "log", "-1", "--name-only", "--format=",
                             "--grep", "t: tool")
    assert_git_clean(workspace)


def test_run_says_at_start_that_bash_is_not_sandboxed(workspace, write_script):
    script = write_script([{"text": "done"}])
    _enable_bash(workspace, "none")
    done = run_cli("run", "t", "-m", "go", "--model", f"replay:{script}", cwd=workspace)
    lines = [line for line in done.stderr.splitlines() if "without a sandbox" in line]
    assert lines == choose_sandbox("none").notices()
    assert 'without a sandbox (tools.bash_sandbox = "none")' in lines[0]


@needs_bwrap
def test_control_folders_a_clone_lacks_are_made_read_only_before_a_command_runs(workspace):
    """A clone whose author left out `knowledge/`, `skills/` and `inbox/` (no
    `.gitkeep`): a command can make none of them, so it cannot plant knowledge, a
    skill or a new trace."""
    for name in ("knowledge", "skills", "inbox"):
        git(workspace, "rm", "-rq", "--ignore-unmatch", name)
        shutil.rmtree(workspace / name, ignore_errors=True)
    git(workspace, "commit", "-qm", "no control folders")
    _, result, context = call(workspace, "mkdir -p knowledge skills/evil inbox; "
                              "echo x > knowledge/evil.md; echo x > skills/evil/SKILL.md; "
                              "echo x > inbox/drop.md", choose_sandbox("auto", "none",
                                                                       workspace.resolve()))
    assert "Read-only file system" in result.content and result.is_error
    for name in ("knowledge", "skills", "inbox"):
        assert (workspace / name).is_dir() and not any((workspace / name).iterdir())
    assert context.changed == set()
    assert_git_clean(workspace)  # empty folders: nothing for git to show
