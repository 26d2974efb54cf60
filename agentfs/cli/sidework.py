"""Side work on the command line: `agentfs compress`, `agentfs reflect`, `agentfs knowledge`.

Each runs side branches through the same queue a run uses
(`agentfs/core/sidequeue.py`), so a command killed halfway is finished by
running it again, and never merges anything twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from agentfs.cli.context import (
    choose_model,
    echo_json,
    for_stdout,
    open_project,
    start_notices,
)
from agentfs.cli.options import MODEL_NAMES
from agentfs.cli.terminal import Terminal, echo_report

if TYPE_CHECKING:
    from agentfs.core.project import Project
    from agentfs.core.runner import Runner

MODEL_HELP = f"Model for the side branches: {MODEL_NAMES}."


def _runner(project: Project, trace_id: str, model: str | None,
            trusted: dict[str, Any]) -> Runner:
    """A runner with the model `agentfs run` would use for this trace (or `model`);
    `trusted`: what `start_notices` returned. Its warnings go to stderr, as a run's."""
    import os

    from agentfs.tools.subprocesses import safe_environment

    trace = project.trace(trace_id)
    chosen = choose_model(project, trace.meta.model, trace.meta.preset, model)
    return project.runner(chosen, command_env=safe_environment(os.environ),
                          on_event=Terminal(quiet=True).event, **trusted)


@click.command()
@click.argument("trace_ref", metavar="TRACE")
@click.option("--model", help=MODEL_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def compress(trace_ref: str, model: str | None, as_json: bool) -> None:
    """Compress TRACE now (Level 2): summarize it on a side branch and continue from
    system + first user message + summary.

    Runs the queue a run would: reflection (with knowledge extraction on),
    knowledge evaluation (if items are pending), then the branch
    agentfs/TRACE/compression-N, whose summary is committed on main with that
    branch as its second parent. No message file is deleted: `agentfs rewind`
    to an earlier sequence puts the originals back on the path. Killed, it is
    finished by running it again.
    """
    from agentfs.core.sidework import report_record

    project = open_project(trace_ref)
    trace_id = project.workspace.resolve_trace(trace_ref)
    report = _runner(project, trace_id, model, start_notices(project)).compress(trace_id)
    echo_report(report_record(project, trace_id, report), as_json)


@click.command()
@click.argument("trace_ref", metavar="TRACE")
@click.option("--model", help=MODEL_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def reflect(trace_ref: str, model: str | None, as_json: bool) -> None:
    """Reflect on TRACE now: lessons become pending knowledge items.

    The model gets the trace's history on the side branch
    agentfs/TRACE/reflection-N and answers with lessons; each becomes
    knowledge/<id>.md with status pending, committed on main with the branch
    as second parent. Judge them with `agentfs knowledge evaluate`.
    """
    from agentfs.core.sidework import report_record

    project = open_project(trace_ref)
    trace_id = project.workspace.resolve_trace(trace_ref)
    report = _runner(project, trace_id, model, start_notices(project)).reflect(trace_id)
    record = report_record(project, trace_id, report)
    echo_report(record, as_json)
    if not as_json and not any(b["items"] for b in record["branches"]):
        click.echo("no lessons worth keeping were found", err=True)


@click.group(invoke_without_command=True)
@click.option("--status", "status_filter", type=click.Choice(["pending", "accepted", "rejected"]),
              help="Only items with this status.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def knowledge(ctx: click.Context, status_filter: str | None, as_json: bool) -> None:
    """List knowledge items (knowledge/*.md): saved by reflection, judged by knowledge
    evaluation; accepted ones are what the knowledge_search tool finds.

    `agentfs knowledge evaluate` judges the pending ones.
    """
    if ctx.invoked_subcommand is not None:
        return
    from agentfs.core.knowledge import load_items
    from agentfs.core.sidework import item_record

    project = open_project()
    items = [i for i in load_items(project.workspace.knowledge_dir)
             if status_filter is None or i.status == status_filter]
    if as_json:
        echo_json([item_record(i) for i in items])
        return
    if not items:
        click.echo("no knowledge items")
    for item in items:
        source = (f"{item.source_trace}#{item.source_sequence}" if item.source_sequence
                  else item.source_trace)
        reason = f" — {item.reason}" if item.reason else ""
        click.echo(for_stdout(f"{item.status:<9} {item.id:<32} {item.title} [{source}]{reason}"))


@knowledge.command()
@click.argument("trace_ref", metavar="[TRACE]", required=False)
@click.option("--model", help=MODEL_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def evaluate(trace_ref: str | None, model: str | None, as_json: bool) -> None:
    """Accept or reject the pending knowledge items, on knowledge_eval side branches.

    With TRACE, every pending item is judged on a branch of TRACE. Without,
    each item is judged on a branch of the trace it came from (its
    source_trace), with that trace's history as context.
    """
    from agentfs.core.reflection import KNOWLEDGE_EVAL
    from agentfs.core.sidework import pending_by_trace, report_record

    project = open_project(trace_ref)
    groups = pending_by_trace(project, trace_ref)
    if not groups:
        click.echo("no pending knowledge items: nothing to evaluate", err=True)
        if as_json:
            echo_json({"traces": []})
        return
    records, trusted = [], start_notices(project)
    for trace_id, ids in groups.items():
        report = _runner(project, trace_id, model, trusted).evaluate_knowledge(trace_id, ids)
        record = report_record(project, trace_id, report)
        record["branches"] = [b for b in record["branches"] if b["type"] == KNOWLEDGE_EVAL]
        records.append(record)
    if as_json:
        echo_json({"traces": records})
        return
    for record in records:
        echo_report(record, False)
