"""`agentfs chat` driven through a real pseudo-terminal, keys typed as a person types
them: every turn is committed as `agentfs run -m` commits it, the slash commands do
what their commands do, Ctrl-C stops a step and keeps the session, history persists."""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import shutil
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from agentfs.core.project import init_workspace
from agentfs.testing import FakeAnthropicServer
from tests.conftest import assert_git_clean, git, mask_branch_bases, run_cli, trust_workspace

pytestmark = pytest.mark.skipif(shutil.which("setsid") is None,
                                reason="needs util-linux setsid to give chat a terminal")

CTRL_C, CTRL_D, UP = b"\x03", b"\x04", b"\x1b[A"
WAIT = 60.0  # seconds before a missing output fails the test (a deadline, not a sleep)


class Terminal:
    """`agentfs chat ARGS` with a pseudo-terminal as its controlling terminal, so a typed
    Ctrl-C becomes SIGINT to it and readline edits its lines, as in a real terminal."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 250, 0, 0))
        self.proc = subprocess.Popen(
            ["setsid", "--ctty", sys.executable, "-m", "agentfs", "chat", *args],
            stdin=slave, stdout=slave, stderr=slave, cwd=cwd,
            env={**os.environ, "TERM": "dumb", "INPUTRC": os.devnull, **(env or {})},
        )
        os.close(slave)
        self.master = master
        self.screen = ""  # everything the terminal showed, \r\n as \n
        self.read_to = 0  # how far `expect` has matched

    def type(self, keys: str | bytes) -> None:
        os.write(self.master, keys.encode() if isinstance(keys, str) else keys)

    def line(self, text: str) -> None:
        self.type(text + "\r")  # Enter

    def expect(self, text: str, timeout: float = WAIT) -> str:
        """Wait until `text` shows after what was matched last; return what came before it."""
        deadline = time.monotonic() + timeout
        while (at := self.screen.find(text, self.read_to)) < 0:
            left = deadline - time.monotonic()
            if left <= 0 or not self._read(left):
                raise AssertionError(f"the terminal never showed {text!r}; it shows:\n"
                                     f"{self.screen[self.read_to:][-4000:]}")
        before = self.screen[self.read_to:at]
        self.read_to = at + len(text)
        return before

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return False
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: the session ended
            return False
        self.screen += data.decode(errors="replace").replace("\r\n", "\n")
        return bool(data)

    def ends(self, timeout: float = WAIT) -> int:
        """Wait for the session to end; its exit code."""
        deadline = time.monotonic() + timeout
        while self._read(max(0.0, deadline - time.monotonic())):
            pass
        try:
            return self.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the session did not end within {timeout}s; the terminal "
                                 f"shows:\n{self.screen[-4000:]}") from None
        finally:
            os.close(self.master)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"waited {WAIT}s for {what}"
        time.sleep(0.01)


@pytest.fixture
def terminals():
    opened: list[Terminal] = []

    def open_terminal(*args, **kwargs) -> Terminal:
        opened.append(Terminal(*args, **kwargs))
        return opened[-1]

    yield open_terminal
    for terminal in opened:
        terminal.close()


SCRIPT = {
    "turns": [
        {"text": "Noting a goal first.",
         "tool_calls": [{"name": "goal", "input": {"add": "Greet the user"}}]},
        {"text": "Hello! This is the first answer."},
        {"text": "And this is the second answer."},
        {"text": "Back on the path: the third answer."},
    ],
    "compression": [{"text": "The user said hello twice; a goal to greet them is open."}],
}


def replay_workspace(tmp_path: Path, name: str) -> tuple[Path, str]:
    """A fresh workspace, and `--model` for the replay script (kept outside it)."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    root = tmp_path / name
    init_workspace(root)
    return root, f"replay:{script}"


def steps(root: Path) -> list[str]:
    """`main`'s commits, parents before children (in graph order, so commits made in the
    same second sort alike): the first line (times masked) and the parent count."""
    log = git(root, "log", "--reverse", "--topo-order", "--format=%s%x09%P", "main")
    rows = []
    for line in log.splitlines():
        subject, _, parents = line.partition("\t")
        subject = mask_branch_bases(re.sub(r"\d{4}-\d\d-\d\dT[\d:.+-]+", "TIME", subject))
        rows.append(f"{subject} [{len(parents.split())} parent(s)]")
    return rows


def test_a_chat_session_commits_every_turn_as_agentfs_run_does(tmp_path, terminals):
    root, model = replay_workspace(tmp_path, "chat")
    chat = terminals(["t1", "--model", model], root)
    chat.expect("trace t1 is new: your first message creates it")
    chat.expect("t1> ")

    chat.line("hello")
    progress = chat.expect("Hello! This is the first answer.")
    assert "Noting a goal first." in progress and '→ goal(add="Greet the user")' in progress
    chat.expect("t1> ")
    chat.line("second")
    chat.expect("And this is the second answer.")
    chat.expect("t1> ")
    meta = json.loads((root / "traces" / "t1" / "trace.json").read_text())
    assert meta["model"] == model  # the trace it created keeps --model

    chat.line("/show")
    shown = chat.expect("t1> ")
    assert "#6 user\n    second" in shown
    assert re.search(r"#7 assistant  · [^\n]*model [^\n]*\n    And this is the second", shown)
    chat.line("/goals")
    assert "[ ] 1 Greet the user ← focus" in chat.expect("t1> ")
    chat.line("/compress")
    chat.expect("t1: summary #10 from agentfs/t1/compression-")
    chat.expect("t1> ")
    chat.line("/show")
    shown = chat.expect("t1> ")
    assert "#10 user (summary)" in shown and "#7 assistant" not in shown
    chat.line("/rewind 7")
    chat.expect("t1: head moved from #10 to #7")
    chat.expect("t1> ")
    chat.line("/rewind seven")
    assert "usage: /rewind N" in chat.expect("t1> ")
    chat.line("/nonsense")
    assert "unknown command /nonsense: /help lists the commands" in chat.expect("t1> ")
    chat.line("/help")
    listed = chat.expect("t1> ")
    assert all(f"/{name}" in listed for name in
               ("show", "goals", "rewind N", "compress", "resume", "help", "quit"))
    chat.line("third")
    chat.expect("Back on the path: the third answer.")
    chat.expect("t1> ")
    chat.line("/quit")
    assert chat.ends() == 0
    assert_git_clean(root)

    # the same turns through `agentfs run`, `compress` and `rewind` commit the same steps
    other, _ = replay_workspace(tmp_path, "run")
    run_cli("run", "t1", "-m", "hello", "--model", model, cwd=other)
    run_cli("run", "t1", "-m", "second", "--model", model, cwd=other)
    run_cli("compress", "t1", "--model", model, cwd=other)
    run_cli("rewind", "t1", "7", cwd=other)
    run_cli("run", "t1", "-m", "third", "--model", model, cwd=other)
    assert steps(root) == steps(other)
    mainline = git(root, "log", "--reverse", "--first-parent", "--format=%s").splitlines()
    assert [re.sub(r"\(.*\)$", "(TIME)", s) if "create" in s else mask_branch_bases(s)
            for s in mainline[1:]] == [
        "t1: create #1 new trace (TIME)", "t1: user #2 hello",
        "t1: assistant #3 Noting a goal first.", "t1: tool #4 ## Updates",
        "t1: assistant #5 Hello! This is the first answer.", "t1: user #6 second",
        "t1: assistant #7 And this is the second answer.",
        "t1: queue #7 compress: knowledge_eval skipped, compression",
        "t1: summary #10 from agentfs/t1/compression-<base>",
        "t1: rewind #7 head moved to #7 (assistant)", "t1: user #11 third",
        "t1: assistant #12 Back on the path: the third answer.",
    ]
    tree = ["ls-tree", "-r", "--name-only", "HEAD"]
    assert git(root, *tree) == git(other, *tree)
    assert mask_branch_bases(git(root, "branch", "--list")) == mask_branch_bases(
        git(other, "branch", "--list"))


@pytest.fixture
def server():
    with FakeAnthropicServer() as fake:
        yield fake


def bash_workspace(root: Path) -> Path:
    """A new workspace whose agent may run bash (unsandboxed: the tests signal it)."""
    init_workspace(root)
    with (root / "agentfs.toml").open("a") as config:
        config.write('\n[tools]\nbash = true\nbash_sandbox = "none"\n')
    git(root, "commit", "-qam", "bash on")
    trust_workspace(root)
    return root


def test_ctrl_c_stops_a_step_cleanly_and_keeps_the_session(tmp_path, terminals, server):
    root = bash_workspace(tmp_path / "ws")
    go = tmp_path / "go"
    env = {"ANTHROPIC_BASE_URL": server.base_url, "ANTHROPIC_API_KEY": "test-key"}
    chat = terminals(["t2", "--model", "anthropic:claude-test"], root, env)
    chat.expect("t2> ")

    # the answer is streamed as it arrives
    server.enqueue({"text": ["Streamed ", "in ", "three parts."]})
    chat.line("hi")
    chat.expect("Streamed in three parts.")
    chat.expect("t2> ")

    # Ctrl-C while the model is slow to answer: the call is dropped, the session stays
    server.delay_next(120)
    chat.line("take your time")
    server.wait_for_requests(2)
    chat.type(CTRL_C)
    chat.expect("[stopped: an answer still arriving was dropped")
    chat.expect("t2> ")
    assert git(root, "log", "-1", "--format=%s") == "t2: user #4 take your time\n"
    assert_git_clean(root)

    # /resume answers the waiting message
    server.enqueue({"text": "Answered after the stop."})
    chat.line("/resume")
    chat.expect("Answered after the stop.")
    chat.expect("t2> ")

    # Ctrl-C during a tool step: the step finishes and is committed, no model call follows
    started = tmp_path / "started"
    server.enqueue({"text": "Waiting for the go file.", "tool_calls": [{
        "name": "bash", "input": {"command": f"touch {started}; until [ -e {go} ]; "
                                             "do sleep 0.02; done; echo went"}}]})
    chat.line("run the command")
    chat.expect("→ bash(")
    wait_for(started.exists, "the command to start")  # in its own session: Ctrl-C is ours
    asked = len(server.requests)
    chat.type(CTRL_C)
    chat.expect("[Ctrl-C: stopping once this step is committed")
    go.touch()
    chat.expect("[stopped after that step; /resume continues]")
    chat.expect("t2> ")
    assert len(server.requests) == asked
    assert git(root, "log", "-1", "--format=%s").startswith("t2: tool #")
    shown = json.loads(run_cli("show", "t2", "--json", cwd=root).stdout)["messages"]
    assert shown[-1]["role"] == "tool" and "went" in shown[-1]["text"]
    assert_git_clean(root)

    # Ctrl-C with something typed drops the line; at an empty prompt it ends the session
    chat.type("never sent")
    chat.expect("never sent")
    chat.type(CTRL_C)
    chat.expect("t2> ")
    chat.type(CTRL_C)
    assert chat.ends() == 0
    assert "never sent" not in git(root, "log", "--format=%s")
    assert_git_clean(root)
    kinds = git(root, "log", "--reverse", "--first-parent",
                "--format=%(trailers:key=Agentfs-Kind,valueonly,separator=)")
    assert kinds.split() == ["init", "create", "user", "assistant", "user", "assistant", "user",
                             "assistant", "tool"]
    # what the model received after the stop is a valid request holding the dropped turn's message
    last_request = server.requests[-1].body
    assert "take your time" in json.dumps(last_request)


def test_ctrl_c_twice_quickly_at_the_prompt_drops_the_line_and_ends_the_session(
        tmp_path, terminals):
    # at the prompt Ctrl-C is a key readline reads in turn, not a signal that can arrive
    # before Python's readline waits for keys (and then go unseen until a line is entered)
    root, model = replay_workspace(tmp_path, "ws")
    chat = terminals(["t7", "--model", model], root)
    chat.expect("t7> ")
    chat.line("hello")
    chat.expect("Hello! This is the first answer.")
    chat.expect("t7> ")
    chat.type("never sent" + CTRL_C.decode() + CTRL_C.decode() + "typed after the end\r")
    assert chat.ends() == 0
    assert "t7> never sent^C\nt7> ^C\n" in chat.screen
    subjects = git(root, "log", "--format=%s")
    assert "never sent" not in subjects and "typed after" not in subjects
    assert_git_clean(root)
    history = (root / ".git" / "agentfs" / "chat_history").read_text().splitlines()
    assert history == ["hello"]  # neither the dropped line nor the Ctrl-Cs are kept


def test_a_trace_left_unanswered_is_offered_for_resuming_and_history_persists(
        tmp_path, terminals):
    root, model = replay_workspace(tmp_path, "ws")
    run_cli("new", "t3", "-m", "a question", cwd=root)
    chat = terminals(["t3", "--model", model], root)
    chat.expect("trace t3 has work left: your message #2 has no answer yet.")
    chat.expect("Resume it now? [Y/n] ")
    chat.line("")
    chat.expect("Noting a goal first.")
    chat.expect("t3> ")
    chat.line("/goals")
    chat.expect("Greet the user")
    chat.expect("t3> ")
    chat.type(CTRL_D)
    assert chat.ends() == 0

    history = root / ".git" / "agentfs" / "chat_history"
    assert history.read_text().splitlines()[-1] == "/goals"  # the Y/n answer is not kept
    again = terminals(["t3", "--model", model], root)
    again.expect("t3> ")
    assert "work left" not in again.screen
    again.type(UP)
    again.line("")
    again.expect("[ ] 1 Greet the user")
    again.line("/quit")
    assert again.ends() == 0
    assert_git_clean(root)


def test_ctrl_c_twice_stops_a_tool_step_at_once_and_the_next_run_answers_it(
        tmp_path, terminals, server):
    root = bash_workspace(tmp_path / "ws")
    pid_file = tmp_path / "pid"
    env = {"ANTHROPIC_BASE_URL": server.base_url, "ANTHROPIC_API_KEY": "test-key"}
    chat = terminals(["t4", "--model", "anthropic:claude-test"], root, env)
    chat.expect("t4> ")
    server.enqueue({"text": "Running it.", "tool_calls": [{
        # the pid is written once agentfs has read 100 kB of output (more than a pipe
        # holds): so agentfs is waiting on the command, past starting it, at the Ctrl-Cs
        "name": "bash", "input": {"command": f"head -c 100000 /dev/zero; echo $$ > {pid_file}; "
                                             "sleep 600"}}]})
    chat.line("wait forever")
    chat.expect("→ bash(")
    wait_for(lambda: pid_file.exists() and pid_file.read_text().endswith("\n"),
             "the command to start")
    pid = int(pid_file.read_text())
    chat.type(CTRL_C)
    chat.expect("[Ctrl-C: stopping once this step is committed")
    chat.type(CTRL_C)
    chat.expect("[stopped at once; everything committed stays")
    chat.expect("t4> ")
    proc_stat = Path(f"/proc/{pid}/stat")
    assert not proc_stat.exists(), (proc_stat.read_text(), chat.screen)  # died with its step
    assert git(root, "log", "-1", "--format=%s").startswith("t4: assistant #3 ")

    server.enqueue({"text": "The command was interrupted."})
    chat.line("/resume")
    chat.expect("resumed: answered 1 interrupted tool call(s)")
    chat.expect("The command was interrupted.")
    chat.expect("t4> ")
    chat.line("/quit")
    assert chat.ends() == 0
    assert_git_clean(root)
    shown = json.loads(run_cli("show", "t4", "--json", cwd=root).stdout)["messages"]
    assert [m["role"] for m in shown] == ["system", "user", "assistant", "tool", "assistant"]
    assert shown[3]["is_error"] and "interrupted" in shown[3]["text"]


def test_lines_from_a_pipe_are_messages_without_prompts_or_history(tmp_path):
    root, model = replay_workspace(tmp_path, "ws")
    typed = b"caf\xff\n/goals\nhello\n\n/nope\n//slash first\n"
    done = subprocess.run([sys.executable, "-m", "agentfs", "chat", "t5", "--model", model],
                          cwd=root, input=typed, capture_output=True, timeout=WAIT, check=False)
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0, err
    assert "not valid UTF-8 text (at character 3); nothing was written" in err
    assert "trace t5 does not exist yet: your first message creates it" in err  # /goals
    assert "unknown command /nope" in err
    assert "t5> " not in out + err
    assert "Hello! This is the first answer." in out and "And this is the second answer." in out
    users = [m["text"] for m in json.loads(run_cli("show", "t5", "--json", cwd=root).stdout)[
        "messages"] if m["role"] == "user"]
    assert users == ["hello", "/slash first"]
    assert not (root / ".git" / "agentfs" / "chat_history").exists()
    assert_git_clean(root)


def test_a_trace_another_process_runs_is_refused_per_turn_and_the_session_goes_on(
        tmp_path, terminals):
    from agentfs.store.tracelock import TraceLock

    root, model = replay_workspace(tmp_path, "ws")
    run_cli("new", "t6", "-m", "a question", cwd=root)
    chat = terminals(["t6", "--model", model], root)
    with TraceLock(root / ".git" / "agentfs" / "locks", "t6"):  # another runner holds it
        chat.expect("Resume it now? [Y/n] ")
        chat.line("y")
        chat.expect(f"agentfs: error: trace 't6' is in use by pid {os.getpid()}")
        chat.expect("t6> ")
        chat.line("more")
        chat.expect("is in use by pid")
        chat.expect("t6> ")
    chat.line("/resume")
    chat.expect("Hello! This is the first answer.")
    chat.expect("t6> ")
    chat.type(CTRL_D)
    assert chat.ends() == 0
    users = [m["text"] for m in json.loads(run_cli("show", "t6", "--json", cwd=root).stdout)[
        "messages"] if m["role"] == "user"]
    assert users == ["a question"]  # the refused line was not written
    assert_git_clean(root)


WRITES = {"turns": [
    *({"text": f"Writing {name}.", "tool_calls": [
        {"name": "write_file", "input": {"path": name, "content": f"{name}\n"}}]}
      for name in ("a.txt", "b.txt", "c.txt", "d.txt")),
    {"text": "All four tried."},
]}


def writes_workspace(tmp_path: Path) -> tuple[Path, str]:
    script = tmp_path / "writes.json"
    script.write_text(json.dumps(WRITES))
    root = tmp_path / "ws"
    init_workspace(root)
    return root, f"replay:{script}"


def test_chat_under_approve_asks_yes_no_always_at_the_terminal(tmp_path, terminals):
    root, model = writes_workspace(tmp_path)
    chat = terminals(["t1", "--model", model, "--approve"], root)
    chat.expect("t1> ")

    chat.line("write four files")
    asked = chat.expect("run write_file? [y]es, [n]o, [a]lways write_file: ")
    assert '"path": "a.txt"' in asked
    chat.line("y")
    chat.expect('"path": "b.txt"')
    chat.expect("[a]lways write_file: ")
    chat.line("maybe")
    chat.expect("answer y (run it), n (refuse it) or a")
    chat.line("n")
    chat.expect('"path": "c.txt"')
    chat.expect("[a]lways write_file: ")
    chat.line("a")
    after = chat.expect("All four tried.")
    assert '"path": "d.txt"' not in after  # always: not asked again this session
    chat.expect("t1> ")
    chat.line("/quit")
    assert chat.ends() == 0

    assert (root / "a.txt").exists() and not (root / "b.txt").exists()
    assert (root / "c.txt").exists() and (root / "d.txt").exists()
    assert "approval" not in git(root, "log", "--format=%s")  # asked, never waited in a file
    assert_git_clean(root)


def test_a_chat_killed_at_the_approval_question_never_runs_the_call_twice(tmp_path, terminals):
    root, model = writes_workspace(tmp_path)
    chat = terminals(["t1", "--model", model, "--approve"], root)
    chat.expect("t1> ")
    chat.line("write four files")
    chat.line("y")  # typed ahead: a.txt
    chat.expect('"path": "b.txt"')
    chat.expect("[a]lways write_file: ")
    chat.proc.kill()  # SIGKILL while the person is being asked
    chat.ends()
    assert (root / "a.txt").read_text() == "a.txt\n" and not (root / "b.txt").exists()

    stopped = run_cli("run", "t1", "--approve", "--model", model, cwd=root)  # no terminal

    assert "waits for your approval of a call to write_file" in stopped.stderr
    assert json.loads((root / "traces/t1/approval.json").read_text())["input"]["path"] == "b.txt"
    run_cli("approve", "t1", "--always", "--model", model, cwd=root)
    assert [(root / n).read_text() for n in ("a.txt", "b.txt", "c.txt", "d.txt")] == [
        "a.txt\n", "b.txt\n", "c.txt\n", "d.txt\n"]
    shown = json.loads(run_cli("show", "t1", "--json", cwd=root).stdout)["messages"]
    results = [m for m in shown if m["role"] == "tool"]
    assert len(results) == 4 and not any(m.get("is_error") for m in results)
    assert_git_clean(root)


def test_approval_turned_on_in_agentfs_toml_applies_from_the_next_line(tmp_path, terminals):
    """A session reads agentfs.toml again before a turn when it changed, as `serve`
    and `watch` do before a run: the second write is asked about."""
    script = tmp_path / "two.json"
    script.write_text(json.dumps({"turns": [
        {"text": "Writing a.", "tool_calls": [
            {"name": "write_file", "input": {"path": "a.txt", "content": "a\n"}}]},
        {"text": "Wrote a."},
        {"text": "Writing b.", "tool_calls": [
            {"name": "write_file", "input": {"path": "b.txt", "content": "b\n"}}]},
        {"text": "Left b alone."}]}))
    root = tmp_path / "ws"
    init_workspace(root)
    chat = terminals(["t1", "--model", f"replay:{script}"], root)
    chat.expect("t1> ")
    chat.line("write a")
    chat.expect("Wrote a.")
    chat.expect("t1> ")
    assert (root / "a.txt").exists()  # asked nothing: approve is "none"
    config = root / "agentfs.toml"
    config.write_text(config.read_text() + '\n[tools]\napprove = "acting"\n')
    chat.line("write b")
    chat.expect("agentfs.toml or its trust changed")
    chat.expect("run write_file? [y]es, [n]o, [a]lways write_file: ")
    chat.line("n")
    chat.expect("Left b alone.")
    chat.expect("t1> ")
    chat.line("/quit")
    assert chat.ends() == 0
    assert not (root / "b.txt").exists()
