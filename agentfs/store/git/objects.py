"""Writing loose Git objects so that a killed process never blocks the next one.

dulwich writes a loose object through `<object>.lock`; a process killed at
that instant leaves the lock and later writes of the same object fail.
Objects are named by their content, so no lock is needed at all: write a
unique temp file and rename it into place, as Git itself does. Like Git's
default `core.looseCompression`, loose objects are compressed for speed.

Loose objects do not stay loose: `packing.py` moves them into packs. So a
read can miss an object that dulwich looked for in the packs just before its
pack appeared and then among the loose objects just after they were
deleted; reads look again, as Git does.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import secrets
import stat
import threading
import zlib
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from dulwich.object_format import DEFAULT_OBJECT_FORMAT
from dulwich.objects import Blob, ObjectID, ShaFile, object_class
from dulwich.pack import OFS_DELTA, REF_DELTA, PackIndex, load_pack_index

from agentfs.errors import GitStateError
from agentfs.store.atomic import CREATE_ATTEMPTS, fsync_dir, open_creating
from agentfs.store.git.trees import TREE, cached_tree

LOOSE_COMPRESSION = 1

#: Objects written recently are kept in memory up to this many bytes in all, so
#: that packing them need not read them back (trees are kept by `trees.py`).
RECENT_BYTES = 8 * 1024 * 1024
#: ... and only objects up to this size.
RECENT_OBJECT = 256 * 1024

#: The temp files of loose objects (in their folder, or in `objects/` for a streamed one).
LOOSE_TEMP = "tmp_obj_"

#: The id no object has (Git's "no object").
NULL_ID = b"0" * 40
#: Bytes read at a time from a file hashed or stored, or from a big loose object.
HASH_CHUNK = 1024 * 1024

#: Reads of an object that is being packed meanwhile (see the module docstring).
READ_ATTEMPTS = 3


class FileChangedError(GitStateError):
    """A file changed while it was stored: commit it again."""


class ObjectWriter:
    """The repository's objects as every agentfs reader and writer sees them: writes
    are lock-free loose objects, reads go to dulwich's store under one lock (and
    retry when a merge moved the object meanwhile)."""

    def __init__(self, store: Any, objects_dir: Path, *, durable: bool = False) -> None:
        self.store = store
        self.objects_dir = objects_dir
        self.durable = durable  # fsync each object and its rename
        #: Loose objects this writer has created (not counting ones that existed),
        #: and their bytes on disk.
        self.written = 0
        self.written_bytes = 0
        self._recent: OrderedDict[bytes, tuple[int, bytes]] = OrderedDict()
        self._recent_bytes = 0
        self._lock = threading.Lock()  # the watcher commits from several threads
        # dulwich's list of open packs is not safe for threads: two that both find
        # a pack gone (merged) both try to drop it, and one gets a KeyError
        self._store_lock = threading.Lock()

    def __getitem__(self, sha: bytes) -> ShaFile:
        got = self.cached(sha)
        if got is not None:
            return ShaFile.from_raw_string(got[0], got[1], ObjectID(sha))
        type_num, data = self._read_stored(sha)
        return ShaFile.from_raw_string(type_num, data, verify_sha=ObjectID(sha))

    def __contains__(self, sha: bytes) -> bool:
        if self._loose_path(sha.decode()).exists():  # dulwich would read it whole
            return True
        with self._store_lock:
            return any(sha in self.store for _ in range(READ_ATTEMPTS))

    def read_raw(self, sha: bytes) -> tuple[int, bytes]:
        """(type number, content) of object `sha` (hex id).

        Raises:
            KeyError: the repository does not have it.
        """
        return self.cached(sha) or self._read_stored(sha)

    def size(self, sha: bytes) -> int:
        """The content size of object `sha` (hex id), from its header alone, loose or
        packed; a packed delta's from the start of the delta.

        Raises:
            KeyError: the repository does not have it.
        """
        path = self._loose_path(sha.decode())
        try:
            with open(path, "rb") as f:
                size = stated_size(f)
            if size is not None:
                return size
        except FileNotFoundError:
            pass  # packed (or packed meanwhile); a damaged one is read to say so
        with contextlib.suppress(OSError, IndexError, zlib.error), \
                self._packed_entry(sha) as entry:
            if entry is not None:
                pack, type_num, size = entry
                if type_num < OFS_DELTA:
                    return size
                # a delta starts with the size of its base, then of what it makes
                head = zlib.decompressobj().decompress(pack.read(64), 20)
                return _varints(head, 2)[1]
        return len(self.read_raw(sha)[1])

    def blob_chunks(self, sha: bytes) -> Iterator[bytes]:
        """The content of blob `sha` (hex id) a chunk at a time, decompressed as it is
        read and checked against its id: a loose one, or one a pack holds whole (big
        files are loose, or packed whole by `git gc`); a delta is read whole.

        Raises:
            KeyError: the repository does not have it.
            GitStateError: the object is damaged.
        """
        path = self._loose_path(sha.decode())
        try:
            f = open(path, "rb")  # noqa: SIM115 — closed when the chunks end
        except FileNotFoundError:
            pass
        else:
            with f:
                yield from _inflated(f, sha, path, header=None)
            return
        with self._packed_entry(sha) as entry:
            if entry is not None and entry[1] == Blob.type_num:
                pack, _, size = entry
                yield from _inflated(pack, sha, pack.name, header=b"blob %d\0" % size)
                return
        yield self.read_raw(sha)[1]

    @contextlib.contextmanager
    def _packed_entry(self, sha: bytes) -> Iterator[tuple[BinaryIO, int, int] | None]:
        """The pack holding object `sha` (hex id) open at its entry's data, the entry's
        type (a delta's own) and size; None if no pack holds it (or it went meanwhile)."""
        pack_dir = self.objects_dir / "pack"
        try:
            names = [name for name in os.listdir(pack_dir) if name.endswith(".idx")]
        except FileNotFoundError:
            names = []
        for name in names:
            with open_pack_index(pack_dir / name) as index:
                if index is None:  # the slow path reads it, or says what is wrong
                    continue
                try:
                    offset = index.object_offset(ObjectID(sha))
                except KeyError:
                    continue
            try:
                f = open(pack_dir / f"{name[:-4]}.pack", "rb")  # noqa: SIM115
            except FileNotFoundError:
                break
            with f:
                f.seek(offset)
                yield f, *_entry_header(f)
                return
        yield None

    def _read_stored(self, sha: bytes) -> tuple[int, bytes]:
        with self._store_lock:
            for _ in range(READ_ATTEMPTS - 1):
                with contextlib.suppress(KeyError):
                    return self.store.get_raw(sha)
            return self.store.get_raw(sha)

    def forget_removed_packs(self) -> None:
        """Have dulwich close the packs it has open that were deleted (merged), so
        that their disk space is freed."""
        with self._store_lock:
            _ = self.store.packs

    def cached(self, sha: bytes) -> tuple[int, bytes] | None:
        """(type, content) of an object (hex id) still in memory, else None."""
        with self._lock:
            got = self._recent.get(sha)
        if got is not None:
            return got
        tree = cached_tree(sha)
        return None if tree is None else (TREE, tree)

    def _remember(self, sha: bytes, type_num: int, data: bytes) -> None:
        if len(data) > RECENT_OBJECT or type_num == TREE:
            return
        with self._lock:
            if sha in self._recent:
                return
            self._recent[sha] = (type_num, data)
            self._recent_bytes += len(data)
            while self._recent_bytes > RECENT_BYTES:
                _, (_, dropped) = self._recent.popitem(last=False)
                self._recent_bytes -= len(dropped)

    def add_object(self, obj: ShaFile) -> None:
        self.add_raw(obj.type_num, obj.as_raw_string())

    def add_raw(self, type_num: int, data: bytes) -> bytes:
        """Store an object given its type and content; returns its hex id."""
        type_name = object_class(type_num).type_name  # type: ignore[union-attr]
        full = b"%s %d\0" % (type_name, len(data)) + data
        hex_id = hashlib.sha1(full, usedforsecurity=False).hexdigest()
        sha = hex_id.encode()
        self._remember(sha, type_num, data)
        target = self._loose_path(hex_id)
        if target.exists():
            return sha
        tmp = target.parent / f"{LOOSE_TEMP}{os.getpid()}_{secrets.token_hex(4)}"
        size = self._write_temp(tmp, [zlib.compress(full, LOOSE_COMPRESSION)], target)
        self._rename(tmp, target, size)
        return sha

    def add_stream(self, f: BinaryIO, size: int) -> bytes:
        """Store the next `size` bytes of `f` (seekable) as a blob, read, hashed and
        compressed a chunk at a time, so a file of any size costs `HASH_CHUNK` of
        memory; returns its hex id.

        The bytes are hashed first, as `git hash-object -w` does: a blob the
        repository has (a file touched, or written again the same) is not
        compressed and written again.

        Raises:
            FileChangedError: `f` ended before `size` bytes (the file was cut
                short while it was read).
        """
        start = f.tell()
        sha = hash_stream(f, size)
        if sha == NULL_ID:
            raise FileChangedError("the file was cut short while it was read")
        if sha in self:
            return sha
        f.seek(start)
        header = b"blob %d\0" % size
        digest = hashlib.sha1(header, usedforsecurity=False)
        compress = zlib.compressobj(LOOSE_COMPRESSION)

        def compressed() -> Iterator[bytes]:
            yield compress.compress(header)
            left = size
            for chunk in _next_bytes(f, size):
                digest.update(chunk)
                left -= len(chunk)
                yield compress.compress(chunk)
            if left:
                raise FileChangedError("the file was cut short while it was read")
            yield compress.flush()

        # written before its id is known, so beside the object folders; renamed
        # only once whole, so an object file is never seen half-written
        tmp = self.objects_dir / f"{LOOSE_TEMP}{os.getpid()}_{secrets.token_hex(4)}"
        written = self._write_temp(tmp, compressed(), tmp)
        hex_id = digest.hexdigest()
        target = self._loose_path(hex_id)
        if target.exists():
            tmp.unlink()
        else:
            self._rename(tmp, target, written)
        return hex_id.encode()

    def _loose_path(self, hex_id: str) -> Path:
        """Where the loose object `hex_id` is, or goes."""
        return self.objects_dir / hex_id[:2] / hex_id[2:]

    def _write_temp(self, tmp: Path, chunks: Iterable[bytes], target: Path) -> int:
        """Write `chunks` into the new file `tmp`; returns its size. On an error (a
        full disk) the temp file is removed, and the error names `target`."""
        fd = open_creating(tmp, os.O_WRONLY | os.O_EXCL, 0o444)
        size = 0
        try:
            for chunk in chunks:
                view = memoryview(chunk)
                size += len(view)
                while view:
                    view = view[os.write(fd, view) :]
            if self.durable:
                os.fsync(fd)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise OSError(exc.errno, exc.strerror or str(exc), str(target)) from exc
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        finally:
            os.close(fd)
        return size

    def _rename(self, tmp: Path, target: Path, size: int) -> None:
        """Move the written object `tmp` into place as `target` and count it."""
        for _ in range(CREATE_ATTEMPTS):
            try:  # same name means same content: replacing is harmless
                os.replace(tmp, target)
                break
            except FileNotFoundError:  # its folder is missing, or pruned by `git gc`
                target.parent.mkdir(exist_ok=True)
        else:
            os.replace(tmp, target)
        if self.durable:
            fsync_dir(target.parent)
        self.written += 1
        self.written_bytes += size


@contextlib.contextmanager
def open_pack_index(path: Path) -> Iterator[PackIndex | None]:
    """The pack index at `path`, closed after use; None if it is gone (its pack was
    merged meanwhile) or damaged (left for `git fsck` to report)."""
    try:
        index = load_pack_index(str(path), DEFAULT_OBJECT_FORMAT)
    except (OSError, ValueError, AssertionError):
        yield None
        return
    try:
        yield index
    finally:
        index.close()


def _inflated(f: BinaryIO, sha: bytes, where: str | os.PathLike[str],
              header: bytes | None) -> Iterator[bytes]:
    """The content of the zlib stream at `f`, at most `HASH_CHUNK` at a time however
    well it compressed, checked against `sha` as it ends: a loose object (its
    header, in the stream, is skipped) or a pack entry (`header` is its object's)."""
    inflate, digest = zlib.decompressobj(), hashlib.sha1(usedforsecurity=False)
    head: bytes | None = b""
    if header is not None:
        digest.update(header)
        head = None
    try:
        while not inflate.eof:
            chunk = inflate.unconsumed_tail or f.read(HASH_CHUNK)
            data = inflate.decompress(chunk, HASH_CHUNK)
            if not chunk and not data:
                break  # the file ends before the stream does
            digest.update(data)
            if head is not None:  # the header, up to its NUL, is no content
                head += data
                if b"\0" not in head:
                    continue
                data, head = head.partition(b"\0")[2], None
            yield data
    except zlib.error:
        pass
    if head is not None or not inflate.eof or digest.hexdigest().encode() != sha:
        raise GitStateError(f"{where}: object {sha.decode()} is damaged "
                            "(git fsck names what else is)")


def _entry_header(f: BinaryIO) -> tuple[int, int]:
    """(type, size) of the pack entry at `f`, which is left at its compressed data
    (past a delta's base)."""
    byte = f.read(1)[0]
    type_num, size, shift = (byte >> 4) & 7, byte & 15, 4
    while byte & 0x80:
        byte = f.read(1)[0]
        size |= (byte & 0x7F) << shift
        shift += 7
    if type_num == OFS_DELTA:
        while f.read(1)[0] & 0x80:
            pass
    elif type_num == REF_DELTA:
        f.read(20)
    return type_num, size


def _varints(data: bytes, count: int) -> list[int]:
    """The first `count` little-endian base-128 numbers of `data` (a delta's sizes)."""
    found, at = [], 0
    for _ in range(count):
        value = shift = 0
        while True:
            byte = data[at]
            at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        found.append(value)
    return found


def stated_size(f: BinaryIO) -> int | None:
    """The content size a loose object's header states, from the first bytes of its
    file `f` (left at its start); None if they are no loose object's."""
    try:
        head = zlib.decompressobj().decompress(f.read(256), 64)
    except zlib.error:
        return None
    finally:
        f.seek(0)
    header, nul, _ = head.partition(b"\0")
    size = header.partition(b" ")[2]
    return int(size) if nul and size.isdigit() else None  # a cut header states nothing


def file_blob_id(path: str | os.PathLike[str], st: os.stat_result) -> bytes:
    """The blob id (hex) Git gives the file at `path`: of its content, or of its
    target's name for a symlink; `st` is its `lstat`, which tells which.

    The content is hashed a chunk at a time, so a huge file costs no memory. A
    file cut short while it is read, or that is no longer a regular file when it
    is opened (it is never opened through a link, nor read if it is a FIFO),
    gets the null id, which no blob has.
    """
    if stat.S_ISLNK(st.st_mode):
        target = os.fsencode(os.readlink(path))
        return hash_stream(io.BytesIO(target), len(target))
    with open(path, "rb", opener=_open_unfollowed) as f:
        now = os.fstat(f.fileno())
        if not stat.S_ISREG(now.st_mode):
            return NULL_ID
        return hash_stream(f, now.st_size)


def hash_stream(f: BinaryIO, size: int) -> bytes:
    """The blob id (hex) of the next `size` bytes of `f`, read a chunk at a time; the
    null id if `f` ends before."""
    digest = hashlib.sha1(b"blob %d\0" % size, usedforsecurity=False)
    left = size
    for chunk in _next_bytes(f, size):
        digest.update(chunk)
        left -= len(chunk)
    return NULL_ID if left else digest.hexdigest().encode()


def _next_bytes(f: BinaryIO, size: int) -> Iterator[bytes]:
    """The next `size` bytes of `f`, `HASH_CHUNK` at a time; fewer if `f` ends first."""
    left = size
    while left and (chunk := f.read(min(left, HASH_CHUNK))):
        left -= len(chunk)
        yield chunk


def _open_unfollowed(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK)
