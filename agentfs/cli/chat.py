"""`agentfs chat TRACE`: talk with a trace in the terminal.

Each line typed is a user message, committed and answered exactly as
`agentfs run TRACE -m LINE` does it (`agentfs/core/runner.py:Runner.run`); the
slash commands run `agentfs show`, `goals` and `rewind` themselves and
`/compress` calls what `agentfs compress` calls. Ctrl-C while the trace runs
stops it (`_Interrupt`) and keeps the session; the typed lines are kept in a
readline history file inside `.git/agentfs/`.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from agentfs.cli.context import (
    LiveOptions,
    choose_model,
    model_to_record,
    open_project,
    printable,
    registered_command,
    thinking_options,
    trace_id_for,
    trace_settings,
)
from agentfs.cli.options import MODEL_NAMES, run_options
from agentfs.cli.terminal import Terminal, echo_report
from agentfs.store.wording import counted

if TYPE_CHECKING:
    from agentfs.core.project import Project
    from agentfs.core.runner import Runner
    from agentfs.models.base import Model, ModelRequest, ModelResponse, TextSink
    from agentfs.store.trace import Trace

#: The history file, in the workspace's private state (`.git/agentfs/`).
HISTORY_FILE = "chat_history"
HISTORY_LENGTH = 1000
#: Ctrl-C at the prompt, read as a key (`_LineReader`): readline inserts it literally
#: (quoted-insert, shown as ^C) and ends the line, which `_LineReader.read` recognizes.
CTRL_C = "\x03"
CTRL_C_BINDING = r'"\C-c": "\C-v\C-c\C-m"'

COMMANDS = {
    "show": "[--all] [--full] [--as-sent]  the trace's messages, as `agentfs show`",
    "goals": "[--summaries]  the goal tree, as `agentfs goals`",
    "rewind": "N  move the head back to message N, as `agentfs rewind`",
    "compress": "summarize the trace on a side branch and go on from the summary, "
                "as `agentfs compress`",
    "resume": "continue the trace without a new message, as `agentfs run TRACE`",
    "help": "list these commands",
    "quit": "end the session (so do Ctrl-D, and Ctrl-C at an empty prompt)",
}


@click.command()
@click.argument("trace_ref", metavar="TRACE")
@click.option("--model", help=f"Model for this session: {MODEL_NAMES}.")
@click.option("--preset", help="Preset from agentfs.toml, for a trace this session creates.")
@click.option("--max-iterations", type=click.IntRange(min=1),
              help="Stop each answer after this many model calls (default: max_iterations "
              "in agentfs.toml); /resume continues.")
@run_options("session")
def chat(  # noqa: PLR0913, PLR0917 -- click passes one parameter per option
        trace_ref: str, model: str | None, preset: str | None, max_iterations: int | None,
        inject_skills: tuple[str, ...], skill_recency: int, pending_tools: str,
        thinking: int | None, no_thinking: bool, quiet: bool, approve: bool | None,
) -> None:
    """Talk with TRACE in the terminal: each line you type is a user message.

    Each line is committed and answered as `agentfs run TRACE -m LINE` would
    do it, the answer streamed as it arrives; a new TRACE id is created by the
    first line. /help lists the slash commands (/show, /goals, /rewind N,
    /compress, /resume, /quit). Ctrl-C while the trace runs stops it and keeps
    the session: an answer still arriving is dropped, a tool step is finished
    and committed first (Ctrl-C twice stops at once). Ctrl-C at an empty
    prompt, or Ctrl-D, ends the session. Typed lines are kept in
    .git/agentfs/chat_history; the up arrow recalls them. Under --approve, each
    call that may change something is asked about first: y runs it, n refuses
    it, a runs it and every later call of that tool this session.
    """
    from agentfs.cli.options import approve_policy
    from agentfs.cli.terminal import TerminalAsker

    project = open_project(trace_ref)
    thinking_options(project, thinking, no_thinking)  # a bad budget fails now
    trace_id = trace_id_for(project, trace_ref, creating=True)
    existing = project.trace(trace_id) if trace_id in project.workspace.trace_ids() else None
    trace_model, trace_preset, declared = trace_settings(existing, preset, inject_skills)
    chosen = choose_model(project, trace_model, preset or trace_preset, model)
    reader = _LineReader(project.workspace.state_dir / HISTORY_FILE)
    asker = TerminalAsker(lambda prompt: reader.read(prompt, remember=False))
    live = LiveOptions(project, {"ask": asker, "approve": approve_policy(approve)},
                       thinking=(thinking, no_thinking))
    session = _Chat(project, trace_id, chosen, quiet, runner_fields=live, run_options={
                        "max_iterations": max_iterations, "inject_skills": declared,
                        "skill_recency_threshold": skill_recency, "pending_tools": pending_tools,
                        "preset": preset, "model_name": model_to_record(project, model),
                    })
    try:
        session.loop(reader, resume=session.greet(reader))
    finally:
        reader.close()


class _Interrupt:
    """Ctrl-C while the trace runs.

    The first one abandons the model call in progress (a turn is saved only once
    it is complete, so nothing of it is written); between model calls it lets the
    step under way (tools, a commit) finish and ends the run before the next call
    (`RunnerOptions.stop`). A second one stops at once, as Ctrl-C stops `agentfs
    run`: what is committed stays and the next run finishes what was cut short.
    """

    def __init__(self) -> None:
        self.calls = 0  # model calls in progress
        self.requested = False
        self.dropped_call = False  # the last interruption dropped a model call

    @contextmanager
    def armed(self) -> Iterator[None]:
        self.requested = self.dropped_call = False
        previous = signal.signal(signal.SIGINT, self._on_sigint)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)

    @contextmanager
    def calling(self) -> Iterator[None]:
        self.calls += 1
        try:
            yield
        finally:
            self.calls -= 1

    def stop_requested(self) -> bool:
        return self.requested

    def _on_sigint(self, signum: int, frame: Any) -> None:
        if self.calls or self.requested:
            self.dropped_call = bool(self.calls)
            raise KeyboardInterrupt
        self.requested = True
        click.echo("\n  [Ctrl-C: stopping once this step is committed; Ctrl-C again stops "
                   "at once]", err=True)


class _Abandonable:
    """The session's model, its calls marked so a first Ctrl-C abandons one in progress."""

    def __init__(self, model: Model, interrupt: _Interrupt) -> None:
        self.model = model
        self.name = model.name
        self.interrupt = interrupt

    def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelResponse:
        with self.interrupt.calling():
            return self.model.complete(request, on_text)


class _LineReader:
    """The lines typed at the prompt: edited with readline and kept in a history file
    when standard input is a terminal, read plainly when it is not.

    With GNU readline, Ctrl-C at the prompt is a key, not a signal: the terminal's
    interrupt character is switched off while the prompt waits, and readline puts the
    Ctrl-C in the line and ends it (`CTRL_C_BINDING`). A SIGINT there could be lost:
    Python's readline waits for keys in `select()` and notices a signal only when it
    interrupts that wait, so one that arrives after the prompt is printed and before
    the wait began (a second Ctrl-C pressed quickly) is seen only when a line is
    entered. A key waits in the terminal until it is read. Elsewhere (libedit, a
    Python without readline) Ctrl-C stays the signal it always was.
    """

    def __init__(self, history: Path) -> None:
        self.history = history
        self.readline: Any = None
        self.ctrl_c_is_a_key = False
        self._typed = ""
        if sys.stdin.isatty():
            try:
                import readline
            except ImportError:  # a Python built without it: plain input()
                return
            self.readline = readline
            readline.set_history_length(HISTORY_LENGTH)
            readline.set_auto_history(False)  # `read` adds the lines worth keeping
            with contextlib.suppress(OSError):  # no history yet, or unreadable: start a new one
                readline.read_history_file(history)
            if "GNU readline" in (readline.__doc__ or ""):
                readline.parse_and_bind(CTRL_C_BINDING)
                self.ctrl_c_is_a_key = True

    @property
    def interactive(self) -> bool:
        return sys.stdin.isatty()

    def read(self, prompt: str, *, remember: bool = True) -> str:
        """One line; EOFError at Ctrl-D or end of input, KeyboardInterrupt at Ctrl-C
        (`typed` then tells what the prompt held), the cursor at the start of a line.
        A line is kept in the history if `remember`."""
        self._typed = ""
        with self._ctrl_c_as_a_key():
            try:
                line = input(prompt if self.interactive else "")
            except KeyboardInterrupt:  # the signal: readline left the cursor on the line
                self._typed = self.readline.get_line_buffer() if self.readline else ""
                click.echo("", err=True)
                raise
        if self.ctrl_c_is_a_key and CTRL_C in line:
            self._typed = line.replace(CTRL_C, "")
            raise KeyboardInterrupt
        if self.readline is not None and remember and line.strip():
            self.readline.add_history(line)
            try:
                self.history.parent.mkdir(parents=True, exist_ok=True)
                self.readline.append_history_file(1, self.history)
            except OSError:
                pass  # history is a convenience: never stop the session for it
        return line

    def typed(self) -> str:
        """What the prompt held at the last Ctrl-C (empty without readline)."""
        return self._typed

    @contextmanager
    def _ctrl_c_as_a_key(self) -> Iterator[None]:
        """The terminal's interrupt character switched off while the prompt waits."""
        if not self.ctrl_c_is_a_key:
            yield
            return
        import termios

        fd = sys.stdin.fileno()
        attributes = termios.tcgetattr(fd)
        interrupt = attributes[6][termios.VINTR]
        attributes[6][termios.VINTR] = bytes([os.fpathconf(fd, "PC_VDISABLE")])
        termios.tcsetattr(fd, termios.TCSANOW, attributes)  # TCSANOW: keys typed stay
        try:
            yield
        finally:
            attributes = termios.tcgetattr(fd)  # as readline left them
            attributes[6][termios.VINTR] = interrupt
            termios.tcsetattr(fd, termios.TCSANOW, attributes)

    def close(self) -> None:
        if self.readline is not None:
            with contextlib.suppress(OSError):
                self.readline.write_history_file(self.history)  # trimmed to HISTORY_LENGTH


class _Chat:
    """One session: the trace, the runner that answers it, and the slash commands."""

    def __init__(self, project: Project, trace_id: str, model: Model, quiet: bool, *,
                 runner_fields: LiveOptions, run_options: dict[str, Any]) -> None:
        self.project = project
        self.trace_id = trace_id
        self.model = model
        self.quiet = quiet
        self.runner_fields = runner_fields  # RunnerOptions fields: thinking, trust, asking
        self.run_options = run_options
        self.interrupt = _Interrupt()
        self.terminal: Any = None
        self.generation = -1  # of the fields the runner was made with
        self.runner = self._runner()

    def _runner(self) -> Runner:
        from agentfs.tools.subprocesses import safe_environment

        self.terminal = Terminal(self.quiet)
        fields = self.runner_fields()
        self.generation = self.runner_fields.generation
        return self.project.runner(
            _Abandonable(self.model, self.interrupt), on_text=self.terminal.text,
            on_event=self.terminal.event, stop=self.interrupt.stop_requested,
            command_env=safe_environment(os.environ), **fields)

    def _current(self) -> Runner:
        """The runner for the next turn: made again if agentfs.toml or its trust changed
        since (`LiveOptions`), so an edit of the file applies from the next line."""
        self.runner_fields()  # agentfs.toml and its trust read again if they changed
        if self.runner_fields.generation != self.generation:
            self.runner = self._runner()
        return self.runner

    def _reopen(self) -> None:
        """After a Ctrl-C that may have cut a step short: a fresh workspace and runner,
        so nothing the cut step held in memory is trusted."""
        from agentfs.core.project import Project

        self.terminal.end_line()
        self.project = self.runner_fields.project = Project.open(self.project.workspace.root)
        self.runner = self._runner()

    @property
    def exists(self) -> bool:
        return self.trace_id in self.project.workspace.trace_ids()

    @property
    def trace_path(self) -> str:
        """What the trace commands get as TRACE: its directory, wherever chat runs."""
        return str(self.project.workspace.trace_dir(self.trace_id))

    def greet(self, reader: _LineReader) -> bool:
        """Say what the session talks to; True if the person wants a trace left with work
        to do resumed now."""
        click.echo(f"agentfs chat: trace {self.trace_id}, model {self.model.name}. "
                   "Type a message; /help lists the commands; Ctrl-D ends.", err=True)
        if not self.exists:
            click.echo(f"trace {self.trace_id} is new: your first message creates it.", err=True)
            return False
        trace = self.project.trace(self.trace_id)
        waiting = _approval_waits(trace) or _what_waits(trace)
        if waiting is None:
            return False
        what, resumable = waiting
        click.echo(f"trace {self.trace_id} has work left: {what}.", err=True)
        if not resumable:
            return False
        if not reader.interactive:
            click.echo("/resume continues it.", err=True)
            return False
        try:
            answer = reader.read("Resume it now? [Y/n] ", remember=False).strip().lower()
        except EOFError:
            answer = "n"
            click.echo("", err=True)
        except KeyboardInterrupt:
            answer = "n"
        if answer in ("", "y", "yes"):
            return True
        click.echo("/resume continues it when you want.", err=True)
        return False

    def loop(self, reader: _LineReader, *, resume: bool = False) -> None:
        """(Resume first, if asked, then) read lines until /quit, Ctrl-D, or Ctrl-C at an
        empty prompt."""
        if resume:
            self._guarded("/resume")
        while True:
            try:
                line = reader.read(f"{self.trace_id}> ")
            except EOFError:
                click.echo("", err=True)
                return
            except KeyboardInterrupt:
                if reader.typed().strip():
                    continue  # Ctrl-C drops what was typed, like a shell
                return
            if not self._guarded(line):
                return

    def _guarded(self, line: str) -> bool:
        """`handle(line)`, printing what goes wrong as `agentfs` prints it; the session
        goes on. False ends the session."""
        from agentfs.errors import AgentfsError

        try:
            return self.handle(line)
        except KeyboardInterrupt:  # during a slash command, or between steps
            self._reopen()
            click.echo("  [stopped]", err=True)
        except click.exceptions.Abort:
            click.echo("  [stopped]", err=True)
        except click.ClickException as exc:
            exc.show()
        except (AgentfsError, OSError) as exc:
            self.terminal.end_line()
            click.echo(f"agentfs: error: {printable(str(exc))}", err=True)
        return True

    def handle(self, line: str) -> bool:
        """One typed line: a slash command, or a user message. False ends the session."""
        text = line.strip()
        if not text:
            return True
        if text.startswith("//"):  # a message that begins with a slash
            return self.turn([line.lstrip()[1:]])
        if not text.startswith("/"):
            return self.turn([line])
        name, _, rest = text[1:].partition(" ")
        try:
            args = shlex.split(rest)
        except ValueError as exc:
            click.echo(f"/{name}: {exc}", err=True)
            return True
        return self.slash(name, args)

    def slash(self, name: str, args: list[str]) -> bool:
        """Slash command `name` with its arguments. False ends the session."""
        if name == "quit":
            return False
        if name == "help":
            for word, what in COMMANDS.items():
                click.echo(f"  /{word} {what}")
            click.echo("  //TEXT  send a message that begins with /TEXT")
            return True
        if name not in COMMANDS:
            click.echo(f"unknown command /{name}: /help lists the commands "
                       "(start a message that begins with a slash with //)", err=True)
            return True
        if name == "resume":
            return self.resume(args)
        if not self.exists:
            click.echo(f"trace {self.trace_id} does not exist yet: your first message "
                       "creates it", err=True)
            return True
        if name == "rewind":
            return self.rewind(args)
        if name == "compress":
            return self.compress(args)
        registered_command(name).main([self.trace_path, *args], prog_name=f"/{name}",
                                      standalone_mode=False)
        return True

    def turn(self, messages: list[str]) -> bool:
        """Run the trace with these user messages first, as `agentfs run -m` does."""
        from agentfs.core.runner import StopReason

        with self.interrupt.armed():
            try:
                result = self._current().run(self.trace_id, messages, **self.run_options)
            except KeyboardInterrupt:
                self._reopen()
                what = ("stopped: an answer still arriving was dropped"
                        if self.interrupt.dropped_call else "stopped at once")
                click.echo(f"  [{what}; everything committed stays. /resume continues]",
                           err=True)
                return True
        self.terminal.end_line()
        if result.stop is StopReason.NOTHING_TO_DO:
            click.echo("  [nothing to resume: the trace ends with an answer]", err=True)
        elif result.stop is StopReason.APPROVAL:
            click.echo("  [a tool call waits for your approval; /resume asks again]", err=True)
        elif result.stop is StopReason.STOPPED:
            click.echo("  [stopped after that step; /resume continues]", err=True)
        elif result.stop is StopReason.MAX_ITERATIONS:
            click.echo(f"  [stopped after {counted(result.iterations, 'model call')} "
                       "(--max-iterations); /resume continues]", err=True)
        return True

    def resume(self, args: list[str]) -> bool:
        if args:
            click.echo("/resume takes no arguments", err=True)
        elif not self.exists:
            click.echo(f"nothing to resume: trace {self.trace_id} does not exist yet; "
                       "your first message creates it", err=True)
        else:
            self.turn([])
        return True

    def rewind(self, args: list[str]) -> bool:
        if len(args) != 1 or not args[0].isdigit():
            click.echo("usage: /rewind N, N a message number (/show lists them)", err=True)
            return True
        registered_command("rewind").main([self.trace_path, args[0]], prog_name="/rewind",
                                standalone_mode=False)
        return True

    def compress(self, args: list[str]) -> bool:
        """What `agentfs compress` does, with the session's model and Ctrl-C handling."""
        if args:
            click.echo("/compress takes no arguments (the session's model writes the "
                       "summary)", err=True)
            return True
        with self.interrupt.armed():
            try:
                report = self._current().compress(self.trace_id)
            except KeyboardInterrupt:
                self._reopen()
                click.echo("  [stopped: /compress or `agentfs compress` finishes what was "
                           "started]", err=True)
                return True
        from agentfs.core.sidework import report_record

        echo_report(report_record(self.project, self.trace_id, report), as_json=False)
        return True


def _what_waits(trace: Trace) -> tuple[str, bool] | None:
    """What a run would take up before any new message, in words, and whether a run
    without one can go on; None when the trace ends with an answer and nothing waits."""
    from agentfs.errors import AgentfsError

    if trace.waits_for_user():
        return None
    inbox = trace.pending_inbox()
    if inbox:
        return f"{counted(len(inbox), 'file')} {'waits' if len(inbox) == 1 else 'wait'} in its inbox", True
    try:
        last = trace.main_path()[-1]
    except AgentfsError as exc:
        return f"it cannot run as it is: {exc}", False
    if last.role == "user":
        return f"your message #{last.sequence} has no answer yet", True
    if last.role == "assistant" and last.tool_calls:
        return f"the tool calls of #{last.sequence} have no results yet", True
    if last.role == "tool":
        return f"the model has not answered the tool results at #{last.sequence} yet", True
    if last.role == "system":
        return "it has no user message yet: type one", False
    return "an earlier run was cut short; the next run finishes its step", True


def _approval_waits(trace: Trace) -> tuple[str, bool] | None:
    """A tool call of the trace waiting for approval, in words (resuming asks about it)."""
    if not trace.awaits_approval():
        return None
    pending = trace.pending_approval()
    return f"its call to {pending.tool if pending else '?'} waits for your approval", True
