"""`agentfs doctor`: every file agentfs reads, checked by the code that reads it.

Nothing here states a rule of its own: `agentfs.toml` is checked by
`agentfs/config.py:load_config`, `trace.json` by `agentfs/store/meta.py:load_meta`,
message files by `agentfs/store/message_dir.py:MessageDir.problems` (the rules a
run applies, each file once, the parse cache reused), uncommitted edits by
`agentfs/store/recovery.py:edit_problem` (recovery's check as a dry run, asked
first as a run does), the side-branch queue by
`agentfs/core/sidequeue.py:queue_problems`, skills by `agentfs/skills.py:load_skills`,
knowledge items by `agentfs/core/knowledge.py:load_items`, the inboxes by
`agentfs/store/inbox.py:inbox_problem`, the index against HEAD by
`agentfs/store/git/index.py:staged_changes`, and packing by
`agentfs/store/git/packing.py:backlog_problem`. Each problem is one line naming
the file and its fix.

`check_config` is the cheap check `agentfs status` runs: the bytes of an
`agentfs.toml` found valid are remembered (their SHA-1 in `.git/agentfs/`), so
a status of an unchanged configuration imports no pydantic (`Project.open`
remembers it too, through `load_valid_config`).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from agentfs.errors import AgentfsError
from agentfs.store.atomic import atomic_write
from agentfs.store.regularfile import FileRefused, read_config_file
from agentfs.store.workspace import GOALS_FILE, TRACES_DIR, Workspace

if TYPE_CHECKING:
    from agentfs.config import WorkspaceConfig
    from agentfs.store.git.repo import GitRepo

__all__ = ["Diagnosis", "check_config", "config_digest", "diagnose", "load_valid_config"]

#: What `check_config` remembers: the SHA-1 of the last agentfs.toml found valid.
VALID_CONFIG_STAMP = "config-valid"


@dataclass
class Diagnosis:
    """What `agentfs doctor` found: one line per problem, and what it looked at."""

    problems: list[str] = field(default_factory=list)
    traces: int = 0
    messages: int = 0


def check_config(workspace: Workspace) -> None:
    """Raise the error of an invalid `agentfs.toml`; cheap for one already found valid.

    Raises:
        ConfigError: it does not exist, is not TOML, or has bad keys or values.
    """
    stamp = workspace.state_dir / VALID_CONFIG_STAMP
    try:
        if stamp.read_text() == config_digest(workspace):
            return
    except OSError:
        pass
    load_valid_config(workspace)


def load_valid_config(workspace: Workspace) -> WorkspaceConfig:
    """`agentfs.toml` loaded (`agentfs/config.py:load_config`), and remembered as valid.

    Raises:
        ConfigError: it does not exist, is not TOML, or has bad keys or values.
    """
    from agentfs.config import load_config

    before = config_digest(workspace)
    config = load_config(workspace.config_path)
    if before is not None and before == config_digest(workspace):  # not changed meanwhile
        stamp = workspace.state_dir / VALID_CONFIG_STAMP
        try:
            if not stamp.is_file() or stamp.read_text() != before:
                atomic_write(stamp, before.encode(), tmp_dir=workspace.state_dir / "tmp")
        except OSError:
            pass  # only a shortcut: the next status checks again
    return config


def config_digest(workspace: Workspace) -> str | None:
    """The SHA-1 of `agentfs.toml`'s bytes, or None if it cannot be read."""
    try:
        return hashlib.sha1(read_config_file(workspace.config_path),
                            usedforsecurity=False).hexdigest()
    except (OSError, FileRefused):
        return None


def diagnose(workspace: Workspace) -> Diagnosis:
    """Check the workspace's configuration, traces, the uncommitted edits a run would
    refuse, their goal trees and waiting calls, message files and main paths,
    side-branch queues and the index's entries for `traces/`."""
    from agentfs.core.sidequeue import queue_problems
    from agentfs.core.toolstep import foreign_calls_problem
    from agentfs.store.git.packing import backlog_problem
    from agentfs.store.git.repo import GitRepo
    from agentfs.store.goalsfile import GoalsFile
    from agentfs.store.recovery import edit_problem
    from agentfs.store.trace import Trace

    report = Diagnosis()
    try:
        check_config(workspace)
    except AgentfsError as exc:
        report.problems.append(str(exc))
    report.problems += _workspace_problems(workspace)
    repo = GitRepo(workspace.root)
    try:
        for trace_id in workspace.trace_ids():
            report.traces += 1
            trace = Trace(workspace, repo, trace_id)
            try:
                trace.check_folders()  # nothing is read through a link
            except AgentfsError as exc:
                report.problems.append(str(exc))
                continue
            report.problems += _inbox_problems(trace.inbox_dir)
            problems = [str(p) for p in trace.message_dir.problems()]
            if not problems:
                report.messages += len(trace.messages())
            try:
                trace.meta  # noqa: B018 — loading it is the check
                # first, as a run meets it: a file an edit broke is named as the run
                # names it, with the command that undoes the edit
                refused = None if problems else edit_problem(trace)
                if refused is not None:
                    report.problems.append(refused)
                    continue  # the run stops there; the readers would name it again
                GoalsFile.load(trace.dir / GOALS_FILE)
                trace.pending_approval()
                problems += [str(p) for p in queue_problems(trace)]
                if not problems:
                    trace.main_path()  # a run and every view follow it: it must lead back
                    problems += map(str, filter(None, [
                        trace.iterations_problem(), foreign_calls_problem(trace)]))
            except AgentfsError as exc:
                problems.insert(0, str(exc))
            report.problems += problems
        report.problems += _orphaned(workspace, repo)
        staged = repo.staged_changes(TRACES_DIR)
        report.problems += [
            f"{path}: {how} (agentfs commits trace files itself: "
            f"`git restore --staged {path}` puts the index back to HEAD)"
            for path, how in staged
        ]
        report.problems += filter(None, [backlog_problem(repo.git_dir)])
    finally:
        repo.close()
    return report


def _orphaned(workspace: Workspace, repo: GitRepo) -> list[str]:
    """Trace folders whose `trace.json` is gone while their files are committed
    (`agentfs/store/trace.py:Trace.refuse_orphaned`): no command sees them as traces."""
    from agentfs.store.trace import Trace
    from agentfs.store.workspace import TRACE_ID

    try:
        names = sorted(os.listdir(workspace.traces_dir))
    except OSError:
        return []
    problems = []
    for name in names:
        if TRACE_ID.fullmatch(name) and (workspace.traces_dir / name).is_dir():
            try:
                Trace(workspace, repo, name).refuse_orphaned()
            except AgentfsError as exc:
                problems.append(str(exc))
    return problems


def _workspace_problems(workspace: Workspace) -> list[str]:
    """What is wrong with the workspace's skills, knowledge items and `inbox/`."""
    from agentfs.core.knowledge import load_items
    from agentfs.skills import load_skills

    problems = [str(error) for error in load_skills(workspace.skills_dir).errors]
    try:
        load_items(workspace.knowledge_dir)
    except AgentfsError as exc:
        problems.append(str(exc))
    return problems + _inbox_problems(workspace.inbox_dir)


def _inbox_problems(folder: Path) -> list[str]:
    from agentfs.store.inbox import inbox_problem

    problem = inbox_problem(folder)
    return [] if problem is None else [f"{folder}: {problem}"]
