"""`trace.json` read as plain JSON, before any schema: cheap to import (no pydantic).

`agentfs/store/meta.py:load_meta` validates what `read_meta_json` returns; a
caller that wants a field or two of many traces fast (`agentfs status`) reads
them from it directly and leaves anything unexpected to `load_meta`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentfs.errors import AgentfsError, TraceNotFound
from agentfs.store.regularfile import read_trace_file
from agentfs.store.unicode import load_json

__all__ = ["FORMAT_VERSION", "read_meta_file", "read_meta_json"]

#: Version of the on-disk trace format this agentfs writes (it reads 1 to 4; older
#: ones are upgraded in place by `agentfs/store/upgrade.py`). 2: message files in
#: folders. 3: side branches named after their base commit, so `trace.json` no longer
#: counts them (`context.side_branches` is gone). 4: `iterations` is exact at every
#: commit, so a run reads it instead of counting the model's turns in every file.
FORMAT_VERSION = 4


def read_meta_json(path: Path, git_path: str) -> Any:
    """The JSON value in `trace.json` (`git_path` is its path in the repository, for
    the hint that restores it); usually a dict, but not checked to be one.

    Raises:
      TraceNotFound: the file does not exist.
      AgentfsError: it is not valid JSON, or is from a newer agentfs.
    """
    return read_meta_file(path, git_path)[1]


def read_meta_file(path: Path, git_path: str) -> tuple[bytes, Any]:
    """`trace.json`'s bytes and the JSON value in them (see `read_meta_json`)."""
    try:
        raw = read_trace_file(path)
        data = load_json(raw)
    except FileNotFoundError:
        raise TraceNotFound(f"{path}: missing", hint="is this a trace?") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise AgentfsError(
            f"{path}: not valid JSON ({exc})",
            hint=f"fix it, or restore it with `git checkout HEAD -- {git_path}`",
        ) from None
    version = data.get("format_version", FORMAT_VERSION) if isinstance(data, dict) else None
    if isinstance(version, int) and version > FORMAT_VERSION:
        raise AgentfsError(
            f"{path}: written by a newer agentfs (format {version})",
            hint="upgrade agentfs to read this trace",
        )
    return raw, data
