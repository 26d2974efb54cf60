"""The README is a test: every command of its tour runs, in order, on a demo workspace,
and each must succeed. A command of a form this test does not know fails it, so the
README cannot gain a command the suite does not run."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import assert_git_clean, git, run_cli

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _setup_commands() -> list[str]:
    """The `sh` blocks before the tour: the install-and-run lines."""
    head = README.split("## A short tour", 1)[0]
    return [line for block in re.findall(r"```sh\n(.*?)```", head, re.DOTALL)
            for line in block.splitlines() if line.strip()]


def _tour() -> list[tuple[str, str]]:
    """(command, comment) of every line of the tour's `sh` blocks, in order."""
    tour = README.split("## A short tour", 1)[1].split("\n## ", 1)[0]
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", tour, re.DOTALL):
        for line in block.splitlines():
            command, _, comment = line.partition("  #")
            if command.strip():
                lines.append((command.strip(), comment.strip()))
    return lines


def test_the_setup_commands_are_the_two_the_developers_guide_promises():
    setup = _setup_commands()
    assert any(line.endswith("agentfs demo") for line in setup)
    [tests] = [line for line in setup if "pytest" in line]
    assert "test" in re.search(r"\[([a-z,]+)\]", tests)[1].split(",")
    venv, install, run = tests.split(" && ")  # one command: install and run the whole suite
    ci = (ROOT / ".ci" / "run").read_text()
    assert f"{venv} && {install}\n" in ci, ".ci/run installs what the README's test command does"
    assert f"\n{run} " in ci, ".ci/run runs the tests as the README's test command does"
    # both install the versions CI passes on (docs/dependencies.md)
    assert all(line.startswith("python3 -m venv .venv && .venv/bin/pip install "
                               "-c requirements/ci.lock -e ") for line in setup)
    assert (ROOT / "requirements" / "ci.lock").is_file()


def test_every_command_of_the_tour_runs(tmp_path):
    demo = tmp_path / "demo"
    done = run_cli("demo", str(demo), cwd=tmp_path)
    assert "done. Look around" in done.stderr
    watcher: subprocess.Popen | None = None
    try:
        for command, comment in _tour():
            watcher = _run(command, comment, demo, watcher)
        assert watcher is not None, "the tour starts the watcher"
        _wait_for(lambda: not list((demo / "traces/demo/inbox").glob("*.md")),
                  "the watcher to take the dropped file")
        _wait_for(lambda: "assistant" in git(demo, "log", "-1", "--format=%s"),
                  "the watcher's run to answer")
    finally:
        if watcher is not None:
            watcher.terminate()
            _, stderr = watcher.communicate(timeout=60)
    assert watcher.returncode == 0, stderr.decode()  # SIGTERM: steps finish, exit 0
    assert_git_clean(demo)


def _run(command: str, comment: str, demo: Path, watcher):
    """Run one tour line the way a person at a shell would."""
    words = shlex.split(command)
    if words == ["cd", "DIR"]:
        return watcher
    if words[0] == "$EDITOR":  # a person edits the file and saves it
        path = demo / words[1]
        path.write_text(path.read_text() + "\nEdited by hand.\n")
        return watcher
    if words[-1] == "&" and words[:2] == ["agentfs", "watch"]:
        return subprocess.Popen([sys.executable, "-m", "agentfs", *words[1:-1]], cwd=demo,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if words[0] == "agentfs":
        out = run_cli(*words[1:], cwd=demo).stdout
    elif words[0] == "git":
        out = git(demo, *words[1:])
    elif words[0] == "echo" and ">" in words:
        out = subprocess.run(["bash", "-c", command], cwd=demo, check=True).stdout
    else:
        raise AssertionError(f"README runs a command this test does not know: {command}")
    _check_comment(command, comment, out or "")
    return watcher


def _check_comment(command: str, comment: str, out: str) -> None:
    """Where a comment lists what the output shows (`assistant #14, user #13`), it does."""
    shown = re.findall(r"\b([a-z]+ #\d+)", comment)
    if not (command.startswith("git log") and shown):
        return
    if re.search(r" -\d+\b", command):  # `git log -3`: these, newest first
        for expected, line in zip(shown, out.splitlines(), strict=True):
            assert expected in line, f"{command}: expected {expected!r}, got {line!r}"
    else:  # an example line somewhere in the log
        assert all(expected in out for expected in shown), f"{command}: {shown} not in {out}"


def _wait_for(condition, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_the_tour_does_not_depend_on_the_callers_environment(monkeypatch, tmp_path):
    """The demo runs offline: no API key, no base URL."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    assert "ANTHROPIC_API_KEY" not in os.environ
    run_cli("demo", str(tmp_path / "d"), cwd=tmp_path)
