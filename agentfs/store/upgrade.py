"""Upgrading a trace written in an older format, in place, before a run goes on.

Format 1 kept every message file directly in `messages/`; format 2 keeps them
in folders of `SHARD_SIZE` sequences (`agentfs/store/message_dir.py`). Format 2's
`trace.json` counted the side branches the trace named (`context.side_branches`);
format 3 names them after commits (`agentfs/store/branches.py:branch_name`) and
keeps no count. The upgrade moves each message file found directly in
`messages/` into its folder and, when `trace.json` is as committed, writes it
in the current format (`agentfs/store/meta.py:parse_meta` reads every older
one); then it commits the moves of committed files, unchanged, and trace.json
as one `upgrade` commit. It only renames and reformats: a moved file that
differs from its commit (an edit) or was never committed (a file a person put
there) is left to recovery, which commits it as an `edit` or adopts it, from
its folder; a trace.json that differs from its commit is committed by recovery
as it is, and in the current format by the next step.

Killed at any instant, the next run finishes it: renames already done are
found as a committed file missing from `messages/` whose folder holds the
same bytes, a trace.json already rewritten as the current form of the
committed one, and nothing is committed until the ref moves once.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from dulwich.objects import Blob

from agentfs.errors import AgentfsError
from agentfs.store.atomic import fsync_dir
from agentfs.store.commits import Step
from agentfs.store.filenames import parse_file_name
from agentfs.store.message_dir import SHARD_SIZE, message_relpath
from agentfs.store.messages import MAX_MESSAGE_BYTES
from agentfs.store.meta import FORMAT_VERSION, dump_meta, parse_meta
from agentfs.store.regularfile import FileRefused, check_real_folder, read_regular, read_trace_file

if TYPE_CHECKING:
    from agentfs.store.trace import Trace

__all__ = ["upgrade"]


def upgrade(trace: Trace) -> bytes | None:
    """Bring the trace's files to the current format; returns the `upgrade` commit, or
    None if there was nothing to commit. The caller holds the trace's lock."""
    moved = _move_loose_files(trace)
    head = trace.repo.head()
    paths = _moved_paths(trace, head, moved)
    done = [f"{len(paths) // 2} message files moved into folders of {SHARD_SIZE}"] if paths else []
    if _meta_as_committed(trace, head):
        trace.save_meta()  # the format changes: the upgrade's part
        paths.append(trace.rel(trace.meta_path))
        done.append(f"trace.json in format {FORMAT_VERSION}")
    if not paths:
        return None
    step = Step(trace.id, "upgrade", trace.meta.head, summary=", ".join(done))
    return trace.repo.commit_worktree(paths, step.message())


def _moved_paths(trace: Trace, head: bytes | None, moved: int) -> list[str]:
    """Old and new path of each committed message file now in its folder, unchanged."""
    messages = trace.rel(trace.messages_dir)
    flat = {
        name: sha for name, (mode, sha) in trace.repo.entries(head, messages).items()
        if not stat.S_ISDIR(mode) and parse_file_name(name) is not None
    }
    paths: list[str] = []
    for name, sha in sorted(flat.items()):
        rel = message_relpath(name)
        if (trace.messages_dir / name).exists() or _blob_id(trace.messages_dir / rel) != sha:
            continue  # not moved (its place is taken), or edited: recovery's to commit
        paths += [f"{messages}/{name}", f"{messages}/{rel}"]
    return paths


def _meta_as_committed(trace: Trace, head: bytes | None) -> bool:
    """True if the committed trace.json is of an older format and the one on disk is
    as committed, or its current form (written by an upgrade killed before its
    commit, with `iterations` as it counted them from the message files)."""
    committed = trace.repo.read_file(head, trace.rel(trace.meta_path))
    if committed is None:
        return False
    try:
        meta = parse_meta(committed)
        if meta.format_version >= FORMAT_VERSION:
            return False
        on_disk = read_trace_file(trace.meta_path)
        if on_disk == committed:
            return True
        meta.format_version = FORMAT_VERSION
        meta.iterations = parse_meta(on_disk).iterations
    except (ValueError, OSError, AgentfsError):
        return False
    return on_disk == dump_meta(meta)


def _move_loose_files(trace: Trace) -> int:
    """Rename each message file directly in `messages/` into its folder, unless a file
    is there already; returns how many were moved."""
    moved = 0
    folders: set[str] = set()
    try:
        entries = list(os.scandir(trace.messages_dir))
    except FileNotFoundError:
        return 0
    for entry in entries:
        if parse_file_name(entry.name) is None or not entry.is_file(follow_symlinks=False):
            continue  # folders, symlinks and other names: the listing reports them
        rel = message_relpath(entry.name)
        target = trace.messages_dir / rel
        if os.path.lexists(target):
            continue  # two files for one message: the listing names both
        check_real_folder(target.parent)  # never moved out through a link
        target.parent.mkdir(exist_ok=True)
        os.rename(entry.path, target)
        folders.add(rel.partition("/")[0])
        moved += 1
    if moved and trace.repo.durable:
        for folder in folders:
            fsync_dir(trace.messages_dir / folder)
        fsync_dir(trace.messages_dir)
    return moved


def _blob_id(path: os.PathLike[str]) -> bytes | None:
    """The blob id of the message file at `path` as it can be read (never through a
    symlink, at most a message file's size), or None."""
    try:
        return Blob.from_string(read_regular(Path(path), MAX_MESSAGE_BYTES,
                                             what="message files")).id
    except (OSError, FileRefused):
        return None
