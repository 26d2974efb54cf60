"""What Git ignores in a work tree (`.gitignore`, `.git/info/exclude`), for code
outside the store that must not see dulwich."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from dulwich.errors import NotGitRepository
from dulwich.ignore import IgnoreFilterManager
from dulwich.repo import Repo

__all__ = ["not_ignored"]


def not_ignored(root: Path, paths: Iterable[str]) -> set[str]:
    """The `paths` (relative to the repository at `root`) that Git does not ignore;
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
        return {p for p in paths if not ignore.is_ignored(p)}
    finally:
        repo.close()
