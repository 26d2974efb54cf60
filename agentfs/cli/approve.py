"""Asking before acting from the terminal: the question a run asks there
(`TerminalAsker`), and `agentfs approve TRACE` for a call that waits in
`approval.json` (`agentfs/core/approval.py`)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from agentfs.cli.context import open_project, registered_command

if TYPE_CHECKING:
    from agentfs.store.approval import Answer
    from agentfs.store.messages import ToolCall

__all__ = ["TerminalAsker", "approve", "approve_policy", "stdin_asker"]

#: The most of a call's input shown at the question, in characters.
SHOWN_INPUT = 2000

_REPLIES = {"y": "yes", "yes": "yes", "n": "no", "no": "no", "a": "always", "always": "always"}


def approve_policy(flag: bool | None) -> str | None:
    """`--approve` / `--no-approve` as `RunnerOptions.approve`; None: agentfs.toml's."""
    return None if flag is None else ("acting" if flag else "none")


class TerminalAsker:
    """Asks at the terminal whether a call may run: yes, no, or always (this tool, with
    no more questions for as long as this command runs: a chat session, or one
    `agentfs run`). End of input answers nothing: the call then waits in
    `approval.json`. Ctrl-C stops the run as anywhere else; the call is asked about
    again when the trace next runs."""

    def __init__(self, read: Callable[[str], str]) -> None:
        self.read = read
        self.always: set[str] = set()

    def __call__(self, trace_id: str, call: ToolCall) -> Answer | None:
        from agentfs.store.approval import Answer

        if call.name in self.always:
            return Answer.ALWAYS
        shown = json.dumps(call.input, indent=2, ensure_ascii=False)
        if len(shown) > SHOWN_INPUT:
            shown = shown[:SHOWN_INPUT] + f"\n[... {len(shown) - SHOWN_INPUT:,} more characters]"
        click.echo(f"  ? {call.name} wants to run with:\n{_indent(shown)}", err=True)
        while True:
            try:
                reply = self.read(f"  run {call.name}? [y]es, [n]o, [a]lways {call.name}: ")
            except EOFError:
                click.echo("", err=True)
                return None
            answer = _REPLIES.get(reply.strip().lower())
            if answer is not None:
                break
            click.echo("  answer y (run it), n (refuse it) or a (run it and every later "
                       f"{call.name} call without asking)", err=True)
        if answer == "always":
            self.always.add(call.name)
        return Answer(answer)


def stdin_asker() -> TerminalAsker | None:
    """A `TerminalAsker` on standard input when it is a terminal; None otherwise (the
    call waits in `approval.json`)."""
    return TerminalAsker(_read_stdin) if sys.stdin.isatty() else None


def _read_stdin(prompt: str) -> str:
    """A line of standard input, the prompt on stderr (stdout holds the model's text)."""
    click.echo(prompt, err=True, nl=False)
    line = sys.stdin.readline()
    if not line:
        raise EOFError
    return line


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


@click.command()
@click.argument("trace_ref", metavar="TRACE")
@click.option("--no", "refuse", is_flag=True,
              help="Refuse the call: the model is told the user refused it and goes on.")
@click.option("--always", is_flag=True,
              help="Run it, and every later call of the same tool in the run that follows.")
@click.option("--no-run", is_flag=True,
              help="Only record the answer; a watcher, the next `agentfs run` or the page "
              "continues the trace.")
@click.option("--model", help="Model for the run that follows (default: the trace's).")
@click.option("-q", "--quiet", is_flag=True, help="Do not print tool calls.")
def approve(  # noqa: PLR0917 -- click passes one parameter per option
        trace_ref: str, refuse: bool, always: bool, no_run: bool, model: str | None,
        quiet: bool,
) -> None:
    """Answer the tool call TRACE waits for, then continue TRACE.

    A run under --approve (or `approve = "acting"` in agentfs.toml) that cannot
    ask anyone (no terminal: `agentfs watch`, a script, the API) stops at a
    call that may change something and writes it to traces/TRACE/approval.json.
    This command shows the call, records yes (--no refuses it, --always runs it
    and every later call of that tool in the run that follows) as an
    `approval` commit, and continues TRACE as `agentfs run TRACE --approve`
    does. Setting "answer" in approval.json by hand does the same.
    """
    from agentfs.core.approval import answer_waiting
    from agentfs.errors import TraceLocked
    from agentfs.store.approval import Answer

    if refuse and always:
        raise click.UsageError("--no and --always do not go together")
    project = open_project(trace_ref)
    trace = project.trace(trace_ref)
    answer = Answer.NO if refuse else Answer.ALWAYS if always else Answer.YES
    pending = answer_waiting(trace, answer)
    shown = json.dumps(pending.input, ensure_ascii=False)
    click.echo(f"{trace.id}: {pending.tool} {shown[:200]} answered {answer}", err=True)
    if no_run:
        return
    run = registered_command("run")
    try:
        click.get_current_context().invoke(run, trace_ref=trace_ref, model=model,
                                           approve=True, quiet=quiet)
    except TraceLocked:
        click.echo(f"{trace.id} is run by another process (a watcher?); it continues with "
                   "your answer", err=True)

