"""Which object each new object is a version of, and which version it is stored against.

A trace's `messages/` tree gains an entry per step, so every step writes a
new version of it; stored whole, the versions add up quadratically (a
3,400-message trace left 219 MB of loose objects, 4.4 MB after `git gc`).
Stored as a delta against an earlier version of the same path, each costs
about what the step added.

`predecessors` finds, for the new trees and blobs of some commits, the
object at the same path in each commit's first parent, walking only into
the directories that changed. `skip_delta_bases` then picks each object's
base among its earlier versions the way Subversion's skip-deltas do: the
version k steps into a chain is stored against the one `k & -k` steps
back, so reading any version applies at most log2(k) deltas, and each
delta holds only what changed since its base.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

from dulwich.objects import Commit

from agentfs.store.git.packfile import common_prefix
from agentfs.store.git.trees import TREE

COMMIT = Commit.type_num

_DIR_MODE = b"40000"
_GITLINK_MODE = b"160000"
_MODES = (b"100644 ", b"100755 ", b"120000 ", b"40000 ", b"160000 ")

#: (type number, content) of an object, by hex id; KeyError if it is missing.
ReadRaw = Callable[[bytes], tuple[int, bytes]]


def commit_tree_and_parents(data: bytes) -> tuple[bytes, list[bytes]]:
    """The tree and parent ids (hex) from a commit's raw content."""
    tree = b""
    parents = []
    for line in data.split(b"\n", 64):
        if not line:
            break
        if line.startswith(b"tree "):
            tree = line[5:]
        elif line.startswith(b"parent "):
            parents.append(line[7:])
    return tree, parents


def tree_entries(data: bytes, start: int = 0) -> dict[bytes, tuple[bytes, bytes]]:
    """A tree's entries from offset `start` (an entry's start): name → (mode, binary id)."""
    entries = {}
    at, end = start, len(data)
    while at < end:
        space = data.index(b" ", at)
        nul = data.index(b"\0", space)
        entries[data[space + 1 : nul]] = (data[at:space], data[nul + 1 : nul + 21])
        at = nul + 21
    return entries


def changed_entries(new: bytes, old: bytes) -> Iterator[tuple[bytes, bytes, bytes, bytes]]:
    """(new mode, new binary id, old mode, old binary id) of the names both trees
    hold with different ids.

    Entries are sorted, so only those from the first differing byte on are
    parsed: for a directory that gained an entry at its end (a trace's
    `messages/`), that is the new entry alone.
    """
    start = _entry_start(new, common_prefix(new, old))
    try:
        before = tree_entries(old, start)
        after = tree_entries(new, start)
    except ValueError:  # not an entry's start after all: parse the whole trees
        before, after = tree_entries(old), tree_entries(new)
    for name, (mode, sha) in after.items():
        was = before.get(name)
        if was is not None and was[1] != sha:
            yield mode, sha, was[0], was[1]


def _entry_start(data: bytes, limit: int) -> int:
    """The start of an entry of tree `data` at or before offset `limit`.

    An entry is `<mode> <name>\0<20-byte id>`, and ids can hold any byte, so
    this looks back for a NUL that is followed, 20 bytes later, by a mode. An
    id that happens to look like that (before a name holding "100644 ") makes
    `changed_entries` miss a pair or pair the wrong objects, even a file with
    a folder: a hint for a delta only, which `packing.py` makes only between
    objects of one type.
    """
    at = limit + 1
    while True:
        nul = data.rfind(b"\0", 0, at)
        if nul < 0:
            return 0
        start = nul + 21
        if start <= limit and data.startswith(_MODES, start):
            return start
        at = nul


def predecessors(batch: Mapping[bytes, tuple[int, bytes]], read: ReadRaw) -> dict[bytes, bytes]:
    """For objects in `batch` (hex id → (type, content)), the object at the same
    path in the first parent of a commit of the batch that introduced them.

    Objects of the batch that no commit of the batch reaches by a changed path
    (a blob new at its path, a tree of a commit that lost its race) get none.
    Parents and their trees may be outside the batch: they are read with `read`;
    one that cannot be read is skipped.
    """
    found: dict[bytes, bytes] = {}
    for type_num, data in batch.values():
        if type_num != COMMIT:
            continue
        tree, parents = commit_tree_and_parents(data)
        if not parents:
            continue
        parent = _load(batch, read, parents[0])
        if parent is None or parent[0] != COMMIT:
            continue
        _walk(batch, read, found, tree, commit_tree_and_parents(parent[1])[0])
    return found


def _load(batch: Mapping[bytes, tuple[int, bytes]], read: ReadRaw,
          sha: bytes) -> tuple[int, bytes] | None:
    """An object of the batch, else read; None if it cannot be read."""
    got = batch.get(sha)
    if got is not None:
        return got
    try:
        return read(sha)
    except KeyError:
        return None


def _walk(batch: Mapping[bytes, tuple[int, bytes]], read: ReadRaw, found: dict[bytes, bytes],
          new: bytes, old: bytes) -> None:
    """Into `found`: tree `new` of the batch continues `old`, and so do the entries
    that changed between them, folder by folder."""
    pending = [(new, old)]
    while pending:
        tree, previous = pending.pop()
        if tree == previous or tree in found or tree not in batch:
            continue
        found[tree] = previous
        tree_data = batch[tree][1]
        got = _load(batch, read, previous)
        if got is None or got[0] != TREE or tree_data == got[1]:
            continue
        for mode, sha, old_mode, old_sha in changed_entries(tree_data, got[1]):
            if _GITLINK_MODE in (mode, old_mode):
                continue  # a submodule
            if (mode == _DIR_MODE) != (old_mode == _DIR_MODE):
                continue  # a file that became a folder, or the reverse
            hex_sha, hex_old = sha.hex().encode(), old_sha.hex().encode()
            if mode == _DIR_MODE:
                pending.append((hex_sha, hex_old))
            elif hex_sha in batch and hex_sha not in found:
                found[hex_sha] = hex_old


def skip_delta_bases(
    previous: Mapping[bytes, bytes], members: Iterable[bytes]
) -> tuple[dict[bytes, bytes], dict[bytes, int]]:
    """Each member's delta base among its earlier versions that are members too,
    and each member's position in its chain.

    `previous` maps an object to the version it continues. Following it from a
    member through members only gives the member's chain back to its first
    member version, at position 0, which gets no base. The member at position k
    is based on the version `k & -k` links back, so a base always has a lower
    position than the objects based on it. A loop in `previous` (a path whose
    content went back to an older one) is cut where it closes.
    """
    inside = set(members)
    parent = {
        sha: back for sha in inside
        if (back := previous.get(sha)) is not None and back in inside and back != sha
    }
    position: dict[bytes, int] = {}
    for start in inside:
        path: list[bytes] = []
        on_path: set[bytes] = set()
        sha = start
        while sha not in position:
            path.append(sha)
            on_path.add(sha)
            back = parent.get(sha)
            if back is None:
                break
            if back in on_path:
                del parent[sha]  # the loop closes here
                break
            sha = back
        for sha in reversed(path):
            back = parent.get(sha)
            position[sha] = 0 if back is None else position[back] + 1
    bases = {}
    for sha, k in position.items():
        base = sha
        for _ in range(k & -k):
            base = parent[base]
        if base != sha:
            bases[sha] = base
    return bases, position
