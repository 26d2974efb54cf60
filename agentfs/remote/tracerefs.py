"""Trace refs: each trace's steps not yet on `main`, and the folds that move them there.

A worker pushes a trace's steps to `refs/agentfs/traces/<trace-id>`, a line of
commits on top of a commit of `main`, so steps of different traces never race
for one ref. A fold carries the steps of some trace refs onto `main`, path by
path (`agentfs/store/git/carry.py:carry`), and deletes those refs in the same
atomic push: a step is on `main` or on its trace ref, never on both. See
docs/remote.md, "Folds".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from agentfs.errors import MergeConflict
from agentfs.store.git.carry import BothKept, Resolver, carry
from agentfs.store.git.remote import GitRemote, RefUpdate, git, git_paths, is_ancestor
from agentfs.store.git.repo import GitRepo

__all__ = ["MAIN_REF", "SEEN_TRACES", "TRACES", "Folded", "backlog", "fold", "removed",
           "seen_traces", "trace_ref", "unfolded"]

MAIN_REF = "refs/heads/main"
TRACES = "refs/agentfs/traces/"
#: What a worker's last fetch saw of the trace refs, kept in its clone.
SEEN_TRACES = "refs/agentfs/seen/traces/"


def trace_ref(trace_id: str) -> str:
    return TRACES + trace_id


def seen_traces(remote: GitRemote, prefix: str = SEEN_TRACES) -> dict[str, str]:
    """Trace id → the value of its trace ref as the last fetch saw it under `prefix`."""
    return {ref[len(prefix):]: sha for ref, (sha, _) in remote.local_refs(prefix).items()}


def backlog(refs: dict[str, str], claimed: Iterable[str]) -> dict[str, str]:
    """The trace refs (trace id → value) no claim holds: steps whose job ended without
    folding them (its release lost the race for `main`), or a killed worker's once its
    claim was reaped. Any fold may take them."""
    taken = set(claimed)
    return {t: sha for t, sha in refs.items() if t not in taken}


def unfolded(repo: GitRepo, main: str, tips: dict[str, str]) -> dict[str, list[bytes]]:
    """The steps of each trace ref (trace id → its tip) that `main` does not hold: its
    first-parent line down to the commit of `main` it started from, oldest first.

    One `git rev-list` lists the lines for all of them. Its walk ends early when commit
    times are out of order (a step re-made on main keeps its times; clocks differ), and
    then lists commits `main` holds too, off its first-parent line (the remote's main a
    sync merged, on the merge's second parent): carried again, such a step meets the
    newer ones of its trace and the ref waits forever. So each line's oldest commit is
    checked with `git merge-base --is-ancestor`, and a line that starts inside `main`
    is cut where it leaves it (`_cut`)."""
    if not tips:
        return {}
    listed = git(repo.root, "rev-list", "--first-parent", "--parents",
                 *sorted(set(tips.values())), f"^{main}").stdout
    first_parent: dict[str, str] = {}
    for entry in listed.decode().splitlines():
        sha, *parents = entry.split()
        first_parent[sha] = parents[0] if parents else ""
    lines: dict[str, list[bytes]] = {}  # by tip: refs of two traces may share one
    for tip in set(tips.values()):
        steps, commit = [], tip
        while commit in first_parent:
            steps.append(commit.encode())
            commit = first_parent[commit]
        lines[tip] = _cut(repo, main, steps[::-1])
    return {trace_id: lines[tip] for trace_id, tip in tips.items()}


def _cut(repo: GitRepo, main: str, line: list[bytes]) -> list[bytes]:
    """`line` (oldest first) without the commits `main` holds. Those are its oldest
    ones (a commit's first parent is in every history the commit is in), so one check
    settles the usual line, none of whose commits main holds, and a search the rest."""
    if not line or not _in(repo, line[0], main):
        return line
    lo, hi = 1, len(line)  # line[lo - 1] is in main; the first commit not in it is in [lo, hi]
    while lo < hi:
        mid = (lo + hi) // 2
        if _in(repo, line[mid], main):
            lo = mid + 1
        else:
            hi = mid
    return line[lo:]


def _in(repo: GitRepo, commit: bytes, main: str) -> bool:
    """Whether `main` holds `commit`; a failure of git is raised, never taken for a no
    (the steps would be carried again)."""
    return is_ancestor(repo.root, commit.decode(), main)


@dataclass
class Folded:
    """`main` with some trace refs' steps carried on top (in the clone only)."""

    main: str  # the remote's main the fold started from
    tip: str  # the result
    taken: dict[str, str] = field(default_factory=dict)  # trace id → ref value folded
    #: trace id → why it was left out (its paths changed on main too)
    left: dict[str, MergeConflict] = field(default_factory=dict)
    #: trace id → how its paths changed on main too were settled (with `resolve`)
    kept: dict[str, BothKept] = field(default_factory=dict)
    #: trace id → the tip once its steps were carried, for those in `kept`
    carried_to: dict[str, str] = field(default_factory=dict)

    def updates(self) -> list[RefUpdate]:
        """The push that makes this fold the remote's: main moved, the refs deleted."""
        moves = [RefUpdate(MAIN_REF, self.tip, self.main)] if self.tip != self.main else []
        return moves + [RefUpdate(trace_ref(t), None, sha) for t, sha in sorted(self.taken.items())]


def fold(repo: GitRepo, main: str, refs: dict[str, str], *,
         resolve: Resolver | None = None) -> Folded:
    """Carry the unfolded steps of `refs` (trace id → ref value) onto `main`, one trace
    after another; a step `main` already holds is dropped. A trace whose steps
    meet a path changed on `main` too is left out (`Folded.left`), never half-folded:
    a worker has no one to ask which version to keep, so its steps wait on the ref
    for `agentfs sync`, which passes `resolve` and has them carried all the same, in
    line, the paths changed both ways settled as `agentfs/store/git/carry.py:BothKept`
    says (`Folded.kept`)."""
    result = Folded(main, main)
    steps = unfolded(repo, main, refs)
    for trace_id, value in sorted(refs.items()):
        keep = BothKept(value.encode(), resolve) if resolve is not None else None
        try:
            tip = carry(repo, steps[trace_id], result.tip.encode(), skip_empty=True, keep=keep)
        except MergeConflict as exc:  # without `resolve` only
            result.left[trace_id] = exc
            continue
        if keep is not None and (keep.resolved or keep.kept_aside):
            result.kept[trace_id] = keep
            result.carried_to[trace_id] = tip.decode()
        result.tip = tip.decode()
        result.taken[trace_id] = value
    return result


def removed(root: Path, main: str, tip: str, folder: str) -> list[str]:
    """The files under `folder` that the steps on a trace ref (at `tip`) deleted since
    they left `main`, in the clone at `root`: for the workspace `inbox/`, the file its
    job made the trace from."""
    return git_paths(root, "diff", "--name-only", "-z", "--no-renames", "--diff-filter=D",
                     f"{main}...{tip}", "--", f"{folder}/")
