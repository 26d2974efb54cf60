"""`agentfs sync`, and the worker behind `agentfs watch --remote` (see docs/remote.md)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from agentfs.store.wording import counted


@click.command()
@click.argument("remote", default="origin")
@click.option("--workspace", "-w", type=click.Path(file_okay=False, path_type=Path),
              help="The workspace (default: the one holding the current directory).")
@click.option("--theirs", "theirs", multiple=True, metavar="TRACE",
              help="Take the remote's version of TRACE's files, whatever this clone did to "
              "them (its inbox aside); for a trace run both here and on the remote, "
              "refused for any other. Repeatable.")
def sync(remote: str, workspace: Path | None, theirs: tuple[str, ...]) -> None:
    """Commit what waits here, pull the remote's main, push the result.

    REMOTE is a remote's name or a URL (default: origin). Each trace's edits are
    committed first, as a run would (refused if they break the trace), then files
    dropped into inboxes and edits of other tracked files. Work on different
    traces merges path by path; trace.json and goals.json changed on both
    sides are merged key by key. A file changed both here and on the remote
    stops the sync before pushing: the remote's version is at the path, yours
    beside it as PATH.conflict-SHA; keep one and sync again. A trace run
    both here and on the remote stops the sync before it merges anything: fork
    your run to keep it (agentfs fork), then sync with --theirs TRACE.
    """
    from agentfs.core.doctor import load_valid_config
    from agentfs.remote.sync import sync as run_sync
    from agentfs.store.workspace import find_workspace

    found = find_workspace(workspace)
    report = run_sync(found, remote, durable=load_valid_config(found).fsync == "all",
                      theirs=theirs)
    for trace_id, kinds in report.recovered.items():  # as a run would (`agentfs log`)
        steps = (f"{'an' if kinds[0][0] in 'aeiou' else 'a'} {kinds[0]} step" if len(kinds) == 1
                 else f"{' and '.join(kinds)} steps")
        click.echo(f"{trace_id}: committed what changed here as {steps}")
    parts = [f"committed {counted(report.committed, 'file')}" if report.committed else "",
             "pulled" if report.pulled else "", f"pushed to {remote}" if report.pushed else "",
             f"merged {', '.join(report.resolved)}" if report.resolved else ""]
    click.echo("; ".join(p for p in parts if p) or "up to date")
    for trace_id in report.theirs_kept:
        click.echo(f"{trace_id}: took the remote's version; your changes to it are in the "
                   "history (`git log`)")


def run_worker(  # noqa: PLR0913 -- the options of `agentfs watch --remote`, passed on
        root: Path, remote: str, model_for: Callable, log: Callable[[str, dict], None],
        *, lease: float, poll: float, once: bool, runner_options: dict[str, Any]) -> None:
    """`agentfs watch --remote`: a worker on the clone at `root` until a signal."""
    from agentfs.watch.worker import Worker

    worker = Worker(root, remote, model_for, log, lease=lease, poll=poll,
                    runner_options=runner_options)

    def stop(signum: int, frame: Any) -> None:
        worker.stopping.set()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    log("worker", {"workspace": str(root), "remote": remote, "name": worker.name,
                   "pid": os.getpid()})
    if once:
        worker.run_once()
    else:
        worker.run_forever()
