"""Parsed message files kept across processes, so a long trace opens fast.

Parsing YAML frontmatter costs about 150 µs per file: 1.5 s for a trace of
10,000 messages, paid again by every `agentfs run`. After a scan that had
to parse many files, the parsed messages are saved to
`.git/agentfs/cache/<trace>.pickle` with each file's stat stamp (mtime,
ctime, size, inode), and the next process reuses every entry whose file still has
that stamp. It is derived data: deleting it only costs one slow load, and
an unreadable or outdated cache is ignored.

A file changed within the same clock tick as the cache was written could
keep its stamp; as Git does for its index ("racily clean" entries), an
entry whose file is not older than the cache file is not trusted.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import pydantic

from agentfs.store.atomic import purge_stale_temps, replace_derived
from agentfs.store.stamps import Stamp

#: Bumped when what is pickled changes shape (the versions below are checked too).
FORMAT = 5
#: Save after a scan that parsed at least this many files.
SAVE_AFTER = 32



def load(path: Path) -> dict[str, tuple[Stamp, Any]]:
    """Trusted entries of the cache at `path` (path below `messages/` → (stamp, message)); {} if none."""
    try:
        with open(path, "rb") as f:
            written_ns = os.fstat(f.fileno()).st_mtime_ns
            data = pickle.load(f)  # noqa: S301 -- agentfs' own file in .git/, as trusted as hooks
    except FileNotFoundError:
        return {}
    except Exception:  # noqa: BLE001 — any damage or version skew: start afresh
        return {}
    if not isinstance(data, dict) or data.get("key") != _key():
        return {}
    entries = data.get("entries")
    if not isinstance(entries, dict):
        return {}
    return {name: entry for name, entry in entries.items() if entry[0][0] < written_ns}


def save(path: Path, entries: dict[str, tuple[Stamp, Any]]) -> None:
    """Replace the cache at `path` (atomically, not fsynced: it can be rebuilt)."""
    purge_stale_temps(path.parent)  # left by processes killed while saving
    data = pickle.dumps({"key": _key(), "entries": entries}, protocol=pickle.HIGHEST_PROTOCOL)
    replace_derived(path, data, path.parent)


def _key() -> tuple[object, ...]:
    """What a cache must have been written by to be read."""
    from agentfs import __version__  # at call time: agentfs/__init__ imports the store

    return ("agentfs-parse-cache", FORMAT, __version__, pydantic.VERSION)
