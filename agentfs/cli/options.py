"""Options shared by the commands that run a trace (`agentfs run`, `agentfs chat`),
defined once so their names, defaults and help cannot drift apart."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

__all__ = ["approve_option", "approve_policy", "run_options"]


def approve_policy(flag: bool | None) -> str | None:
    """`--approve` / `--no-approve` as `RunnerOptions.approve`; None: agentfs.toml's."""
    return None if flag is None else ("acting" if flag else "none")


#: The models `--model` takes, for its help.
MODEL_NAMES = "replay:PATH, anthropic:MODEL-ID or openai:MODEL-ID"


def approve_option(what: str, *, asked: str = "at the terminal, else the call waits in "
                   "traces/TRACE/approval.json for `agentfs approve`",
                   ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`--approve/--no-approve`, for the commands that run traces; `asked` says where
    the question is put."""
    return click.option(
        "--approve/--no-approve", "approve", default=None,
        help=f"Ask before each call of a tool that may change something (bash, write_file, "
        f"edit_file, delegate, tools not declared read-only) in this {what}: {asked} "
        "(default: [tools] approve in agentfs.toml).")


def run_options(what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Add the options of a run to a command; `what` names it in the help ("run",
    "session")."""
    options: list[Any] = [
        click.option("--inject-skill", "inject_skills", multiple=True, metavar="NAME",
                     help="Keep this skill in the model's context (repeatable)."),
        click.option("--skill-recency", type=click.IntRange(min=1), default=10,
                     show_default=True,
                     help="Re-inject a declared skill once it is not among this many latest "
                     "messages."),
        click.option("--pending-tools", type=click.Choice(["refuse", "run", "skip"]),
                     default="refuse", show_default=True,
                     help="Tool calls at the head that agentfs did not itself just receive "
                     "from the model (after an edit or a git checkout): refuse to go on, run "
                     "them, or answer them as not run."),
        click.option("--thinking", "thinking", type=int, metavar="BUDGET",
                     help=f"Extended thinking on for this {what}, with this many tokens per "
                     "model call (at least 1024 and less than max_tokens; default: [thinking] "
                     "in agentfs.toml)."),
        click.option("--no-thinking", is_flag=True,
                     help=f"Extended thinking off for this {what}."),
        click.option("-q", "--quiet", is_flag=True, help="Do not print tool calls."),
        approve_option(what),
    ]

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate
