"""Index refreshes that must finish even if the committing process dies.

A commit writes the new index into `index.lock`, moves `refs/heads/main`,
then renames `index.lock` into place. A process killed between the last two
leaves the index behind HEAD, and `git status` would show the step as staged changes. Before it
commits, agentfs writes an *intent* naming the paths and holds an `flock` on
it until the index is refreshed; an intent nobody holds belongs to a dead
process. The next commit claims it (`DeadIntents`) and, while holding Git's
`index.lock`, sets those entries to what HEAD holds
(`agentfs/store/git/repo.py:GitRepo.commit_worktree`).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Self

from agentfs.store.locking import create_exclusive, try_flock


def _folder(state_dir: Path) -> Path:
    return state_dir / "intents"


@contextmanager
def index_intent(state_dir: Path, paths: list[str]) -> Iterator[None]:
    """Hold an intent for `paths` while the body commits and refreshes the index.

    If the body fails, the intent is left in place: unheld once this returns,
    it gets the index repaired in case the branch had already moved.
    """
    folder = _folder(state_dir)
    name = f"{os.getpid()}-{uuid.uuid4().hex}.json"
    tmp = folder / f".{name}"
    fd = create_exclusive(tmp)
    try:
        taken = try_flock(fd)  # a new file, named for this call alone: nobody else holds it
        assert taken
        os.write(fd, json.dumps(paths).encode())
        os.rename(tmp, folder / name)  # visible only once complete; the flock stays on it
        yield
        (folder / name).unlink(missing_ok=True)
    finally:
        os.close(fd)


class DeadIntents:
    """The intents of dead processes, claimed so that nobody else handles them meanwhile.

    `with DeadIntents(state_dir) as dead:` takes the flock of every intent
    nobody holds; `dead.paths` are the paths they name. When the block ends
    without an error the intent files are deleted, and only then released.
    """

    def __init__(self, state_dir: Path) -> None:
        self.folder = _folder(state_dir)
        self.paths: list[str] = []
        self._claimed: list[tuple[Path, int]] = []

    def __bool__(self) -> bool:
        return bool(self._claimed)

    def __enter__(self) -> Self:
        try:
            names = sorted(n for n in os.listdir(self.folder) if not n.startswith("."))
        except FileNotFoundError:
            return self
        try:
            for name in names:
                self._claim(self.folder / name)
        except BaseException:
            self._release()
            raise
        return self

    def _claim(self, path: Path) -> None:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return
        if not try_flock(fd):
            os.close(fd)  # its process is alive and still working
            return
        if os.fstat(fd).st_nlink == 0:
            os.close(fd)  # finished: its process deleted it before letting go
            return
        self._claimed.append((path, fd))
        with open(fd, "rb", closefd=False) as f:
            try:
                paths = json.loads(f.read() or b"[]")
            except ValueError:
                paths = []
        if isinstance(paths, list):
            self.paths.extend(p for p in paths if isinstance(p, str))

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if exc_type is None:
                for path, _ in self._claimed:
                    path.unlink(missing_ok=True)
        finally:
            self._release()

    def _release(self) -> None:
        for _, fd in self._claimed:
            os.close(fd)
        self._claimed = []
