"""Index refreshes that must finish even if the committing process dies.

A commit moves `refs/heads/main` first and refreshes the index entries of
its paths right after. A process killed in between leaves the index behind
HEAD, and `git status` would show the step as staged changes. Before it
commits, agentfs writes an *intent* naming the paths and holds an `flock` on
it until the index is refreshed; an intent nobody holds belongs to a dead
process, and `agentfs/store/gitrepo.py:GitRepo.repair_index` finishes it.
"""

from __future__ import annotations

import fcntl
import json
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from agentfs.store.atomic import open_creating


def _folder(state_dir: Path) -> Path:
    return state_dir / "intents"


@contextmanager
def index_intent(state_dir: Path, paths: list[str]) -> Iterator[None]:
    """Hold an intent for `paths` while the body commits and refreshes the index."""
    folder = _folder(state_dir)
    name = f"{os.getpid()}-{uuid.uuid4().hex}.json"
    tmp = folder / f".{name}"
    fd = open_creating(tmp, os.O_RDWR | os.O_EXCL)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, json.dumps(paths).encode())
        os.rename(tmp, folder / name)  # visible only once complete; the flock stays on it
        yield
        os.unlink(folder / name)
    finally:
        os.close(fd)


def dead_intents(state_dir: Path) -> Iterator[tuple[Path, list[str]]]:
    """(intent file, paths) of intents whose process died; delete the file once handled."""
    folder = _folder(state_dir)
    try:
        names = sorted(n for n in os.listdir(folder) if not n.startswith("."))
    except FileNotFoundError:
        return
    for name in names:
        path = folder / name
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # its process is alive and still working
            try:
                paths = json.loads(os.read(fd, 1 << 24) or b"[]")
            except ValueError:
                paths = []
            yield path, [p for p in paths if isinstance(p, str)]
        finally:
            os.close(fd)
