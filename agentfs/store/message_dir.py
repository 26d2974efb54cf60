"""One trace's `messages/` folder: where each file goes, listing, parsing (with caches), writing.

Message files are kept in folders of `SHARD_SIZE` sequences, named after
the sequences they hold (`messages/000000-000999/000042-assistant.md`), so
a step rewrites a tree of at most that many entries however long the
trace is, and the last folder holds the latest messages. A file found
directly in `messages/` (the layout before folders, or a file a person put
there) is read too; `agentfs/store/upgrade.py` moves such files into their
folder. Every path of a message file is built and parsed here
(`message_relpath`, `parse_message_relpath`).

Parsed files are kept per process and on disk (`agentfs/store/parsecache.py`),
keyed by each file's stat, so a long trace opens fast and a run re-reads only
what changed. The sequences each folder's file names tell are kept too, per process
and on disk (`agentfs/store/foldernames.py`), so a view of a long compressed trace
lists no folder that did not change. What a process keeps is bounded
(`agentfs/store/dirmemory.py`). Message files are read through
`agentfs/store/messages.py`, the one reader and writer of their format.
"""

from __future__ import annotations

import bisect
import os
import re
import stat
import time
from collections.abc import Iterable
from pathlib import Path

from agentfs.errors import MessageFileError
from agentfs.store import foldernames
from agentfs.store.atomic import atomic_write
from agentfs.store.dirmemory import memory_of
from agentfs.store.filenames import (
    FILE_NAME,
    SHARD_SIZE,
    is_shard_name,
    parse_file_name,
    shard_name,
)
from agentfs.store.gcpause import gc_paused
from agentfs.store.inbox import is_ignored_name
from agentfs.store.messages import Message, load_message, render_message
from agentfs.store.regularfile import check_real_folder, linked_folder
from agentfs.store.stamps import RACY_NS, Stamp, settled, stamp_of

__all__ = [
    "SHARD_SIZE",
    "DirKey",
    "Listing",
    "MessageDir",
    "MessageLookup",
    "WindowReader",
    "folders",
    "is_shard_name",
    "message_relpath",
    "parse_message_relpath",
    "shard_name",
]


#: `agentfs/store/filenames.py:FILE_NAME` over lines, the sequence alone.
_FILE_NAMES = re.compile(FILE_NAME.pattern.replace("(?P<sequence>", "(").replace(
    "(?P<role>", "(?:").replace("(?P<ext>", "(?:"), re.MULTILINE)
#: The same, the whole name and its sequence.
_NAMED_FILES = re.compile(f"^({_FILE_NAMES.pattern[1:-1]})$", re.MULTILINE)

#: (inode, mtime) of `messages/` and of its newest folder: changes when a file is
#: added, removed or renamed there.
DirKey = tuple[tuple[int, int] | None, tuple[int, int] | None] | None

#: The files of `messages/` as listed: folder (`""` for `messages/` itself, else the
#: name of one of its folders) → file name → stamp.
Listing = dict[str, dict[str, Stamp]]

#: The most sequences a `MessageLookup` reads at once: a folder's worth.
LOOKUP_RUN = 1024
#: Above every sequence: `MessageDir.previous` of it is the highest one.
_NO_SEQUENCE = 10**18


def message_relpath(file_name: str) -> str:
    """Where the message file named `file_name` belongs, relative to `messages/`:
    `<folder>/<file name>` (`000000-000999/000042-assistant.md`).

    Raises:
        ValueError: `file_name` is not a message file name.
    """
    parsed = parse_file_name(file_name)
    if parsed is None:
        raise ValueError(f"not a message file name: {file_name!r}")
    return f"{shard_name(parsed[0])}/{file_name}"


def parse_message_relpath(rel: str) -> tuple[int, str, str] | None:
    """(sequence, role, ext) of a path relative to `messages/` where agentfs reads
    message files (in its folder, or directly in `messages/`), else None."""
    folder, _, name = rel.rpartition("/")
    parsed = parse_file_name(name)
    if parsed is None or (folder and (folder != shard_name(parsed[0]))):
        return None
    return parsed


def _top(messages: Path) -> tuple[list[str], list[str]] | None:
    """The names of the files (and other entries that are no folder) directly in
    `messages/`, and of its folders of messages; None if there is no `messages/`.

    Raises:
        MessageFileError: a folder's name is taken by a symlink (`check_real_folder`).
    """
    loose: list[str] = []
    shards: list[str] = []
    try:
        with os.scandir(messages) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    if is_shard_name(entry.name):
                        shards.append(entry.name)
                elif is_shard_name(entry.name) and entry.is_symlink():
                    raise linked_folder(Path(entry.path))
                else:
                    loose.append(entry.name)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return loose, shards


def folders(messages: Path) -> list[Path]:
    """`messages/` and its folders of messages: where a file added, removed or renamed
    changes a folder's mtime."""
    try:
        with os.scandir(messages) as entries:
            found = sorted(Path(e.path) for e in entries
                           if is_shard_name(e.name) and e.is_dir(follow_symlinks=False))
    except (FileNotFoundError, NotADirectoryError):
        return [messages]
    return [messages, *found]


def _first(shard: str) -> int:
    return int(shard.partition("-")[0])


def _bounds(name: str) -> tuple[int, int] | None:
    """The first and last sequence folder `name` holds, or None if it is no folder of messages."""
    return (_first(name), _first(name) + SHARD_SIZE - 1) if is_shard_name(name) else None


def _folder_stamp(st: os.stat_result) -> foldernames.FolderStamp:
    """What a folder's names are kept by (`_names`): its (inode, mtime, ctime)."""
    return st.st_ino, st.st_mtime_ns, st.st_ctime_ns


def _index(found: list[int], sequence: int | None) -> int:
    """Where `sequence` would go in `found` (in order): all of it for None (no end)."""
    return len(found) if sequence is None else bisect.bisect_left(found, sequence)


def _own(folder: str, found: list[int]) -> slice:
    """The part of `found` (the sequences a folder's names tell, in order) that folder
    `folder` of `messages/` holds: a misplaced file is none of its messages (`messages`
    refuses it)."""
    return slice(_index(found, _first(folder)), _index(found, _first(folder) + SHARD_SIZE))


def _joined(names: list[str]) -> str | None:
    """`names` one per line, for a regular expression to match over all of them at
    once (a folder of 1,000 names in one pass); None if a name holds a line break,
    which would make one name look like two."""
    joined = "\n".join(names)
    return joined if joined.count("\n") == max(len(names) - 1, 0) else None


def _named_sequences(names: list[str]) -> list[tuple[str, int]]:
    """The message file names among `names` (`FILE_NAME`) with their sequences."""
    joined = _joined(names)
    if joined is None:
        return [(name, parsed[0]) for name in names
                if (parsed := parse_file_name(name)) is not None]
    return [(name, int(digits)) for name, digits in _NAMED_FILES.findall(joined)]


def _sequences_of(names: Iterable[str]) -> list[int]:
    """The sequences of the message file names among `names` (`FILE_NAME`)."""
    listed = list(names)
    joined = _joined(listed)
    if joined is None:
        return [parsed[0] for parsed in map(parse_file_name, listed) if parsed is not None]
    return [int(n) for n in _FILE_NAMES.findall(joined)]


def _file_names(folder: Path, st: os.stat_result, *, folders_too: bool = False) -> list[str]:
    """The names in `folder` (whose stat is `st`) that are not folders (or, with
    `folders_too`, every name): a folder named like a message file is no message
    (`MessageDir.messages` skips it). A folder's link count is 2 plus its subfolders
    on most file systems, so only a folder with another count is scanned for them
    (a plain listing costs 0.6 of a scan that tells folders apart)."""
    if folders_too or st.st_nlink == 2:
        return os.listdir(folder)
    with os.scandir(folder) as entries:
        return [e.name for e in entries if not e.is_dir(follow_symlinks=False)]


def _highest_below(names: Iterable[str], sequence: int) -> int | None:
    """The highest sequence below `sequence` among message file names, or None."""
    return max((n for n in _sequences_of(names) if n < sequence), default=None)


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns


class MessageDir:
    """The message files of one trace, by sequence."""

    def __init__(self, path: Path, cache_path: Path, tmp_dir: Path, *, durable: bool,
                 names_path: Path | None = None) -> None:
        self.path = path
        self.cache_path = cache_path
        self.names_path = names_path  # where `_names` is saved (`foldernames`), if anywhere
        self.tmp_dir = tmp_dir
        self.durable = durable
        # What every MessageDir of this folder in the process shares.
        self._memory = memory_of(path, cache_path)
        self._cache = self._memory.parsed
        self._folders = self._memory.folders
        self._names = self._memory.names
        self._gone_saved = False  # the saved file names a folder no longer there
        self._snapshot: dict[int, Message] | None = None
        self._snapshot_key: DirKey = None
        # Where each message of the snapshot was found, below messages/.
        self._where: dict[int, str] = {}
        # The newest folder seen: its mtime is part of `key()`.
        self._newest: str | None = None
        # Recovery stats every file anyway; the next scan reuses that listing if
        # the folder has not changed since: (folder key, listing).
        self._stat_hint: tuple[DirKey, Listing] | None = None
        # Messages read only when asked for (`lookup`), with the key they are valid for.
        self._lookup: MessageLookup | None = None
        self._lookup_key: DirKey = None

    def messages(self, *, refresh: bool = False) -> dict[int, Message]:
        """Every message file by sequence (a copy).

        Only files whose stat changed are parsed again. Without `refresh`, the
        folders are not even listed while the mtimes of `messages/` and of its
        newest folder show no file was added, removed or renamed (a run holding
        the lock writes the only new files, always into the newest folder);
        recovery refreshes, so edits in place and files added by hand to older
        folders are seen by the next run.
        """
        return dict(self.current(refresh))

    def current(self, refresh: bool = False) -> dict[int, Message]:
        """The snapshot behind `messages()`, brought up to date (not a copy).

        While it stays the same object it only gains messages newer than all it
        holds; any other change makes a new one (what `agentfs/store/history.py:PathMemo`
        relies on)."""
        key = self.key()
        if not refresh and self._snapshot is not None and key == self._snapshot_key:
            return self._snapshot
        if refresh:
            self._lookup = None  # what it read may predate an edit in place seen now
        with gc_paused():
            return self._scan(key)

    def lookup(self) -> MessageLookup:
        """The messages by sequence, each read when first asked for (`MessageLookup`):
        what a run follows its main path through, reading the path's files and not
        the others. The same object while, as for `current`, the folder only gains
        files this object writes (`agentfs/store/history.py:PathMemo` relies on it);
        a refresh (`current(refresh=True)`, as recovery does when it finds an edit)
        or a file added, removed or renamed by someone else makes a new one."""
        key = self.key()
        if self._lookup is None or key != self._lookup_key:
            self._lookup, self._lookup_key = MessageLookup(self), key
        return self._lookup

    def highest(self) -> int:
        """The highest sequence of any message file, or 0, from the names in the newest
        folders (no file is read), listed afresh: a new message's sequence comes from
        this, and a kept name gone stale (a clock behind the file system's) would give
        it a sequence that already has a file. A folder named like a message file
        counts here (its name is taken), though it is no message."""
        return self.previous(_NO_SEQUENCE, afresh=True) or 0

    def path_of(self, message: Message) -> Path:
        """Where `message` is stored: where its file was found, else in its folder."""
        file_name = message.file_name()
        found = self._where.get(message.sequence)
        if found is not None and found.rpartition("/")[2] == file_name:
            return self.path / found
        return self.path / message_relpath(file_name)

    def role_on_disk(self, sequence: int) -> str | None:
        """The role in the name of message `sequence`'s file, looked up by name only
        (its folder and `messages/`), or None if there is no such file."""
        found = self._find(sequence)
        return None if found is None else found[1]

    def roles(self) -> dict[int, str]:
        """The role of each message file by sequence, in order, from the names alone
        (nothing is read or `stat`ed; what `messages()` would refuse is not checked)."""
        found: dict[int, str] = {}
        for folder in folders(self.path):
            try:
                names = os.listdir(folder)
            except (FileNotFoundError, NotADirectoryError):
                continue
            for name in names:
                parsed = parse_file_name(name)
                if parsed is not None:
                    found[parsed[0]] = parsed[1]
        return dict(sorted(found.items()))

    def _find(self, sequence: int) -> tuple[str, str] | None:
        """(path below `messages/`, role) of message `sequence`'s file, by name only."""
        prefix = f"{sequence:06d}-"
        for folder in (shard_name(sequence), ""):
            try:
                names = os.listdir(self.path / folder)
            except (FileNotFoundError, NotADirectoryError):
                continue
            for name in names:
                parsed = parse_file_name(name) if name.startswith(prefix) else None
                if parsed is not None and parsed[0] == sequence:
                    return (f"{folder}/{name}" if folder else name), parsed[1]
        return None

    def one(self, sequence: int) -> Message | None:
        """Message `sequence`, or None if no file has that sequence: only its folder
        (and `messages/` itself) is listed and only its file is read, so a view of a
        few messages costs those messages however long the trace is.

        Raises:
            MessageFileError: its file cannot be read, or two files use the sequence.
        """
        return self.window(sequence, sequence + 1).get(sequence)

    def window(self, first: int, end: int | None = None) -> dict[int, Message]:
        """The messages with `first` <= sequence < `end` (no `end`: up to the newest),
        by sequence: only the folders that hold those sequences are listed, and only
        their files are read (through the same parse cache as `messages`).

        Raises:
            MessageFileError: one of those files cannot be read, is a symlink, or
                shares its sequence with another file.
        """
        listing = self._list(span=(first, end))
        racy_after = time.time_ns() - RACY_NS
        found: dict[int, Message] = {}
        where: dict[int, str] = {}
        loose = bool(listing.get(""))
        for folder in sorted(listing, key=lambda f: _first(f) if f else -1):
            part, part_where, _, _ = self._parse_folder(folder, listing[folder], racy_after)
            self._merge(found, where, part, part_where, loose=loose)
        self._cache.save()
        return dict(sorted(found.items()))

    def sequences(self, first: int, end: int | None = None,
                  limit: int | None = None) -> list[int]:
        """The sequences of the message files with `first` <= sequence < `end` (no
        `end`: up to the newest), in order, from their names alone (the first `limit`
        and the one after them, with `limit`): only the folders that hold those
        sequences are listed, and no file is read. A folder whose names were listed
        before and that has not changed since (its stamp, settled) is not listed
        again (`_names`), in this process or, through the names saved at `names_path`
        when a call listed a folder anew, in the next (`agentfs/store/foldernames.py`).
        What a view counts of the messages it leaves out
        (`agentfs/store/trace.py:Trace.view`)."""
        top = _top(self.path)
        if top is None:
            return []

        loose = [n for n in _sequences_of(top[0])
                 if n >= first and (end is None or n < end)]
        found: list[int] = []  # in order: folder after folder
        racy_after = time.time_ns() - RACY_NS
        shards = sorted(top[1], key=_first)
        self._load_names(shards)
        listed = False
        for name in shards:
            start = _first(name)
            if start + SHARD_SIZE <= first or (end is not None and start >= end) \
                    or (limit is not None and len(found) > limit):
                continue
            names, anew = self._names_in(name, racy_after)
            listed = listed or anew
            found.extend(names[_index(names, first):_index(names, end)])
        if listed or self._gone_saved or not self._names.keys() <= set(shards):
            self._save_names(shards)
        if loose:
            found = sorted(found + loose)
        return found if limit is None else found[:limit + 1]

    def _names_in(self, folder: str, racy_after: int, *,
                  afresh: bool = False) -> tuple[list[int], bool]:
        """The sequences the file names of one folder tell, in order, listed again only
        if the folder changed since (`_names`), or always if `afresh`; and whether they
        were listed and kept anew (what is worth saving)."""
        path = self.path / folder
        try:
            st = os.stat(path)
            kept = None if afresh else self._names.get(folder)
            if kept is not None and kept[0] == _folder_stamp(st):
                return kept[1], False
            # afresh, for the next sequence: every name taken, a folder's too, so a
            # new file never lands on one
            found = sorted(_sequences_of(_file_names(path, st, folders_too=afresh)))
        except (FileNotFoundError, NotADirectoryError):
            return [], False
        found = found[_own(folder, found)]
        # afresh, a folder named like a message file is among them: not kept
        return found, not afresh and self._keep(folder, st, found, None, racy_after)

    def _span_names(self, folder: str, first: int, end: int | None,
                    racy_after: int) -> list[str]:
        """The names of the message files in folder `folder` of `messages/` with
        sequences from `first` to before `end`, in order: the folder listed by name,
        or, while it keeps the stamp of an earlier listing of this process, the names
        kept then (`_names`), so a server that pages through a folder of 1,000 files
        does not list it again for every page of 100. A misplaced file's name is
        among them, for the page to refuse it as a full scan does."""
        path = self.path / folder
        st = os.stat(path)
        kept = self._names.get(folder)
        if kept is not None and kept[0] == _folder_stamp(st) and kept[2] is not None:
            sequences, names = kept[2]
        else:
            named = sorted(_named_sequences(_file_names(path, st)), key=lambda pair: pair[1])
            sequences, names = [n for _, n in named], [name for name, _ in named]
            own = _own(folder, sequences)
            found = sequences if own == slice(0, len(sequences)) else sequences[own]
            self._keep(folder, st, found, (sequences, names), racy_after)
        return names[_index(sequences, first):_index(sequences, end)]

    def _keep(self, folder: str, st: os.stat_result, found: list[int],
              names: tuple[list[int], list[str]] | None, racy_after: int) -> bool:
        """Keep what folder `folder` (whose stat is `st`) was just listed to hold, if
        it is settled (it may still change unseen otherwise); True if kept."""
        if not settled(max(st.st_mtime_ns, st.st_ctime_ns), racy_after):
            return False
        self._names[folder] = (_folder_stamp(st), found, names)
        return True

    def _load_names(self, shards: list[str]) -> None:
        """Add the saved names (`names_path`) of the folders among `shards` (those of
        `messages/` now: a foreign file's others are never expanded) to `_names`, once
        per dict of them."""
        if self.names_path is not None and not self._memory.names_loaded:
            present = set(shards)

            def bounds(name: str) -> tuple[int, int] | None:
                if name in present:
                    return _bounds(name)
                self._gone_saved = True  # saved again without it at the next save
                return None

            for folder, (stamp, found) in foldernames.load(self.names_path, bounds).items():
                self._names.setdefault(folder, (stamp, found, None))
            self._memory.names_loaded = True

    def _save_names(self, shards: list[str]) -> None:
        """Save `_names` at `names_path`, without the folders no longer among `shards`
        (the folders of `messages/`)."""
        for gone in self._names.keys() - set(shards):
            self._names.pop(gone, None)
        # a copy made in one call: a server's other threads may add folders meanwhile
        saved = {folder: (stamp, found) for folder, (stamp, found, _) in list(self._names.items())}
        if self.names_path is not None and foldernames.save(self.names_path, saved):
            self._gone_saved = False

    def reader(self, chunk: int, since: int = 0) -> WindowReader:
        """`one` for a walk back through the messages (`WindowReader`)."""
        return WindowReader(self, chunk, since)

    def previous(self, sequence: int, *, afresh: bool = False) -> int | None:
        """The highest sequence of a message file below `sequence`, or None; from
        the names in its folder and the ones before it (no file is read), kept as
        `sequences` keeps them (`_names`) but not saved: a run asks for the highest
        (`highest`) at every step, when its newest folder has just changed. What a
        file without `parent_sequence` follows (`agentfs/store/history.py:parent_of`).
        `afresh`: the folders looked at are listed, not taken from `_names` (nor
        from the saved names)."""
        top = _top(self.path)
        if top is None:
            return None
        best = _highest_below(top[0], sequence)
        present = top[1]
        if not afresh:  # the saved names would not be used
            self._load_names(present)
        shards = sorted((name for name in present if _first(name) < sequence),
                        key=_first, reverse=True)
        racy_after = time.time_ns() - RACY_NS
        for shard in shards:
            if best is not None and best >= _first(shard) + SHARD_SIZE - 1:
                break
            names, _ = self._names_in(shard, racy_after, afresh=afresh)
            below = bisect.bisect_left(names, sequence)
            if below:
                return max(names[below - 1], best) if best is not None else names[below - 1]
        return best

    def write(self, message: Message) -> Path:
        """Write one message file atomically, keeping the snapshot and the lookup current
        (a file written again makes a new lookup)."""
        path = self.path_of(message)
        check_real_folder(path.parent)
        self._stat_hint = None
        key = self.key()
        was_current = self._snapshot is not None and self._snapshot_key == key
        lookup = self._lookup if key == self._lookup_key and not os.path.lexists(path) else None
        self._lookup = None
        atomic_write(path, render_message(message), tmp_dir=self.tmp_dir, sync_dir=self.durable)
        rel = path.relative_to(self.path).as_posix()
        folder = rel.rpartition("/")[0]
        if folder and (self._newest is None or _first(folder) > _first(self._newest)):
            self._newest = folder
        if was_current and self._snapshot is not None:
            is_last = message.sequence > next(reversed(self._snapshot), 0)
            self._snapshot[message.sequence] = message
            self._where[message.sequence] = rel
            if not is_last:  # new messages come last; only a rewrite can be out of order
                self._snapshot = dict(sorted(self._snapshot.items()))
            self._snapshot_key = self.key()
        if lookup is not None:
            lookup.add(message)
            self._lookup, self._lookup_key = lookup, self.key()
        return path

    def hint(self, key: DirKey, listing: Listing) -> None:
        """A listing of `messages/` that someone just made (as `_list` makes it), with
        the folder's key then, for the next scan."""
        self._stat_hint = (key, listing)

    def key(self) -> DirKey:
        """(inode, mtime) of `messages/` and of its newest folder (see `messages`)."""
        top = _stamp(self.path)
        if top is None:
            return None
        if self._newest is None:
            self._newest = self._find_newest()
        return top, (_stamp(self.path / self._newest) if self._newest else None)

    def _find_newest(self) -> str | None:
        top = _top(self.path)
        return None if top is None else max(top[1], key=_first, default=None)

    def _scan(self, key: DirKey) -> dict[int, Message]:
        found: dict[int, Message] = {}
        where: dict[int, str] = {}
        parsed = 0
        racy_after = time.time_ns() - RACY_NS
        hint, self._stat_hint = self._stat_hint, None
        listing = hint[1] if hint is not None and hint[0] == key else self._list()
        newest = self._newest
        loose = bool(listing.get(""))  # files directly in messages/: may share a sequence
        in_order = not loose
        for folder in sorted(listing, key=lambda f: _first(f) if f else -1):
            stamps = listing[folder]
            if folder and (newest is None or _first(folder) > _first(newest)):
                newest = folder
            kept = self._folders.get(folder)
            if kept is not None and kept[0] == stamps:
                part, part_where = kept[1], kept[2]
            else:
                part, part_where, all_settled, count = self._parse_folder(folder, stamps,
                                                                          racy_after)
                if count:  # files changed: entries of files gone go too
                    self._cache.keep_only(folder, stamps)
                parsed += count
                if all_settled:
                    self._folders[folder] = (stamps, part, part_where)
                else:
                    self._folders.pop(folder, None)
            self._merge(found, where, part, part_where, loose=loose)
        for gone in set(self._folders) - set(listing):
            del self._folders[gone]
        if parsed:
            self._cache.save()
        self._snapshot = found if in_order else dict(sorted(found.items()))
        self._where = where
        # a folder made after the key was taken: the key did not cover it
        self._snapshot_key = key if newest == self._newest else None
        self._newest = newest
        return self._snapshot

    def _merge(self, found: dict[int, Message], where: dict[int, str],
               part: dict[int, Message], part_where: dict[int, str], *, loose: bool) -> None:
        """Add one folder's messages to those of the folders before it; with `loose`
        files (directly in `messages/`, listed first), a sequence found twice is an error."""
        if loose and not found.keys().isdisjoint(part.keys()):
            sequence = min(found.keys() & part.keys())
            raise MessageFileError(
                self.path / part_where[sequence],
                f"sequence {sequence} is also used by {where[sequence]}",
                hint="each sequence number may be used by one file only; rename one",
            )
        found.update(part)
        where.update(part_where)

    def problems(self) -> list[MessageFileError]:
        """Every message file that cannot be read or breaks a path rule, each with what
        to fix (`agentfs doctor`); `messages()` stops at the first. Files whose stamp
        is in the parse cache are not read again."""
        found: list[MessageFileError] = []
        listing = self._list(found)
        where: dict[int, str] = {}
        racy_after = time.time_ns() - RACY_NS
        parsed = 0
        for folder in sorted(listing, key=lambda f: _first(f) if f else -1):
            _, part_where, _, count = self._parse_folder(folder, listing[folder], racy_after,
                                                         found)
            parsed += count
            for sequence in sorted(part_where.keys() & where.keys()):
                found.append(MessageFileError(
                    self.path / part_where[sequence],
                    f"sequence {sequence} is also used by {where[sequence]}",
                    hint="each sequence number may be used by one file only; rename one",
                ))
            where.update(part_where)
        if parsed:
            self._cache.save()
        return found

    def _parse_folder(
        self, folder: str, stamps: dict[str, Stamp], racy_after: int,
        problems: list[MessageFileError] | None = None,
    ) -> tuple[dict[int, Message], dict[int, str], bool, int]:
        """The messages of one folder's files by sequence (in order), where each was
        found, whether every file's stamp is settled, and how many files were parsed.
        With `problems`, a file that breaks a rule is added to it and left out,
        instead of raised."""
        part: dict[int, Message] = {}
        part_where: dict[int, str] = {}
        all_settled = True
        parsed = 0
        prefix = folder + "/" if folder else ""
        entries = self._cache.entries(folder, wanted=len(stamps))
        for name, stamp in stamps.items():
            rel = prefix + name
            cached = entries.get(name)
            if cached is not None and cached[0] == stamp:
                message = cached[1]
            else:
                try:
                    message = load_message(self.path / rel)
                except MessageFileError as exc:
                    if problems is None:
                        raise
                    problems.append(exc)
                    continue
                parsed += 1
                if settled(stamp[0], racy_after):
                    self._cache.put(folder, name, stamp, message)
                # else: changed within the last clock ticks; a second change in the same
                # tick could keep its stamp, so it is parsed again next time (as Git does)
            all_settled = all_settled and settled(max(stamp[0], stamp[1]), racy_after)
            problem = None
            if folder and folder != shard_name(message.sequence):
                problem = MessageFileError(
                    self.path / rel,
                    f"message #{message.sequence} is in folder {folder}/",
                    hint=f"move it to {self.path.name}/{shard_name(message.sequence)}/",
                )
            elif message.sequence in part:
                problem = MessageFileError(
                    self.path / rel,
                    f"sequence {message.sequence} is also used by {part_where[message.sequence]}",
                    hint="each sequence number may be used by one file only; rename one",
                )
            if problem is not None:
                if problems is None:
                    raise problem
                problems.append(problem)
                continue
            part[message.sequence] = message
            part_where[message.sequence] = rel
        order = sorted(part)
        return ({n: part[n] for n in order}, {n: part_where[n] for n in order},
                all_settled, parsed)

    def _span_files(self, folder: str, first: int, end: int | None,
                    problems: list[MessageFileError] | None,
                    racy_after: int) -> dict[str, Stamp]:
        """The message files of folder `folder` of `messages/` from sequence `first` to
        before `end`, with their stamps: their names (`_span_names`) and only those
        files `lstat`ed, so a page of a full folder costs its own files, not the
        folder's (docs/performance.md). As `_list` does: a link is refused, a folder
        or another kind of file named like a message file is no message; and a file
        gone since the listing is left out."""
        files: dict[str, Stamp] = {}
        base = f"{self.path}/{folder}"
        for name in self._span_names(folder, first, end, racy_after):
            if is_ignored_name(name):
                continue
            try:
                st = os.lstat(f"{base}/{name}")
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(st.st_mode):
                _refuse(linked_file(Path(base, name)), problems)
            elif stat.S_ISREG(st.st_mode):
                files[name] = stamp_of(st)
        return files

    def _list(self, problems: list[MessageFileError] | None = None, *,
              span: tuple[int, int | None] | None = None) -> Listing:
        """The message files and their stamps: those directly in `messages/` and in its
        folders (symlinks refused, or with `problems` added to it; other folders are
        not messages). With `span` (first, end), only the files of the sequences from
        `first` to before `end` (a window, `window`), from the folders that can hold
        them, each listed by name (or known from an earlier listing) and only its
        files in the span `stat`ed (`_span_files`)."""
        listing: Listing = {}
        pending = [(self.path, "")]
        racy_after = time.time_ns() - RACY_NS
        while pending:
            folder, name = pending.pop()
            try:
                if name and span is not None:
                    listing[name] = self._span_files(name, *span, problems, racy_after)
                    continue
                entries = list(os.scandir(folder))
            except FileNotFoundError:
                continue
            files = listing[name] = {}
            for entry in entries:
                if not name and entry.is_dir(follow_symlinks=False):
                    if is_shard_name(entry.name) and (span is None
                                                     or _shard_in_span(entry.name, *span)):
                        pending.append((Path(entry.path), entry.name))
                    continue
                if not name and is_shard_name(entry.name) and entry.is_symlink():
                    _refuse(linked_folder(Path(entry.path)), problems)
                    continue
                if span is not None and not _name_in_span(entry.name, *span):
                    continue
                if is_ignored_name(entry.name) or not entry.is_file(follow_symlinks=False):
                    if entry.is_symlink():
                        _refuse(linked_file(Path(entry.path)), problems)
                    continue
                files[entry.name] = stamp_of(entry.stat(follow_symlinks=False))
        return listing


def _shard_in_span(name: str, first: int, end: int | None) -> bool:
    """True if folder `name` of `messages/` can hold sequences from `first` to before `end`."""
    start = _first(name)
    return start + SHARD_SIZE > first and (end is None or start < end)


def _name_in_span(name: str, first: int, end: int | None) -> bool:
    """True if `name` is a message file name of a sequence from `first` to before `end`."""
    parsed = parse_file_name(name)
    return parsed is not None and first <= parsed[0] and (end is None or parsed[0] < end)


def linked_file(path: Path) -> MessageFileError:
    """The refusal of a message file that is a symlink."""
    return MessageFileError(path, "is a symlink", hint="message files must be regular files")


def _refuse(error: MessageFileError, problems: list[MessageFileError] | None) -> None:
    """Raise `error`, or add it to `problems` when they are being collected."""
    if problems is None:
        raise error
    problems.append(error)


class WindowReader:
    """Messages by sequence for a walk back from a message (`agentfs/store/history.py:walk_back`):
    a sequence not read yet reads the `chunk` sequences up to it (none below `since`)
    in one `MessageDir.window`, so a walk of N messages lists each folder it passes
    about N / `chunk` times, not N times; a window inside what was read is not read again."""

    def __init__(self, messages: MessageDir, chunk: int, since: int) -> None:
        self.messages = messages
        self.chunk = chunk
        self.since = since
        self._read: dict[int, Message] = {}
        self._covered: list[tuple[int, int]] = []

    def __call__(self, sequence: int) -> Message | None:
        if self.holds(sequence):
            return self._read.get(sequence)
        first = max(self.since, sequence - self.chunk + 1, 0)
        self._read.update(self.messages.window(first, sequence + 1))
        self._cover(first, sequence + 1)
        return self._read.get(sequence)

    def window(self, first: int, end: int | None) -> dict[int, Message]:
        """`MessageDir.window(first, end)`, from what was read if it covers it."""
        if end is not None and self._covers(first, end):
            return {n: m for n, m in sorted(self._read.items()) if first <= n < end}
        return self.messages.window(first, end)

    def holds(self, sequence: int) -> bool:
        """Whether `sequence` was read, or found to have no file, already."""
        return sequence in self._read or self._covers(sequence, sequence + 1)

    def read(self) -> dict[int, Message]:
        """The messages read so far (and added)."""
        return self._read

    def add(self, message: Message) -> None:
        """A message just written (newer than every file read)."""
        self._read[message.sequence] = message

    def _covers(self, first: int, end: int) -> bool:
        return any(a <= first and end <= b for a, b in self._covered)

    def _cover(self, first: int, end: int) -> None:
        """Add the range read, merged with those it touches: a walk back reads one
        range after another, so they stay one or a few, however long the walk."""
        kept: list[tuple[int, int]] = []
        for a, b in self._covered:
            if b < first or a > end:
                kept.append((a, b))
            else:
                first, end = min(a, first), max(b, end)
        kept.append((first, end))
        self._covered = kept


class MessageLookup:
    """A trace's messages by sequence, each read when first asked for: the files of a
    walk back along the main path (`agentfs/store/history.py:PathMemo`) and few
    others, so a run on a compressed trace reads its path, not the trace.

    A sequence not read yet reads one file; each next one asked for just below
    the last read reads twice as many at once (`MessageDir.window`), up to
    `LOOKUP_RUN`: a path that jumps (a compression summary's parent) reads little
    besides its own files, and an uncompressed path, which the request holds whole
    anyway, is read a folder at a time, through the folders' parse caches.
    Messages the `MessageDir` writes while this is its lookup are added
    (`MessageDir.lookup` tells when it is)."""

    def __init__(self, messages: MessageDir) -> None:
        self.messages = messages
        self._windows = WindowReader(messages, chunk=1, since=0)  # chunk: the last window's
        self._below: int | None = None  # the sequence just below the last window

    def get(self, sequence: int) -> Message | None:
        """Message `sequence`, or None if no file has that sequence.

        Raises:
            MessageFileError: a file read for it cannot be read.
        """
        windows = self._windows
        if not windows.holds(sequence):
            size = min(windows.chunk * 2, LOOKUP_RUN) if sequence == self._below else 1
            windows.chunk = size
            self._below = max(sequence - size + 1, 0) - 1
        return windows(sequence)

    def add(self, message: Message) -> None:
        """A message just written (newer than every file read)."""
        self._windows.add(message)
