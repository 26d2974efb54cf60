"""Writing loose Git objects so that a killed process never blocks the next one.

dulwich writes a loose object through `<object>.lock`; a process killed at
that instant leaves the lock and later writes of the same object fail.
Objects are named by their content, so no lock is needed at all: write a
unique temp file and rename it into place, as Git itself does. Like Git's
default `core.looseCompression`, loose objects are compressed for speed.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import zlib
from pathlib import Path
from typing import Any

from dulwich.objects import ShaFile, object_class

from agentfs.store.atomic import fsync_dir, open_creating

LOOSE_COMPRESSION = 1


class ObjectWriter:
    """An object store view for `commit_tree_changes`: reads go to dulwich, writes are
    lock-free."""

    def __init__(self, store: Any, objects_dir: Path, *, durable: bool = False) -> None:
        self.store = store
        self.objects_dir = objects_dir
        self.durable = durable  # fsync each object and its rename

    def __getitem__(self, sha: bytes) -> ShaFile:
        return self.store[sha]

    def __contains__(self, sha: bytes) -> bool:
        return sha in self.store

    def read_raw(self, sha: bytes) -> tuple[int, bytes]:
        """(type number, content) of object `sha` (hex id)."""
        type_num, data = self.store.get_raw(sha)
        return type_num, data

    def add_object(self, obj: ShaFile) -> None:
        self.add_raw(obj.type_num, obj.as_raw_string())

    def add_raw(self, type_num: int, data: bytes) -> bytes:
        """Store an object given its type and content; returns its hex id."""
        type_name = object_class(type_num).type_name  # type: ignore[union-attr]
        full = b"%s %d\0" % (type_name, len(data)) + data
        hex_id = hashlib.sha1(full).hexdigest()
        folder = self.objects_dir / hex_id[:2]
        target = folder / hex_id[2:]
        if target.exists():
            return hex_id.encode()
        tmp = folder / f"tmp_obj_{os.getpid()}_{secrets.token_hex(4)}"
        fd = open_creating(tmp, os.O_WRONLY | os.O_EXCL, 0o444)
        try:
            view = memoryview(zlib.compress(full, LOOSE_COMPRESSION))
            while view:
                view = view[os.write(fd, view) :]
            if self.durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)  # same name means same content: replacing is harmless
        if self.durable:
            fsync_dir(folder)
        return hex_id.encode()
