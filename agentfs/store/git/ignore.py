"""What Git ignores in a work tree (`.gitignore`, `.git/info/exclude`), for code
outside the store that must not see dulwich. As in Git, only untracked files are
ignored: a path in the index never is.

One exception: a `.gitignore` that Git reads is never ignored here, even when a
rule matches it, so a step that changes ignore rules commits them and a rule
cannot hide itself (`printf '.gitignore\\npayload\\n' > .gitignore`). One in a
folder Git skips as ignored is not read by Git, hides nothing, and stays ignored.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from dulwich.errors import NotGitRepository
from dulwich.ignore import IgnoreFilterManager
from dulwich.repo import Repo

from agentfs.store.git.index import stat_cache

__all__ = ["is_ignore_file", "not_ignored"]


def is_ignore_file(path: str) -> bool:
    """Whether `path` (relative, `/`-separated) names a `.gitignore`."""
    return path.rpartition("/")[2] == ".gitignore"


def not_ignored(root: Path, paths: Iterable[str]) -> set[str]:
    """The `paths` (relative to the repository at `root`) that Git does not ignore,
    with every `.gitignore` among them that Git reads (see the module docstring);
    all of them when `root` is not a repository."""
    paths = set(paths)
    if not paths:
        return paths
    try:
        repo = Repo(str(root))
    except NotGitRepository:
        return paths
    try:
        ignore = IgnoreFilterManager.from_repo(repo)
        ignored = {p for p in paths if ignore.is_ignored(p) and not _read_by_git(ignore, p)}
        if ignored:
            index = stat_cache(Path(repo.index_path()))
            ignored = {p for p in ignored if not index.has(p)}
        return paths - ignored
    finally:
        repo.close()


def _read_by_git(ignore: IgnoreFilterManager, path: str) -> bool:
    """Whether `path` is a `.gitignore` in a folder Git enters (the top one always)."""
    folder = path.rpartition("/")[0]
    return is_ignore_file(path) and not (folder and ignore.may_prune_directory(folder + "/"))
