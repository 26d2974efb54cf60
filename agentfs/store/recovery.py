"""Bringing a trace's commits up to date with its files, before a run goes on.

New message files that continue the committed head (a step a crash cut
short, or a file the person added to `messages/`) are adopted onto the main
path as one `recover` commit. Any other change under the trace is the
person's and becomes an `edit` commit, unless it leaves no usable main path:
then nothing is committed and the error says how to undo it. Files waiting
in `inbox/` are not edits; the inbox door takes them
(`agentfs/store/ingest.py`).
"""

from __future__ import annotations

import bisect
import os
import shlex
import stat
import time
from collections.abc import Container
from pathlib import Path
from typing import TYPE_CHECKING

from agentfs.errors import AgentfsError
from agentfs.store.atomic import atomic_write, purge_stale_temps
from agentfs.store.branches import queue_step_files
from agentfs.store.cleanfolders import load_stamps, save_stamps, stamps_digest
from agentfs.store.commits import Step
from agentfs.store.frontmatter import misplaced_fields, split
from agentfs.store.gcpause import gc_paused
from agentfs.store.git.index import StatCache
from agentfs.store.git.objects import file_blob_id
from agentfs.store.goalsfile import GoalsFile
from agentfs.store.history import is_model_turn, unanswered_calls
from agentfs.store.inbox import KEEP, is_ignored_name, post_key, staged_in
from agentfs.store.message_dir import Listing, is_shard_name, parse_message_relpath
from agentfs.store.messages import Message, parse_message
from agentfs.store.meta import parse_meta, remember_post
from agentfs.store.regularfile import read_trace_file
from agentfs.store.stamps import RACY_NS, Stamp, settled
from agentfs.store.upgrade import upgrade
from agentfs.store.wording import counted
from agentfs.store.workspace import GOALS_FILE, INBOX_DIR

if TYPE_CHECKING:
    from agentfs.store.trace import Trace

__all__ = ["edit_problem", "recover"]


def recover(trace: Trace) -> list[str]:
    """Commit what is on disk but not committed under the trace; returns the kinds.

    New message files that continue the committed head (an interrupted
    step, or a file the user added to `messages/`) are adopted onto the
    main path as kind `recover`; any other change is the user's and
    becomes `edit`. Files waiting in `inbox/` are left for `ingest`. Adopting
    a turn of the model, or an edit of message files, may change how many
    there are: `trace.json`'s `iterations` is then counted from the files
    again and committed with them.
    """
    trace.repo.check_on_main()
    purge_stale_temps(trace.tmp_dir)
    trace.repo.repair_index()
    # before the upgrade, which would move a merge's files away from the branch's paths
    _undo_cut_short_transition(trace, trace.repo.head())
    kinds: list[str] = ["upgrade"] if upgrade(trace) else []
    head_commit = trace.repo.head()
    prefix = trace.rel(trace.dir)
    with gc_paused():
        on_disk, clean, checked = _worktree_files(trace, head_commit)
        committed = _committed_files(trace, head_commit, skip=clean)
    sources = _claimed_sources(trace)
    changed = _changed_paths(trace, on_disk, committed, sources)
    _remember_clean(trace, checked, changed)
    if not changed:
        return kinds
    if clean:  # what follows needs every committed file
        committed = _committed_files(trace, head_commit)
    adopted = _adopt(trace, committed, head_commit)
    if adopted:
        trace.meta.head = adopted[-1].sequence
        if any(map(is_model_turn, adopted)):
            # its commit adds the turns above `usage.through`; a person's file at or
            # below it is counted here (`trace.json` on disk may count either already)
            trace.meta.iterations = trace.turns_counted()
        extra = [f for m in adopted for f in (m.files_changed or [])]
        extra += [sources[m.sequence] for m in adopted if m.sequence in sources]
        for m in adopted:  # a post's message a crash left uncommitted: its key, as ingest
            key = post_key(sources.get(m.sequence, ""))
            if key is not None:
                remember_post(trace.meta, key, m.sequence)
        trace.commit_step(
            "recover",
            adopted,
            extra_paths=extra,
            summary=f"adopted {counted(len(adopted), 'uncommitted message file')}",
        )
        kinds.append("recover")
        done = {trace.rel(trace.message_path(m)) for m in adopted} | {trace.rel(trace.meta_path)}
        changed = [p for p in changed if p not in done]
    if changed:
        trace.reload()
        _check_edit(trace, changed, head_commit)
        changed = _recount_turns(trace, changed)
    if changed:
        shown = [p[len(prefix) + 1 :] for p in changed]
        step = Step(
            trace.id,
            "edit",
            trace.meta.head,
            summary=", ".join(shown[:3]) + (f" and {len(shown) - 3} more" if len(shown) > 3 else ""),
        )
        trace.repo.commit_worktree(changed, step.message())
        trace.summary_file.forget()  # an edited title or head: the list builds it again
        kinds.append("edit")
    return kinds

def _recount_turns(trace: Trace, changed: list[str]) -> list[str]:
    """`changed` with `trace.json` as the edit leaves it: its count of the model's turns
    counted from the files again if a message file changed (a turn may be added or
    gone) or `trace.json` did (the count may be edited); left out if it is then as
    committed (`Trace.meta_uncommitted`, against HEAD: a `recover` commit may just
    have moved it)."""
    meta = trace.rel(trace.meta_path)
    messages = trace.rel(trace.messages_dir) + "/"
    if not any(p.startswith(messages) or p == meta for p in changed):
        return changed
    trace.meta.iterations = trace.count(is_model_turn)
    if trace.save_meta():
        changed = sorted({*changed, meta})
    if meta in changed and not trace.meta_uncommitted():
        changed.remove(meta)
    return changed


def edit_problem(trace: Trace) -> str | None:
    """What the next `recover` would refuse of the uncommitted changes under the
    trace (`_check_edit`), found without committing or writing anything: the files
    it would adopt are left out, as it adopts them first. `agentfs doctor`'s dry run."""
    head_commit = trace.repo.head()
    with gc_paused():
        on_disk, clean, _ = _worktree_files(trace, head_commit, refresh=False)
        changed = _changed_paths(trace, on_disk, _committed_files(trace, head_commit, skip=clean),
                                 _claimed_sources(trace))
        if not changed:
            return None
        committed = _committed_files(trace, head_commit)  # every one: what _adopt needs
    try:
        taken = _adopt(trace, committed, head_commit)
        adopted = {trace.rel(trace.message_path(m)) for m in taken}
        changed = [p for p in changed if p not in adopted]
        _check_edit(trace, changed, head_commit, dry=True)
    except AgentfsError as exc:
        return str(exc)
    finally:
        trace.reload()
    return None


def _claimed_sources(trace: Trace) -> dict[int, str]:
    """Inbox files claimed for the trace, by the sequence they are taking: their
    removal belongs to their `user` step, not to an edit."""
    return {s.sequence: s.origin
            for s in staged_in(trace.workspace.ingest_dir / trace.id) if s.origin}


def _changed_paths(trace: Trace, on_disk: dict[str, bytes],
                   committed: dict[str, tuple[int, bytes]], sources: dict[int, str]) -> list[str]:
    """The paths under the trace whose files differ from their commit, in order: not
    the files waiting in the inbox (ingest takes them) nor claimed ones (`sources`)."""
    inbox = f"{trace.rel(trace.dir)}/{INBOX_DIR}/"
    claimed = set(sources.values())
    return sorted(
        path
        for path in set(committed) | set(on_disk)
        if not (path.startswith(inbox) and path in on_disk and not path.endswith("/" + KEEP))
        and (path not in on_disk or path not in committed or on_disk[path] != committed[path][1])
        and path not in claimed
    )


def _undo_cut_short_transition(trace: Trace, head_commit: bytes | None) -> None:
    """Undo a side-branch queue transition a crash cut short before its commit: a
    trace.json whose `side_queue` differs from the committed one goes back to its
    commit, and message files a merge wrote from the running branch are removed.
    The queue redoes the transition with the same bytes
    (`agentfs/core/sidequeue.py`); adopting them here would lose the merge parent."""
    committed_bytes = trace.repo.read_file(head_commit, trace.rel(trace.meta_path))
    try:
        disk_bytes = read_trace_file(trace.meta_path)
    except (OSError, AgentfsError):  # a refused file or folder: opening the trace says why
        return
    if committed_bytes is None or (disk_bytes == committed_bytes
                                   and b'"side_queue"' not in committed_bytes):
        return  # the common case, with no queue: nothing to parse
    try:
        committed = parse_meta(committed_bytes)
        on_disk = parse_meta(disk_bytes)
    except ValueError:
        return  # the edit check reports a broken trace.json
    if disk_bytes != committed_bytes and on_disk.side_queue != committed.side_queue:
        atomic_write(trace.meta_path, committed_bytes, tmp_dir=trace.tmp_dir,
                     sync_dir=trace.repo.durable)
        trace.reload()
    step = committed.side_queue.current() if committed.side_queue else None
    if step is None or step.branch is None or step.first is None:
        return
    branch_head = trace.repo.head(b"refs/heads/" + step.branch.encode())
    if branch_head is None:
        return
    for path in queue_step_files(trace.repo, branch_head, trace.rel(trace.messages_dir),
                                 step.first):
        full = trace.workspace.root / path
        try:
            st = os.lstat(full)
        except (FileNotFoundError, NotADirectoryError):  # a folder on the way is a file now
            continue
        on_branch = trace.repo.tree_lookup(branch_head, path)
        if (stat.S_ISREG(st.st_mode) and on_branch is not None
                and trace.repo.tree_lookup(head_commit, path) is None
                and file_blob_id(full, st) == on_branch[1]):  # hashed a chunk at a time
            full.unlink()


def _check_edit(trace: Trace, changed: list[str], head_commit: bytes | None, *,
                dry: bool = False) -> None:
    """Refuse, before anything is committed, edits that leave no usable main path
    (a deleted message on it, a head pointing nowhere, a broken trace.json), a goal
    tree or `approval.json` a run could not read (each read by its own reader), or
    edits that change what a message is: its role, its tool calls, or the call a
    tool result answers (`_changed_shape`). The person's text is theirs to edit;
    the pairing of calls and results is what the model was sent and must stay.
    `dry`: said as what the next run will refuse (`edit_problem`)."""
    try:
        messages = trace.messages(refresh=True)
        trace.main_path(messages)
        if _touches(changed, trace.rel(trace.dir / GOALS_FILE)):
            GoalsFile.load(trace.dir / GOALS_FILE)  # gone is fine: a tree with no goals
        if _touches(changed, trace.rel(trace.approval_path)):
            trace.pending_approval()  # gone is fine: no call waits
        problem = _changed_shape(trace, changed, messages, head_commit)
    except AgentfsError as exc:
        problem = exc.message
    if problem is None:
        return
    where = trace.rel(trace.dir)
    raise AgentfsError(
        f"{problem}; " + (f"the next run refuses your changes under {where}" if dry
                          else f"your changes under {where} were not committed"),
        hint=_undo_hint(trace, changed, head_commit),
    )


#: The most files an undo hint names one by one; beyond, it names their folder.
UNDO_NAMED = 8


def _undo_hint(trace: Trace, changed: list[str], head_commit: bytes | None) -> str:
    """Commands that undo `changed` (paths from the workspace root), as a person can run
    them there: committed files checked out again from `HEAD` (which also takes back a
    staged deletion or rename, and a file a stopped `git revert` or merge left
    unmerged, where `git checkout -- FILE` is refused), new ones removed (from the
    index too if staged); and the Git command that stopped halfway, if one did."""
    unfinished = trace.unfinished_note()
    if len(changed) > UNDO_NAMED:
        where = shlex.quote(trace.rel(trace.dir))
        return (f"{unfinished}fix the files, or undo every change under {where}: "
                f"`git checkout HEAD -- {where}` and, for new files, `git clean -n -- {where}` "
                "lists them; then run again")
    committed = [p for p in changed if trace.repo.tree_lookup(head_commit, p) is not None]
    new = [p for p in changed if p not in committed]
    undo = ([f"`git checkout HEAD -- {' '.join(map(shlex.quote, committed))}`"]
            if committed else [])
    if new:  # the index is read only for them: a staged one is removed from it too
        staged = trace.repo.stat_cache()
        for command, paths in (("git rm -qf --", [p for p in new if staged.has(p)]),
                               ("rm --", [p for p in new if not staged.has(p)])):
            undo += [f"`{command} {' '.join(map(shlex.quote, paths))}`"] if paths else []
    return f"{unfinished}fix the file, or undo the change: {' and '.join(undo)}; then run again"


def _touches(changed: list[str], path: str) -> bool:
    """True if `path`, or something below it (a folder in a file's place), changed."""
    return any(p == path or p.startswith(path + "/") for p in changed)


def _changed_shape(trace: Trace, changed: list[str], messages: dict[int, Message],
                   head_commit: bytes | None) -> str | None:
    """What an edit of a committed message file changed that only agentfs may change
    (role, tool calls, the call a result answers), or None."""
    prefix = trace.rel(trace.messages_dir) + "/"
    for path in changed:
        parsed = parse_message_relpath(path[len(prefix):]) if path.startswith(prefix) else None
        if parsed is None or parsed[0] not in messages:
            continue
        before_bytes = trace.repo.read_file(head_commit, path)
        if before_bytes is None:
            continue  # a new file: adopted or judged by the main path
        try:
            before = parse_message(trace.workspace.root / path, before_bytes)
        except AgentfsError:
            continue  # the committed file was unreadable: any fix is welcome
        now = messages[parsed[0]]
        if _lost_header(trace.workspace.root / path, before_bytes):
            return (f"{path}: the file no longer starts with its frontmatter's `---` line "
                    "(deleted, or lines put before it), so its fields would become its text")
        if now.role != before.role:
            return f"{path}: the edit changes the role from {before.role} to {now.role}"
        if _calls(now) != _calls(before):
            return (f"{path}: the edit changes the message's tool calls "
                    f"({len(_calls(before))} before, {len(_calls(now))} now; a lost "
                    "frontmatter `---` line does this)")
        if now.tool_call_id != before.tool_call_id:
            return (f"{path}: the edit changes which tool call the result answers "
                    f"({before.tool_call_id!r} to {now.tool_call_id!r})")
    return None


#: Fields every message's frontmatter holds: a header holding one is a message's.
_OWN_FIELDS = frozenset({"id", "sequence", "parent_sequence"})


def _lost_header(path: Path, before_bytes: bytes) -> bool:
    """Whether the message file at `path` lost the place of the frontmatter it had when
    committed (`before_bytes`): its fields read now as its text (`misplaced_fields`)."""
    try:
        now = path.read_bytes().decode("utf-8")
        had = split(before_bytes.decode("utf-8"))[0] is not None
        return had and split(now)[0] is None and misplaced_fields(now, _OWN_FIELDS)
    except (OSError, UnicodeDecodeError, AgentfsError):
        return False  # unreadable either way: the parse of the file says why


def _calls(message: Message) -> list[tuple[str, str, dict]]:
    return [(c.id, c.name, c.input) for c in message.tool_calls or []]

def _adopt(
    trace: Trace, committed: dict[str, tuple[int, bytes]], head_commit: bytes | None
) -> list[Message]:
    """Uncommitted new message files continuing the committed head, in order."""
    messages = trace.messages(refresh=True)
    messages_prefix = trace.rel(trace.messages_dir) + "/"
    committed_sequences = [
        parsed[0]
        for path in committed
        if path.startswith(messages_prefix)
        and (parsed := parse_message_relpath(path[len(messages_prefix) :])) is not None
    ]
    newest_committed = max(committed_sequences, default=0)
    head = start = _committed_head(trace, head_commit)
    adopted: list[Message] = []
    for sequence, message in messages.items():
        if sequence <= newest_committed:
            continue
        if message.parent_sequence not in (None, head):
            continue
        if message.parent_sequence is None and head is not None:
            adopted.append(message.model_copy(update={"parent_sequence": head}))
        else:
            adopted.append(message)
        head = sequence
    _check_results(trace, messages, start, adopted)
    return adopted


def _check_results(trace: Trace, messages: dict[int, Message], head: int | None,
                   adopted: list[Message]) -> None:
    """Refuse a tool result among the files to adopt that answers no call waiting for
    one where it comes (a request holding it would be refused by the model's API).

    Raises:
        AgentfsError: naming the file and the calls it could answer.
    """
    if head is None or not any(m.role == "tool" for m in adopted):
        return
    try:
        path = trace.path_to(head, messages)
    except AgentfsError:
        return  # an edit broke the path there: the edit check names it
    for message in adopted:
        waiting = {c.id for c in unanswered_calls(path)}
        if message.role == "tool" and message.tool_call_id not in waiting:
            file = trace.rel(trace.message_path(message))
            where = shlex.quote(file)
            raise AgentfsError(
                f"{file}: a tool result for call "
                f"{message.tool_call_id!r}, which no tool call waiting there asks for",
                hint=f"set its tool_call_id to one of {sorted(waiting)}, or remove it: "
                f"`rm -- {where}`; then run again" if waiting
                else f"remove it: `rm -- {where}`; then run again")
        path.append(message)

def _committed_head(trace: Trace, head_commit: bytes | None) -> int | None:
    """The head recorded in the committed `trace.json` (the disk may be ahead)."""
    data = trace.repo.read_file(head_commit, trace.rel(trace.meta_path))
    if data is None:
        return None  # the trace itself was never committed
    try:
        return parse_meta(data).head
    except ValueError:
        return trace.meta.head

def _committed_files(
    trace: Trace, head_commit: bytes | None, skip: Container[str] = ()
) -> dict[str, tuple[int, bytes]]:
    """Committed files under the trace, with the same names left out as on disk
    (and the folders in `skip` not looked into)."""
    prefix = trace.rel(trace.dir)
    ignored_dirs: dict[str, bool] = {}
    files: dict[str, tuple[int, bytes]] = {}
    for path, entry in trace.repo.walk(head_commit, prefix, skip).items():
        directory, _, name = path[len(prefix) + 1 :].rpartition("/")
        if directory not in ignored_dirs:
            ignored_dirs[directory] = any(is_ignored_name(p) for p in directory.split("/") if p)
        if not ignored_dirs[directory] and not _ignored(name):
            files[path] = entry
    return files

#: A folder checked file by file that may be remembered as clean if nothing in it
#: changed: (its path below the workspace, its absolute path, tree id, digest of
#: stamps, the stamps).
_Checked = tuple[str, str, bytes, bytes, dict[str, Stamp]]
#: A folder of at most this many files, and bytes, not remembered clean is read and
#: hashed rather than loading the index (whose size grows with the repository).
FEW_FILES, FEW_BYTES = 16, 1 << 20


def _worktree_files(
    trace: Trace, head_commit: bytes | None, *, refresh: bool = True
) -> tuple[dict[str, bytes], set[str], list[_Checked]]:
    """Files under the trace directory (editor temp files left out): path → blob id;
    the folders of `messages/` left out because they are as clean as last time; the
    folders checked file by file that may be remembered as clean.

    Like `git status`, a file whose stat matches its index entry is taken to
    hold the entry's blob without being read, unless it changed in the same
    clock tick as the index was written ("racily clean"). A file read although
    the index had an entry for it (its stat changed: a copy, a `touch`) has its
    new stat recorded there when it still holds the entry's blob
    (`agentfs/store/git/repo.py:GitRepo.refresh_stat`), so the next run does not
    read it again.

    A folder of `messages/` whose files all have the stamps (mtime, ctime, size,
    inode) they had when an earlier recovery through the same repository object
    found the folder to hold the same tree as now (`GitRepo.clean_folders`,
    saved for the next process by `recover`) is not looked at further: every
    file is still stat'ed (an edit in place changes a file's ctime, not its
    folder's mtime), but none is looked up in the index or read, and the
    folder's committed tree is not walked. Only folders whose stamps were all
    settled (older than the last clock ticks, by mtime and ctime) are
    remembered. A remembered folder whose stamps changed since (the newest
    one, where the last run wrote) is compared file by file with the stamps
    saved then: only the files with new stamps are read. The index, whose
    load grows with the repository, is read only for the folders left (none
    remembered, as after a copy) unless they hold a few small files, which are
    read instead (the trace's own folder: `trace.json`).
    """
    prefix = trace.rel(trace.dir)
    marks = trace.workspace.clean_marks(trace.id)
    trace.repo.clean_folders.load(str(trace.dir), marks)
    known: list[StatCache] = []  # the index's stat data, loaded when first needed
    files: dict[str, bytes] = {}
    reread: dict[str, tuple[os.stat_result, bytes]] = {}  # read although the index knew them
    messages_key = trace.message_dir.key()
    messages_rel = trace.rel(trace.messages_dir)
    trees = trace.repo.entries(head_commit, messages_rel)
    racy_after = time.time_ns() - RACY_NS
    listing: Listing | None = {}
    clean: set[str] = set()
    checked: list[_Checked] = []
    pending = [(str(trace.dir), prefix)]
    while pending:
        directory, rel_dir = pending.pop()
        parent, _, name = rel_dir.rpartition("/")
        folder = "" if rel_dir == messages_rel else (
            name if parent == messages_rel and is_shard_name(name) else None)
        found, stamps, plain, kept, linked = _scan(directory, rel_dir, pending)
        if listing is not None and (folder is not None or rel_dir.startswith(messages_rel + "/")):
            if linked:
                listing = None  # let the scan of messages/ report it
            elif folder is not None:
                listing[folder] = ({n: s for n, s in stamps.items() if n != KEEP} if kept
                                   else stamps)
        tree = trees.get(folder) if folder else None
        if tree is not None and plain:
            remembered = trace.repo.clean_folders.get(str(trace.dir), directory)
            digest = stamps_digest(stamps)
            if remembered is not None and remembered == (tree[1], digest):
                clean.add(rel_dir)
                continue
            trace.repo.clean_folders.forget(str(trace.dir), directory)
            if all(settled(max(s[0], s[1]), racy_after) for s in stamps.values()):
                checked.append((rel_dir, directory, tree[1], digest, stamps))
            if remembered is not None and _since_remembered(
                    trace, found, directory, rel_dir, files,
                    saved=load_stamps(marks, name, remembered[0])):
                continue
        if not known and _read_few(found, directory, rel_dir, files):
            continue
        if not known:
            known.append(trace.repo.stat_cache())
        _blob_ids(found, directory, rel_dir, known=known[0], files=files, reread=reread)
    _after_scan(trace, reread if refresh else {}, listing, messages_key)
    return files, clean, checked


def _after_scan(trace: Trace, reread: dict[str, tuple[os.stat_result, bytes]],
                listing: Listing | None, messages_key: object) -> None:
    """What a scan of the trace's files leaves for the next: the index's stat data of
    the files it read although the index knew them (`reread`), so the next run stats
    them instead; the listing of `messages/`, if it is still the folder's."""
    trace.repo.refresh_stat(reread)
    if listing is not None and trace.message_dir.key() == messages_key:
        trace.message_dir.hint(messages_key, listing)


#: A folder's files as scanned: (name, its `lstat`) of each file and symlink, the
#: stamps of those, whether they are all regular files with no subfolder, whether a
#: `.gitkeep` is among them, and whether a symlink is.
_Found = list[tuple[str, os.stat_result]]
_Scan = tuple[_Found, dict[str, Stamp], bool, bool, bool]


def _scan(directory: str, rel_dir: str, pending: list[tuple[str, str]]) -> _Scan:
    """The files of one folder under the trace; its subfolders go onto `pending`.

    Each file is `stat`ed through the open folder (`fstatat`), not by its whole
    path: the kernel then walks one name instead of the workspace's whole path,
    a third less time for the `stat` of every file a run's start pays
    (docs/performance.md)."""
    found: _Found = []
    stamps: dict[str, Stamp] = {}
    plain = True  # regular files only
    kept = False  # a `.gitkeep`: a file here, not a message file
    linked = False  # a symlink among the files
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with os.scandir(fd) as entries:
            for entry in entries:  # once per file of the trace: kept lean
                name = entry.name
                if is_ignored_name(name):
                    if name != KEEP:
                        continue
                    kept = True
                if entry.is_dir(follow_symlinks=False):
                    pending.append((f"{directory}/{name}", f"{rel_dir}/{name}"))
                    plain = False
                    continue
                st = entry.stat(follow_symlinks=False)
                if not stat.S_ISREG(st.st_mode):
                    plain = False
                    if not stat.S_ISLNK(st.st_mode):
                        continue  # a FIFO or device: Git does not track it, and reading could block
                    linked = True
                found.append((name, st))
                stamps[name] = (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)
    finally:
        os.close(fd)
    return found, stamps, plain, kept, linked


def _since_remembered(trace: Trace, found: _Found, directory: str,
                      rel_dir: str, files: dict[str, bytes], *,
                      saved: tuple[bytes, dict[str, Stamp]] | None) -> bool:
    """Into `files`: the blob id of each file of a folder once remembered clean, as
    `saved` (tree id, stamps of its files then): the tree's blob for a file that
    kept its stamp, else read. False (nothing done) without them or the tree."""
    if saved is None:
        return False
    entries = trace.repo.tree_entries(saved[0])
    if not entries:
        return False
    saved_stamps = saved[1]
    for name, st in found:
        kept = entries.get(name) if saved_stamps.get(name) == (
            st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino) else None
        files[f"{rel_dir}/{name}"] = (kept[1] if kept is not None
                                      else file_blob_id(f"{directory}/{name}", st))
    return True


def _read_few(found: _Found, directory: str, rel_dir: str, files: dict[str, bytes]) -> bool:
    """Into `files`: the blob id of each file found, read, if they are a few small
    ones (`FEW_FILES`, `FEW_BYTES`); False (nothing done) otherwise."""
    if len(found) > FEW_FILES or sum(st.st_size for _, st in found) > FEW_BYTES:
        return False
    for name, st in found:
        files[f"{rel_dir}/{name}"] = file_blob_id(f"{directory}/{name}", st)
    return True


def _blob_ids(found: _Found, directory: str, rel_dir: str, *,
              known: StatCache, files: dict[str, bytes],
              reread: dict[str, tuple[os.stat_result, bytes]]) -> None:
    """Into `files`: the blob id of each file found, from the index when its stat
    matches, else read; into `reread`: files read although the index had them."""
    for name, st in found:
        rel = f"{rel_dir}/{name}"
        blob_id = known.blob_id(rel, st)
        if blob_id is not None:
            files[rel] = blob_id
            continue
        files[rel] = file_blob_id(f"{directory}/{name}", st)
        if not stat.S_ISLNK(st.st_mode) and known.has(rel):
            reread[rel] = (st, files[rel])


def _remember_clean(trace: Trace, checked: list[_Checked], changed: list[str]) -> None:
    """Remember the folders checked file by file in which nothing changed
    (`agentfs/store/cleanfolders.py:CleanFolders`, held by the workspace's repository)."""
    marks = trace.workspace.clean_marks(trace.id)
    for rel_dir, directory, tree, digest, stamps in checked:
        start = bisect.bisect_left(changed, rel_dir + "/")
        if start == len(changed) or not changed[start].startswith(rel_dir + "/"):
            save_stamps(marks, rel_dir.rpartition("/")[2], tree, stamps)
            trace.repo.clean_folders.remember(str(trace.dir), directory, (tree, digest))
    trace.repo.clean_folders.save(str(trace.dir), marks)


def _ignored(name: str) -> bool:
    """Editor temp files are never edits; `.gitkeep` (agentfs' own) is a file like any."""
    return name != KEEP and is_ignored_name(name)
