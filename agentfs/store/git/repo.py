"""The workspace's Git repository, driven at the object level with dulwich.

Each step becomes one commit built directly in the object store: blobs for
the changed files, the new tree derived from the branch head's tree, the
commit, then a compare-and-swap of the branch ref. Porcelain add+commit is
avoided on purpose: it rescans the whole index and runs dulwich's foreground
auto-gc on every commit (see docs/decisions.md). Instead, once enough loose
objects have piled up, a commit packs them (`packing.py`).
"""

from __future__ import annotations

import errno
import os
import random
import stat
import time
import weakref
from collections.abc import Callable, Container, Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import BinaryIO, Literal, NamedTuple, Self

from dulwich.index import IndexEntry, index_entry_from_stat
from dulwich.objects import Blob, Commit, Tree
from dulwich.reflog import format_reflog_line
from dulwich.repo import Repo

from agentfs.errors import GitStateError
from agentfs.store.atomic import open_creating
from agentfs.store.cleanfolders import CleanFolders
from agentfs.store.git import ids
from agentfs.store.git.index import IndexUpdate, StatCache, staged_changes, stat_cache
from agentfs.store.git.intents import DeadIntents, index_intent
from agentfs.store.git.lockfiles import GitLockFile
from agentfs.store.git.objects import FileChangedError, ObjectWriter, hash_stream
from agentfs.store.git.packing import Packer, PackReport
from agentfs.store.git.trees import change_tree

MAIN = b"refs/heads/main"
DEFAULT_IDENTITY = b"agentfs <agentfs@localhost>"
FILE_MODE = 0o100644
EXEC_MODE = 0o100755

#: Files in `.git` that say a Git command stopped halfway, and the command undoing it.
UNFINISHED = (("REVERT_HEAD", "git revert --abort"),
              ("CHERRY_PICK_HEAD", "git cherry-pick --abort"),
              ("MERGE_HEAD", "git merge --abort"), ("rebase-merge", "git rebase --abort"),
              ("rebase-apply/applying", "git am --abort"),  # `git am` uses rebase-apply/ too
              ("rebase-apply", "git rebase --abort"))
#: Attempts at moving a ref before giving up (another process keeps winning).
CAS_ATTEMPTS = 200
#: Files larger than this are committed a chunk at a time, never read whole.
STREAM_BYTES = 8 * 1024 * 1024
#: Reads of a big file that is cut short while it is read (rewritten meanwhile).
STREAM_ATTEMPTS = 3


class UnsafePathError(GitStateError):
    """A path given to commit is not a plain path inside the work tree: absolute, with
    empty, `.` or `..` parts, inside `.git`, or reached through a symlinked folder."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(
            f"{path!r}: {problem}; nothing was committed",
            hint="agentfs commits relative paths inside the workspace, outside .git, "
            "that do not pass through a symlink",
        )
        self.path = path


def check_path(path: str) -> None:
    """Refuse `path` unless it is a relative POSIX path with no empty, `.` or `..` parts
    and nothing named `.git` (in any case) on the way.

    Raises:
        UnsafePathError: naming the path and what is wrong with it.
    """
    if not isinstance(path, str) or not path or "\0" in path:
        raise UnsafePathError(str(path), "not a file path")
    if path.startswith("/"):
        raise UnsafePathError(path, "an absolute path")
    for part in path.split("/"):
        if part in ("", ".", ".."):
            raise UnsafePathError(path, "has an empty, '.' or '..' part")
        if part.lower() == ".git":
            raise UnsafePathError(path, "inside .git")


@dataclass(frozen=True)
class Change:
    """A path's new content for a commit: `data`, or the hex id of a blob already
    stored (`stored`); with neither, the path is deleted."""

    path: str
    data: bytes | None
    mode: int = FILE_MODE
    stored: bytes | None = None


def init_repo(root: Path) -> bool:
    """Make `root` a Git repository on branch `main` unless it is one; True if created."""
    if (root / ".git").exists():
        return False
    repo = Repo.init(str(root), default_branch=b"main")
    config = repo.get_config()
    config.set((b"core",), b"autocrlf", b"false")
    config.write_to_path()
    repo.close()
    return True


class GitRepo:
    """Commits, branches and history of one workspace repository.

    With `durable`, every object, ref, index and directory change of a
    commit is fsynced before the commit returns (the workspace setting
    `fsync = "all"`); by default they are written as Git itself writes them,
    without fsync, which a killed process cannot harm.
    """

    def __init__(self, root: Path, *, durable: bool = False) -> None:
        self.root = root
        self.durable = durable
        try:
            self.repo = Repo(str(root))
        except Exception as exc:  # noqa: BLE001 — dulwich raises NotGitRepository and others
            raise GitStateError(
                f"{root}: not a Git repository ({exc})", hint="run `agentfs init` there"
            ) from None
        self.store = self.repo.object_store
        self.git_dir = Path(self.repo.controldir())
        self.state_dir = self.git_dir / "agentfs"
        self.objects = ObjectWriter(self.store, self.git_dir / "objects", durable=durable)
        self.packer = Packer(self.git_dir, self.objects)
        self.index_path = Path(self.repo.index_path())
        self._identity: bytes | None = None
        #: What recovery found clean, kept for the next recovery of each trace.
        self.clean_folders = CleanFolders()
        # dulwich keeps the packs it has read open until it is closed
        weakref.finalize(self, self.repo.close)

    def close(self) -> None:
        self.repo.close()

    @cached_property
    def split_index(self) -> bool:
        """Whether agentfs may write the index split (`agentfs/store/git/index.py`):
        unless `core.splitIndex` is false, as Git would then undo it."""
        try:
            value = self.repo.get_config_stack().get((b"core",), b"splitIndex")
        except KeyError:
            return True
        return value.strip().lower() not in (b"false", b"no", b"off", b"0")

    def pack(self) -> PackReport | None:
        """Move the loose objects into a pack and merge the small packs that are due
        (`agentfs/store/git/packing.py`); commits do this on their own once about
        `LOOSE_LIMIT` objects are loose. None if another process is packing."""
        return self.packer.pack()

    # --- reading -----------------------------------------------------------

    def head(self, ref: bytes = MAIN) -> bytes | None:
        """Commit id `ref` points at, or None for an unborn branch."""
        try:
            return self.repo.refs[ids.ref(ref)]
        except KeyError:
            return None

    def point_unborn_head_at_main(self) -> None:
        """A repository with no commits yet (e.g. on `master`) is switched to `main`."""
        target = self.repo.refs.read_ref(ids.ref(b"HEAD")) or b""
        if target.startswith(b"ref: ") and self.head(target[5:]) is None and self.head() is None:
            self.repo.refs.set_symbolic_ref(ids.ref(b"HEAD"), ids.ref(MAIN))

    def check_on_main(self) -> None:
        """Refuse to commit when the work tree is not `main`'s (HEAD elsewhere)."""
        target = self.repo.refs.read_ref(ids.ref(b"HEAD")) or b""
        if target == b"ref: " + MAIN:
            return
        if target.startswith(b"ref: refs/heads/"):
            branch = target[len(b"ref: refs/heads/") :].decode()
            where = f"on branch {branch!r}"
        else:
            branch, where = None, "detached"
        if self.head() is not None:
            hint = "run `git checkout main` first"
        elif branch:
            hint = f"there is no main branch yet: rename yours with `git branch -m {branch} main`"
        else:
            hint = "run `git checkout -b main`"
        raise GitStateError(
            f"{self.root}: HEAD is {where}, but agentfs keeps traces on branch main", hint=hint
        )

    def commit(self, sha: bytes) -> Commit:
        obj = self.objects[sha]
        assert isinstance(obj, Commit)
        return obj

    def tree_lookup(self, commit_sha: bytes | None, path: str) -> tuple[int, bytes] | None:
        """(mode, sha) of `path` in the commit's tree, or None."""
        if commit_sha is None:
            return None
        tree_sha = self.commit(commit_sha).tree
        try:
            mode, sha = _lookup(self.objects, tree_sha, path.encode())
        except KeyError:
            return None
        return mode, sha

    def read_file(self, commit_sha: bytes | None, path: str) -> bytes | None:
        """Contents of `path` at a commit, or None."""
        found = self.tree_lookup(commit_sha, path)
        if found is None or stat.S_ISDIR(found[0]):
            return None
        blob = self.objects[found[1]]
        assert isinstance(blob, Blob)
        return blob.as_raw_string()

    def entries(self, commit_sha: bytes | None, directory: str) -> dict[str, tuple[int, bytes]]:
        """The entries directly in `directory` at a commit: name → (mode, sha); {} if none."""
        found = self.tree_lookup(commit_sha, directory)
        if found is None or not stat.S_ISDIR(found[0]):
            return {}
        return self.tree_entries(found[1])

    def tree_entries(self, tree_sha: bytes) -> dict[str, tuple[int, bytes]]:
        """The entries of a tree object: name → (mode, sha); {} if there is no such tree."""
        try:
            tree = self.objects[tree_sha]
        except KeyError:
            return {}
        if not isinstance(tree, Tree):
            return {}
        return {e.path.decode(): (e.mode, e.sha) for e in tree.iteritems()}

    def walk(self, commit_sha: bytes | None, prefix: str,
             skip: Container[str] = ()) -> dict[str, tuple[int, bytes]]:
        """Every file below directory `prefix` at a commit: path → (mode, blob id); the
        folders named in `skip` (paths like `prefix/a/b`) are not looked into."""
        found = self.tree_lookup(commit_sha, prefix)
        if found is None or not stat.S_ISDIR(found[0]):
            return {}
        files: dict[str, tuple[int, bytes]] = {}
        pending = [(prefix, found[1])]
        while pending:
            directory, tree_sha = pending.pop()
            tree = self.objects[tree_sha]
            assert isinstance(tree, Tree)
            for entry in tree.iteritems():
                path = f"{directory}/{entry.path.decode()}"
                if stat.S_ISDIR(entry.mode):
                    if path not in skip:
                        pending.append((path, entry.sha))
                else:
                    files[path] = (entry.mode, entry.sha)
        return files

    def branches(self, prefix: str) -> list[str]:
        """Branch names under `prefix` (e.g. `agentfs/demo/`)."""
        base = prefix.encode()
        return sorted(name.decode() for name in self.repo.refs.keys(base=ids.ref(b"refs/heads/"))
                      if name.startswith(base))

    def unfinished(self) -> str | None:
        """The command that undoes a Git command stopped halfway in this repository (a
        revert, cherry-pick, merge or rebase waiting on a conflict), or None."""
        return next((abort for name, abort in UNFINISHED if (self.git_dir / name).exists()),
                    None)

    def stat_cache(self) -> StatCache:
        """The index's stat data (`agentfs/store/git/index.py:StatCache`)."""
        return stat_cache(self.index_path)

    # --- writing -----------------------------------------------------------

    def staged_changes(self, prefix: str) -> list[tuple[str, str]]:
        """Files below folder `prefix` whose index entry differs from HEAD, with how
        (`agentfs/store/git/index.py:staged_changes`)."""
        return staged_changes(self.index_path, prefix, self.walk(self.head(), prefix))

    def refresh_stat(self, found: dict[str, tuple[os.stat_result, bytes]]) -> None:
        """Record in the index the stat of files read and found to hold their entry's
        blob (`path → (stat taken before reading, blob hex id)`), so the next look
        at them needs a stat, not a read (`git update-index --refresh`). Best
        effort: skipped while another program holds the index lock."""
        if not found:
            return
        try:
            with IndexUpdate(self.index_path, self.state_dir, durable=self.durable,
                             split=self.split_index) as index:
                index.refresh(found)
        except GitStateError:
            return  # derived data: the files are read again next time

    def identity(self) -> bytes:
        """`user.name <user.email>` from Git config, or agentfs' own identity."""
        if self._identity is None:
            config = self.repo.get_config_stack()
            try:
                name = config.get((b"user",), b"name")
                email = config.get((b"user",), b"email")
                self._identity = name + b" <" + email + b">"
            except KeyError:
                self._identity = DEFAULT_IDENTITY
        return self._identity

    def commit_worktree(
        self,
        paths: Iterable[str],
        message: bytes,
        *,
        extra_parents: Sequence[bytes] = (),
    ) -> bytes:
        """Commit the work tree's current state of `paths` on main; refresh their index entries.

        A path missing from the work tree is deleted; a symlink is committed as
        a symlink. Only these paths change: commits other processes made
        meanwhile (other traces) are kept, by rebuilding on the new head and
        retrying the compare-and-swap. Index entries that a killed process
        left behind HEAD are repaired in the same index write.

        Returns:
            The new commit's id.

        Raises:
            UnsafePathError: a path is not a plain path inside the work tree
                (see `check_path`) or passes through a symlinked folder.
            GitStateError: HEAD is not on main, the index is of a kind agentfs
                cannot update, or main kept moving.
        """
        self.check_on_main()
        wanted = sorted(set(paths))
        for path in wanted:
            check_path(path)
        changes: list[Change] = []
        index_changes: dict[bytes, IndexEntry | None] = {}
        with _Folders(self.root) as folders:
            for path in wanted:  # each blob stored as it is read: one file in memory
                found = folders.read(path, big=self.objects.add_stream)
                if found is None:
                    changes.append(Change(path, None))
                    index_changes[path.encode()] = None
                elif isinstance(found, _File):  # anything else (a fifo) is left out
                    blob_id = found.blob_id or self.objects.add_raw(Blob.type_num, found.data)
                    changes.append(Change(path, None, found.mode, stored=blob_id))
                    index_changes[path.encode()] = index_entry_from_stat(
                        found.stat, blob_id, mode=found.mode
                    )
        # Lock order: dead intents are claimed (never waited for), then our own
        # intent, then index.lock; main moves only while index.lock is held, so
        # the entries repaired from the new commit are what HEAD holds. The new
        # index is written into index.lock before main moves: if that write fails
        # (a full disk), main stays where it was and the index with it.
        with (
            DeadIntents(self.state_dir) as dead,
            index_intent(self.state_dir, [change.path for change in changes]),
            IndexUpdate(self.index_path, self.state_dir, durable=self.durable,
                        split=self.split_index) as index,
        ):
            def write_index(new: bytes) -> None:
                index.apply({**self._entries_at(new, dead.paths), **index_changes})

            sha = self._commit(MAIN, changes, message, extra_parents=extra_parents,
                               before_swap=write_index)
        self.packer.after_commit()  # outside the locks: others go on meanwhile
        return sha

    def repair_index(self) -> None:
        """Bring index entries left behind by a process that died mid-commit in line
        with HEAD (see `agentfs/store/git/intents.py`)."""
        with DeadIntents(self.state_dir) as dead:
            if dead:
                with IndexUpdate(self.index_path, self.state_dir, durable=self.durable,
                                 split=self.split_index) as index:
                    # HEAD is read under the index lock: main cannot move meanwhile
                    index.apply(self._entries_at(self.head(), dead.paths))

    def _entries_at(
        self, commit_sha: bytes | None, paths: Sequence[str]
    ) -> dict[bytes, IndexEntry | None]:
        """The index entries `paths` must have to match the commit: None for a path
        it does not hold as a file. Paths agentfs would not commit are left alone."""
        entries: dict[bytes, IndexEntry | None] = {}
        if not paths:
            return entries
        with _Folders(self.root) as folders:
            for path in paths:
                try:
                    check_path(path)
                except UnsafePathError:
                    continue  # never in the index by agentfs' doing
                found = self.tree_lookup(commit_sha, path)
                if found is None or stat.S_ISDIR(found[0]):
                    entries[path.encode()] = None
                else:
                    entries[path.encode()] = self._entry_for(folders, path, *found)
        return entries

    def _entry_for(self, folders: _Folders, path: str, mode: int, sha: bytes) -> IndexEntry:
        """Index entry for a committed blob; stat data only if the work tree matches it,
        so Git re-reads a file that differs instead of trusting its stat."""
        try:
            found = folders.read(path, big=hash_stream)
        except (UnsafePathError, OSError):
            found = None  # unreadable: the entry is right without stat data
        if isinstance(found, _File) and (
                found.blob_id or Blob.from_string(found.data).id) == sha:
            return index_entry_from_stat(found.stat, sha, mode=mode)
        return IndexEntry(
            ctime=(0, 0), mtime=(0, 0), dev=0, ino=0, mode=mode, uid=0, gid=0, size=0,
            sha=ids.object_id(sha), flags=0, extended_flags=0,
        )

    def commit_changes(
        self,
        ref: bytes,
        changes: Sequence[Change],
        message: bytes,
        *,
        extra_parents: Sequence[bytes] = (),
        start: bytes | None = None,
    ) -> bytes:
        """Commit `changes` on top of `ref` (created from `start` if it does not exist).

        The work tree and the index are not touched: this is how side
        branches are written.

        Raises:
            ValueError: `ref` is main, which only `commit_worktree` moves (under
                the index lock, so that the index always follows it).
            UnsafePathError: a change's path is not a plain relative path.
        """
        if ref in (MAIN, b"HEAD"):
            raise ValueError("main is committed to with commit_worktree, which keeps the index")
        sha = self._commit(ref, changes, message, extra_parents=extra_parents, start=start)
        self.packer.after_commit()
        return sha

    def _commit(
        self,
        ref: bytes,
        changes: Sequence[Change],
        message: bytes,
        *,
        extra_parents: Sequence[bytes] = (),
        start: bytes | None = None,
        before_swap: Callable[[bytes], None] | None = None,
    ) -> bytes:
        """Commit `changes` on `ref` by compare-and-swap, rebuilt on the new head if it
        moved. `before_swap` is called with the first commit built, before the ref
        first moves (the index written for it: the later attempts differ from it only
        in paths someone else committed meanwhile, never in `changes`)."""
        for change in changes:
            check_path(change.path)
        tree_changes: list[tuple[bytes, int, bytes | None]] = []
        for change in changes:
            blob_id = (change.stored if change.data is None
                       else self.objects.add_raw(Blob.type_num, change.data))
            sha = None if blob_id is None else bytes.fromhex(blob_id.decode())
            tree_changes.append((change.path.encode(), change.mode, sha))
        delay = 0.001
        for _ in range(CAS_ATTEMPTS):
            current = self._read_ref(ref)
            parent = current if current is not None else start
            base_tree = self.commit(parent).tree if parent is not None else None
            tree = change_tree(self.objects, base_tree, tree_changes)
            if tree is None:
                tree = self.objects.add_raw(Tree.type_num, b"")
            parents = ([parent] if parent is not None else []) + list(extra_parents)
            commit = self.make_commit(tree, message, parents)
            if before_swap is not None:
                before_swap(commit.id)
                before_swap = None
            if self._swap(ref, current, commit.id, message):
                return commit.id
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 0.05)
        raise GitStateError(
            f"could not update {ref.decode()}: it kept moving during {CAS_ATTEMPTS} attempts",
            hint="another process is committing heavily; try again",
        )

    def _swap(self, ref: bytes, old: bytes | None, new: bytes, message: bytes) -> bool:
        """Move `ref` from `old` (None: must not exist) to `new`; False if it moved meanwhile.

        Git's protocol: under `<ref>.lock`, check the current value, write the
        new one, append to the reflog, rename the lock over the ref.
        """
        check_path(ref.decode())
        if not ref.startswith(b"refs/"):
            raise UnsafePathError(ref.decode(), "not a ref under refs/")
        path = self.git_dir / ref.decode()
        with GitLockFile(path, self.state_dir, durable=self.durable) as lock:
            if self._read_ref(ref) != old:
                lock.abort()
                return False
            try:
                lock.write(new + b"\n")
                self._append_reflog(ref, old, new, message)
            except OSError as exc:  # os.write names no file (a full disk): say which one
                raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
        return True

    def _read_ref(self, ref: bytes) -> bytes | None:
        try:
            value = (self.git_dir / ref.decode()).read_bytes().strip()
        except (FileNotFoundError, NotADirectoryError):
            return self.repo.refs.get_packed_refs().get(ids.ref(ref))
        return value or None

    def _append_reflog(self, ref: bytes, old: bytes | None, new: bytes, message: bytes) -> None:
        now = int(time.time())
        line = format_reflog_line(old, new, self.identity(), now, _utc_offset(now),
                                  b"agentfs: " + message.split(b"\n", 1)[0])
        fd = open_creating(self.git_dir / "logs" / ref.decode(), os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, line + b"\n")
        finally:
            os.close(fd)

    def create_branch(self, name: str, start: bytes) -> None:
        """Create `refs/heads/<name>` at `start`; an existing branch is an error."""
        ref = b"refs/heads/" + name.encode()
        if ref == MAIN:
            raise ValueError("main is committed to with commit_worktree, which keeps the index")
        if not self._swap(ref, None, start, b"branch: created " + name.encode()):
            raise GitStateError(f"branch {name} already exists")

    def make_commit(self, tree: bytes, message: bytes, parents: Sequence[bytes], *,
                    when: tuple[int, int] | None = None, like: Commit | None = None) -> Commit:
        """Write a commit of `tree` by this repository's identity, now or at `when`
        (seconds, UTC offset); or by the author and committer of `like`, at its times
        (a commit re-made on another tip), its commit time made no earlier than its
        first parent's: Git's walks (`git log main..ref`) stop early on a commit older
        than its parent, and the same commit re-made on the same tip is the same."""
        commit = Commit()
        commit.tree = tree
        commit.parents = ids.object_ids(parents)
        commit.message = message
        if like is not None:
            commit.author, commit.committer = like.author, like.committer
            commit.author_time, commit.commit_time = like.author_time, like.commit_time
            if parents:
                commit.commit_time = max(commit.commit_time, self.commit(parents[0]).commit_time)
            commit.author_timezone = like.author_timezone
            commit.commit_timezone = like.commit_timezone
            commit.encoding = like.encoding
        else:
            now = int(time.time())
            seconds, offset = when or (now, _utc_offset(now))
            commit.author = commit.committer = self.identity()
            commit.author_time = commit.commit_time = seconds
            commit.author_timezone = commit.commit_timezone = offset
            commit.encoding = b"UTF-8"
        self.objects.add_object(commit)
        return commit


class _File(NamedTuple):
    """A work-tree file or symlink as committed: content (a symlink's target), Git mode;
    for a file over `STREAM_BYTES`, the id of its blob instead of its content."""

    data: bytes
    mode: int
    stat: os.stat_result
    blob_id: bytes | None = None


#: What `_Folders.read` returns for a path that is neither a file nor a symlink.
_OTHER: Literal["other"] = "other"

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class _Folders:
    """Reads work-tree files through folders opened one by one without following
    symlinks, so `link/passwd` with `link -> /etc` is refused, not read, even if a
    folder is swapped for a symlink meanwhile."""

    def __init__(self, root: Path) -> None:
        self._fds: dict[str, int | None] = {}
        self._fds[""] = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in self._fds.values():
            if fd is not None:
                os.close(fd)
        self._fds.clear()

    def read(self, path: str, *, big: Callable[[BinaryIO, int], bytes], again: bool = False
             ) -> _File | Literal["other"] | None:
        """The file or symlink at `path`; None if there is none (a folder there is not a
        file either: as with `git add -A`, the file is gone); `_OTHER` for anything else
        (a fifo, a socket), which Git cannot store. A file over `STREAM_BYTES` is not
        read into memory: `big(file, size)` reads it and gives its blob id (stores it,
        or only hashes it). A file swapped for something else between its `lstat` and
        its opening is taken as what it is then (`again`: this is the second look).

        Raises:
            UnsafePathError: a folder on the way is a symlink.
            FileChangedError: a big file was cut short while it was read.
        """
        folder, _, name = path.rpartition("/")
        dir_fd = self._folder(folder, path)
        if dir_fd is None:
            return None
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                return _File(os.fsencode(os.readlink(name, dir_fd=dir_fd)), stat.S_IFLNK, st)
            if not stat.S_ISREG(st.st_mode):
                return _not_a_file(st)
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except OSError as exc:  # swapped for a symlink since the stat: looked at again
            if exc.errno != errno.ELOOP or again:
                raise
            return self.read(path, big=big, again=True)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped since the stat
            os.close(fd)
            return _not_a_file(st)
        with open(fd, "rb") as f:
            mode = EXEC_MODE if st.st_mode & 0o100 else FILE_MODE
            if st.st_size <= STREAM_BYTES:
                return _File(f.read(), mode, st)
            return _File(b"", mode, *_read_big(f, path, big))

    def _folder(self, folder: str, path: str) -> int | None:
        """An fd of `folder`, or None if it is missing or not a folder (so `path` is gone)."""
        if folder in self._fds:
            return self._fds[folder]
        parent, _, name = folder.rpartition("/")
        parent_fd = self._folder(parent, path)
        fd = None
        if parent_fd is not None:
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
            except FileNotFoundError:
                pass
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                try:
                    st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
                    link = stat.S_ISLNK(st.st_mode)
                except FileNotFoundError:
                    link = False
                if link:
                    raise UnsafePathError(path, f"{folder} is a symlink") from None
        self._fds[folder] = fd
        return fd


def _not_a_file(st: os.stat_result) -> Literal["other"] | None:
    """What `_Folders.read` gives for what is no file: None for a folder (the file is
    gone, as with `git add -A`), `_OTHER` for anything else (a fifo, a socket)."""
    return None if stat.S_ISDIR(st.st_mode) else _OTHER


def _read_big(f: BinaryIO, path: str, big: Callable[[BinaryIO, int], bytes]
              ) -> tuple[os.stat_result, bytes]:
    """(stat, blob id) of the big file `f` at `path`, through `big`. A file cut short
    while it is read (rewritten meanwhile) is read again from its start, up to
    `STREAM_ATTEMPTS` times in all.

    Raises:
        FileChangedError: it was cut short every time.
    """
    for attempt in range(1, STREAM_ATTEMPTS + 1):
        st = os.fstat(f.fileno())
        try:
            return st, big(f, st.st_size)
        except FileChangedError as exc:
            if attempt == STREAM_ATTEMPTS:
                raise FileChangedError(f"{path}: {exc}, {STREAM_ATTEMPTS} times in a row; "
                                       "commit it again") from None
            f.seek(0)
    raise AssertionError("unreachable")


def _utc_offset(timestamp: int) -> int:
    """Local time's offset from UTC in seconds at `timestamp`."""
    return time.localtime(timestamp).tm_gmtoff


def _lookup(store: object, tree_sha: bytes, path: bytes) -> tuple[int, bytes]:
    """(mode, sha) of a slash-separated path below a tree; KeyError if absent."""
    mode, sha = stat.S_IFDIR, tree_sha
    for part in path.split(b"/"):
        if not part:
            continue
        if not stat.S_ISDIR(mode):
            raise KeyError(path)
        tree = store[sha]  # type: ignore[index]
        mode, sha = tree[part]
    return mode, sha

