"""A trace's side branches: their names, and what they hold read back from Git.

A side branch is named `agentfs/<trace>/<type>-<base>`: `<base>` is the first
8 hex digits of the `main` commit its queue step started from
(`agentfs/store/meta.py:QueueStep`), so two clones never name different work
alike (`branch_name`). Branches an older agentfs made are numbered,
`<type>-<n>`; both are read, continued and merged alike.

A side branch starts at main's head and holds, besides main's files, the
messages written there only (a reflection, a knowledge evaluation, a
compression's request and answer). They are never in main's work tree, so
they are read from the branch's commit: the message files it has and main's
head has not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agentfs.errors import AgentfsError
from agentfs.store.filenames import parse_file_name
from agentfs.store.git.repo import GitRepo
from agentfs.store.message_dir import parse_message_relpath
from agentfs.store.messages import Message, parse_message
from agentfs.store.workspace import MESSAGES_DIR, TRACES_DIR

__all__ = [
    "SideBranch", "branch_kind", "branch_name", "branch_prefix", "queue_step_files",
    "side_branches",
]

#: Hex digits of the base commit in a branch's name: as `git log --oneline` shows.
BASE_DIGITS = 8

#: What follows `<type>-`: the base commit's digits, `-<n>` after them when this clone
#: had a branch of that name already; or, from an older agentfs, a number.
_SUFFIX = re.compile(rf"[0-9a-f]{{{BASE_DIGITS}}}(-[1-9][0-9]*)?|[0-9]+")


def branch_prefix(trace_id: str) -> str:
    """Where a trace's side branches are, under `refs/heads/`."""
    return f"agentfs/{trace_id}/"


def branch_name(repo: GitRepo, trace_id: str, kind: str, base: str) -> str:
    """The name for a new side branch of type `kind` whose queue step started from
    the main commit `base`: `agentfs/<trace>/<kind>-<first 8 hex digits of base>`.

    Every commit that starts a step is followed by one on `main` (the step's
    `queue` or merge commit), so one line of history starts a type once per base;
    clones that start one from the same base start it on the same history. Only
    a `main` moved back (a reset) can start it again here: `-2`, `-3`, ... then
    keep the older branch, a record of real work, apart."""
    name = f"{branch_prefix(trace_id)}{kind}-{base[:BASE_DIGITS]}"
    taken = set(repo.branches(name))
    again = 2
    candidate = name
    while candidate in taken:
        candidate, again = f"{name}-{again}", again + 1
    return candidate


def branch_kind(trace_id: str, name: str) -> str | None:
    """The branch type in a side branch's name, either style; None if `name` is not
    one of the trace's side branches."""
    prefix = branch_prefix(trace_id)
    if not name.startswith(prefix):
        return None
    kind, dash, suffix = name[len(prefix):].partition("-")
    return kind if kind and dash and "/" not in kind and _SUFFIX.fullmatch(suffix) else None


def queue_step_files(repo: GitRepo, head: bytes, messages_dir: str, first: int) -> list[str]:
    """The message files of a queue step's branch (`agentfs/store/meta.py:QueueStep`):
    those in `messages_dir` at the branch's commit `head` from sequence `first` on
    (its conversation, then its outcome's), by sequence."""
    found = []
    for path in repo.walk(head, messages_dir):
        parsed = parse_message_relpath(path[len(messages_dir) + 1:])
        if parsed is not None and parsed[0] >= first:
            found.append((parsed[0], path))
    return [path for _, path in sorted(found)]


@dataclass(frozen=True)
class SideBranch:
    """One side branch: its name, type, head commit and own messages, by sequence."""

    name: str
    type: str
    head: str
    messages: list[Message]

    @property
    def from_sequence(self) -> int | None:
        """The main-path message the branch continues (its first message's parent)."""
        return self.messages[0].parent_sequence if self.messages else None


def side_branches(repo: GitRepo, trace_id: str) -> list[SideBranch]:
    """The trace's side branches, oldest first (by their first message); files on a
    branch that cannot be read as messages are left out.

    Only the folders of `messages/` whose tree differs from main's are looked into (a
    branch adds a few messages to the newest one), so this costs the branches'
    messages, not the trace's length."""
    folder = f"{TRACES_DIR}/{trace_id}/{MESSAGES_DIR}"
    names = repo.branches(branch_prefix(trace_id))
    main = repo.head()
    main_folders = repo.entries(main, folder) if names else {}
    on_main: dict[str, dict[str, tuple[int, bytes]]] = {}  # folder → its entries on main
    found = []
    for name in names:
        head = repo.head(b"refs/heads/" + name.encode())
        if head is None:
            continue
        same = {f"{folder}/{entry}" for entry, value in repo.entries(head, folder).items()
                if main_folders.get(entry) == value}
        messages = []
        for path in repo.walk(head, folder, skip=same):
            where, _, file_name = path.rpartition("/")
            if where not in on_main:
                on_main[where] = repo.entries(main, where)
            if file_name in on_main[where] or parse_file_name(file_name) is None:
                continue
            data = repo.read_file(head, path)
            try:
                messages.append(parse_message(repo.root / path, data or b""))
            except AgentfsError:
                continue
        messages.sort(key=lambda m: m.sequence)
        kind = messages[0].branch_type if messages and messages[0].branch_type else (
            branch_kind(trace_id, name) or name.rsplit("/", 1)[-1].partition("-")[0])
        found.append(SideBranch(name, kind, head.decode(), messages))
    found.sort(key=lambda b: (b.messages[0].sequence if b.messages else 0, b.name))
    return found
