"""A trace run on both sides of a sync: here and on the remote since they last met.

Each side answered and went on, so each has new message files with the next
numbers. Merged path by path they would sit side by side: two messages with one
number, a trace no run can read. `agentfs sync` keeps the remote's run in the
trace and this clone's in a fork of it (`agentfs/store/fork.py:fork_trace`),
made in the clone before the merge, which then takes the remote's version of
the trace's files (its inbox aside: files waiting there are kept from both).
"""

from __future__ import annotations

from collections.abc import Callable

from agentfs.store.fork import default_fork_id, fork_trace
from agentfs.store.git.carry import Entry, changed_paths
from agentfs.store.git.remote import git
from agentfs.store.git.repo import GitRepo
from agentfs.store.message_dir import parse_message_relpath
from agentfs.store.trace import Trace
from agentfs.store.tracelock import TraceLock
from agentfs.store.workspace import INBOX_DIR, MESSAGES_DIR, TRACES_DIR, Workspace

__all__ = ["diverged", "fork_aside", "remote_wins"]


def diverged(repo: GitRepo, base: str | None, ours: str, theirs: str) -> list[str]:
    """The traces that got new message files both at `ours` and at `theirs` since
    `base`, other ones on each side (the same file added on both, as a fold of one
    worker's steps gives, is no run of its own)."""
    base_tree = repo.commit(base.encode()).tree if base is not None else None
    mine, other = (_new_messages(repo, base_tree, tip) for tip in (ours, theirs))
    return sorted(t for t in mine.keys() & other.keys()
                  if mine[t].items() - other[t].items() and other[t].items() - mine[t].items())


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


def fork_aside(workspace: Workspace, repo: GitRepo, trace_id: str, base: str | None,
               theirs: str) -> str:
    """Fork this clone's trace `trace_id` at its head into a new trace, committed in
    the clone; returns the fork's id, one taken neither here nor at `theirs`. A fork
    an earlier sync made of the same head and did not push (it is not at `base`) is
    used again. The caller holds every trace's lock and committed their edits."""
    source = Trace(workspace, repo, trace_id)
    head = source.meta.head
    taken = set(workspace.trace_ids())
    for other in sorted(taken):
        origin = Trace(workspace, repo, other).meta.forked_from
        if (origin is not None and (origin.trace, origin.sequence) == (trace_id, head)
                and (base is None or repo.tree_lookup(base.encode(), f"{TRACES_DIR}/{other}")
                     is None)):
            return other
    listed = git(workspace.root, "ls-tree", "--name-only", "-z", theirs, f"{TRACES_DIR}/").stdout
    taken |= {p.removeprefix(f"{TRACES_DIR}/") for p in listed.decode().split("\0") if p}
    new_id = default_fork_id(trace_id, taken)
    assert head is not None  # it got new messages
    with TraceLock(workspace.lock_dir, new_id):
        fork_trace(source, new_id, head)
    return new_id


def remote_wins(forked: dict[str, str]) -> Callable[[str], bool]:
    """For the merge: the paths of the traces in `forked` whose remote version is
    kept, whatever this clone did to them (its run is in the fork): all but their
    inbox."""
    folders = tuple(f"{TRACES_DIR}/{t}/" for t in forked)
    inboxes = tuple(f"{TRACES_DIR}/{t}/{INBOX_DIR}/" for t in forked)
    return lambda path: path.startswith(folders) and not path.startswith(inboxes)
