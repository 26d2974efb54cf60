"""Building a commit's tree from its parent's by changing a few paths.

A trace keeps every message in one directory, so its tree object grows with
the trace (about 47 bytes per message). dulwich parses a tree into a dict
and sorts it again to serialize it, which at 10,000 messages cost tens of
milliseconds per step. Here a tree stays as its raw entries, sorted the way
Git sorts them; a change splices the changed entries in by binary search,
and the new tree is the join of the pieces. Trees are named by their
content, so the parsed form of recently used ones is kept in memory without
any risk of it going stale.
"""

from __future__ import annotations

import bisect
import stat
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

#: Parsed trees kept in memory (by id); a long trace's directory is one of them.
CACHE_SIZE = 256


class RawObjects(Protocol):
    def read_raw(self, sha: bytes) -> tuple[int, bytes]: ...

    def add_raw(self, type_num: int, data: bytes) -> bytes: ...


TREE = 2


@dataclass
class RawTree:
    """A tree's entries as raw bytes, sorted by Git's order (directories as `name/`)."""

    keys: list[bytes] = field(default_factory=list)
    raws: list[bytes] = field(default_factory=list)

    @classmethod
    def parse(cls, data: bytes) -> RawTree:
        tree = cls()
        offset, end = 0, len(data)
        while offset < end:
            nul = data.index(b"\0", offset)
            mode, name = data[offset:nul].split(b" ", 1)
            tree.keys.append(name + b"/" if mode == b"40000" else name)
            tree.raws.append(data[offset : nul + 21])
            offset = nul + 21
        return tree

    def copy(self) -> RawTree:
        return RawTree(list(self.keys), list(self.raws))

    def get(self, name: bytes) -> tuple[int, bytes] | None:
        """(mode, sha) of entry `name`, or None."""
        at = self._find(name)
        if at is None:
            return None
        raw = self.raws[at]
        mode, _ = raw[:-21].split(b" ", 1)
        return int(mode, 8), raw[-20:]

    def set(self, name: bytes, mode: int, sha: bytes) -> None:
        self.remove(name)
        key = name + b"/" if stat.S_ISDIR(mode) else name
        at = bisect.bisect_left(self.keys, key)
        self.keys.insert(at, key)
        self.raws.insert(at, b"%o %s\0" % (mode, name) + sha)

    def remove(self, name: bytes) -> None:
        at = self._find(name)
        if at is not None:
            del self.keys[at], self.raws[at]

    def _find(self, name: bytes) -> int | None:
        for key in (name, name + b"/"):
            at = bisect.bisect_left(self.keys, key)
            if at < len(self.keys) and self.keys[at] == key:
                return at
        return None

    def encode(self) -> bytes:
        return b"".join(self.raws)


_cache: OrderedDict[bytes, RawTree] = OrderedDict()
_cache_lock = threading.Lock()  # the watcher commits from several threads


def load_tree(objects: RawObjects, sha: bytes) -> RawTree:
    """The tree `sha` (hex id), parsed or from the cache. Callers must not change it."""
    with _cache_lock:
        cached = _cache.get(sha)
        if cached is not None:
            _cache.move_to_end(sha)
            return cached
    type_num, data = objects.read_raw(sha)
    if type_num != TREE:
        raise ValueError(f"object {sha.decode()} is not a tree")
    tree = RawTree.parse(data)
    _remember(sha, tree)
    return tree


def cached_tree(sha: bytes) -> bytes | None:
    """The content of tree `sha` (hex id) if it is parsed in memory, else None."""
    with _cache_lock:
        cached = _cache.get(sha)
    return None if cached is None else cached.encode()


def _remember(sha: bytes, tree: RawTree) -> None:
    with _cache_lock:
        _cache[sha] = tree
        _cache.move_to_end(sha)
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)


def change_tree(
    objects: RawObjects,
    base: bytes | None,
    changes: Sequence[tuple[bytes, int, bytes | None]],
) -> bytes | None:
    """Write the tree `base` (None: empty) with `changes` applied; returns its id.

    Each change is (slash-separated path, mode, binary sha or None to delete).
    A directory left empty disappears, as in Git; None when the whole tree is
    empty.
    """
    tree = load_tree(objects, base).copy() if base is not None else RawTree()
    nested: dict[bytes, list[tuple[bytes, int, bytes | None]]] = {}
    for path, mode, sha in changes:
        head, slash, rest = path.partition(b"/")
        if slash:
            nested.setdefault(head, []).append((rest, mode, sha))
        elif sha is None:
            tree.remove(head)
        else:
            tree.set(head, mode, sha)
    for name, subchanges in nested.items():
        current = tree.get(name)
        sub_base = current[1].hex().encode() if current and stat.S_ISDIR(current[0]) else None
        if sub_base is None and all(sha is None for _, _, sha in subchanges):
            continue  # deletions below a file or nothing: there is nothing to delete
        sub = change_tree(objects, sub_base, subchanges)
        if sub is None:
            tree.remove(name)
        else:
            tree.set(name, stat.S_IFDIR, bytes.fromhex(sub.decode()))
    if not tree.keys:
        return None
    sha = objects.add_raw(TREE, tree.encode())
    _remember(sha, tree)
    return sha
