"""The side-branch queue: reflection, knowledge evaluation, compression, one after the other.

A queue is planned as a list of branch types (Level 2 compression plans
`reflection` if knowledge extraction is on, `knowledge_eval`, `compression`;
`agentfs reflect` plans `reflection` alone) and kept in `trace.json`
(`agentfs/store/meta.py:SideQueue`). Every transition is a commit on `main`:

- planning it, with the first step `running`, the main commit it starts from
  (`base`) and its branch's name, made from the type and that commit
  (`agentfs/store/branches.py:branch_name`): kind `queue`;
- each step's merge (`agentfs/core/sidebranch.py:take_outcome`), which also marks
  the step `done` with its branch head and the next step `running` (or a
  `knowledge_eval` with nothing pending `skipped`): kind `outcome`, or `summary`
  for compression, the branch's head as second parent. The last one removes
  the queue.

So a crash at any instant leaves the committed queue naming the step that was
running: the next run continues that branch from its last commit, merges an
outcome the branch already holds, and never runs a finished step again. A
merge cut short before its commit is rolled back by recovery
(`agentfs/store/recovery.py`) and redone with the same bytes. If the main
path's head moved meanwhile (a rewind, an edit), the queue is abandoned with a
`queue` commit: its unfinished branch stays as a record, never merged. A
branch of the running step's name, in whichever clone takes the queue over,
is a run of the step's type on the history the step started from, so it is
continued or merged as the step's own.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from agentfs.core.reflection import (
    KNOWLEDGE_EVAL,
    REFLECTION,
    knowledge_eval_branch,
    pending_items,
    reflection_branch,
)
from agentfs.core.sidebranch import (
    COMPRESSION,
    Merged,
    SideWork,
    branch_files,
    branch_head,
    compression_branch,
    has_outcome,
    side_calls,
    take_outcome,
)
from agentfs.errors import AgentfsError
from agentfs.store.branches import branch_kind, branch_name, branch_prefix
from agentfs.store.commits import StepKind
from agentfs.store.messages import Message
from agentfs.store.meta import QueueStep, SideQueue
from agentfs.store.trace import Trace

__all__ = ["BRANCHES", "QueueReport", "compression_queue", "plan", "queue_problems", "run_queue"]

#: What runs on a branch of each type and commits its outcome there.
BRANCHES: dict[str, Callable[[SideWork, QueueStep], None]] = {
    REFLECTION: reflection_branch,
    KNOWLEDGE_EVAL: knowledge_eval_branch,
    COMPRESSION: compression_branch,
}


@dataclass
class QueueReport:
    """What a queue did: the steps merged into main, and whether it was abandoned."""

    reason: str | None = None
    merged: list[Merged] = field(default_factory=list)
    abandoned: bool = False

    @property
    def summary(self) -> Message | None:
        """The summary a compression step merged, if one did."""
        return next((m for merged in self.merged if merged.step.type == COMPRESSION
                     for m in merged.messages), None)


def compression_queue(extraction: bool, *, knowledge: bool = True) -> list[str]:
    """Level 2's queue: reflection if knowledge extraction is on, knowledge evaluation
    (skipped when nothing is pending once its turn comes), compression; without
    `knowledge` (its folder cannot be used), compression alone."""
    if not knowledge:
        return [COMPRESSION]
    return [*([REFLECTION] if extraction else []), KNOWLEDGE_EVAL, COMPRESSION]


def plan(trace: Trace, reason: str, types: Sequence[str],
         items: Collection[str] | None = None) -> SideQueue | None:
    """Plan a queue of branches of `types` and commit it (kind `queue`); None if no
    step has anything to do (a `knowledge_eval` with no pending item). `items`
    limits a `knowledge_eval` to those knowledge items. The caller holds the lock
    and has finished any earlier queue."""
    assert trace.meta.side_queue is None, "finish the unfinished queue first"
    steps = [QueueStep(type=t, items=sorted(items) if items is not None and t == KNOWLEDGE_EVAL
                       else None) for t in types]
    queue = SideQueue(reason=reason, head=trace.meta.head, steps=steps)
    _advance(trace, queue)
    if queue.current() is None:
        return None
    trace.meta.side_queue = queue
    trace.commit_step(StepKind.QUEUE, [], summary=f"{reason}: " + ", ".join(
        f"{s.type}{' skipped' if s.state == 'skipped' else ''}" for s in steps))
    return queue


def run_queue(work: SideWork) -> QueueReport:
    """Run the trace's queue (`trace.meta.side_queue`) to its end, from the step that
    is running: a new queue, or one a crash cut short. The caller holds the lock."""
    trace = work.trace
    report = QueueReport(trace.meta.side_queue.reason if trace.meta.side_queue else None)
    while (queue := trace.meta.side_queue) is not None:
        step = queue.current()
        if step is None:  # nothing left (an edited trace.json): close it
            trace.meta.side_queue = None
            trace.commit_step(StepKind.QUEUE, [], summary=f"{queue.reason}: finished")
            break
        _check_step(trace, step)
        if step.state == "waiting":  # an edited queue: start it (the merge commits that)
            _advance(trace, queue)
            continue
        if trace.meta.head != queue.head:
            _abandon(work, queue)
            report.abandoned = True
            break
        if not has_outcome(trace, step):
            BRANCHES[step.type](work, step)
        report.merged.append(_merge(work, queue, step))
    return report


def _merge(work: SideWork, queue: SideQueue, step: QueueStep) -> Merged:
    """Copy the step's outcome onto main, marking it done and the next step running,
    in one commit whose second parent is the branch's head."""
    trace = work.trace
    merged = take_outcome(trace, step)
    conversation = [m for m in branch_files(trace, step) if m.branch_id == step.branch]
    calls = sum(1 for m in conversation if m.role == "assistant")
    trace.meta.context.side_calls[step.type] = side_calls(trace, step.type) + calls
    if conversation:
        trace.meta.next_sequence = max(trace.meta.next_sequence, conversation[-1].sequence + 1)
    trace.count_usage(conversation)
    head = branch_head(trace, step)
    assert head is not None
    step.state, step.head = "done", head.decode()
    _advance(trace, queue)
    trace.meta.side_queue = queue if queue.current() is not None else None
    kind = StepKind.SUMMARY if step.type == COMPRESSION else StepKind.OUTCOME
    summary = (f"from {step.branch}" if kind is StepKind.SUMMARY
               else f"{step.branch}: {len(merged.files)} knowledge item(s)")
    merged.kind = kind
    trace.commit_step(kind, merged.messages, extra_paths=merged.files, extra_parents=[head],
                      summary=summary, move_head=kind is StepKind.SUMMARY)
    work.emit("merged", trace=trace.id, branch=step.branch, type=step.type,
              files=merged.files, sequence=trace.meta.head)
    return merged


def queue_problems(trace: Trace) -> list[AgentfsError]:
    """What is wrong with each step of the trace's queue as `trace.json` holds it
    (`agentfs doctor`): the errors a run would stop at."""
    queue = trace.meta.side_queue
    found = []
    for step in queue.steps if queue is not None else []:
        try:
            _check_step(trace, step)
        except AgentfsError as exc:
            found.append(exc)
    return found


def _check_step(trace: Trace, step: QueueStep) -> None:
    """A hand-edited queue must name a known branch type and one of this trace's branches."""
    problem = None
    if step.type not in BRANCHES:
        problem = f"unknown side-branch type {step.type!r} (known: {', '.join(BRANCHES)})"
    elif step.state == "running" and (step.branch is None or step.first is None):
        problem = "a running step without its branch and first sequence"
    elif step.branch is not None and branch_kind(trace.id, step.branch) != step.type:
        problem = (f"branch {step.branch!r} is not named "
                   f"{branch_prefix(trace.id)}{step.type}-<base commit>")
    if problem:
        raise AgentfsError(
            f"{trace.meta_path}: side_queue: {problem}",
            hint="restore trace.json with git, or delete its side_queue to drop the queue",
        )


def _advance(trace: Trace, queue: SideQueue) -> None:
    """Start the next step: `running` with a new branch name (the branch is made when
    it runs), or `skipped` for a `knowledge_eval` with nothing pending."""
    for step in queue.steps:
        if step.state in ("done", "skipped"):
            continue
        if step.state == "running":
            return
        if step.type == KNOWLEDGE_EVAL and not pending_items(trace, step.items):
            step.state = "skipped"
            continue
        base = _main_commit(trace)
        step.state, step.first, step.base = "running", trace.next_sequence(), base
        step.branch = branch_name(trace.repo, trace.id, step.type, base)
        return


def _main_commit(trace: Trace) -> str:
    """Main's head commit, which the branch of a step started now descends from: the
    branch starts at the commit recording the step, or a later one."""
    commit = trace.repo.head()
    assert commit is not None, "a queue runs on a committed trace"
    return commit.decode()


def _abandon(work: SideWork, queue: SideQueue) -> None:
    """The main path moved under an unfinished queue: drop it; its branch stays unmerged."""
    trace = work.trace
    step = queue.current()
    trace.meta.side_queue = None
    where = f" ({step.branch} left unmerged)" if step is not None and step.branch else ""
    trace.commit_step(StepKind.QUEUE, [], summary=f"{queue.reason} abandoned: head moved from "
                      f"#{queue.head} to #{trace.meta.head}{where}")
    work.emit("queue_abandoned", trace=trace.id, branch=step.branch if step else None)
