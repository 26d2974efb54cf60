"""Inbox rules and the staging area: which dropped files wait, when one has
settled, where a claimed file sits until it is committed, and where a file that
cannot be used is put aside.

Stated once here and used by `agentfs run`, `agentfs watch` and `agentfs status`
(see docs/watch.md). `agentfs/store/ingest.py` is the door that turns a staged
file into a message.

Staging layout, inside `.git/agentfs/ingest/` (Git never sees it):

    <trace-id>/<sequence>/origin.json   where the file came from (written first)
    <trace-id>/<sequence>/file.md       the claimed file, renamed in (file.json for
                                        a dropped .json file, which is read as JSON)

No id or name is ever parsed out of a joined file name: the trace is the
folder, the sequence the subfolder, the origin a JSON record.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import stat
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from agentfs.errors import MessageFileError
from agentfs.store.atomic import atomic_write, fsync_dir
from agentfs.store.git.conflicts import CONFLICT_COPY
from agentfs.store.regularfile import check_real_folder
from agentfs.store.unicode import escaped, shown

__all__ = [
    "POST_KEY",
    "REJECTED_DIR",
    "SettleClock",
    "Staged",
    "exclude_temp_names",
    "inbox_names",
    "inbox_problem",
    "is_hidden_drop",
    "is_ignored_name",
    "post_key",
    "reject",
    "rejected_names",
    "save_in_inbox",
    "stage",
    "staged_in",
    "unstage",
    "waiting",
]

#: Where files that cannot become messages are put, inside the inbox they came from.
REJECTED_DIR = ".rejected"
KEEP = ".gitkeep"
ORIGIN = "origin.json"
CONTENTS = ("file.md", "file.json")

#: Hidden files, editor backups (`x~`), Emacs auto-saves (`#x#`), swap and temp
#: files, and vim's `4913` probe, as Git patterns (see `exclude_temp_names`).
TEMP_NAMES = (".*", "*~", "#", "#*#", "*.swp", "*.swo", "*.swx", "*.tmp", "*.part", "4913")
#: The same as one regex: it runs on every file of a trace.
_IGNORED = re.compile("|".join(fnmatch.translate(g) for g in TEMP_NAMES))
#: Hidden names that are still drops (and refused as such), not temp files: a dot
#: name ending like a message file, as no editor or copying tool names its temp files.
_HIDDEN_DROP = re.compile(r"\A\.(?!#).*\.(?:md|json)\Z", re.DOTALL)
#: Seconds an empty file may wait for content (an editor may create it first); after
#: that it is taken, and refused as empty.
EMPTY_GRACE = 60.0


def is_ignored_name(name: str) -> bool:
    """Editor and agentfs temporary files, and the copies `agentfs sync` keeps of a file
    changed both here and on the remote: never messages or edits."""
    return _IGNORED.match(name) is not None or CONFLICT_COPY.match(name) is not None


def is_hidden_drop(name: str) -> bool:
    """A hidden name that is a drop all the same (`..md`, `.notes.md`): taken, to be
    refused once with a note, rather than left in the inbox for ever."""
    return _HIDDEN_DROP.match(name) is not None


def inbox_problem(folder: Path) -> str | None:
    """Why nothing in inbox `folder` can be taken, or None: it is a symlink (files
    are never taken through one: they could be anywhere), or a file in the folder's
    place (nothing can be dropped into it)."""
    try:
        mode = os.lstat(folder).st_mode
    except OSError:
        return None  # none yet: made when a file is kept there
    if stat.S_ISLNK(mode):
        return "is a symlink; files in it are not taken (make it a plain folder again)"
    if not stat.S_ISDIR(mode):
        return (f"is a file, not a folder: nothing can be dropped into it (move the file "
                f"away, then put the folder back with `git checkout -- {folder.name}` "
                "in the folder that holds it)")
    return None


def waiting(folder: Path) -> list[Path]:
    """What waits in an inbox folder, in name order: every entry but editor temp
    files (`is_ignored_name`, unless `is_hidden_drop`), `.gitkeep` and `.rejected/`.
    What cannot be a message (a symlink, a folder, a FIFO, a device) waits too:
    it is put aside when taken. Nothing waits in a folder that is a symlink."""
    if inbox_problem(folder) is not None:
        return []
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [
        Path(e.path)
        for e in entries
        if e.name not in (KEEP, REJECTED_DIR)
        and (not is_ignored_name(e.name) or is_hidden_drop(e.name))
    ]


@dataclass
class _Seen:
    size: int
    mtime_ns: int
    since: float


@dataclass
class SettleClock:
    """Decides when a waiting file is ready to be taken.

    A regular file is ready once it is not empty and its size and mtime stayed
    the same for `window` seconds (an empty one once it was left empty for
    `EMPTY_GRACE` seconds) (an editor may truncate first and write in
    place after); with a window of 0, as soon as it has content. The window counts from the file's mtime, at most half of it
    (the other half it must be seen unchanged), and none for whole-second
    mtimes (a coarse filesystem). Anything else (a symlink, a device) is ready
    at once: it is refused when taken.
    """

    window: float = 1.0
    next_due: float | None = None  # monotonic time when the next waiting file settles
    _seen: dict[Path, _Seen] = field(default_factory=dict)

    def ready(self, path: Path, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            self._seen.pop(path, None)
            return False
        if not stat.S_ISREG(st.st_mode):
            return True
        if st.st_size == 0 and time.time() - st.st_mtime > EMPTY_GRACE:
            return True  # left empty: taken, to be refused as empty
        if self.window == 0:  # no waiting asked for: any file with content is ready
            return st.st_size > 0
        seen = self._seen.get(path)
        changed = seen is None or (seen.size, seen.mtime_ns) != (st.st_size, st.st_mtime_ns)
        if seen is None or changed:
            seen = self._seen[path] = _Seen(
                st.st_size, st.st_mtime_ns, now - self._quiet_before(st.st_mtime_ns)
            )
        if changed or st.st_size == 0 or now - seen.since < self.window:
            due = seen.since + self.window
            if due > now and st.st_size > 0:  # an empty file waits for a change, not a time
                self.next_due = due if self.next_due is None else min(self.next_due, due)
            return False
        return True

    def forget(self, path: Path) -> None:
        self._seen.pop(path, None)

    def _quiet_before(self, mtime_ns: int) -> float:
        if mtime_ns % 1_000_000_000 == 0:
            return 0.0
        return min(max(0.0, time.time() - mtime_ns / 1e9), self.window / 2)


@dataclass(frozen=True)
class Staged:
    """A claimed file waiting in the staging area to be committed as message `sequence`."""

    dir: Path
    sequence: int
    origin: str  # workspace-relative path the file was dropped at

    @property
    def file(self) -> Path:
        return self.dir / _content_name(self.origin)


def _content_name(origin: str) -> str:
    """The claimed file's name in staging: its origin's kind (JSON or Markdown)."""
    return CONTENTS[1] if origin.endswith(".json") else CONTENTS[0]


def stage(source: Path, folder: Path, sequence: int, origin: str) -> Staged | None:
    """Claim `source` by renaming it into `folder/<sequence>/`; None if it is gone
    (another process took it). From the rename on it can be neither lost nor taken twice.
    """
    target = folder / f"{sequence:06d}"
    folder.mkdir(parents=True, exist_ok=True)
    if target.exists():
        _remove(target, ignore_errors=False)  # a claim that never happened (`staged_in`)
    target.mkdir()
    atomic_write(target / ORIGIN, json.dumps({"origin": origin}).encode())
    try:  # a symlink moves as itself, never followed
        os.rename(source, target / _content_name(origin))
    except FileNotFoundError:
        _remove(target)
        return None
    fsync_dir(target)
    return Staged(target, sequence, origin)


def staged_in(folder: Path, *, tidy: bool = True) -> list[Staged]:
    """Claims in `folder`, by sequence. With `tidy`, leftovers of claims that never
    happened (no file) are removed: only under the lock claims there are made with
    (the trace's, or the one for new traces), since a claim being made (`stage`)
    looks the same until its file is moved in; without, they are only left out."""
    try:
        names = sorted(os.listdir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = []
    for name in names:
        path = folder / name
        if not name.isdigit() or not path.is_dir():
            continue
        try:
            origin = json.loads((path / ORIGIN).read_bytes())["origin"]
        except (OSError, ValueError, KeyError, TypeError):
            origin = ""
        origin = origin if isinstance(origin, str) else ""
        if not os.path.lexists(path / _content_name(origin)):
            if tidy:
                _remove(path)
            continue
        found.append(Staged(path, int(name), origin))
    return found


def unstage(staged: Staged) -> None:
    """Remove a claim whose message is committed (or whose file was rejected)."""
    _remove(staged.dir)
    fsync_dir(staged.dir.parent)


def _remove(claim: Path, *, ignore_errors: bool = True) -> None:
    """Remove a claim's folder and what it holds (a dropped folder too)."""
    import shutil  # here: the trace list imports this module and removes nothing

    shutil.rmtree(claim, ignore_errors=ignore_errors)


#: An idempotency key a post may carry (`save_in_inbox`): a UUID fits.
POST_KEY = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: The name of an inbox file written for a post with a key.
_KEYED_NAME = re.compile(r"\d{8}T\d{6}\.\d{6}-key-(?P<key>" + POST_KEY.pattern + r")\.md")


def save_in_inbox(folder: Path, text: str, *, key: str | None = None,
                  tmp_dir: Path | None = None, durable: bool = False) -> Path:
    """Write `text` atomically as a new file of the inbox `folder`, named by the
    time, so files are taken in the order they were written; returns its path.
    A post's idempotency `key` (`POST_KEY`) is kept in the name, where whoever
    commits the file finds it (`post_key`)."""
    check_real_folder(folder)  # never written through a link, wherever it leads
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%f")
    # not `secrets`: the trace list imports this
    tail = os.urandom(4).hex() if key is None else f"key-{key}"
    path = folder / f"{stamp}-{tail}.md"
    atomic_write(path, text.encode(), tmp_dir=tmp_dir, sync_dir=durable)
    return path


def post_key(path: str) -> str | None:
    """The idempotency key in the name of an inbox file `save_in_inbox` wrote for a
    post with one (`path`: its name, or a path ending in it, such as a claim's
    origin); None for any other name."""
    match = _KEYED_NAME.fullmatch(path.rpartition("/")[2])
    return match["key"] if match else None


def inbox_names(inbox: Path) -> tuple[list[str], list[str]]:
    """The names of the files waiting in an inbox folder, and of those put aside in
    its `.rejected/`."""
    return [p.name for p in waiting(inbox)], rejected_names(inbox)


def rejected_names(inbox: Path) -> list[str]:
    """Names of the files put aside in an inbox's `.rejected/` (not their notes)."""
    try:
        names = os.listdir(inbox / REJECTED_DIR)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(n for n in names if not n.endswith(".reason.txt") and n != ".gitignore")


def reject(file: Path, origin: Path, reason: str) -> Path:
    """Put `file` (dropped at `origin`) aside in `<origin's folder>/.rejected/`, with
    `<name>.reason.txt` saying why; returns where it now is.

    The folder ignores itself for Git (its `.gitignore` holds `*`), so rejected
    files never show as untracked; they are never deleted. Nothing is written
    through a link: a `.rejected` that is one is refused, and a file in it that is
    one is replaced, not followed (a clone can bring either).

    Raises:
        MessageFileError: `.rejected` is a symlink or a file (the file stays claimed).
    """
    folder = origin.parent / REJECTED_DIR
    check_real_folder(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise MessageFileError(folder, "is a file, not a folder",
                               hint="agentfs puts aside there what it cannot take: "
                               "move the file away") from None
    ignore = folder / ".gitignore"
    if not os.path.lexists(ignore):
        atomic_write(ignore, b"*\n")
    target, number = folder / origin.name, 1
    while os.path.lexists(target) or os.path.lexists(_note_of(target)):
        target, number = folder / f"{origin.name}.{number}", number + 1
    os.rename(file, target)
    note = f"{shown(origin.name)} was not taken as a message: {escaped(reason)}\n"
    atomic_write(_note_of(target), note.encode())  # a name may not be UTF-8
    fsync_dir(folder)
    return target


def _note_of(rejected: Path) -> Path:
    return rejected.with_name(rejected.name + ".reason.txt")


#: The block `exclude_temp_names` keeps in `.git/info/exclude`.
_EXCLUDE_HEADER = "# agentfs: editor temp files in inboxes (agentfs never takes them)"


def exclude_temp_names(root: Path) -> None:
    """Have Git ignore editor temp names in the inboxes of the workspace at `root`
    (`.git/info/exclude`, which is not versioned), so that what agentfs never takes
    does not show as untracked either. Written once; kept if the person edits it."""
    exclude = root / ".git" / "info" / "exclude"
    try:
        text = exclude.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = ""
    except (OSError, UnicodeDecodeError):
        return  # not ours to repair
    if _EXCLUDE_HEADER in text:
        return
    lines = [f"/{folder}/{name}" for folder in ("inbox", "traces/*/inbox") for name in TEMP_NAMES]
    block = "\n".join([_EXCLUDE_HEADER, *lines]) + "\n"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(exclude, ((text + "\n") if text and not text.endswith("\n") else text).encode()
                 + block.encode())
