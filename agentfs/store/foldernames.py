"""The sequences of a trace's message folders, kept across processes, so a new
server answers a view of a long compressed trace without listing its folders.

`agentfs/store/message_dir.py:MessageDir.sequences` keeps what each folder's file
names tell (`_names`), by the folder's stamp (inode, mtime, ctime) when it was
listed, settled: a file added, removed or renamed there changes its mtime and ctime,
and ctime cannot be set back. A new process would list every folder again (a fold of
100,000 messages: about 100 folders, 90 ms), so they are saved beside the parse cache
(`agentfs/store/workspace.py:Workspace.folder_names`, `.git/agentfs/cache/<trace>.names`)
as JSON: each folder's stamp and its sequences as runs `[first, last]`, so a folder of
1,000 dense sequences is one run and a trace of 100,000 messages a few KB.

Derived data like the parse cache and recovery's clean marks: never committed, not
fsynced, loaded once per messages directory per process, and ignored when unreadable
or of another shape (every folder is then listed again, as without it). A folder
whose stamp no longer matches is listed again.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from agentfs.store.atomic import replace_derived

__all__ = ["FORMAT", "FolderStamp", "Names", "load", "runs", "save"]

#: Bumped when the saved file changes shape.
FORMAT = 1
#: A folder's (inode, mtime_ns, ctime_ns) when its names were listed.
FolderStamp = tuple[int, int, int]
#: Folder name → (its stamp when listed, the sequences its file names tell, in order).
Names = dict[str, tuple[FolderStamp, list[int]]]


def runs(sequences: list[int]) -> list[list[int]]:
    """Sequences in order as runs `[first, last]` of consecutive ones (a sequence two
    files share makes two runs that `load` refuses: that folder is listed again)."""
    if sequences and sequences == list(range(sequences[0], sequences[-1] + 1)):
        return [[sequences[0], sequences[-1]]]  # a dense folder, told in C
    found: list[list[int]] = []
    for sequence in sequences:
        if found and found[-1][1] == sequence - 1:
            found[-1][1] = sequence
        else:
            found.append([sequence, sequence])
    return found


def load(path: Path, bounds: Callable[[str], tuple[int, int] | None]) -> Names:
    """The folders saved at `path` (by `save`), each with sequences in increasing order
    inside its `bounds` (first, last), else left out (None: not a folder of messages);
    {} if there is no such file or it cannot be read."""
    try:
        data = json.loads(path.read_bytes())
        folders = data["folders"] if data.get("format") == FORMAT else {}
        return {name: kept for name, entry in folders.items()
                if (kept := _entry(entry, bounds(name))) is not None}
    except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return {}  # none saved, or damaged (or nested past the parser): listed again


def save(path: Path, names: Names) -> bool:
    """Replace the file at `path` with `names` (atomically, not fsynced: it can be
    rebuilt); False if it could not be written."""
    data = json.dumps({"format": FORMAT, "folders": {
        name: [*stamp, runs(sequences)] for name, (stamp, sequences) in sorted(names.items())
    }}, separators=(",", ":")).encode()
    return replace_derived(path, data, path.parent)


def _entry(entry: object, bounds: tuple[int, int] | None
           ) -> tuple[FolderStamp, list[int]] | None:
    """One saved folder, `[inode, mtime, ctime, runs]`, if it has that shape and its runs
    are increasing, apart and inside `bounds`."""
    if bounds is None or not isinstance(entry, list) or len(entry) != 4:
        return None
    *stamp, saved = entry
    if not all(_is_int(n) for n in stamp) or not isinstance(saved, list):
        return None
    sequences: list[int] = []
    below = bounds[0] - 1  # every run starts above the last one's end
    for run in saved:
        if not (isinstance(run, list) and len(run) == 2 and _is_int(run[0])
                and _is_int(run[1]) and below < run[0] <= run[1] <= bounds[1]):
            return None
        sequences.extend(range(run[0], run[1] + 1))
        below = run[1]
    return (stamp[0], stamp[1], stamp[2]), sequences


def _is_int(value: object) -> bool:
    return type(value) is int
