"""Moving commits onto another tip, path by path, in the object store only.

Traces are disjoint directories, so a worker's steps and the steps other
workers pushed meanwhile touch different paths. `carry` re-makes each of a
worker's commits on top of the remote's `main` by applying the paths that
commit changed, as a rebase would, but without a work tree, an index or a
merge machinery: a path is a conflict only when the other side changed that
very path too. `merge` is the same for `agentfs sync`: one three-way merge of
two tips, where a path changed both ways goes to a resolver first (agentfs'
own JSON files) and is otherwise kept both ways, one off the path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from dulwich.diff_tree import tree_changes
from dulwich.objects import Blob, Tree

from agentfs.errors import MergeConflict
from agentfs.store.git.conflicts import conflict_copy
from agentfs.store.git.repo import GitRepo
from agentfs.store.git.trees import change_tree

__all__ = ["BothKept", "MergeResult", "Resolver", "carry", "changed_paths", "merge",
           "new_commits"]

Entry = tuple[int, bytes]  # (mode, hex sha)
#: (path, base bytes or None, ours, theirs) -> merged bytes, or None: a real conflict
Resolver = Callable[[str, bytes | None, bytes | None, bytes | None], bytes | None]


def new_commits(repo: GitRepo, base: bytes | None, tip: bytes) -> list[bytes]:
    """Commits from `base` (excluded) to `tip` along first parents, oldest first."""
    found = []
    sha: bytes | None = tip
    while sha is not None and sha != base:
        found.append(sha)
        parents = repo.commit(sha).parents
        sha = parents[0] if parents else None
    if base is not None and sha != base:
        raise ValueError(f"{base.decode()} is not a first-parent ancestor of {tip.decode()}")
    return found[::-1]


def changed_paths(repo: GitRepo, old_tree: bytes | None,
                  new_tree: bytes) -> dict[str, tuple[Entry | None, Entry | None]]:
    """path → (old entry, new entry) for every file that differs between two trees."""
    found: dict[str, tuple[Entry | None, Entry | None]] = {}
    # through the locked view: dulwich's own store is not safe while a packer merges
    for change in tree_changes(repo.objects, old_tree, new_tree):  # type: ignore[arg-type]
        old: Entry | None = None if change.old is None or change.old.sha is None else (
            change.old.mode, change.old.sha)
        new: Entry | None = None if change.new is None or change.new.sha is None else (
            change.new.mode, change.new.sha)
        side = change.new if new is not None else change.old
        assert side is not None and side.path is not None  # a change has a side with a path
        path = side.path.decode("utf-8", "surrogateescape")
        if path in found:  # a file made a link (or back): dulwich says delete, then add
            was_old, was_new = found[path]
            old, new = was_old or old, was_new or new
        found[path] = (old, new)
    return found


@dataclass
class BothKept:
    """What `carry` does with a path changed both ways when it may go on (`agentfs
    sync`, which a person watches): `resolve` merges the two versions if it can (the
    carried commit's as ours, the tip's as theirs); else the tip's version stays at
    the path and the carried one is kept beside it, as `merge` keeps a clone's
    (`conflict_copy`, named after `name`, the carried line's last commit)."""

    name: bytes
    resolve: Resolver
    resolved: list[str] = field(default_factory=list)  # merged by the resolver
    kept_aside: dict[str, str] = field(default_factory=dict)  # path → where the carried went

    def settle(self, repo: GitRepo, path: str, old: Entry | None, new: Entry | None,
               current: Entry | None) -> tuple[bytes, int, bytes | None] | None:
        """The change that carries `path` (from `old` to `new` in the carried commit,
        `current` at the tip), or None to leave the tip's version alone."""
        merged = self.resolve(path, _read(repo, old), _read(repo, new), _read(repo, current))
        if merged is not None:
            blob = Blob.from_string(merged)
            repo.objects.add_object(blob)
            self.resolved.append(path)
            return _change(path, ((new or current or (0o100644, b""))[0], blob.id))
        if new is None:  # deleted by the carried line, changed at the tip: the tip's stays
            self.kept_aside.setdefault(path, "")
            return None
        self.kept_aside[path] = conflict_copy(path, self.name)
        return _change(self.kept_aside[path], new)


def carry(repo: GitRepo, commits: Sequence[bytes], onto: bytes, *,
          skip_empty: bool = False, keep: BothKept | None = None) -> bytes:
    """Re-make `commits` (oldest first, each on the previous) on top of `onto`.

    Each keeps its message, author and extra parents (a side branch's head); its
    tree is `onto`'s with the paths the commit changed applied. With `skip_empty`,
    a commit whose paths `onto` already holds as it left them is dropped (it was
    carried before). With `keep`, a path changed differently since is settled by it
    (`BothKept`) instead of refused. Returns the new tip.

    Raises:
      MergeConflict: without `keep`, a path the commit changes was changed
        differently since.
    """
    tip = onto
    for sha in commits:
        commit = repo.commit(sha)
        parent_tree = repo.commit(commit.parents[0]).tree if commit.parents else None
        tip_tree = repo.commit(tip).tree
        changes = []
        conflicts = []
        for path, (old, new) in changed_paths(repo, parent_tree, commit.tree).items():
            current = _entry(repo, tip, path)
            if current == new:
                continue
            if current != old and keep is not None:
                settled = keep.settle(repo, path, old, new, current)
                changes += [settled] if settled is not None else []
                continue
            if current != old:
                conflicts.append(path)
            changes.append(_change(path, new))
        if conflicts:
            raise MergeConflict(
                f"{len(conflicts)} path(s) changed on the remote too: {', '.join(conflicts[:5])}",
                conflicts, hint="the trace was run elsewhere meanwhile; its claim was lost")
        if skip_empty and not changes:
            continue
        tip = repo.make_commit(_tree(repo, tip_tree, changes), commit.message,
                               [tip, *commit.parents[1:]], like=commit).id
    return tip


@dataclass
class MergeResult:
    """A merge commit, and the paths kept both ways (the local side beside the path)."""

    commit: bytes
    resolved: list[str] = field(default_factory=list)  # merged by the resolver
    kept_aside: dict[str, str] = field(default_factory=dict)  # path → where ours went


def merge(repo: GitRepo, base: bytes | None, ours: bytes, theirs: bytes, *,
          resolve: Resolver, message: bytes,
          theirs_wins: Callable[[str, Entry | None], bool] = lambda path, mine: False
          ) -> MergeResult:
    """Three-way merge of `ours` and `theirs` (parents in that order).

    A path changed only on one side takes that side. A path changed both ways is
    given to `resolve`; when it cannot merge them, theirs stays at the path and
    ours is kept beside it as `<path>.conflict-<ours, 12 hex>`: nothing is lost.
    A path for which `theirs_wins(path, ours' entry or None)` is true keeps theirs,
    whatever ours did to it.
    """
    base_tree = repo.commit(base).tree if base is not None else None
    theirs_changed = changed_paths(repo, base_tree, repo.commit(theirs).tree)
    keep = BothKept(ours, resolve)  # ours is the side kept beside the path
    changes = []
    for path, (old, new) in changed_paths(repo, base_tree, repo.commit(ours).tree).items():
        if theirs_wins(path, new):
            continue
        if path not in theirs_changed:
            changes.append(_change(path, new))
            continue
        other = theirs_changed[path][1]
        if other == new:
            continue
        settled = keep.settle(repo, path, old, new, other)
        changes += [settled] if settled is not None else []
    tree = _tree(repo, repo.commit(theirs).tree, changes)
    mine, their_tip = repo.commit(ours), repo.commit(theirs)
    commit = repo.make_commit(tree, message, [ours, theirs],  # never older than a parent
                              when=(max(mine.commit_time, their_tip.commit_time),
                                    mine.commit_timezone))
    return MergeResult(commit.id, keep.resolved, keep.kept_aside)


def _entry(repo: GitRepo, commit: bytes, path: str) -> Entry | None:
    return repo.tree_lookup(commit, path)


def _read(repo: GitRepo, entry: Entry | None) -> bytes | None:
    if entry is None:
        return None
    blob = repo.objects[entry[1]]
    return blob.as_raw_string() if isinstance(blob, Blob) else None


def _change(path: str, entry: Entry | None) -> tuple[bytes, int, bytes | None]:
    if entry is None:
        return (path.encode(), 0, None)
    return (path.encode(), entry[0], bytes.fromhex(entry[1].decode()))


def _tree(repo: GitRepo, base: bytes, changes: list) -> bytes:
    tree = change_tree(repo.objects, base, changes) if changes else base
    return tree if tree is not None else repo.objects.add_raw(Tree.type_num, b"")
