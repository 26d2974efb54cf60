"""The files a program changed in the workspace, found by comparing the work tree.

A bash command or a tool of a stdio MCP server is a program running in the
workspace: it may change any file and does not say which. `WorkTreeChanges`
takes the size and modification time of every file before the call and after
it (outside `.git` directories at any depth and the top-level `traces/` and
`inbox/`), and records what was added, changed or removed in the tool context,
so it goes into the step's commit and the result's `files_changed`. Paths `.gitignore`
ignores are left out, but never a `.gitignore` Git reads, so a rule cannot hide
itself (`agentfs/store/git/ignore.py:not_ignored`); when the call changed one,
the new files that are ignored are named in the result. Names a message file
cannot hold are left uncommitted and named in the result (`WorkTreeChanges.note`).

The cost is one walk of the work tree, an `lstat` per file, before and after
each call: about what `git status` pays. Such a program cannot announce a
change before it makes it (as `agentfs/tools/base.py:ToolContext.write` does):
if the run is killed during the call, the call is answered "interrupted" on
resume and its files stay uncommitted in the work tree.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Self

from agentfs.store.git.ignore import is_ignore_file, not_ignored
from agentfs.store.messages import workspace_path_problem
from agentfs.store.unicode import shown
from agentfs.store.workspace import INBOX_DIR, TRACES_DIR
from agentfs.tools.base import ToolContext

__all__ = ["TOP_LEVEL_SKIPPED", "WorkTreeChanges", "snapshot"]

#: Top-level folders whose files are never compared: agentfs commits them itself
#: (a file dropped into `inbox/` during a call is the watcher's to take, and the
#: `.rejected/` folder it puts files aside in is its own).
TOP_LEVEL_SKIPPED = {TRACES_DIR, INBOX_DIR}
#: Names of uncommitted files a note quotes before saying how many more there are.
NOTE_NAMES = 3

#: A file's (modification time in ns, size), by its path relative to the root.
Snapshot = dict[str, tuple[int, int]]


def snapshot(root: Path) -> Snapshot:
    """(mtime, size) of every file outside `.git` (at any depth) and the top-level
    `TOP_LEVEL_SKIPPED` folders."""
    files: Snapshot = {}
    for directory, dirnames, filenames in os.walk(root):
        dirnames[:] = [
            d for d in dirnames
            if d != ".git" and not (Path(directory) == root and d in TOP_LEVEL_SKIPPED)
        ]
        for name in filenames:
            full = os.path.join(directory, name)
            try:
                st = os.lstat(full)
            except FileNotFoundError:
                continue
            files[os.path.relpath(full, root)] = (st.st_mtime_ns, st.st_size)
    return files


class WorkTreeChanges:
    """Records in `context.changed` the files changed during a `with` block, even one
    that raises (see the module docstring)."""

    def __init__(self, context: ToolContext) -> None:
        self.context = context
        self.root = context.root.resolve()
        #: Changed files left uncommitted, each as `'name' (why)`.
        self.unstored: list[str] = []
        #: New files that are ignored, when the call changed a `.gitignore` Git reads.
        self.hidden: list[str] = []
        self._before: Snapshot = {}

    def __enter__(self) -> Self:
        self._before = snapshot(self.root)
        return self

    def __exit__(self, *exc: object) -> None:
        before, after = self._before, snapshot(self.root)
        changed = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
        kept = not_ignored(self.root, changed)
        for path in sorted(kept):
            problem = workspace_path_problem(path)
            if problem is None:
                self.context.changed.add(path)
            else:
                self.unstored.append(f"'{shown(path)}' ({problem})")
        if any(is_ignore_file(p) for p in kept):  # the rules changed: say what they hide
            self.hidden = [f"'{shown(p)}'" for p in sorted(changed - kept) if p not in before]

    def note(self) -> str:
        """The lines a result gets when changed files were left uncommitted, or ''."""
        return "\n".join(
            f"[not committed, {why}: {_named(names)}]" for why, names in (
                ("new files .gitignore ignores", self.hidden),
                ("names agentfs cannot store", self.unstored)) if names)


def _named(names: list[str]) -> str:
    """The first `NOTE_NAMES` of `names`, and how many more there are."""
    more = f" and {len(names) - NOTE_NAMES} more" if len(names) > NOTE_NAMES else ""
    return f"{', '.join(names[:NOTE_NAMES])}{more}"
