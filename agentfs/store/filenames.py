"""The names of message files and of the folders of `messages/`: the grammar alone,
with nothing else imported, so what tells files apart by name (the trace list among
them, which loads no message model) has one home.

A message file is `<sequence>-<role>.<ext>` (`000042-assistant.md`), kept in the
folder of `messages/` that holds its sequence (`000000-000999/`, `SHARD_SIZE` a
folder). See docs/trace-format.md.
"""

from __future__ import annotations

import functools
import os
import re

__all__ = ["FILE_NAME", "SHARD_SIZE", "is_shard_name", "message_file_name", "names_from",
           "parse_file_name", "shard_name"]

FILE_NAME = re.compile(r"^(?P<sequence>\d{6,})-(?P<role>[a-z]+)\.(?P<ext>md|json)$")
#: Sequences per folder of `messages/`. Part of the trace format: changing it
#: moves files, which needs an upgrade (`agentfs/store/upgrade.py`).
SHARD_SIZE = 1000
_SHARD = re.compile(r"^(?P<first>\d{6,})-(?P<last>\d{6,})$")


def message_file_name(sequence: int, role: str, ext: str = "md") -> str:
    """File name for a message with this sequence and role."""
    return f"{sequence:06d}-{role}.{ext}"


def parse_file_name(name: str) -> tuple[int, str, str] | None:
    """(sequence, role, ext) from a message file name, or None if it is not one."""
    match = FILE_NAME.fullmatch(name)  # `$` alone would let a final line break through
    if match is None:
        return None
    return int(match["sequence"]), match["role"], match["ext"]


def shard_name(sequence: int) -> str:
    """The folder of `messages/` that holds message `sequence`: `000000-000999`, ..."""
    first = sequence - sequence % SHARD_SIZE
    return f"{first:06d}-{first + SHARD_SIZE - 1:06d}"


@functools.lru_cache(maxsize=4096)
def is_shard_name(name: str) -> bool:
    """True if `name` is the name of a folder of `messages/` (`shard_name` of some
    sequence). Remembered: every listing of `messages/` asks it of each of its ~100
    names, and telling one costs about 3 µs."""
    match = _SHARD.fullmatch(name)
    return match is not None and shard_name(int(match["first"])) == name


def names_from(messages: str, sequence: int) -> tuple[list[str], list[str]]:
    """The message files in folder `messages` (a trace's `messages/`) with `sequence`
    or a later one, as paths below it, directly in it or in its folder of that
    sequence and those after it; and the folders looked in (`""` for `messages`
    itself), where such a file would appear. Told by name and by the kind of entry the
    listing gives: a regular file or a link (to be refused where it is read), not a
    folder, a FIFO or a device; nothing is read. What a run finds past the files
    agentfs numbered (`agentfs/store/trace.py:Trace.waits_for_user`), and what the
    trace list watches for them (`agentfs/core/status.py:trace_state`)."""
    found: list[str] = []
    looked: list[str] = []
    folders = [""]
    while folders:
        folder = folders.pop()
        try:
            with os.scandir(f"{messages}/{folder}" if folder else messages) as entries:
                listed = sorted((e.name, e.is_dir(follow_symlinks=False),
                                 e.is_file(follow_symlinks=False) or e.is_symlink())
                                for e in entries)
        except (FileNotFoundError, NotADirectoryError):
            continue
        looked.append(folder)
        for name, is_dir, is_file in listed:
            if is_dir and not folder and is_shard_name(name):
                if int(name[:name.index("-")]) + SHARD_SIZE > sequence:
                    folders.append(name)
            elif is_file and (parsed := parse_file_name(name)) and parsed[0] >= sequence:
                found.append(f"{folder}/{name}" if folder else name)
    return sorted(found), sorted(looked)
