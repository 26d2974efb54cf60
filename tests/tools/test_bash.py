"""The bash tool: limits, changed files, no secrets, off by default."""

from __future__ import annotations

import os
import time

from agentfs.core.runner import Runner
from agentfs.models.replay import ReplayModel
from agentfs.tools import ToolContext, ToolRegistry
from agentfs.tools.bash import bash_tool
from agentfs.tools.subprocesses import safe_environment
from tests.conftest import assert_git_clean, git, run_cli, user


def call(root, command, timeout=10.0, limit=1000, env=None):
    context = ToolContext(root, "t")
    tool = bash_tool(timeout, limit, env or safe_environment(os.environ))
    result = ToolRegistry([tool]).call("bash", {"command": command}, context)
    return result, context


def test_output_status_and_changed_files(workspace):
    (workspace / ".gitignore").write_text("build/\n")
    result, context = call(workspace, "echo hi; mkdir -p build sub; echo x > sub/a.txt; "
                                      "echo o > build/o.bin; git init -q nested; exit 3")
    assert result.is_error and result.content == "hi\n[exit status 3]"
    assert "sub/a.txt" in context.changed
    assert not any(p.startswith("build/") for p in context.changed)  # ignored
    assert not any("/.git/" in p or p.startswith("nested/.git") for p in context.changed)


def test_timeout_kills_the_whole_process_group(workspace):
    started = time.monotonic()
    result, _ = call(workspace, "sleep 30 & sleep 30; echo never", timeout=0.5)
    assert result.is_error and "timeout" in result.content
    assert time.monotonic() - started < 10
    assert "never" not in result.content


def test_output_is_capped_and_secrets_are_not_passed(workspace, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-secret")
    monkeypatch.setenv("DATABASE_URL", "postgres://u:pw@h/db")
    monkeypatch.setenv("LANG", "C.UTF-8")
    result, _ = call(workspace, "env; yes | head -c 5000", limit=100_000)
    assert "sk-secret" not in result.content and "pw@h" not in result.content
    assert "LANG=C.UTF-8" in result.content
    result, _ = call(workspace, "yes | head -c 5000", limit=1000)
    assert "\n[... cut by agentfs: 4,000 more bytes; send the output to a file" in result.content
    result, _ = call(workspace, "env", env={"PATH": os.defpath})
    assert "LANG" not in result.content


def test_output_over_what_a_message_may_hold_is_cut_whatever_the_configured_limit(workspace):
    from agentfs.tools.base import TOOL_RESULT_MAX_BYTES

    result, _ = call(workspace, "yes € | head -c 20000000", limit=100_000_000)
    assert len(result.content.encode()) <= TOOL_RESULT_MAX_BYTES
    assert "more bytes; one tool result holds at most" in result.content
    assert "\ufffd" not in result.content  # cut between characters


def test_bash_is_off_unless_enabled_and_its_files_are_committed(project, write_script):
    script = write_script([{"tool_calls": [{"name": "bash", "input": {
        "command": "echo data > made-by-bash.txt"}}]}, {"text": "done"}])
    project.new_trace("t", user("go"))
    runner = Runner(project.workspace, project.repo, ReplayModel(script), config=project.config)
    runner.run("t")
    result = next(m for m in project.trace("t").main_path() if m.role == "tool")
    assert result.is_error and "unknown tool 'bash'" in result.text

    project = _enable_bash(project)
    project.new_trace("t2", user("go"))
    Runner(project.workspace, project.repo, ReplayModel(script), config=project.config).run("t2")
    assert (project.workspace.root / "made-by-bash.txt").read_text() == "data\n"
    shown = git(project.workspace.root, "log", "-1", "--name-only", "--format=",
                "--grep", "t2: tool")
    assert "made-by-bash.txt" in shown
    assert_git_clean(project.workspace.root)


def test_a_file_named_in_bytes_that_are_not_utf8_is_left_uncommitted_and_named(
        project, write_script):
    """A message file cannot hold such a name: the run goes on, and says so."""
    script = write_script([{"tool_calls": [{"name": "bash", "input": {
        "command": "echo a > $'caf\\xe9.txt'; echo b > 'back\\slash.txt'; echo c > fine.txt"}}]},
        {"text": "done"}])
    config = project.workspace.config_path
    config.write_text(config.read_text() + "\n[tools]\nbash = true\n")
    root = project.workspace.root
    git(root, "commit", "-qam", "enable bash")
    from agentfs.core.project import Project

    project = Project.open(root)
    project.new_trace("t", user("go"))
    Runner(project.workspace, project.repo, ReplayModel(script), config=project.config).run("t")
    path = project.trace("t").main_path()  # every file loads
    result = path[3]
    assert result.files_changed == ["fine.txt"] and path[-1].text == "done"
    assert result.text == (
        "[not committed, names agentfs cannot store: 'back\\\\slash.txt' (it holds a NUL or "
        "a backslash), 'caf\\xe9.txt' (it is not valid UTF-8)]\n[exit status 0]")
    assert git(root, "status", "--porcelain").splitlines() == [
        '?? "back\\\\slash.txt"', '?? "caf\\351.txt"']
    assert "fine.txt" in git(root, "show", "--name-only", "--format=", "HEAD~1")


def _enable_bash(project):
    """`[tools] bash = true` added to agentfs.toml and committed; the project opened again."""
    from agentfs.core.project import Project

    config = project.workspace.config_path
    config.write_text(config.read_text() + "\n[tools]\nbash = true\n")
    git(project.workspace.root, "commit", "-qam", "enable bash")
    return Project.open(project.workspace.root)


def _run_bash(project, write_script, *commands: str):
    """Run trace 't' on a script calling bash with each command in turn, bash enabled;
    returns the tool results."""
    script = write_script([*({"tool_calls": [{"name": "bash", "input": {"command": c}}]}
                             for c in commands), {"text": "done"}])
    project = _enable_bash(project)
    project.new_trace("t", user("go"))
    Runner(project.workspace, project.repo, ReplayModel(script), config=project.config).run("t")
    return [m for m in project.trace("t").main_path() if m.role == "tool"]


def test_a_gitignore_that_ignores_itself_and_a_file_is_committed_and_the_file_named(
        project, write_script):
    """The rule the agent wrote is in the step, so no view says it changed nothing."""
    root = project.workspace.root
    (result,) = _run_bash(project, write_script,
                          r"printf '.gitignore\npayload\n' > .gitignore; echo x > payload")
    assert result.files_changed == [".gitignore"]
    assert result.text == ("[not committed, new files .gitignore ignores: 'payload']\n"
                           "[exit status 0]")
    step = git(root, "log", "-1", "-p", "--format=", "--grep", "t: tool")
    assert "+++ b/.gitignore" in step and "+payload" in step
    assert (root / "payload").exists() and "payload" not in git(root, "ls-files")
    assert_git_clean(root)
    shown = run_cli("log", "t", "-p", cwd=root).stdout
    assert "+payload" in shown


def test_a_nested_gitignore_is_committed_unless_its_folder_is_ignored(project, write_script):
    """`.venv/` is the user's rule: what the agent writes under it stays out, its
    `.gitignore` too; `sub/.gitignore` is read by Git, so it is committed, and removing
    it later is a change of the step that does it too."""
    root = project.workspace.root
    (root / ".gitignore").write_text(".venv/\n")
    git(root, "add", ".gitignore")
    made, removed = _run_bash(
        project, write_script,
        r"mkdir -p sub .venv; printf '*\n' > sub/.gitignore; echo x > sub/payload; "
        r"printf '*\n' > .venv/.gitignore; echo y > .venv/python",
        "rm sub/.gitignore sub/payload")
    assert made.files_changed == ["sub/.gitignore"]
    assert made.text == ("[not committed, new files .gitignore ignores: '.venv/.gitignore', "
                         "'.venv/python', 'sub/payload']\n[exit status 0]")
    assert removed.files_changed == ["sub/.gitignore", "sub/payload"]
    assert removed.text == "[exit status 0]"
    assert git(root, "ls-files", "sub", ".venv") == ""
    assert_git_clean(root)


def test_a_tracked_file_is_committed_when_it_changes_whatever_the_ignore_rules_say(
        project, write_script):
    """As in Git, a rule ignores only untracked files: neither the agent's new rule nor
    the user's rule over a file added with `git add -f` hides a change of it."""
    root = project.workspace.root
    (root / ".gitignore").write_text("*.log\n")
    (root / "main.py").write_text("print(1)\n")
    (root / "keep.log").write_text("kept\n")
    git(root, "add", "-f", ".gitignore", "main.py", "keep.log")
    (result,) = _run_bash(project, write_script,
                          r"printf 'main.py\n' >> .gitignore; echo evil > main.py; "
                          r"echo more >> keep.log; echo new > new.log")
    assert result.files_changed == [".gitignore", "keep.log", "main.py"]
    assert result.text == "[not committed, new files .gitignore ignores: 'new.log']\n[exit status 0]"
    assert git(root, "show", "HEAD~1:main.py") == "evil\n"
    assert_git_clean(root)


def test_a_file_dropped_into_the_inbox_during_a_call_is_left_to_the_watcher(workspace):
    from agentfs.store.inbox import reject
    from agentfs.tools.worktree import WorkTreeChanges

    context = ToolContext(workspace, "t")
    with WorkTreeChanges(context):
        (workspace / "notes.txt").write_text("the call's own file\n")
        (workspace / "inbox" / "new.md").write_text("a new trace, dropped meanwhile\n")
        bad = workspace / "inbox" / "bad.md"
        bad.write_bytes(b"\xff")
        reject(bad, bad, "not UTF-8")  # the watcher puts one aside: .rejected/.gitignore
    assert context.changed == {"notes.txt"}
