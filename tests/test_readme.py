"""The README is a test: every command in its code blocks runs, in order, on the demo
workspace `agentfs demo` makes, and each must succeed and print what its comment
quotes. The few that cannot run here are listed in NOT_RUN with the reason; a command
the README gains that is in neither fails the suite."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import assert_git_clean, git, mask_branch_bases, run_cli

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()

#: Words a line of a code block starts with when it is a command (after a `$ ` prompt).
PROGRAMS = {"agentfs", "git", "cd", "echo", "$EDITOR", "python3", "pip"}

#: Options of README commands this test leaves out, and why.
LEFT_OUT = {
    "--model anthropic:claude-sonnet-4-5": "it needs ANTHROPIC_API_KEY and the network; "
    "the demo's replay model answers instead",
}

#: Commands of the README this test does not run, and why.
NOT_RUN = {
    "python3 -m venv .venv": "the suite already runs in an installed environment",
    ".venv/bin/pip install -c requirements/ci.lock -e .": "the suite already runs in an "
    "installed environment",
    ".venv/bin/pip install -c requirements/ci.lock -e '.[serve,mcp,openai,test,bench]'": "the suite "
    "already runs in an "
    "installed environment (test_the_setup_commands_... checks .ci/run installs the same)",
    ".venv/bin/pip install -c requirements/ci.lock -e '.[serve]'": "the suite already runs "
    "in an installed environment",
    ".venv/bin/pip install -c requirements/ci.lock -e '.[openai]'": "the suite already runs "
    "in an installed environment",
    ".venv/bin/pip install -c requirements/ci.lock -e '.[mcp]'": "the suite already runs "
    "in an installed environment",
    "agentfs trust": "the MCP example needs its agentfs.toml and script: "
    "tests/tools/test_mcp.py::test_the_readme_s_mcp_example_runs_as_written runs it",
    "agentfs tools --mcp": "as agentfs trust",
    'agentfs run sums -m "What is 2 + 3?" --model replay:mcp-script.json': "as agentfs trust",
    ".venv/bin/python -m pytest -n auto --dist worksteal": "it is this suite",
    ".venv/bin/python -m bench": "the benchmarks take minutes; tests/test_bench.py runs "
    "each of them at a tiny size",
    ".venv/bin/agentfs serve": "it serves until stopped; tests/server/test_page_tour.py "
    "serves the demo workspace and clicks every button of the page",
}


def _blocks() -> list[tuple[str, str]]:
    """(section heading, body) of every fenced code block, in order."""
    blocks, section = [], ""
    for heading, body in re.findall(r"^(## [^\n]*)$|^```[a-z]*\n(.*?)^```", README,
                                    re.DOTALL | re.MULTILINE):
        if heading:
            section = heading
        else:
            blocks.append((section, body))
    return blocks


def _commands() -> list[tuple[str, str, str]]:
    """(section, command, comment) of every command in the code blocks, in order; a
    line `a && b` is two commands."""
    found = []
    for section, body in _blocks():
        for raw in body.splitlines():
            line = raw.removeprefix("$ ")
            command, _, comment = line.partition("  #")
            first = command.split(maxsplit=1)[0] if command.strip() else ""
            if first not in PROGRAMS and not first.startswith(".venv/bin/"):
                continue
            for part in command.split(" && "):
                found.append((section, part.strip(), comment.strip()))
    return found


def _setup_commands() -> list[str]:
    """The `sh` blocks before the tour: the install-and-run lines."""
    head = README.split("## A short tour", 1)[0]
    return [line for block in re.findall(r"```sh\n(.*?)```", head, re.DOTALL)
            for line in block.splitlines() if line.strip()]


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


def test_every_command_the_readme_does_not_run_here_is_still_in_it():
    commands = {command for _, command, _ in _commands()}
    assert set(NOT_RUN) <= commands, set(NOT_RUN) - commands
    assert all(any(option in command for command in commands) for option in LEFT_OUT)
    tour = [command for section, command, _ in _commands() if section == "## A short tour"]
    assert not set(tour) & set(NOT_RUN), "every command of the tour runs"
    assert len(tour) >= 15


def test_every_command_of_the_readme_runs_in_order_on_the_demo(tmp_path):
    tour = Tour(tmp_path)
    try:
        for _, command, comment in _commands():
            if command not in NOT_RUN:
                tour.run(command, comment)
    finally:
        tour.stop_watcher()
    assert tour.watched, "the tour drops a file for the watcher, which answers it"
    assert git(tour.dir, "rev-parse", "origin/main") == git(tour.dir, "rev-parse", "main")
    knowledge = run_cli("knowledge", cwd=tour.dir).stdout
    assert knowledge.startswith("accepted  action-items-go-in-one-table")
    assert_git_clean(tour.dir)


class Tour:
    """A person at a shell following the README: runs each command where they would."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.dir: Path = tmp_path  # until `agentfs demo` says where the demo is
        self.watcher: subprocess.Popen | None = None
        self.watched = False
        self.remote = tmp_path / "origin.git"  # made by the first `agentfs sync`

    def run(self, command: str, comment: str) -> None:
        words = shlex.split(command)
        words[0] = words[0].removeprefix(".venv/bin/")
        if words[-2:] == ["<", "/dev/null"]:  # no terminal: so are these commands' stdin
            words = words[:-2]
        if words[0] == "cd":  # `cd DIR` or `cd /path/to/workspace`: the demo
            return
        if words == ["agentfs", "sync"] and "origin" not in git(self.dir, "remote"):
            self._remote()
        if not self._acted(words):
            _check_comment(command, comment, self._output(command, words) or "")

    def _acted(self, words: list[str]) -> bool:
        """Do what the person does for the commands that print nothing to check;
        True if `words` was one of them."""
        if words == ["agentfs", "demo"]:
            self._demo()
        elif words[0] == "$EDITOR":  # a person edits the file and saves it
            path = self.dir / words[1]
            path.write_text(path.read_text() + "\nEdited by hand.\n")
        elif words[-1] == "&" and words[:2] == ["agentfs", "watch"]:
            self.watcher = subprocess.Popen(
                [sys.executable, "-m", "agentfs", *words[1:-1]], cwd=self.dir,
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        elif words == ["agentfs", "watch", "--remote", "origin"]:
            self._worker(words)
        elif words[:2] == ["agentfs", "chat"]:
            self._chat(words[2:])
        else:
            return False
        return True

    def _output(self, command: str, words: list[str]) -> str | None:
        """Run a command whose output the README's comment describes."""
        if words[0] == "agentfs":
            done = run_cli(*words[1:], cwd=self.dir)
            return done.stdout + done.stderr
        if words[0] == "git":
            return git(self.dir, *words[1:])
        if words[:3] == ["python3", "-m", "agentfs.testing.fake_openai"]:  # runs agentfs
            done = subprocess.run([sys.executable, *words[1:]], cwd=self.dir, check=True,
                                  capture_output=True, text=True, timeout=120)
            return done.stdout + done.stderr
        if words[0] == "echo" and ">" in words:
            subprocess.run(["bash", "-c", command], cwd=self.dir, check=True)
            if self.watcher is not None:
                self._wait_for_the_watcher(Path(words[-1]).parent)
            return None  # printed nothing
        raise AssertionError(f"README runs a command this test does not know: {command}")

    def _chat(self, args: list[str]) -> None:
        """`agentfs chat` in a terminal, typing the lines the README's session shows."""
        from tests.cli.test_chat import Terminal

        for option, _ in (o.split() for o in LEFT_OUT):
            at = args.index(option)
            del args[at:at + 2]
        [trace] = args
        block = next(body for _, body in _blocks() if f"$ agentfs chat {trace} " in body)
        typed = [re.split(r"\s{2,}", line.removeprefix(f"{trace}> "))[0]
                 for line in block.splitlines() if line.startswith(f"{trace}> ")]
        assert typed[0] == "Which meeting notes mention the restore drill?", typed
        chat = Terminal([trace], self.dir)
        try:
            chat.expect(f"trace {trace} is new: your first message creates it.")
            for line in typed:
                chat.expect(f"{trace}> ")
                chat.line(line)
            assert chat.ends() == 0, chat.screen
        finally:
            chat.close()
        for shown in ['→ read_file(path="notes/meeting-2026-11-30.md")', "\n#2 user\n",
                      "[x] 1 Turn the meeting notes into action items",
                      f"{trace}: summary #15 from agentfs/{trace}/compression-",
                      f"{trace}: head moved from #15 to #5"]:
            assert shown in chat.screen, f"chat did not show {shown!r}:\n{chat.screen}"
        assert "error" not in chat.screen, chat.screen

    def _demo(self) -> None:
        """`agentfs demo` with no directory makes a new temporary one and prints it."""
        temp = self.tmp / "temp"
        temp.mkdir()
        done = run_cli("demo", cwd=self.tmp, env={"TMPDIR": str(temp)}, isolated=True)
        assert "done. Look around" in done.stderr
        self.dir = Path(re.search(r"^  cd (.+)$", done.stderr, re.MULTILINE)[1])
        assert self.dir.parent == temp.resolve()

    def _wait_for_the_watcher(self, inbox: Path) -> None:
        """A dropped file: the watcher takes it, the run answers, Ctrl-C ends it."""
        _wait_for(lambda: not list((self.dir / inbox).glob("*.md")),
                  "the watcher to take the dropped file")
        _wait_for(lambda: git(self.dir, "log", "-1", "--format=%s").startswith(
                  f"{inbox.parts[1]}: assistant"),
                  "the watcher's run to answer")
        assert git(self.dir, "log", "-2", "--format=%s").splitlines() == [
            "demo: assistant #23 The owners: Bo, Chen, and everyone for the comments…",
            "demo: user #22 Now list the owners only."]
        code, stderr = self.stop_watcher()
        assert code == 0, stderr  # steps finish, exit 0
        self.watched = True

    def _remote(self) -> None:
        """The shared remote the README's sync section assumes (a bare repository), and
        a file dropped on the laptop for `agentfs sync` to send."""
        subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(self.remote)],
                       check=True)
        git(self.dir, "remote", "add", "origin", str(self.remote))
        (self.dir / "traces/demo/inbox/from-laptop.md").write_text("Who runs the drill?\n")

    def _worker(self, words: list[str]) -> None:
        """A worker in a clone of its own answers what the laptop sent, pushes it, and
        stops on SIGTERM; the laptop's next sync brings the answer back."""
        clone = self.tmp / "worker"
        git(self.tmp, "clone", "-q", str(self.remote), str(clone))
        worker = subprocess.Popen([sys.executable, "-m", "agentfs", *words[1:]], cwd=clone,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            _wait_for(lambda: git(self.remote, "log", "-1", "--format=%s", "main")
                      .startswith("demo: assistant #25"), "the worker to push its answer")
        finally:
            worker.terminate()
            _, stderr = worker.communicate(timeout=60)
        assert worker.returncode == 0, stderr
        run_cli("sync", cwd=self.dir)
        assert git(self.dir, "log", "-2", "--format=%s").splitlines()[1] == \
            "demo: user #24 Who runs the drill?"

    def stop_watcher(self) -> tuple[int | None, str]:
        """SIGTERM, as at the end of a shell session; (exit code, what it logged)."""
        watcher, self.watcher = self.watcher, None
        if watcher is None:
            return None, ""
        if watcher.poll() is None:
            watcher.terminate()
        _, stderr = watcher.communicate(timeout=60)
        return watcher.returncode, stderr


def _check_comment(command: str, comment: str, out: str) -> None:
    """A quoted comment is a line the command prints (a side branch's commit in its name
    may differ); where a `git log -N` comment lists steps (`assistant #14, user #13`),
    those are its lines, newest first."""
    lines = mask_branch_bases(out).splitlines()
    for quoted in re.findall(r'"([^"]+)"', comment):
        shown = mask_branch_bases(quoted)
        assert shown in lines or any(
            line.split(" ", 1)[-1] == shown for line in lines  # after a sha
        ), f"{command}: README says it prints {quoted!r}; it printed:\n{out}"
    shown = re.findall(r"\b([a-z]+ #\d+)", comment.split('"', maxsplit=1)[0])
    if command.startswith("git log") and shown and re.search(r" -\d+\b", command):
        for expected, line in zip(shown, out.splitlines(), strict=True):
            assert expected in line, f"{command}: expected {expected!r}, got {line!r}"


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
