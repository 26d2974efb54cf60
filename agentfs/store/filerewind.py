"""Putting the workspace files a trace's steps changed back as they were at an
earlier step (`agentfs rewind --files`).

Which files: those the trace's `tool` steps (and earlier file rewinds, and tool
steps recovery adopted) changed after the target step, read from the commits on
`main`, not from message files a person may have edited; a fork's steps go on
with those its origin had taken when it was forked (`lineage_log`). Each is
compared with what the last of those steps committed for it: a file that holds
something else was changed by someone since, and the whole rewind is refused,
naming it, before anything is written. A file that already holds the target's content
counts as restored, so running the same rewind again after a crash finishes it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agentfs.errors import AgentfsError
from agentfs.store.atomic import atomic_write
from agentfs.store.commits import StepKind
from agentfs.store.git.objects import file_blob_id
from agentfs.store.git.repo import EXEC_MODE, FILE_MODE, GitRepo, check_path
from agentfs.store.regularfile import check_real_folders
from agentfs.store.stepdiff import changed_files
from agentfs.store.steplog import lineage_log

__all__ = ["FileRewind", "FilesChangedSince", "plan_file_rewind"]

#: Steps whose workspace files a file rewind puts back.
CHANGES_FILES = frozenset({StepKind.TOOL, StepKind.RECOVER, StepKind.REWIND})

SYMLINK_MODE = 0o120000

#: A file's state: (mode, blob id) as Git would store it, or None when it is absent.
State = tuple[int, bytes] | None


class FilesChangedSince(AgentfsError):
    """Workspace files a rewind would restore were changed since the agent wrote them."""

    def __init__(self, trace_id: str, paths: Sequence[str]) -> None:
        keep = ("copy what you want to keep elsewhere and put back what the agent wrote "
                "(`git log -p -- PATH` shows who changed it since)")
        shown = ", ".join(paths[:10]) + (f" and {len(paths) - 10} more" if len(paths) > 10 else "")
        super().__init__(
            f"trace {trace_id!r}: not rewinding the files: {shown} changed since the agent "
            f"last wrote {'it' if len(paths) == 1 else 'them'}, and restoring would lose "
            "those changes; nothing was changed",
            hint=f"{keep}, or rewind without --files",
            api_hint=f'{keep}, or rewind with "files": false',
        )
        self.paths = list(paths)


@dataclass(frozen=True)
class FileRewind:
    """What a file rewind does: each path and the content it gets (None: deleted)."""

    target: bytes  # the commit whose content the files get back
    restore: dict[str, tuple[int, bytes] | None] = field(default_factory=dict)

    @property
    def paths(self) -> list[str]:
        return sorted(self.restore)

    def apply(self, repo: GitRepo, tmp_dir: Path) -> None:
        """Write each file that is not yet as the target has it, atomically (delete the
        ones the target lacks)."""
        for path, want in sorted(self.restore.items()):
            full = repo.root / path
            check_real_folders(repo.root, path)  # never read or written through a link
            if worktree_state(full) == want:
                continue  # restored already (an earlier attempt that a crash cut short)
            if want is None:
                full.unlink(missing_ok=True)
            else:
                _write(repo, full, want, tmp_dir)


def plan_file_rewind(repo: GitRepo, traces_dir: str, trace_id: str,
                     target: bytes) -> FileRewind:
    """The files to put back as commit `target` (the step rewound to, in the trace's
    lineage) holds them; `traces_dir` is the folder of the traces.

    Raises:
      AgentfsError: `target` is not a step of the trace's lineage.
      FilesChangedSince: a file holds neither what the trace's last step that
        touched it committed nor the target's content.
    """
    last_written: dict[str, State] = {}
    for owner, step in lineage_log(repo, traces_dir, trace_id):
        commit = step.commit.encode()
        if commit == target:
            break
        if step.kind not in CHANGES_FILES:
            continue
        for change in changed_files(repo, commit, outside=f"{traces_dir}/{owner}"):
            last_written.setdefault(change.path, change.new)  # the newest step wins
    else:
        raise AgentfsError(f"trace {trace_id!r}: commit {target.decode()[:10]} is not one of "
                           "its steps on main", hint="rewind without --files",
                           api_hint='rewind with "files": false')
    restore: dict[str, State] = {}
    changed: list[str] = []
    for path, agents in sorted(last_written.items()):
        check_path(path)  # a commit can name anything: never a path into .git or out
        check_real_folders(repo.root, path)  # nor a folder a clone made a link
        want = repo.tree_lookup(target, path)
        if want is not None and stat.S_ISDIR(want[0]):
            want = None
        now = worktree_state(repo.root / path)
        if now not in (agents, want):
            changed.append(path)
        restore[path] = want
    if changed:
        raise FilesChangedSince(trace_id, changed)
    return FileRewind(target, restore)


def worktree_state(full: Path) -> State:
    """The file at `full` as Git would store it: (mode, blob id), None if absent; a
    folder or a special file gets a state no commit has, so it is never 'as committed'."""
    try:
        info = os.lstat(full)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISLNK(info.st_mode):
        return SYMLINK_MODE, file_blob_id(full, info)
    if not stat.S_ISREG(info.st_mode):
        return 0, b""
    mode = EXEC_MODE if info.st_mode & stat.S_IXUSR else FILE_MODE
    return mode, file_blob_id(full, info)


def _write(repo: GitRepo, full: Path, want: tuple[int, bytes], tmp_dir: Path) -> None:
    mode, sha = want
    if mode == SYMLINK_MODE:
        full.parent.mkdir(parents=True, exist_ok=True)
        tmp = full.with_name(f".{full.name}.{os.getpid()}.agentfs-link")
        tmp.unlink(missing_ok=True)
        os.symlink(os.fsdecode(repo.objects[sha].as_raw_string()), tmp)
        os.replace(tmp, full)
        return
    if full.is_symlink() or (full.exists() and not full.is_file()):
        full.unlink()
    # a chunk at a time: a file a bash command wrote may be larger than memory
    atomic_write(full, repo.objects.blob_chunks(sha), tmp_dir=tmp_dir, sync_dir=repo.durable)
    os.chmod(full, 0o755 if mode == EXEC_MODE else 0o644)
