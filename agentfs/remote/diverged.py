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
from pathlib import Path

from agentfs.errors import MergeConflict
from agentfs.store.git.carry import Entry, changed_paths
from agentfs.store.git.remote import git
from agentfs.store.git.repo import GitRepo
from agentfs.store.message_dir import parse_message_relpath
from agentfs.store.workspace import INBOX_DIR, MESSAGES_DIR, TRACES_DIR

__all__ = ["diverged", "numbered_twice", "refusal", "remote_wins"]


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


def refusal(found: dict[str, tuple[list[int], list[int]]]) -> MergeConflict:
    """The error that stops a sync before it merges traces run on both sides."""
    def span(sequences: list[int]) -> str:
        return (f"#{sequences[0]}" if len(sequences) == 1
                else f"#{sequences[0]} to #{sequences[-1]}")

    named = "; ".join(f"{t}: {span(here)} here, {span(there)} on the remote"
                      for t, (here, there) in found.items())
    first, (here, _) = next(iter(found.items()))
    which = f"trace {first}" if len(found) == 1 else f"traces {', '.join(found)}"
    return MergeConflict(
        f"{which} {'was' if len(found) == 1 else 'were'} run both here and on the remote "
        f"since this clone last synced ({named}); nothing was merged or pushed", [f"{TRACES_DIR}/{t}" for t in found],
        hint=f"to keep your run, fork it first (`agentfs fork {first} --at {here[-1]}`); then "
        f"`agentfs sync --theirs {first}` takes the remote's {first} (yours stays in the "
        "history)")


def remote_wins(traces: Collection[str]) -> Callable[[str], bool]:
    """For the merge: the paths of `traces` whose remote version is kept, whatever
    this clone did to them: all but their inbox."""
    folders = tuple(f"{TRACES_DIR}/{t}/" for t in traces)
    inboxes = tuple(f"{TRACES_DIR}/{t}/{INBOX_DIR}/" for t in traces)
    return lambda path: path.startswith(folders) and not path.startswith(inboxes)


def numbered_twice(root: Path, main: str, tip: str) -> dict[str, list[int]]:
    """The traces that `tip` changed since `main` and that hold two message files with
    one number (trace id → those numbers): what a push of `tip` must never bring.
    The last check before a sync pushes, whichever way the files met (a trace ref's
    steps carried onto newer steps of the same trace, or a merge)."""
    changed = git(root, "diff", "--name-only", "-z", main, tip, "--", f"{TRACES_DIR}/").stdout
    traces = {p.split("/")[1] for p in changed.decode(errors="replace").split("\0") if "/" in p}
    found = {}
    for trace_id in sorted(traces):
        listed = git(root, "ls-tree", "-r", "--name-only", "-z", tip,
                     f"{TRACES_DIR}/{trace_id}/{MESSAGES_DIR}/").stdout
        prefix = f"{TRACES_DIR}/{trace_id}/{MESSAGES_DIR}/"
        parsed = [parse_message_relpath(p.removeprefix(prefix))
                  for p in listed.decode(errors="replace").split("\0") if p]
        numbers = Counter(p[0] for p in parsed if p is not None)
        twice = sorted(n for n, count in numbers.items() if count > 1)
        if twice:
            found[trace_id] = twice
    return found
