"""`agentfs approve TRACE`: answer the tool call a trace waits for in
`approval.json` (`agentfs/core/approval.py`), then continue the trace."""

from __future__ import annotations

import json

import click

from agentfs.cli.context import open_project, registered_command

__all__ = ["approve"]


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

