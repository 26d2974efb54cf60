"""Writing loose Git objects so that a killed process never blocks the next one.

dulwich writes a loose object through `<object>.lock`; a process killed at
that instant leaves the lock and later writes of the same object fail.
Objects are named by their content, so no lock is needed at all: write a
unique temp file and rename it into place, as Git itself does.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

from dulwich.objects import ShaFile


class ObjectWriter:
    """An object store view for `commit_tree_changes`: reads go to dulwich, writes are
    lock-free."""

    def __init__(self, store: Any, objects_dir: Path) -> None:
        self.store = store
        self.objects_dir = objects_dir

    def __getitem__(self, sha: bytes) -> ShaFile:
        return self.store[sha]

    def __contains__(self, sha: bytes) -> bool:
        return sha in self.store

    def add_object(self, obj: ShaFile) -> None:
        hex_id = obj.id.decode()
        folder = self.objects_dir / hex_id[:2]
        target = folder / hex_id[2:]
        if target.exists():
            return
        folder.mkdir(exist_ok=True)
        tmp = folder / f"tmp_obj_{os.getpid()}_{secrets.token_hex(4)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        try:
            data = memoryview(obj.as_legacy_object())
            while data:
                data = data[os.write(fd, data) :]
        finally:
            os.close(fd)
        os.replace(tmp, target)  # same name means same content: replacing is harmless
