"""The workspace: a Git repository holding `agentfs.toml`, traces, skills and user files."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from agentfs.errors import AgentfsError, TraceNotFound, WorkspaceNotFound

CONFIG_FILE = "agentfs.toml"
TRACES_DIR = "traces"
INBOX_DIR = "inbox"
SKILLS_DIR = "skills"
KNOWLEDGE_DIR = "knowledge"
MESSAGES_DIR = "messages"
#: The folders every workspace has (`agentfs init` makes them).
FOLDERS = (SKILLS_DIR, TRACES_DIR, INBOX_DIR, KNOWLEDGE_DIR)
TRACE_FILE = "trace.json"
GOALS_FILE = "goals.json"

#: Trace ids: usable as a directory name and a Git ref component (always `fullmatch`).
TRACE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def check_trace_id(trace_id: str) -> str:
    """Return `trace_id` if it is usable as a directory and a Git ref component."""
    if not isinstance(trace_id, str) or not TRACE_ID.fullmatch(trace_id):
        raise AgentfsError(
            f"invalid trace id {trace_id!r}",
            hint="use 1-64 letters, digits, '-' or '_', starting with a letter or digit",
        )
    return trace_id


@dataclass(frozen=True)
class Workspace:
    """Paths of one workspace; `root` is the directory holding `agentfs.toml`."""

    root: Path

    @property
    def config_path(self) -> Path:
        return self.root / CONFIG_FILE

    @property
    def traces_dir(self) -> Path:
        return self.root / TRACES_DIR

    @property
    def inbox_dir(self) -> Path:
        return self.root / INBOX_DIR

    @property
    def skills_dir(self) -> Path:
        return self.root / SKILLS_DIR

    @property
    def knowledge_dir(self) -> Path:
        return self.root / KNOWLEDGE_DIR

    @property
    def state_dir(self) -> Path:
        """agentfs' private state (locks, caches), inside `.git` so Git never sees it."""
        return self.root / ".git" / "agentfs"

    @property
    def lock_dir(self) -> Path:
        """Where the per-trace runner locks are (`agentfs/store/tracelock.py`)."""
        return self.state_dir / "locks"

    @property
    def ingest_dir(self) -> Path:
        """Where dropped files are staged while they become messages (exactly once)."""
        return self.state_dir / "ingest"

    def parse_cache(self, trace_id: str) -> Path:
        """The folder where a trace's parsed message files are kept, a file per folder
        of its `messages/` (`agentfs/store/parsecache.py`)."""
        return self.state_dir / "cache" / f"{trace_id}.parsed"

    def folder_names(self, trace_id: str) -> Path:
        """Where the sequences of each folder of a trace's `messages/` are saved
        (`agentfs/store/foldernames.py`), beside its parse cache."""
        return self.state_dir / "cache" / f"{trace_id}.names"

    def clean_marks(self, trace_id: str) -> Path:
        """The folder where recovery saves the folders of a trace's `messages/` it found
        clean (`agentfs/store/cleanfolders.py:CleanFolders.save`)."""
        return self.state_dir / "cache" / f"{trace_id}.clean"

    @property
    def trace_list(self) -> Path:
        """Where the rows of the trace list are kept between processes
        (`agentfs/core/listcache.py:ListCache`), beside the caches of the traces
        (no trace's cache ends in `.list`)."""
        return self.state_dir / "cache" / "traces.list"

    def summary_path(self, trace_id: str) -> Path:
        """The folder of a trace's summary for the trace list (`agentfs/store/summary.py`)."""
        return self.state_dir / "summaries" / trace_id

    def trace_dir(self, trace_id: str) -> Path:
        return self.traces_dir / check_trace_id(trace_id)

    def relpath(self, path: Path) -> str:
        """`path` relative to the root, with forward slashes (a Git path)."""
        return path.relative_to(self.root).as_posix()

    def trace_ids(self) -> list[str]:
        """Ids of the traces in `traces/` (directories holding a `trace.json`), sorted."""
        return [trace_id for trace_id, _ in self.trace_files()]

    def trace_files(self) -> list[tuple[str, os.stat_result]]:
        """Each trace's id with the `stat` of its `trace.json`, by id: the entries of
        `traces/` named like a trace id that hold a `trace.json` file (the trace list
        keeps its rows by that stat, `agentfs/core/listcache.py:ListCache`)."""
        try:
            entries = os.scandir(self.traces_dir)
        except (FileNotFoundError, NotADirectoryError):
            return []
        found = []
        with entries:  # strings, not pathlib: the trace list of 1,000 traces calls this
            for entry in entries:
                if not TRACE_ID.fullmatch(entry.name):
                    continue
                try:
                    st = os.stat(f"{entry.path}/{TRACE_FILE}")
                except OSError:  # none, or a link that loops: not a trace
                    continue
                if stat.S_ISREG(st.st_mode):
                    found.append((entry.name, st))
        return sorted(found, key=lambda pair: pair[0])

    def resolve_trace(self, ref: str) -> str:
        """Trace id from an id or a path to a trace directory (or a file inside it)."""
        candidate = Path(ref)
        if ("/" in ref or ref in (".", "..")) or (
            candidate.exists() and not TRACE_ID.fullmatch(ref)
        ):
            resolved = candidate.resolve()
            traces = self.traces_dir.resolve()
            try:
                parts = resolved.relative_to(traces).parts
            except ValueError:
                raise TraceNotFound(
                    f"{ref}: not inside this workspace's traces/ directory ({traces})"
                ) from None
            if not parts:
                raise TraceNotFound(f"{ref}: name a trace directory, not traces/ itself")
            ref = parts[0]
        trace_id = check_trace_id(ref)
        meta = self.trace_dir(trace_id) / TRACE_FILE
        if not meta.is_file():
            if self.trace_dir(trace_id).is_dir() and not os.path.lexists(meta):
                raise TraceNotFound(
                    f"trace {trace_id!r} has no {TRACE_FILE} ({self.relpath(meta)} is gone)",
                    hint=f"restore it with `git checkout -- {self.relpath(meta)}` if it was "
                    "committed; `agentfs status` lists traces")
            raise TraceNotFound(
                f"no trace {trace_id!r} in {self.root}",
                hint="`agentfs status` lists traces; `agentfs new` creates one",
            )
        return trace_id


def find_workspace(start: Path | str | None = None) -> Workspace:
    """The workspace containing `start` (default: the current directory): the nearest
    folder with an `agentfs.toml` of any kind, so one that cannot be read (a link to a
    device, a folder) is refused by name when loaded, not passed over for a parent."""
    here = Path(start or Path.cwd()).resolve()
    if here.is_file():
        here = here.parent
    for directory in (here, *here.parents):
        if os.path.lexists(directory / CONFIG_FILE):
            return Workspace(directory)
    raise WorkspaceNotFound(
        f"no {CONFIG_FILE} in {here} or any parent directory",
        hint="run `agentfs init` to make this directory a workspace, or cd into one",
    )
