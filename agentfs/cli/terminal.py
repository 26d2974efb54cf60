"""What runs print, and ask, at the terminal: the model's text on stdout, its events on
stderr, side work's reports, the question before a call that may change something."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from agentfs.cli.context import echo_json, for_stdout, printable

if TYPE_CHECKING:
    from agentfs.store.approval import Answer
    from agentfs.store.messages import ToolCall

__all__ = ["Terminal", "TerminalAsker", "echo_report", "event_line", "stdin_asker"]

class Terminal:
    """Streams assistant text to stdout and run events to stderr, keeping lines apart.

    After a `retry` event the model streams the new attempt from its start; what
    stdout already shows of the turn is not printed again, only what goes beyond
    it, so stdout holds the answer once. (The retry line breaks the screen's line
    with a newline on stderr, not on stdout.) A new attempt that says something
    else is printed from its start, on a new line, after a note on stderr.
    """

    #: Shown even with --quiet: warnings, not tool traffic.
    WARNINGS = ("retry", "max_tokens", "prompt_too_long", "mcp_failed",
                "approval_waiting", "knowledge_skipped")

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self.mid_line = False  # stdout does not end with a newline
        self.cursor_mid_line = False  # ... and nothing was printed on stderr since
        self.shown = ""  # the current turn's text on stdout
        self.retried: str | None = None  # after a retry: the new attempt's text so far
        self.held = ""  # a carriage return ending a chunk: a line break may follow it

    def text(self, chunk: str) -> None:
        if self.retried is not None:
            chunk = self._beyond_shown(chunk)
        if chunk:
            self.shown += chunk
            self.mid_line = self.cursor_mid_line = not chunk.endswith("\n")
            # "\r\n" split between two chunks is a line break: "\r" alone is written out
            chunk, self.held = self.held + chunk, ""
            if chunk.endswith("\r"):
                chunk, self.held = chunk[:-1], "\r"
            sys.stdout.write(for_stdout(chunk))
            sys.stdout.flush()

    def _beyond_shown(self, chunk: str) -> str:
        """What a retried attempt's `chunk` adds to the text stdout shows."""
        assert self.retried is not None
        self.retried += chunk
        if self.shown.startswith(self.retried):
            return ""
        if self.retried.startswith(self.shown):
            new = self.retried[len(self.shown):]
        else:
            self.held = ""  # the old attempt's: its line break is not coming
            self.end_line()
            click.echo("  [the new attempt answers differently; its text follows]", err=True)
            self.shown, new = "", self.retried
        self.retried = None
        return new

    def end_line(self) -> None:
        if self.held:  # no line break came after it
            sys.stdout.write(for_stdout(self.held))
            self.held = ""
        if self.mid_line:
            sys.stdout.write("\n")
            sys.stdout.flush()
            self.mid_line = self.cursor_mid_line = False

    def event(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "assistant":
            self.end_line()
            self.shown, self.retried = "", None
        elif kind == "retry":
            self.retried = ""
        if self.quiet and kind not in self.WARNINGS:
            return
        line = event_line(kind, data)
        line = line and printable(line, one_line=True)  # names, tool input: anyone's
        if line and kind == "retry":  # mid-turn: keep stdout's text whole
            click.echo("\n" + line if self.cursor_mid_line else line, err=True)
            self.cursor_mid_line = False
        elif line:
            self.end_line()
            click.echo(line, err=True)


#: The line of each event shown as its data fills a template.
_TEMPLATES = {
    "ingested": "  ingested {file} as #{sequence}",
    "rejected": "  rejected {file}: {reason} (moved to {moved_to})",
    "retry": "  [retrying in {wait:.1f}s: attempt {attempt} of {attempts} failed: {reason}]",
    "prompt_too_long":
        "  [the model says the request is too long: compressing the trace, then retrying]",
    "mcp_failed": "  [{error}]",
    "knowledge_skipped": "  [knowledge work skipped, the run goes on: {error}]",
    "mcp_tools": "  [MCP server {server!r} changed its tools; the new list is offered from now on]",
    "approval_waiting": "  ? {name} waits for your approval (traces/{trace}/approval.json): "
                        "agentfs approve {trace} (--no, --always)",
}


def event_line(kind: str, data: dict[str, Any]) -> str | None:
    """The stderr line of a run event, or None for events not shown."""
    if kind == "tool_call":
        args = ", ".join(
            f"{k}={json.dumps(v, ensure_ascii=False)[:50]}" for k, v in data["input"].items()
        )
        return f"  → {data['name']}({args})"
    if kind == "tool_result":
        return _error_line(data["text"]) if data["is_error"] else None
    if kind == "recovered":
        return f"  resumed: answered {len(data['interrupted'])} interrupted tool call(s)"
    if kind == "max_tokens":
        return _max_tokens_line(data)
    template = _TEMPLATES.get(kind)
    return template.format(**data) if template is not None else None


def _error_line(text: str) -> str:
    return f"  ✗ {text.splitlines()[0] if text else 'error'}"


def _max_tokens_line(data: dict[str, Any]) -> str:
    limit = f"max_tokens ({data['max_tokens']})"
    if data["cut_call"]:
        return (f"  [cut off at {limit}: the incomplete {data['cut_call']} call is not "
                "run; the model is told to call it again]")
    if data["final"]:
        return (f"  [the answer was cut off at {limit}: raise max_tokens in agentfs.toml, "
                f"or ask for the rest: agentfs run {data['trace']} -m 'continue']")
    return f"  [the turn was cut off at {limit}]"


def echo_report(record: dict[str, Any], as_json: bool) -> None:
    """Print what side work did (`agentfs/core/sidework.py:report_record`): the summary
    each branch wrote, the knowledge items it filed."""
    if as_json:
        echo_json(record)
        return
    for branch in record["branches"]:
        if branch["messages"]:
            click.echo(f"{record['trace']}: summary #{branch['messages'][-1]} "
                       f"from {branch['branch']}")  # names agentfs made
        else:
            click.echo(f"{record['trace']}: {branch['branch']}: "
                       f"{len(branch['items'])} knowledge item(s)")
        for item in branch["items"]:
            reason = f" — {item['reason']}" if item.get("reason") else ""
            click.echo(for_stdout(f"  {item['status']:<9} {item['id']}: {item['title']}{reason}"))


#: The most of a call's input shown at the question, in characters.
SHOWN_INPUT = 2000

_REPLIES = {"y": "yes", "yes": "yes", "n": "no", "no": "no", "a": "always", "always": "always"}


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
        name = printable(call.name, one_line=True)  # the model's, or an MCP server's
        click.echo(printable(f"  ? {name} wants to run with:\n{_indent(shown)}"), err=True)
        while True:
            try:
                reply = self.read(f"  run {name}? [y]es, [n]o, [a]lways {name}: ")
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
