"""Walking the workspace and searching it (`list_files`, `grep`), within limits of
entries, bytes, matches and time. Patterns run on the `regex` package, whose
searches take a timeout, so a catastrophic pattern ends with an error.

That timeout counts CPU time, which on a busy machine passes several times slower
than the clock (a 10 s budget took 35-45 s). So a search runs in a thread and the
call waits for it by the clock (`Search.run`): at the deadline the call ends, and
the thread stops at its next line, or when the CPU time of the one search it is
in runs out."""

from __future__ import annotations

import fnmatch
import os
import stat
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from agentfs.store.wording import counted
from agentfs.tools.base import ToolFailure
from agentfs.tools.paths import GIT_DIR, open_folder, open_regular

__all__ = [
    "MAX_GREP_BYTES",
    "MAX_GREP_FILE_BYTES",
    "MAX_GREP_LINE_CHARS",
    "MAX_GREP_MATCHES",
    "MAX_GREP_READ_BYTES",
    "MAX_WALK_ENTRIES",
    "Search",
    "Walk",
    "glob_match",
]

#: How many directory entries one `list_files` or `grep` call looks at, at most.
MAX_WALK_ENTRIES = 100_000
MAX_GREP_MATCHES = 200
MAX_GREP_LINE_CHARS = 300
MAX_GREP_BYTES = 64 * 1024
#: `grep` skips files larger than this, and stops after reading this much in all.
MAX_GREP_FILE_BYTES = 8 * 1024 * 1024
MAX_GREP_READ_BYTES = 64 * 1024 * 1024


class Walk:
    """Files below `base` in name order, without `.git` directories and symlinks
    (they could lead outside), within `MAX_WALK_ENTRIES` and a deadline. Folders
    are opened as the file tools open them (`agentfs/tools/paths.py:open_folder`)
    and walked by descriptor (`os.fwalk`), so a folder swapped for a symlink
    meanwhile is not followed.

    After the loop, `stopped` says why it ended early, and `timed_out` whether
    the deadline did it.
    """

    def __init__(self, root: Path, base: Path, deadline: float) -> None:
        self.root = root
        self.base = base
        self.deadline = deadline
        self.stopped: str | None = None
        self.timed_out = False

    def __iter__(self) -> Iterator[Path]:
        seen = 0
        shown = self.base.relative_to(self.root).as_posix()
        try:
            base_fd = open_folder(self.root, self.base, shown)
        except FileNotFoundError:
            raise ToolFailure(f"{shown}: no such folder") from None
        try:
            for directory, dirnames, filenames, dir_fd in os.fwalk(".", dir_fd=base_fd):
                dirnames[:] = sorted(d for d in dirnames if d.casefold() != GIT_DIR)
                seen += len(dirnames) + len(filenames)
                if seen > MAX_WALK_ENTRIES:
                    self.stopped = f"stopped after looking at {MAX_WALK_ENTRIES:,} entries"
                    return
                for name in sorted(filenames):
                    if time.monotonic() > self.deadline:
                        self.stopped, self.timed_out = "stopped at the time limit", True
                        return
                    if not _is_link(dir_fd, name):
                        yield Path(os.path.normpath(self.base / directory / name))
        finally:
            os.close(base_fd)


def _is_link(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return True  # gone: skipped as a link would be


def glob_match(rel: str, pattern: str) -> bool:
    """fnmatch, with a leading `**/` also matching at the top level."""
    return fnmatch.fnmatchcase(rel, pattern) or (
        pattern.startswith("**/") and fnmatch.fnmatchcase(rel, pattern[3:])
    )


class Search:
    """One grep: the matches so far, within its limits of matches, bytes and time."""

    def __init__(self, pattern: Any, deadline: float, timeout: float) -> None:
        self.pattern = pattern
        self.deadline = deadline
        self.timeout = timeout
        self.hits: list[str] = []
        self.size = 0  # bytes of hits
        self.read = 0  # bytes of files
        self.files = 0
        self.too_big = 0
        self.notes: list[str] = []
        self.full: str | None = None  # why the result is complete
        self._late = threading.Event()  # the call has ended at its deadline

    def run(self, root: Path, files: Iterable[Path]) -> None:
        """Search `files` of the workspace `root`, in a thread the call waits for until
        the deadline by the clock.

        Raises:
            ToolFailure: the deadline passed.
        """
        failure: list[Exception] = []

        def work() -> None:
            try:
                for path in files:
                    if not self.file(root, path, path.relative_to(root).as_posix()):
                        break
            except Exception as exc:  # noqa: BLE001 - raised again in the calling thread
                failure.append(exc)

        worker = threading.Thread(target=work, name="agentfs-grep", daemon=True)
        worker.start()
        worker.join(timeout=max(0.0, self.deadline - time.monotonic()))
        if worker.is_alive():
            self._late.set()
            raise self.timed_out()
        if failure:
            raise failure[0]

    def file(self, root: Path, path: Path, rel: str) -> bool:
        """Search one file of the workspace `root`; False when the search must stop."""
        try:
            with open_regular(root, path, rel) as file:
                size = os.fstat(file.fileno()).st_size
                if size > MAX_GREP_FILE_BYTES:
                    self.too_big += 1
                    return True
                if self.read + size > MAX_GREP_READ_BYTES:
                    self.notes.append(f"stopped at {MAX_GREP_READ_BYTES:,} bytes of files read; "
                                      "narrow the search with path or glob")
                    return False
                data = file.read(MAX_GREP_FILE_BYTES)
        except (OSError, ToolFailure):  # gone, unreadable, or not a regular file
            return True
        self.read += len(data)
        self.files += 1
        if b"\x00" in data[:8192]:
            return True
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if self._matches(line) and not self._add(f"{rel}:{number}: ", line):
                return False
        return True

    def _matches(self, line: str) -> bool:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0 or self._late.is_set():
            raise self.timed_out()
        try:  # concurrent: other threads run while a slow pattern is searched
            return self.pattern.search(line, timeout=remaining, concurrent=True) is not None
        except TimeoutError:
            raise self.timed_out() from None

    def _add(self, where: str, line: str) -> bool:
        if len(line) > MAX_GREP_LINE_CHARS:
            line = line[:MAX_GREP_LINE_CHARS] + " [... line cut]"
        hit = where + line
        self.size += len(hit.encode("utf-8")) + 1
        if self.size > MAX_GREP_BYTES:
            self.full = (f"stopped at {MAX_GREP_BYTES:,} bytes of matches; "
                         "narrow the search with path or glob")
            return False
        self.hits.append(hit)
        if len(self.hits) >= MAX_GREP_MATCHES:
            self.full = f"stopped at {MAX_GREP_MATCHES} matches"
            return False
        return True

    def timed_out(self) -> ToolFailure:
        return ToolFailure(
            f"grep: the search timed out after {self.timeout:g} s "
            f"({counted(self.files, 'file')} searched); simplify the pattern (nested repeats such as (a+)+ can take "
            "exponential time) or narrow the search with path or glob"
        )

    def result(self, raw: str) -> str:
        notes = [self.full] if self.full else list(self.notes)
        if self.too_big and not self.full:
            notes.append(f"skipped {counted(self.too_big, 'file')} over {MAX_GREP_FILE_BYTES:,} bytes; "
                         "read them with read_file")
        text = "\n".join(self.hits) if self.hits else f"no matches for {raw!r}"
        return text + "".join(f"\n[... {note}]" for note in notes)
