"""What a step did to the workspace's files: the paths its commit changed outside the
trace's own folder, and their unified diff, as `git show` prints it.

The diff is dulwich's (`dulwich.patch`), between the step's commit and its first
parent; the tree walk skips every subtree the two commits share, so a step costs
what it changed, not the size of the workspace. Objects are read through the
repository's `ObjectWriter`, as every other reader does: a server's threads may
commit and merge packs meanwhile, and dulwich's own store is not safe for that.
"""

from __future__ import annotations

import io
from collections.abc import Container, Iterable
from dataclasses import dataclass
from stat import S_IFMT

from dulwich.patch import write_object_diff

from agentfs.store.git.carry import changed_paths
from agentfs.store.git.repo import GitRepo
from agentfs.store.messages import Message
from agentfs.store.steplog import lineage_step_of_message

#: Files larger than this, before or after a step, are not diffed (`render_diff`).
DIFF_MAX_BYTES = 1024 * 1024

__all__ = ["FileChange", "StepDiff", "changed_files", "message_diff", "render_diff", "step_diff"]


@dataclass(frozen=True)
class FileChange:
    """One workspace file a commit changed: its path, and its (mode, blob id) before
    and after (None where it did not exist)."""

    path: str
    old: tuple[int, bytes] | None
    new: tuple[int, bytes] | None

    @property
    def status(self) -> str:
        """`added`, `deleted` or `modified`, as `git diff --name-status` says it."""
        if self.old is None:
            return "added"
        return "deleted" if self.new is None else "modified"

    def record(self) -> dict[str, str]:
        return {"path": self.path, "status": self.status}


def changed_files(repo: GitRepo, commit: bytes, *, outside: str | None,
                  only: Container[str] | None = None) -> list[FileChange]:
    """The files `commit` changed against its first parent, in path order, except those
    under folder `outside` (the trace's own files); with `only`, just those paths."""
    sha = repo.commit(commit)
    parent = repo.commit(sha.parents[0]).tree if sha.parents else None
    prefix = outside.rstrip("/") + "/" if outside is not None else None
    return [FileChange(path, old, new)
            for path, (old, new) in sorted(changed_paths(repo, parent, sha.tree).items())
            if not (prefix is not None and path.startswith(prefix))
            and (only is None or path in only)]


def render_diff(repo: GitRepo, changes: Iterable[FileChange]) -> str:
    """The unified diff of `changes`, one `diff --git` section per file (binary files
    as `Binary files ... differ`), as text. A file over `DIFF_MAX_BYTES` on either
    side is named with its sizes and the `git diff` that shows it, never read."""
    out = io.BytesIO()
    for change in changes:
        path = change.path.encode("utf-8", "surrogateescape")
        sizes = [repo.objects.size(side[1]) if side else 0 for side in (change.old, change.new)]
        if max(sizes) > DIFF_MAX_BYTES:
            out.write(_too_large(path, change, sizes))
            continue
        old, new = change.old, change.new
        # a file made a link (or back) is shown as `git show` shows it: deleted, then added
        pairs = ([(old, None), (None, new)] if old and new and S_IFMT(old[0]) != S_IFMT(new[0])
                 else [(old, new)])
        for before, after in pairs:
            write_object_diff(
                out, repo.objects,  # type: ignore[arg-type]
                (path if before else None, *(before or (None, None))),
                (path if after else None, *(after or (None, None))),
            )
    return out.getvalue().decode("utf-8", "replace")


def _too_large(path: bytes, change: FileChange, sizes: list[int]) -> bytes:
    """The section of a file too large to diff here."""
    sides = (change.old, change.new)
    before, after = (f"{size:,} bytes" if side else "none"
                     for size, side in zip(sizes, sides, strict=True))
    ids_ = [side[1][:12].decode() for side in sides if side]
    show = f"git diff {ids_[0]} {ids_[1]}" if len(ids_) == 2 else f"git cat-file -p {ids_[0]}"
    return (b"diff --git a/%s b/%s\n" % (path, path)
            + f"Large file ({before} before, {after} after), not shown: {show}\n".encode())


@dataclass(frozen=True)
class StepDiff:
    """The workspace files one commit changed, and their diff."""

    commit: str | None  # None: no commit holds the message (nothing to show)
    changes: list[FileChange]
    text: str

    def record(self) -> dict[str, object]:
        """As `agentfs log -p --json` and the API show it."""
        return {"commit": self.commit, "files": [c.record() for c in self.changes],
                "diff": self.text}


def step_diff(repo: GitRepo, commit: str, *, outside: str | None,
              only: Container[str] | None = None) -> StepDiff:
    """What commit `commit` changed outside folder `outside` (see `changed_files`)."""
    changes = changed_files(repo, commit.encode(), outside=outside, only=only)
    return StepDiff(commit, changes, render_diff(repo, changes))


def message_diff(repo: GitRepo, traces_dir: str, trace_id: str, message: Message) -> StepDiff:
    """The files tool result `message` changed (its `files_changed`, which may name a
    file of the trace such as goals.json), as the step that committed it changed
    them; empty for any other message. In a fork, a message it copied is looked up
    in the trace it was copied from, and so on (`lineage_step_of_message`)."""
    files = set(message.files_changed or [])
    found = (lineage_step_of_message(repo, traces_dir, trace_id, message.sequence)
             if files else None)
    if found is None:
        return StepDiff(None, [], "")
    return step_diff(repo, found[1].commit, outside=None, only=files)
