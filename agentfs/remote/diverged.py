"""A trace run on both sides of a sync: here and on the remote since they last met.

Each side answered and went on, so each has new message files with the next
numbers. Merged path by path they would sit side by side: two messages with one
number, a trace no run can read. `agentfs sync` stops before it merges such a
trace, and the person chooses: fork their run to keep it (`agentfs fork`), then
`agentfs sync --theirs TRACE`, whose merge takes the remote's version of the
trace's files (its inbox aside: files waiting there are kept from both sides).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from agentfs.errors import MergeConflict
from agentfs.store.fork import default_fork_id
from agentfs.store.git.carry import Entry, changed_paths
from agentfs.store.git.remote import git_paths
from agentfs.store.git.repo import GitRepo
from agentfs.store.message_dir import parse_message_relpath
from agentfs.store.meta import parse_meta
from agentfs.store.workspace import INBOX_DIR, MESSAGES_DIR, TRACE_FILE, TRACES_DIR

__all__ = ["Crossed", "crossed", "diverged", "numbered_twice", "refusal", "remote_wins"]


def diverged(repo: GitRepo, base: str | None, ours: str,
             theirs: str) -> dict[str, tuple[list[int], list[int]]]:
    """The traces that got new message files both at `ours` and at `theirs` since
    `base`, other ones on each side (the same file added on both, as a fold of one
    worker's steps gives, is no run of its own): trace id → the sequences of the
    files added here, and there, that the other side lacks."""
    base_tree = repo.commit(base.encode()).tree if base is not None else None
    mine, other = (_new_messages(repo, base_tree, tip) for tip in (ours, theirs))
    found = {}
    for t in sorted(mine.keys() & other.keys()):
        here, there = mine[t].items() - other[t].items(), other[t].items() - mine[t].items()
        if here and there:
            found[t] = (_sequences(dict(here)), _sequences(dict(there)))
    return found


def _new_messages(repo: GitRepo, base_tree: bytes | None,
                  tip: str) -> dict[str, dict[str, Entry]]:
    """Trace id → the message files added at `tip` since `base_tree` (path → entry)."""
    found: dict[str, dict[str, Entry]] = {}
    for path, (old, new) in changed_paths(repo, base_tree, repo.commit(tip.encode()).tree).items():
        parts = path.split("/", 3)
        if (old is None and new is not None and len(parts) == 4 and parts[0] == TRACES_DIR
                and parts[2] == MESSAGES_DIR and parse_message_relpath(parts[3]) is not None):
            found.setdefault(parts[1], {})[path] = new
    return found


def _sequences(files: dict[str, Entry]) -> list[int]:
    parsed = (parse_message_relpath(path.split("/", 3)[3]) for path in files)
    return sorted({p[0] for p in parsed if p is not None})


@dataclass(frozen=True)
class Crossed:
    """A trace run on both sides: the numbers of the message files each side added
    that the other lacks, this clone's head, and an id free on both sides for a fork
    of this clone's run."""

    here: list[int]
    there: list[int]
    head: int | None
    fork_id: str


def crossed(repo: GitRepo, base: str | None, ours: str, theirs: str) -> dict[str, Crossed]:
    """`diverged`, with what the refusal names (trace id → `Crossed`)."""
    found = diverged(repo, base, ours, theirs)
    taken = _trace_ids(repo, ours) | _trace_ids(repo, theirs)
    result = {}
    for trace_id, (here, there) in found.items():
        data = repo.read_file(ours.encode(), f"{TRACES_DIR}/{trace_id}/{TRACE_FILE}")
        try:
            head = parse_meta(data).head if data is not None else None
        except ValueError:
            head = None
        fork_id = default_fork_id(trace_id, taken)
        taken.add(fork_id)
        result[trace_id] = Crossed(here, there, head, fork_id)
    return result


def _trace_ids(repo: GitRepo, commit: str) -> set[str]:
    listed = git_paths(repo.root, "ls-tree", "--name-only", "-z", commit, f"{TRACES_DIR}/")
    return {p.removeprefix(f"{TRACES_DIR}/") for p in listed}


def refusal(found: dict[str, Crossed]) -> MergeConflict:
    """The error that stops a sync before it merges traces run on both sides."""
    def span(sequences: list[int]) -> str:
        return (f"#{sequences[0]}" if len(sequences) == 1
                else f"#{sequences[0]} to #{sequences[-1]}")

    named = "; ".join(f"{t}: {span(c.here)} here, {span(c.there)} on the remote"
                      for t, c in found.items())
    which = f"trace {next(iter(found))}" if len(found) == 1 else f"traces {', '.join(found)}"
    forks = " and ".join(f"`agentfs fork {t} --at {c.head} {c.fork_id}`"
                         for t, c in found.items() if c.head is not None)
    theirs = " ".join(f"--theirs {t}" for t in found)
    return MergeConflict(
        f"{which} {'was' if len(found) == 1 else 'were'} run both here and on the remote "
        f"since this clone last synced ({named}); nothing was merged or pushed",
        [f"{TRACES_DIR}/{t}" for t in found],
        hint=(f"to keep your run, fork it first: {forks}. " if forks else "")
        + f"Then `agentfs sync {theirs}` takes the remote's version; yours stays in the "
        "history")


def remote_wins(traces: Collection[str]) -> Callable[[str, Entry | None], bool]:
    """For the merge: whether the remote's version of a path of `traces` is kept,
    whatever this clone did to it (given what this clone made of it, None: deleted).
    All of it but the files this clone added to their inbox: a file this clone's run
    took from the inbox stays there for the remote's run."""
    folders = tuple(f"{TRACES_DIR}/{t}/" for t in traces)
    inboxes = tuple(f"{TRACES_DIR}/{t}/{INBOX_DIR}/" for t in traces)
    return lambda path, mine: path.startswith(folders) and not (
        path.startswith(inboxes) and mine is not None)


def numbered_twice(root: Path, main: str, tip: str) -> dict[str, list[int]]:
    """The traces that `tip` changed since `main` and that hold two message files with
    one number that `main` does not (trace id → those numbers): what a push of `tip`
    must never bring. The last check before a sync pushes, whichever way the files
    met (a trace ref's steps carried onto newer steps of the same trace, or a merge)."""
    changed = git_paths(root, "diff", "--name-only", "-z", main, tip, "--", f"{TRACES_DIR}/")
    traces = {p.split("/")[1] for p in changed}
    found = {}
    for trace_id in sorted(traces):
        twice = sorted(_twice(root, tip, trace_id) - _twice(root, main, trace_id))
        if twice:
            found[trace_id] = twice
    return found


def _twice(root: Path, commit: str, trace_id: str) -> set[int]:
    """The numbers two message files of the trace have at `commit`."""
    prefix = f"{TRACES_DIR}/{trace_id}/{MESSAGES_DIR}/"
    parsed = [parse_message_relpath(p.removeprefix(prefix))
              for p in git_paths(root, "ls-tree", "-r", "--name-only", "-z", commit, prefix)]
    numbers = Counter(p[0] for p in parsed if p is not None)
    return {n for n, count in numbers.items() if count > 1}
