"""A trace as a tree, for viewers (`agentfs show --json`, `agentfs serve`).

Every message file of the trace hangs below its parent. The main path is one
line through that tree; a compression summary hangs below the first user
message beside the originals it replaced; a rewind leaves the messages after
it on a fork off the path. Side branches (reflection, knowledge evaluation,
compression) are read from Git and placed beside the message they continued.
Records are plain JSON-ready dicts; nothing here writes.
"""

from __future__ import annotations

import difflib
import itertools
from typing import Any

from agentfs.core.goals import GoalTree
from agentfs.core.records import message_record
from agentfs.core.usage import trace_totals
from agentfs.errors import AgentfsError
from agentfs.prices import NO_PRICES, PriceTable
from agentfs.store.branches import SideBranch, side_branches
from agentfs.store.history import parent_of, walk_back
from agentfs.store.messages import Message, Synthetic, parse_message
from agentfs.store.steplog import file_versions
from agentfs.store.trace import Trace, TraceView
from agentfs.store.workspace import GOALS_FILE

__all__ = ["folded_records", "trace_tree", "versions_record"]


def trace_tree(trace: Trace, prices: PriceTable = NO_PRICES,
               view: TraceView | None = None) -> dict[str, Any]:
    """Every message of the trace with its place in the tree, the side branches, and
    the goal tree; with `view` (a slice of the main path, `agentfs/store/trace.py:Trace.view`),
    only its messages and the side branches that continue one of them, and `older`
    (the `before` of the page before it, None at the first message).

    Each message record (`agentfs/core/records.py:message_record`) adds `parent` (its parent in the tree,
    also for a hand-written file without `parent_sequence`), `source_branch` (for a
    summary) and `replaced_by` (for a message off the path because a compression
    summary replaced it: that summary's sequence). `path` lists the main path's
    sequences in order. `usage` is the whole trace's (`agentfs/core/usage.py:Totals`).
    """
    shown = view or trace.view()
    messages, path = shown.messages, shown.path
    on_path = {m.sequence for m in path}
    branches = side_branches(trace.repo, trace.id)
    replaced = _replaced(trace, messages, on_path, branches)
    ordered = list(messages)
    records = []
    for message in messages.values():
        record = message_record(message, message.sequence in on_path, prices)
        record["parent"] = parent_of(message, ordered) if view is None else trace.parent(message)
        record["source_branch"] = message.source_branch
        record["replaced_by"] = replaced.get(message.sequence)
        records.append(record)
    if view is not None:
        branches = [b for b in branches if b.from_sequence in messages]
    goals = GoalTree.load(trace.dir / GOALS_FILE)
    paged = ({"older": view.older, "folds": [f.record() for f in view.folds]}
             if view is not None else {})
    return {
        **paged,
        "trace": trace.id,
        "head": trace.meta.head,
        "model": trace.meta.model,
        "preset": trace.meta.preset,
        "forked_from": (trace.meta.forked_from.model_dump() if trace.meta.forked_from
                        else None),
        "path": [m.sequence for m in path],
        "usage": trace_totals(trace.meta, prices).record(),
        "messages": records,
        "branches": [_branch_record(b, messages, prices) for b in branches],
        "goals": {**goals.model_dump(mode="json"), "text": goals.to_prompt(include_summary=True)},
    }


def folded_records(trace: Trace, messages: list[Message],
                   prices: PriceTable = NO_PRICES) -> list[dict[str, Any]]:
    """The records of messages a page folded (`agentfs/store/trace.py:Fold`), read
    on demand: as `trace_tree`'s, off the path, with `replaced_by` None (the fold they
    were read for tells what they are; finding the summary's originals among them
    would read all of them)."""
    return [{**message_record(m, False, prices), "parent": trace.parent(m),
             "source_branch": m.source_branch, "replaced_by": None} for m in messages]


def _replaced(trace: Trace, messages: dict[int, Message], on_path: set[int],
              branches: list[SideBranch]) -> dict[int, int]:
    """Off-path message → the summary that replaced it: the messages of the path the
    compression summarized, after the ones the summary keeps (system, first user).
    Paths are walked back only as far as those messages (a message a page does not
    hold is read by itself)."""
    starts = {b.name: b.from_sequence for b in branches}

    def get(sequence: int) -> Message | None:
        found = messages.get(sequence)
        return found if found is not None else trace.message_dir.one(sequence)

    replaced: dict[int, int] = {}
    for summary in messages.values():
        if summary.synthetic != Synthetic.SUMMARY or summary.source_branch not in starts \
                or starts[summary.source_branch] not in messages:
            continue  # no originals here (a page folded them, or holds the summary alone)
        try:
            kept, _ = walk_back(get, trace.parent, summary.parent_sequence)
            before, _ = walk_back(get, trace.parent, starts[summary.source_branch],
                                  until={m.sequence for m in kept})
        except AgentfsError:
            continue  # edited since: the tree still shows every message, unmarked
        for message in before:
            if message.sequence not in on_path:
                replaced.setdefault(message.sequence, summary.sequence)
    return replaced


def _branch_record(branch: SideBranch, messages: dict[int, Message],
                   prices: PriceTable) -> dict[str, Any]:
    outcome = next((m.sequence for m in messages.values() if m.source_branch == branch.name),
                   None)
    return {
        "name": branch.name,
        "type": branch.type,
        "head": branch.head,
        "from_sequence": branch.from_sequence,
        "summary": outcome,
        "messages": [message_record(m, False, prices) for m in branch.messages],
    }


def versions_record(trace: Trace, message: Message) -> dict[str, Any]:
    """The texts message `message` had in the trace's commits, newest first (each
    `edit` that changed its file, then its text before them), and for each but the
    oldest, a unified diff from the one before it."""
    path = trace.message_path(message)
    rel = trace.rel(path)
    versions = []
    for version in file_versions(trace.repo, trace.id, rel, message.sequence):
        try:
            text = parse_message(path, version.data).text
        except AgentfsError:
            text = version.data.decode(errors="replace")  # an unreadable version: as is
        versions.append({"commit": version.commit, "kind": version.kind,
                         "summary": version.summary, "text": text})
    for newer, older in itertools.pairwise(versions):
        newer["diff"] = "".join(difflib.unified_diff(
            (older["text"] + "\n").splitlines(keepends=True),
            (newer["text"] + "\n").splitlines(keepends=True),
            f"#{message.sequence} before ({older['commit'][:8]})",
            f"#{message.sequence} after ({newer['commit'][:8]})"))
    return {"trace": trace.id, "sequence": message.sequence, "file": rel,
            "edited": len(versions) > 1, "versions": versions}
