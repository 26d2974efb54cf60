"""Keeping the repository packed while traces run.

Every step writes its objects loose, one file each, and a trace's directory
tree is rewritten whole at every step, so loose objects grew quadratically
(219 MB for a 3,400-message trace, 4.4 MB after `git gc`). Here, after a
commit, once about `LOOSE_LIMIT` loose objects exist, the committing process
moves them into one pack, storing each new version of a tree or file as a
delta against an earlier version of the same path (`lineage.py`), and then
deletes the loose copies. Once there are `MIN_PACKS` packs, the small ones
are merged so that their sizes grow geometrically: by `git pack-objects
--stdin-packs` when a `git` binary is found, else by copying their entries
through dulwich's writers. There are only ever a handful, and a merge
rewrites a bounded number of objects, so no step waits long for it.

Safety does not rest on the lock that keeps two processes from packing at
the same moment (it only saves duplicate work, and `git gc` does not take
it): a pack is complete and renamed into place, `.idx` last, before any loose
object or older pack it replaces is deleted, and only objects that the new
pack holds are deleted. So whoever is about to use an object finds it loose
or packed, never neither; dulwich readers that looked in the packs just
before the new one appeared look again (`ObjectWriter.read_raw`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from dulwich.errors import ChecksumMismatch
from dulwich.object_format import DEFAULT_OBJECT_FORMAT
from dulwich.objects import ObjectID, object_class
from dulwich.pack import Pack, PackFileDisappeared, UnpackedObject

from agentfs.errors import GitStateError, RemoteError
from agentfs.store.atomic import alive
from agentfs.store.git.lineage import ReadRaw, predecessors, skip_delta_bases
from agentfs.store.git.objects import LOOSE_TEMP, ObjectWriter, open_pack_index, stated_size
from agentfs.store.git.packfile import TEMP_PREFIXES, delta, install_pack, make_delta, whole
from agentfs.store.git.remote import git
from agentfs.store.locking import FileLock, is_held, retry

#: Loose objects that start a packing run (about what 35 steps of a trace write).
LOOSE_LIMIT = 256
#: Bytes of loose objects (compressed) that make a process pack, however few they are.
LOOSE_BYTES = 8 * 1024 * 1024
#: Objects a process writes between two looks at how many are loose.
CHECK_EVERY = 32
#: Loose objects put into one pack at most, and their bytes (uncompressed): a bigger
#: backlog takes several steps.
BATCH_LIMIT, BATCH_BYTES = 4096, 64 * 1024 * 1024
#: Objects larger than this stay loose (a step committed a big file): packing reads
#: each object whole, and `git gc` packs them streaming.
PACK_OBJECT_MAX = 32 * 1024 * 1024
#: Seconds after which a `.pack` without its `.idx` is taken for a killed packer's.
ORPHAN_AGE = 3600
#: A delta is kept only if it is smaller than this share of its object ...
DELTA_WORTH = 0.5
#: ... and none is tried for objects smaller than this (a state file, a small
#: folder): it would save a few dozen bytes for the time of a larger one.
DELTA_MIN = 512
#: Merges wait until there are this many packs that may be merged.
MIN_PACKS = 8
#: Loose objects and packs that tell packing has stopped (`backlog_problem`).
BACKLOG_LOOSE, BACKLOG_PACKS = 8 * LOOSE_LIMIT, 4 * MIN_PACKS
#: Objects a merge may write at most; bigger packs are left as they are.
MERGE_LIMIT = 40_000
#: Seconds a merge by `git` may take; then it is killed, and tried again later.
MERGE_TIMEOUT = 120.0
#: The packs a merge is merging, in `.git/agentfs/`, until it has deleted them.
MERGING = "merging"
#: The `git` that merges packs; None merges them through dulwich (as when no `git`
#: binary is found).
GIT: str | None = "git"

_SAMPLED = [f"{n:02x}" for n in range(0, 256, 16)]
_HEX = frozenset("0123456789abcdef")

#: (type number, content) of an object this process still has in memory, or None.
Cached = Callable[[bytes], tuple[int, bytes] | None]


@dataclass
class PackReport:
    """What one packing run did."""

    packed: int = 0  # loose objects moved into the new pack
    pack: str | None = None  # the new pack's name
    merged: list[str] = field(default_factory=list)  # packs merged into others, now gone


class Packer:
    """Packs the repository's loose objects after a commit, when enough have piled up.

    One per `GitRepo`; `after_commit` is cheap except in the step that packs.
    """

    def __init__(self, git_dir: Path, objects: ObjectWriter) -> None:
        self.git_dir = git_dir
        self.objects_dir = git_dir / "objects"
        self.objects = objects
        self._next_check = 0  # `objects.written` at which to count the loose objects again
        self._packed_at = (0, 0)  # `objects.written` and `written_bytes` when it last packed
        #: The last error a packing run met (it never fails the commit that ran it).
        self.last_error: Exception | None = None

    def after_commit(self) -> PackReport | None:
        """Pack if about `LOOSE_LIMIT` objects are loose.

        This process packs once it has written `LOOSE_LIMIT` objects or
        `LOOSE_BYTES` bytes since it last did. Other processes' loose objects
        are counted (by sampling) at its first commit and then every
        `CHECK_EVERY` objects it writes.
        """
        written, written_bytes = self.objects.written, self.objects.written_bytes
        if (written - self._packed_at[0] < LOOSE_LIMIT
                and written_bytes - self._packed_at[1] < LOOSE_BYTES):
            if written < self._next_check:
                return None
            self._next_check = written + CHECK_EVERY
            if estimate_loose(self.objects_dir) < LOOSE_LIMIT:
                return None
        self._packed_at, self._next_check = (written, written_bytes), written + CHECK_EVERY
        try:
            return self.pack()
        except (OSError, ValueError, ChecksumMismatch, GitStateError, RemoteError,
                zlib.error) as exc:
            self.last_error = exc  # the commit is made; packing is tried again later
            return None

    def pack(self, *, limit: int = BATCH_LIMIT) -> PackReport | None:
        """Pack up to `limit` loose objects and merge the packs that are due.

        Returns None if another process is packing this repository.
        """
        with FileLock(_lock_path(self.git_dir), wait=0) as lock:  # never waits
            if not lock.held:
                return None
            report = PackReport()
            report.pack, report.packed = pack_loose_objects(
                self.git_dir, read=self.objects.read_raw, cached=self.objects.cached, limit=limit
            )
            held = (lock.fd,) if lock.fd is not None else ()
            report.merged = merge_packs(self.git_dir, hold=held)
            if report.merged:
                self.objects.forget_removed_packs()
            remove_stale_files(self.git_dir)
            return report


# --- loose objects -----------------------------------------------------------


def estimate_loose(objects_dir: Path) -> int:
    """About how many loose objects there are, from 16 of the 256 folders (as
    `git gc --auto` counts one)."""
    count = 0
    for folder in _SAMPLED:
        with contextlib.suppress(FileNotFoundError):
            count += sum(1 for name in os.listdir(objects_dir / folder) if len(name) == 38)
    return count * (256 // len(_SAMPLED))


def loose_objects(objects_dir: Path) -> tuple[dict[bytes, str], list[str]]:
    """Every loose object (hex id → file), and the temp files beside them."""
    found = {}
    base = os.fspath(objects_dir)
    temps = [f"{base}/{name}" for name in _names(objects_dir) if name.startswith(LOOSE_TEMP)]
    for n in range(256):
        folder = f"{base}/{n:02x}"
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            continue
        prefix = f"{n:02x}"
        for name in names:
            if len(name) == 38 and _HEX.issuperset(name):
                found[(prefix + name).encode()] = f"{folder}/{name}"
            elif name.startswith(LOOSE_TEMP):
                temps.append(f"{folder}/{name}")
    return found, temps


def read_loose(path: str, sha: bytes) -> tuple[int, bytes] | None:
    """(type, content) of a loose object; None if it is gone, or damaged (then it is
    left where it is, for `git fsck` to report). Read here rather than by dulwich's
    `ShaFile.from_path`, which parses every object: packing read 2,400 objects in
    115 ms CPU this way, in 185 ms that way."""
    try:
        with open(path, "rb") as f:
            if (stated_size(f) or 0) > PACK_OBJECT_MAX:
                return None  # left loose, unread
            raw = zlib.decompress(f.read())
    except (FileNotFoundError, zlib.error):
        return None
    nul = raw.find(b"\0")
    type_name, _, size = raw[:nul].partition(b" ")
    kind = object_class(type_name)
    if kind is None or not size.isdigit() or int(size) != len(raw) - nul - 1:
        return None
    if hashlib.sha1(raw, usedforsecurity=False).hexdigest().encode() != sha:
        return None
    return kind.type_num, raw[nul + 1 :]


def pack_loose_objects(
    git_dir: Path, *, read: ReadRaw, cached: Cached | None = None, limit: int = BATCH_LIMIT
) -> tuple[str | None, int]:
    """Move up to `limit` loose objects (the oldest, if there are more) into a new pack.

    Returns the pack's name (None if nothing was packed) and how many objects
    it holds. The loose copies are deleted only once the pack is in place.
    """
    objects_dir = git_dir / "objects"
    loose, temps = loose_objects(objects_dir)
    _remove_dead_temps(temps)
    batch = _batch(loose, cached, limit)
    if not batch:
        return None, 0
    previous = predecessors(batch, read)
    bases, position = skip_delta_bases(previous, batch)
    entries = []
    for sha in sorted(batch, key=position.__getitem__):  # bases first
        type_num, data = batch[sha]
        base = bases.get(sha)
        # a delta takes its base's type: `bases` are only guesses from paths
        if base is not None and len(data) >= DELTA_MIN and batch[base][0] == type_num:
            instructions = make_delta(batch[base][1], data)
            if len(instructions) < DELTA_WORTH * len(data):
                entries.append(delta(bytes.fromhex(sha.decode()), bytes.fromhex(base.decode()),
                                     instructions))
                continue
        entries.append(whole(bytes.fromhex(sha.decode()), type_num, data))
    name = install_pack(objects_dir / "pack", entries, len(entries))
    for sha in batch:
        # packed and deleted by another process meanwhile
        with contextlib.suppress(FileNotFoundError):
            os.unlink(loose[sha])
    return name, len(batch)


def _batch(
    loose: dict[bytes, str], cached: Cached | None, limit: int
) -> dict[bytes, tuple[int, bytes]]:
    """The loose objects to pack, read: all of them if they are at most `limit` and
    `BATCH_BYTES`, else the oldest ones, so that a commit and its trees and files
    (written just before it) mostly land in the same pack."""

    def read(order: list[bytes], *, all_or_none: bool) -> dict[bytes, tuple[int, bytes]] | None:
        batch, size = {}, 0
        for sha in order:
            got = read_already.get(sha)
            if got is None:
                got = cached(sha) if cached is not None else None
                got = got or read_loose(loose[sha], sha)
            if got is not None and len(got[1]) <= PACK_OBJECT_MAX:
                read_already[sha] = batch[sha] = got
                size += len(got[1])
                if size >= BATCH_BYTES:
                    return None if all_or_none else batch
        return batch

    read_already: dict[bytes, tuple[int, bytes]] = {}
    if len(loose) <= limit:
        whole = read(list(loose), all_or_none=True)
        if whole is not None:
            return whole
    oldest = sorted(loose, key=lambda sha: _mtime(loose[sha]))[:limit]
    return read(oldest, all_or_none=False) or {}


def _mtime(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except FileNotFoundError:
        return 0


# --- merging packs ------------------------------------------------------------


def packs_to_merge(pack_dir: Path) -> list[str]:
    """The small packs to merge so that, sorted by size, each pack holds at least
    twice as many objects as all smaller ones together; [] if none are due.

    Packs with a `.keep`, `.promisor` or `.mtimes` file are never merged, nor any
    pack while a `multi-pack-index` lists them, and a merge never writes more than
    `MERGE_LIMIT` objects.
    """
    files = set(_names(pack_dir))
    if "multi-pack-index" in files:
        return []
    sized = []
    for file in files:
        name = file[:-4]
        # `.tmp-<pid>-pack-*` is a `git repack` installing its pack: not ours to take
        if not (file.startswith("pack-") and file.endswith(".idx")) or f"{name}.pack" not in files:
            continue
        if any(f"{name}{ext}" in files for ext in (".keep", ".promisor", ".mtimes")):
            continue
        with open_pack_index(pack_dir / file) as index:
            if index is not None:  # else damaged, or gone meanwhile: left for Git to report
                sized.append((len(index), name))
    if len(sized) < MIN_PACKS:
        return []
    sized.sort()
    total, upto = 0, 0
    for i, (count, _) in enumerate(sized):
        if total + count > MERGE_LIMIT:
            break
        if i and count < 2 * total:
            upto = i + 1
        total += count
    return [name for _, name in sized[:upto]] if upto >= 2 else []


def merge_packs(git_dir: Path, *, hold: tuple[int, ...] = ()) -> list[str]:
    """Merge the small packs that are due (`packs_to_merge`); returns those now gone.

    With a `git` binary (unless `GIT` is None), `git pack-objects --stdin-packs`
    writes one pack of those packs' objects, which also finds deltas for the
    objects each pack stores whole, and the merged packs are deleted once it is
    in place; loose objects are left alone (`git repack --geometric` would pack
    them too, big files included). Without `git`, `merge_with_dulwich` copies
    the entries as they are. `hold` are the packing lock's file descriptors:
    `git` keeps them open, so the lock stays held while it writes, even after
    this process is killed.
    """
    pack_dir = git_dir / "objects" / "pack"
    gone = _finish_killed_merge(git_dir)
    due = packs_to_merge(pack_dir)
    if not due:
        return gone
    record = git_dir / "agentfs" / MERGING
    record.parent.mkdir(exist_ok=True)
    # a torn record names no pack: nothing is deleted by it
    record.write_bytes("".join(f"{name}\n" for name in due).encode())
    try:
        if GIT is None:
            merge_with_dulwich(git_dir, due)
        else:
            try:
                _merge_with_git(git_dir, due, hold)
            except FileNotFoundError:  # no `git` on this machine
                merge_with_dulwich(git_dir, due)
    finally:
        record.unlink(missing_ok=True)
    files = set(_names(pack_dir))
    return gone + [name for name in due if f"{name}.idx" not in files]


def _merge_with_git(git_dir: Path, due: list[str], hold: tuple[int, ...]) -> None:
    """Merge the packs `due` into one by `git pack-objects --stdin-packs`, then delete
    them. One pack whatever `pack.packSizeLimit` says: the merged packs are deleted
    only once one pack holds all their objects."""
    pack_dir = git_dir / "objects" / "pack"
    listed = "".join(f"{name}.pack\n" for name in due).encode()
    done = git(git_dir, f"--git-dir={git_dir}", "-c", "pack.packSizeLimit=0", "pack-objects",
               "--stdin-packs", "--delta-base-offset", "-q", str(pack_dir / "pack"),
               input=listed, pass_fds=hold, timeout=MERGE_TIMEOUT)
    merged = f"pack-{done.stdout.decode().strip()}"
    if not (pack_dir / f"{merged}.idx").is_file():
        raise GitStateError(f"git pack-objects wrote no {merged}.idx in {pack_dir}")
    for name in due:
        if name != merged:
            remove_pack(pack_dir, name)


def _finish_killed_merge(git_dir: Path) -> list[str]:
    """Delete the packs a merge listed (`MERGING`) and was killed before it deleted:
    its merged pack may be in place (a `git` goes on after its process is killed).
    Each listed pack whose objects one other pack all holds goes; returns those.
    (Left, they would stay for good beside a merged pack too big to merge again.)"""
    record = git_dir / "agentfs" / MERGING
    try:
        listed = record.read_text().split()
    except (FileNotFoundError, UnicodeDecodeError):
        return []
    pack_dir = git_dir / "objects" / "pack"
    gone = []
    others = [file[:-4] for file in _names(pack_dir)
              if file.startswith("pack-") and file.endswith(".idx") and file[:-4] not in listed]
    for name in listed:
        shas = _pack_shas(pack_dir, name)
        if shas and any(_holds_all(pack_dir, other, shas) for other in others):
            remove_pack(pack_dir, name)
            gone.append(name)
    record.unlink(missing_ok=True)
    return gone


def _pack_shas(pack_dir: Path, name: str) -> list[ObjectID]:
    """The ids of the objects in pack `name`; [] if it is gone or unreadable."""
    with open_pack_index(pack_dir / f"{name}.idx") as index:
        return [] if index is None else list(index)


def _holds_all(pack_dir: Path, name: str, shas: list[ObjectID]) -> bool:
    """Whether pack `name` holds every object of `shas`."""
    with open_pack_index(pack_dir / f"{name}.idx") as index:
        if index is None:
            return False
        try:
            for sha in shas:
                index.object_offset(sha)
        except KeyError:
            return False
    return True


def merge_with_dulwich(git_dir: Path, names: list[str]) -> str | None:
    """Write one pack holding every object of the packs `names` through dulwich's
    writers, entries copied as they are (deltas included), then delete those packs.

    Each pack's checksums are checked first, so a damaged pack fails the merge
    and every pack stays. Returns the new pack's name; None if one of the packs
    is gone (another process merged it first), and then nothing is changed.
    """
    pack_dir = git_dir / "objects" / "pack"
    packs: list[Pack] = []
    try:
        for name in names:
            pack = Pack(str(pack_dir / name), object_format=DEFAULT_OBJECT_FORMAT)
            packs.append(pack)
            try:  # opened now: a pack deleted after this is still read to its end
                pack.index  # noqa: B018 — dulwich opens its files on first use
                pack.data  # noqa: B018
            except (OSError, PackFileDisappeared):
                return None  # another process merged it first
        for pack in packs:
            pack.check_length_and_checksum()
            pack.index.check()
            pack.data.check()
        members = [set(pack) for pack in packs]
        count = len(set().union(*members))

        def entries() -> Iterator[UnpackedObject]:
            seen: set[bytes] = set()
            for pack, shas in zip(packs, members, strict=True):
                for entry in pack.iter_unpacked_subset(shas, convert_ofs_delta=True):
                    if entry.sha() not in seen:
                        seen.add(entry.sha())
                        yield entry

        merged = install_pack(pack_dir, entries(), count)
    finally:
        for pack in packs:
            pack.close()
    for name in names:
        if name != merged:
            remove_pack(pack_dir, name)
    return merged


def remove_pack(pack_dir: Path, name: str) -> None:
    """Delete a pack whose objects another pack holds: `.idx` first, so that it
    disappears for new readers at once; readers that have it open keep reading."""
    for ext in (".idx", ".pack", ".rev", ".bitmap"):
        (pack_dir / f"{name}{ext}").unlink(missing_ok=True)


# --- leftovers ------------------------------------------------------------------


def remove_stale_files(git_dir: Path) -> None:
    """Delete what killed packers left in `objects/pack`: our temp files of processes
    that are gone; Git's temp files (`tmp_*`, `.tmp-*`: a `git` killed while it wrote a
    pack, as a merge that ran out of time is) and a `.pack` whose `.idx` never came
    (killed between the two renames; unseen by Git and dulwich) once they have not
    been written for `ORPHAN_AGE`, in case a `git` command is writing them. (Temp
    files of loose objects go when loose objects are packed.)"""
    pack_dir = git_dir / "objects" / "pack"
    files = set(_names(pack_dir))
    for name in files:
        path = pack_dir / name
        if _temp_pid(name) is not None:
            _remove_dead_temps([os.fspath(path)])
        elif (name.startswith(("tmp_", ".tmp-"))
                or (name.endswith(".pack") and f"{name[:-5]}.idx" not in files)):
            try:
                if time.time() - path.stat().st_mtime > ORPHAN_AGE:
                    path.unlink()
            except FileNotFoundError:
                pass


def _remove_dead_temps(paths: list[str]) -> None:
    """Delete our temp files (`<prefix><pid>_<random>`) whose writing process is gone."""
    for path in paths:
        pid = _temp_pid(os.path.basename(path))
        if pid is not None and not alive(pid):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def _temp_pid(name: str) -> int | None:
    """The pid in the name of one of our temp files (`<prefix><pid>_<random>`), else None.

    Git's own (`tmp_obj_XXXXXX`, 6 random letters and digits, no `_`) have none: one
    that is all digits would read as the pid of a dead process.
    """
    prefix = next((p for p in (*TEMP_PREFIXES, LOOSE_TEMP) if name.startswith(p)), None)
    if prefix is None:
        return None
    pid, ours, _ = name[len(prefix) :].partition("_")
    return int(pid) if ours and pid.isdigit() else None


def _names(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)
    except FileNotFoundError:
        return []


def backlog_problem(git_dir: Path) -> str | None:
    """What to do when packing has not kept up: loose objects or packs far past what
    starts a packing run or a merge (`BACKLOG_LOOSE`, `BACKLOG_PACKS`); None if it has.

    Packing never fails a commit, so a repository it stopped on (a damaged object,
    a packing run that never ended) only grows; this says so, for `agentfs doctor`.
    """
    objects_dir = git_dir / "objects"
    loose = estimate_loose(objects_dir)
    packs = sum(1 for name in _names(objects_dir / "pack") if name.endswith(".idx"))
    if loose <= BACKLOG_LOOSE and packs <= BACKLOG_PACKS:
        return None
    holder = (f" (a packing run holds {_lock_path(git_dir)} now)"
              if is_held(_lock_path(git_dir)) else "")
    return (f"{objects_dir}: about {loose:,} loose objects and {packs} packs: packing has "
            f"not kept up{holder}; `git gc` packs them (if this comes back, `git fsck` "
            "names any damaged object that stops it)")


def wait_for_packing(git_dir: Path, timeout: float) -> bool:
    """Wait up to `timeout` seconds while a packing run holds the repository's packing
    lock (one of any agentfs process, or a `git pack-objects` it left running when it was
    killed); whether none is running now. `git fsck` run meanwhile may report the
    packs being merged as missing."""
    return retry(lambda: (not is_held(_lock_path(git_dir))) or None, timeout) is not None


def _lock_path(git_dir: Path) -> Path:
    """The repository's packing lock: an flock on this file (`FileLock`), by one
    packing run at a time."""
    return git_dir / "agentfs" / "locks" / "pack.lock"
