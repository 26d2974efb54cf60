"""The `agentfs` commands. Each parses its options, calls the core once, prints."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from agentfs.cli.context import (
    LiveOptions,
    choose_model,
    echo_json,
    for_stdout,
    interrupted,
    model_to_record,
    open_project,
    printable,
    start_notices,
    thinking_options,
    trace_id_for,
    trace_settings,
    trust_store,
)
from agentfs.cli.options import MODEL_NAMES, approve_option, run_options
from agentfs.cli.terminal import Terminal
from agentfs.store.wording import counted

if TYPE_CHECKING:
    from agentfs.core.listcache import Listing
    from agentfs.core.project import Project
    from agentfs.models.base import Model
    from agentfs.store.workspace import Workspace

# Module level: the standard library and click only. Each command imports what it
# uses when it runs, so `agentfs --help` and `agentfs status` start fast (they
# load neither pydantic nor dulwich nor the runner; tests/cli/test_startup.py).

EXAMPLE_TRACE = "demo"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="agentfs-workspace", prog_name="agentfs")
def cli() -> None:
    """Run LLM agents whose whole state is plain files in a Git repository.

    A workspace is a Git repository with an agentfs.toml. Each trace is a
    directory traces/<id>/ of message files; every step is a commit on main.
    Commands find the workspace by walking up from the current directory.
    """


@cli.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path), default=".")
def init(directory: Path) -> None:
    """Make DIRECTORY (default: here) a workspace.

    Creates the Git repository if needed, agentfs.toml, skills/, traces/,
    inbox/ and knowledge/, and commits them. In an existing repository or
    workspace only what is missing is added; nothing is overwritten.
    """
    from agentfs.config import load_config
    from agentfs.core.project import init_workspace
    from agentfs.store.workspace import CONFIG_FILE

    workspace, created = init_workspace(directory)
    if CONFIG_FILE in created:  # agentfs wrote it: what it runs is trusted (a clone's is not)
        trust_store().trust(workspace.root, load_config(workspace.config_path))
    if created:
        click.echo(f"initialized workspace {workspace.root} (added {', '.join(created)})")
    else:
        click.echo(f"{workspace.root} is already a workspace; nothing to add")


@cli.command()
@click.argument("trace_id", metavar="TRACE")
@click.option("-m", "--message", help="Text of the first user message; - reads standard input.")
@click.option(
    "-f", "--file", "file",
    type=click.Path(dir_okay=False, exists=True, allow_dash=True, path_type=Path),
    help="Read the first user message from a Markdown file (frontmatter optional); "
    "- reads standard input.",
)
@click.option("--preset", help="Preset from agentfs.toml for the system prompt.")
@click.option("--model", help="Model this trace uses by default (e.g. replay:script.json).")
def new(trace_id: str, message: str | None, file: Path | None, preset: str | None,
        model: str | None) -> None:
    """Create trace TRACE with its first user message (-m TEXT or -f FILE).

    Makes traces/TRACE/ with trace.json, the system message and the user
    message, as two commits. Run it with `agentfs run TRACE`.
    """
    from agentfs.store.ingest import parse_dropped_text, read_dropped
    from agentfs.store.workspace import check_trace_id

    if (message is None) == (file is None):
        raise click.UsageError("give the first message with exactly one of -m TEXT or -f FILE")
    check_trace_id(trace_id)
    project = open_project()
    if file is not None and str(file) == "-":
        first = parse_dropped_text("<stdin>", sys.stdin.buffer.read())
    elif file is not None:
        first = read_dropped(file)
    else:
        first = parse_dropped_text("<-m>", _text_or_stdin(message or ""))
    trace = project.new_trace(trace_id, first, preset=preset, model=model)
    click.echo(f"created trace {trace.id} in {trace.dir}")


@cli.command()
@click.argument("trace_ref", metavar="TRACE")
@click.option("-m", "--message", "messages", multiple=True,
              help="Append a user message first (repeatable); - reads standard input.")
@click.option("--model", help=f"Model to use: {MODEL_NAMES}.")
@click.option("--max-iterations", type=click.IntRange(min=1),
              help="Stop after this many model calls (default: max_iterations in agentfs.toml).")
@click.option("--preset", help="Preset from agentfs.toml, for a trace this run creates.")
@run_options("run")
def run(  # noqa: PLR0913, PLR0917 -- click passes one parameter per option
        trace_ref: str, messages: tuple[str, ...], model: str | None, max_iterations: int | None,
        preset: str | None, inject_skills: tuple[str, ...], skill_recency: int,
        pending_tools: str, thinking: int | None, no_thinking: bool, quiet: bool,
        approve: bool | None,
) -> None:
    """Run TRACE until the model stops, streaming its text.

    TRACE is a trace id or a path to a trace directory; a new id with -m
    creates the trace. Before running, edits you made under the trace are
    committed (kind `edit`) so the model sees them, files in
    traces/TRACE/inbox/ become user messages, and an interrupted earlier run
    is resumed. Inbox files are taken once they have settled; a file that
    cannot be a message is moved to inbox/.rejected/ with a note saying why.
    Model: --model, else the trace's, else the preset's, else `model` in
    agentfs.toml. Under --approve, a call that may change something is asked
    about at the terminal; without one it waits in traces/TRACE/approval.json
    and the run stops (`agentfs approve TRACE` answers it).
    """
    from agentfs.cli.terminal import stdin_asker

    if list(messages).count("-") > 1:
        raise click.UsageError("standard input can be read once: give -m - at most once")
    messages = tuple(_text_or_stdin(m) for m in messages)
    project = open_project(trace_ref)
    thinking_fields = thinking_options(project, thinking, no_thinking)
    trace_id = trace_id_for(project, trace_ref, creating=bool(messages))
    trace = project.trace(trace_id) if trace_id in project.workspace.trace_ids() else None
    meta_model, preset_name, declared = trace_settings(trace, preset, inject_skills)
    asker = stdin_asker()
    if (trace is not None and not messages and not declared and trace.waits_for_user()
            and not (asker is not None and trace.awaits_approval())):
        _say_waiting(project, trace_id)  # no model needed, so no credentials either
        return
    # Imported once there is work: deciding there is none stays cheap (docs/performance.md)
    from agentfs.cli.options import approve_policy
    from agentfs.cli.render import run_text
    from agentfs.core.runner import StopReason
    from agentfs.core.status import record_failure
    from agentfs.errors import AgentfsError
    from agentfs.tools.subprocesses import safe_environment

    chosen = choose_model(project, meta_model, preset or preset_name, model)
    trusted = start_notices(project)
    terminal = Terminal(quiet)
    runner = project.runner(chosen, on_text=terminal.text, on_event=terminal.event,
                            command_env=safe_environment(os.environ), **thinking_fields,
                            **trusted, approve=approve_policy(approve), ask=asker)
    try:
        result = runner.run(trace_id, messages, max_iterations=max_iterations, preset=preset,
                            inject_skills=declared, skill_recency_threshold=skill_recency,
                            pending_tools=pending_tools,  # type: ignore[arg-type]
                            model_name=model_to_record(project, model))
    except AgentfsError as exc:
        terminal.end_line()
        record_failure(project, trace_id, exc, unattended=False)  # the error itself follows
        raise
    except KeyboardInterrupt:
        terminal.end_line()
        interrupted(trace_id)
    terminal.end_line()
    if result.queued:
        click.echo(f"  your message waits in traces/{trace_id}/inbox/ until the call is "
                   "answered", err=True)
    if result.stop is StopReason.NOTHING_TO_DO or (
            result.stop is StopReason.APPROVAL and not result.iterations):
        _say_waiting(project, trace_id)
        return
    if result.stop is StopReason.APPROVAL:
        _say_waiting(project, trace_id)
    if result.stop is StopReason.MAX_ITERATIONS:
        click.echo(
            f"stopped after {counted(result.iterations, 'model call')} (--max-iterations); "
            f"`agentfs run {trace_id}` continues", err=True,
        )
    click.echo(f"{trace_id}: {chosen.name}, {run_text(result, project.prices)}", err=True)


def _text_or_stdin(text: str) -> str:
    """`-` stands for standard input, as in most commands. Bytes that are not UTF-8
    are kept as Python keeps them in arguments, for the message's reader to refuse."""
    return sys.stdin.buffer.read().decode("utf-8", "surrogateescape") if text == "-" else text


def _say_waiting(project: Project, trace_id: str) -> None:
    pending = project.trace(trace_id).pending_approval()
    if pending is not None and pending.answer is None:
        click.echo(
            f"trace {trace_id} waits for your approval of a call to {pending.tool} "
            f"(traces/{trace_id}/approval.json): agentfs approve {trace_id} (--no, --always)",
            err=True,
        )
        return
    inbox = project.workspace.trace_dir(trace_id) / "inbox"
    click.echo(
        f"trace {trace_id} is waiting for a user message: "
        f"agentfs run {trace_id} -m '...' (or drop a file into {inbox})",
        err=True,
    )


@cli.command()
@click.argument("trace_ref", metavar="TRACE")
@click.option("--all", "show_all", is_flag=True, help="Also list messages off the main path.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--full", is_flag=True, help="Do not shorten long messages.")
@click.option("--as-sent", is_flag=True,
              help="Show what the model receives next: the history after compression.")
@click.option("--tail", type=click.IntRange(min=1), metavar="N",
              help="Only the main path's last N messages (reads only those).")
@click.option("--from", "since", type=click.IntRange(min=0), metavar="SEQ",
              help="Only the main path from message SEQ on.")
def show(trace_ref: str, show_all: bool, as_json: bool, full: bool, as_sent: bool,  # noqa: PLR0917 -- click passes one parameter per option
         tail: int | None, since: int | None) -> None:
    """Print TRACE's main path (with --all, every message, off-path ones marked).

    With --tail N or --from SEQ, only that part of the main path, reading only
    its messages however long the trace is (with --all, also the messages off
    the path among them).

    With --as-sent, print the messages the next model call would send: Level 1
    compression may leave out a finished goal's execution details (the files
    stay as they are).
    """
    from agentfs.cli.render import show_text
    from agentfs.core.records import message_record
    from agentfs.core.usage import trace_totals

    if as_sent and show_all:
        raise click.UsageError("--as-sent and --all do not go together")
    if as_sent and (tail or since is not None):
        raise click.UsageError("--as-sent shows the whole request; leave out --tail and --from")
    project = open_project(trace_ref)
    trace = project.trace(trace_ref)
    view = trace.view(tail, since=since or 0)
    messages = view.messages
    on_path = {m.sequence for m in view.path}
    if as_sent:
        from agentfs.core.request import preview_request  # the tools and MCP: --as-sent only

        name = project.model_name(trace.meta.model, trace.meta.preset, None)
        request = preview_request(project, trace, name)
        sent = [view.path[0], *request.messages]
        chosen = [(m, True) for m in sent]
    else:
        chosen = [(m, m.sequence in on_path) for m in messages.values()
                  if show_all or m.sequence in on_path]
    prices = project.prices
    if as_json:
        body = {
            "trace": trace.id,
            "head": trace.meta.head,
            "usage": trace_totals(trace.meta, prices).record(),
            **({"older": view.older, "folds": [f.record() for f in view.folds]}
               if tail or since is not None else {}),
            "messages": [message_record(m, p, prices) for m, p in chosen],
        }
        echo_json(body)
    else:
        if view.older is not None:
            click.echo(f"… (the main path goes on before #{view.older})\n")
        if not chosen and since is not None:
            click.echo(f"(no message of the main path from #{since} on: its head is "
                       f"#{trace.meta.head})")
        click.echo(for_stdout(show_text(chosen, prices, full=full)))
        for fold in view.folds if show_all else ():
            click.echo(f"\n… {fold.count} messages off the path left out, #{fold.first} to "
                       f"#{fold.last} (all of them: leave out --tail and --from)")
        click.echo(f"\n{trace.id}: {trace_totals(trace.meta, prices).text()}")


@cli.command()
@click.argument("trace_ref", metavar="TRACE")
@click.option("-n", "--max-count", type=click.IntRange(min=0), metavar="N", help="Show at most this many commits.")
@click.option("-p", "--patch", is_flag=True,
              help="Also show the workspace files each step changed, as a diff.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def log(trace_ref: str, max_count: int | None, patch: bool, as_json: bool) -> None:
    """List TRACE's commits on main, newest first: commit, kind, sequence, summary;
    a model's turn adds what its call used (tokens, time, cost).

    With -p, each step is followed by the diff of the workspace files it changed
    (message files and the rest of the trace's folder left out).
    """
    from agentfs.cli.render import log_text
    from agentfs.core.records import step_record
    from agentfs.store.stepdiff import step_diff
    from agentfs.store.steplog import trace_log

    project = open_project(trace_ref)
    trace = project.trace(trace_ref)
    repo, own = project.repo, trace.rel(trace.dir)
    steps = []
    for step in trace_log(repo, trace.id, max_count):
        record = step_record(step, project.prices)
        if patch:
            record = {**record, **step_diff(repo, step.commit, outside=own).record()}
        steps.append((step, record))
    if as_json:
        echo_json({"trace": trace.id, "steps": [r for _, r in steps]})
        return
    for step, record in steps:
        click.echo(for_stdout(log_text(step, project.prices)))
        if record.get("diff"):
            click.echo(for_stdout(record["diff"]), nl=False)


@cli.command()
@click.argument("trace_ref", metavar="TRACE")
@click.argument("sequence", type=int)
@click.option("--files", is_flag=True, help="Also put back the workspace files the trace's "
              "steps changed after SEQUENCE.")
def rewind(trace_ref: str, sequence: int, files: bool) -> None:
    """Move TRACE's head back to message SEQUENCE (a `rewind` commit).

    Later messages stay on disk, off the main path (`agentfs show --all`);
    the next run continues from SEQUENCE. With --files, the workspace files
    the agent changed after SEQUENCE get back their content of then (files it
    created are deleted), in the same commit; refused, with nothing changed,
    if you changed one of them since the agent last wrote it.
    """
    from agentfs.core.actions import rewind as rewind_trace

    project = open_project(trace_ref)
    trace = project.trace(trace_ref)
    done = rewind_trace(trace, sequence, files=files)
    if not done.moved:
        click.echo(f"{trace.id}: already at #{sequence}"
                   + ("" if done.files else "; nothing to do"))
    else:
        click.echo(f"{trace.id}: head moved from #{done.previous} to #{sequence}")
    if done.files:  # one path a line, as git lists them; a line break in a name written out
        click.echo(for_stdout(f"{trace.id}: restored {counted(len(done.files), 'file')}:"))
        for path in done.files:
            click.echo(f"  {printable(path, one_line=True)}")


@cli.command()
@click.argument("trace_ref", metavar="TRACE")
@click.argument("new_id", metavar="[NEW]", required=False)
@click.option("--at", "at", type=int, metavar="SEQ",
              help="The message to fork from (default: TRACE's head).")
def fork(trace_ref: str, new_id: str | None, at: int | None) -> None:
    """Start trace NEW as a copy of TRACE's main path up to message SEQ.

    NEW (default: TRACE-fork-N) gets the messages' files as they are, the goals of
    then, TRACE's model and preset, and records where it came from in its
    trace.json (`forked_from`). TRACE is not changed. Continue NEW with
    `agentfs run NEW`.
    """
    from agentfs.core.actions import fork as fork_trace

    project = open_project(trace_ref)
    source = project.trace(trace_ref)
    if new_id is not None:
        from agentfs.store.workspace import check_trace_id

        check_trace_id(new_id)
    made = fork_trace(source, at, new_id)
    click.echo(f"{made.id}: forked from {source.id} at #{made.meta.head}")


@cli.command()
@click.argument("words", nargs=-1, required=True)
@click.option("-n", "--limit", type=click.IntRange(min=1), default=50, show_default=True,
              help="Show at most this many messages.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def search(words: tuple[str, ...], limit: int, as_json: bool) -> None:
    """Find the messages of every trace whose text holds each of WORDS.

    Case does not matter; messages off the main path are found too. Each line
    is TRACE#SEQUENCE, the role and an excerpt; `agentfs show TRACE --all`
    shows the message.
    """
    from agentfs.core.search import search_messages

    found = search_messages(open_project(), " ".join(words), limit)
    if as_json:
        echo_json(found.record())
        return
    for hit in found.hits:
        place = "" if hit.on_path else " (off the path)"
        click.echo(for_stdout(f"{hit.trace}#{hit.sequence} {hit.role}{place}: {hit.excerpt}"))
    for trace_id, error in found.unreadable.items():
        click.echo(f"{trace_id}: not searched: {error}", err=True)
    if found.more:
        click.echo(f"(more than {limit}: give more words or --limit)", err=True)
    if not found.hits:
        click.echo("no message holds " + " and ".join(repr(w) for w in words), err=True)
        raise click.exceptions.Exit(1)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--check", is_flag=True, help="Check every file as `agentfs doctor` does.")
def status(as_json: bool, check: bool) -> None:
    """List the workspace's traces: head, running or idle, pending inbox files.

    An invalid agentfs.toml is an error. A trace whose trace.json cannot be
    read is listed as broken, with what is wrong; the command then exits 1.
    """
    from agentfs.store.gcpause import gc_paused

    with gc_paused():  # thousands of rows, none of them garbage: 2-3 ms of 1,000 traces'
        from agentfs.core.doctor import check_config
        from agentfs.core.listcache import ListCache
        from agentfs.prices import PriceTable
        from agentfs.store.workspace import find_workspace

        workspace = find_workspace(None)
        if check:
            _doctor(workspace)
        check_config(workspace)
        cache = ListCache(workspace, PriceTable.in_config(workspace.config_path),
                          saved=workspace.trace_list)
        listing = cache.listed()
        cache.save()
        if as_json:
            echo_json(listing.document(str(workspace.root)))
        else:
            _status_text(listing)
    if listing.broken:
        raise click.exceptions.Exit(1)


@cli.command()
def doctor() -> None:
    """Check the workspace: agentfs.toml, every trace.json, goals.json, approval.json
    and message file, the side-branch queues, skills/, knowledge/, the inboxes, and that
    the Git index holds what HEAD holds under traces/.

    Prints one line per problem, naming the file and how to fix it, and exits 1;
    or a short summary and exits 0.
    """
    from agentfs.store.workspace import find_workspace

    _doctor(find_workspace(None))


def _doctor(workspace: Workspace) -> None:
    from agentfs.core.doctor import diagnose

    report = diagnose(workspace)
    for problem in report.problems:  # they may name files someone else named
        click.echo(printable(problem))
    if report.problems:
        raise click.exceptions.Exit(1)
    click.echo(f"ok: agentfs.toml, {counted(report.traces, 'trace')}, "
               f"{counted(report.messages, 'message file')}, skills, knowledge, inboxes, "
               "the index under traces/")


def _status_text(listing: Listing) -> None:
    """The list as lines, from the rows `--json` prints (`TraceStatus.record()`)."""
    lines = [_status_line(row) for row in listing.rows()]
    if not lines:
        lines.append("no traces yet: agentfs new TRACE -m '...'")
    if listing.inbox:
        lines.append(f"inbox/: {counted(len(listing.inbox), 'file')} waiting")
    if listing.inbox_rejected:
        lines.append(f"inbox/.rejected/: {counted(len(listing.inbox_rejected), 'file')} "
                     "that could not be used")
    click.echo(for_stdout("\n".join(lines)))  # one write: a line each is 1,000 writes


def _status_line(row: dict[str, Any]) -> str:
    """One trace's line of `agentfs status`."""
    trace = row["trace"]
    if "error" in row:
        return f"{trace:<24} BROKEN  {row['error']}"
    state = {"approval": f"waits for approval of {row.get('approval')} "
                         f"(agentfs approve {trace})",
             "waiting": "waits for a user message"}.get(row["status"], row["status"])
    pending = f", {len(row['pending_inbox'])} in inbox" if row["pending_inbox"] else ""
    if row["rejected"]:
        pending += f", {len(row['rejected'])} rejected (inbox/.rejected/)"
    if row["messages"] is not None:
        pending += f", {row['messages']} messages"
    error = ""
    if row.get("last_error") and not row["running"]:
        error += f"  last run: {row['last_error'].splitlines()[0][:120]}"
    used = ""
    usage = row["usage"]
    if usage is not None and usage["calls"]:
        used = f"  {counted(usage['calls'], 'call')}"
        tokens = usage["input_tokens"] + usage["output_tokens"]
        if usage["input_tokens"] or usage["output_tokens"]:  # `Totals.counted`
            used += f", {tokens:,} tokens, {usage['cost']['text']}"
    title = f"  {row['title']!r}" if row["title"] else ""
    return f"{trace:<24} head #{row['head']}  {state}{pending}{used}{title}{error}"


@cli.command()
@click.argument("trace_ref", metavar="TRACE")
@click.option("--summaries", is_flag=True, help="Show the summaries of finished goals.")
@click.option("--json", "as_json", is_flag=True, help="Print goals.json's content as JSON.")
def goals(trace_ref: str, summaries: bool, as_json: bool) -> None:
    """Print TRACE's goal tree (goals.json): [ ] open, [x] done, [-] abandoned."""
    from agentfs.core.goals import GoalTree
    from agentfs.store.workspace import GOALS_FILE

    project = open_project(trace_ref)
    trace = project.trace(trace_ref)
    tree = GoalTree.load(trace.dir / GOALS_FILE)
    if as_json:
        echo_json(tree.model_dump(mode="json"))
        return
    click.echo(for_stdout(tree.to_prompt(include_summary=summaries)))
    click.echo(for_stdout(tree.focus_reminder()))


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def skills(as_json: bool) -> None:
    """List the skills runs can use: built-in ones and the workspace's skills/.

    Invalid skill files are listed with what to fix; the command then exits 1.
    """
    from agentfs.skills import load_skills

    project = open_project()
    catalog = load_skills(project.workspace.skills_dir)
    if as_json:
        echo_json({
            "skills": [{"name": s.name, "description": s.description, "origin": s.origin,
                        "path": str(s.path)} for s in catalog],
            "errors": [str(e) for e in catalog.errors],
        })
    else:
        for skill in catalog:
            note = f" (overrides {skill.overrides})" if skill.overrides else ""
            click.echo(f"{skill.name:<24} {skill.origin}{note}: {skill.description}")
        for error in catalog.errors:
            click.echo(f"invalid: {error}", err=True)
    if catalog.errors:
        raise click.exceptions.Exit(1)


@cli.command()
@click.argument("workspace", type=click.Path(file_okay=False, path_type=Path), required=False)
@click.option("--once", is_flag=True, help="Take what is pending, wait for those runs, exit.")
@click.option("--max-parallel", type=click.IntRange(min=1), default=2, show_default=True,
              help="Traces run at the same time.")
@click.option("--settle", type=click.FloatRange(min=0),
              help="Seconds a dropped file must stay unchanged before it is taken "
              "(default: `settle` in agentfs.toml, 1.0).")
@click.option("--model", help="Model for every run (default: each trace's, else agentfs.toml's).")
@click.option("--thinking", "thinking", type=int, metavar="BUDGET",
              help="Extended thinking on for every run, with this many tokens per model call "
              "(default: [thinking] in agentfs.toml).")
@click.option("--no-thinking", is_flag=True, help="Extended thinking off for every run.")
@click.option("--json", "as_json", is_flag=True, help="Log JSON lines instead of text.")
@click.option("--remote", metavar="REMOTE", help="Be a worker of a fleet sharing this Git "
              "remote (a name or a URL): claim traces there, push their steps (docs/remote.md).")
@click.option("--lease", type=click.FloatRange(min=1), default=30.0, show_default=True,
              help="With --remote: seconds a claim lives unless renewed.")
@approve_option("watcher's runs", asked="the call waits in traces/TRACE/approval.json for "
                "`agentfs approve` or an answer written there")
@click.option("--poll", type=click.FloatRange(min=0.1), default=1.0, show_default=True,
              help="With --remote: seconds between looks at the remote while idle.")
def watch(  # noqa: PLR0913, PLR0917 -- click passes one parameter per option
        workspace: Path | None, once: bool, max_parallel: int, settle: float | None,
        model: str | None, thinking: int | None, no_thinking: bool, as_json: bool,
        remote: str | None, lease: float, approve: bool | None, poll: float,
) -> None:
    """Run traces when files are dropped into inboxes.

    A Markdown file saved into traces/ID/inbox/ continues trace ID; one saved
    into the workspace's inbox/ starts a new trace named after the file
    (frontmatter may set `preset` and `model`). Files are taken once they
    have settled; editor temp and swap files are ignored; symlinks and files
    that cannot be messages are moved to .rejected/ beside them, with a note.
    On start, traces left unanswered or cut short by a crash are resumed.
    Under --approve, a call that may change something waits in
    traces/ID/approval.json; the trace goes on once it is answered there, by
    `agentfs approve`, or on the page. Ctrl-C or SIGTERM lets running traces finish their current step, then
    exits 0.
    """
    import signal

    from agentfs.cli.options import approve_policy
    from agentfs.core.project import Project
    from agentfs.tools.subprocesses import safe_environment
    from agentfs.watch.observe import observe
    from agentfs.watch.watcher import Watcher

    project = Project.open(workspace)
    thinking_options(project, thinking, no_thinking)  # a bad budget fails now, not per run
    _check_default_model(project, model)
    runner_options = LiveOptions(project, {"command_env": safe_environment(os.environ),
                                           "approve": approve_policy(approve)},
                                 thinking=(thinking, no_thinking))

    def model_for(trace_model: str | None, preset: str | None) -> Model:
        return choose_model(project, trace_model, preset, model)

    if remote is not None:
        from agentfs.cli.remote import run_worker

        run_worker(project.workspace.root, remote, model_for, _watch_logger(as_json),
                   lease=lease, poll=poll, once=once, runner_options=runner_options())
        return
    watcher = Watcher(project, model_for, _watch_logger(as_json), settle=settle,
                      max_parallel=max_parallel, runner_options=runner_options)

    def stop(signum: int, frame: Any) -> None:
        watcher.stopping.set()
        watcher.wake()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    if once:
        watcher.run_once()
        return
    observer, kind = observe(project.workspace.root, watcher.wake)
    watcher.log("watching", {"workspace": str(project.workspace.root), "observer": kind})
    try:
        watcher.run_forever()
    finally:
        observer.stop()
        observer.join()
    watcher.log("stopped", {})


def _check_default_model(project: Project, flag: str | None) -> None:
    """The model runs fall back on, made once at start: with --model (every run's) a
    missing key or script fails now, not at each run; agentfs.toml's default is only
    warned about, since traces that name their own model run without it."""
    from agentfs.errors import AgentfsError

    if flag is not None:
        choose_model(project, None, None, flag)
        return
    try:
        choose_model(project, None, None, None)
    except AgentfsError as exc:
        click.echo(printable(f"agentfs: warning: {exc}; traces that name no model of "
                             "their own fail until that is fixed"), err=True)


def _watch_logger(as_json: bool) -> Callable[[str, dict], None]:
    def log(event: str, data: dict) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        if as_json:
            click.echo(json.dumps({"time": stamp, "event": event, **data}))
        else:
            details = " ".join(f"{k}={_shown(v)}" for k, v in data.items())
            # names of dropped files, which anyone who may drop one chose: one line each
            click.echo(printable(f"{stamp} {event} {details}".rstrip(), one_line=True))
        sys.stdout.flush()

    return log


def _shown(value: object) -> object:
    """A value of a watch log line as text: a cost as its text ($0.0123), any other
    dict or list as compact JSON."""
    if isinstance(value, dict) and isinstance(value.get("text"), str):
        return value["text"]
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return value


@cli.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path), required=False)
def demo(directory: Path | None) -> None:
    """Copy the example workspace to DIRECTORY (default: a new temp dir) and run it.

    Runs offline on the replay model; your own repositories are not touched.
    """
    import shutil
    import tempfile

    from agentfs.core.project import Project, init_workspace
    from agentfs.resources import example_workspace_dir
    from agentfs.tools.subprocesses import safe_environment

    source = example_workspace_dir()
    if directory is None:
        directory = Path(tempfile.mkdtemp(prefix="agentfs-demo-"))
    elif directory.exists() and any(directory.iterdir()):
        raise click.UsageError(f"{directory} is not empty; give a new or empty directory")
    shutil.copytree(source, directory, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns(".git", "__pycache__"))
    init_workspace(directory, commit_existing=True)
    click.echo(f"example workspace copied to {directory.resolve()}\n", err=True)
    project = Project.open(directory)
    trust_store().trust(project.workspace.root, project.config)  # agentfs wrote its config
    trace = project.trace(EXAMPLE_TRACE)
    chosen = choose_model(project, trace.meta.model, trace.meta.preset, None)
    terminal = Terminal()
    runner = project.runner(chosen, on_text=terminal.text, on_event=terminal.event,
                            command_env=safe_environment(os.environ),
                            **start_notices(project))
    runner.run(trace.id)
    terminal.end_line()
    root = project.workspace.root
    click.echo(
        f"\ndone. Look around:\n  cd {root}\n  git log --oneline\n"
        f"  agentfs show {trace.id}\n  agentfs log {trace.id}",
        err=True,
    )


# Commands defined in their own modules register here, one line each.
from agentfs.cli.approve import approve
from agentfs.cli.chat import chat
from agentfs.cli.remote import sync
from agentfs.cli.serve import serve
from agentfs.cli.sidework import compress, knowledge, reflect
from agentfs.cli.tools import tools
from agentfs.cli.trust import trust

cli.add_command(approve)
cli.add_command(chat)
cli.add_command(compress)
cli.add_command(reflect)
cli.add_command(knowledge)
cli.add_command(serve)
cli.add_command(sync)
cli.add_command(tools)
cli.add_command(trust)
