"""Reading a file of a trace that a person, another program or a clone may have put
there: only a regular file, never through a symlink, never more than a limit; and
never a trace's folder through a link (`check_real_folder`).

A link could make agentfs read, and show or send to the model, a file outside the
workspace; a FIFO would hang the read and a device such as `/dev/zero` would never
end it. Git can bring a symlink with a clone, so a trace's files are opened without
following one (`O_NOFOLLOW`), without waiting on a FIFO (`O_NONBLOCK`), and judged
by what was opened (`fstat`), so nothing can be swapped in between.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from agentfs.errors import AgentfsError, MessageFileError
from agentfs.store.workspace import INBOX_DIR, MESSAGES_DIR

__all__ = [
    "MAX_CONFIG_BYTES",
    "MAX_CONTROL_BYTES",
    "FileRefused",
    "check_real_folder",
    "check_real_folders",
    "check_trace_folders",
    "linked_folder",
    "read_config_file",
    "read_regular",
    "read_trace_file",
]

#: The largest `trace.json`, `goals.json` or `approval.json` read: far above what
#: agentfs writes (a few KB), far below what would hurt to load.
MAX_CONTROL_BYTES = 16 * 1024 * 1024
#: The largest `agentfs.toml` read (the default one is under 2 KB).
MAX_CONFIG_BYTES = 1024 * 1024

_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class FileRefused(AgentfsError):
    """A file that is not read: a symlink, not a regular file, too large, with other
    hard links where that is refused, or unreadable."""

    def __init__(self, path: Path, problem: str, *, hint: str | None = None) -> None:
        super().__init__(f"{path}: {problem}", hint=hint)
        self.path = path
        self.problem = problem


def read_regular(path: Path, limit: int, *, what: str, size_hint: str | None = None,
                 single: bool = False, follow: bool = False) -> bytes:
    """The bytes of the regular file at `path`, of at most `limit` bytes.

    Args:
        what: what such files are, for the messages ("message files").
        size_hint: what to do with a file over `limit`.
        single: refuse a file with other hard links too (its bytes are elsewhere as
            well, maybe outside the workspace: for untrusted dropped files).
        follow: follow a symlink (to a regular file): for a file whose content the
            person vouches for whatever it is, as `agentfs.toml` through trust.

    Raises:
        FileNotFoundError: there is no such file.
        FileRefused: naming the file and what is wrong with it.
    """
    try:
        fd = os.open(path, _FLAGS & ~os.O_NOFOLLOW if follow else _FLAGS)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise FileRefused(path, f"is a symlink; {what} must be regular files",
                              hint="replace the link with a copy of the file it points to"
                              ) from None
        raise FileRefused(path, f"cannot read: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FileRefused(path, "is not a regular file",
                              hint=f"{what} must be regular files: replace it with one")
        if single and info.st_nlink > 1:
            raise FileRefused(
                path, f"has {info.st_nlink} hard links; a dropped file must be a file of its own",
                hint="drop a copy of the file, not a link to it",
            )
        if info.st_size > limit:
            raise FileRefused(path, over_limit(info.st_size, limit), hint=size_hint)
        data = _read_upto(fd, info.st_size, limit + 1)
    except OSError as exc:
        raise FileRefused(path, f"cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise FileRefused(path, over_limit(len(data), limit), hint=size_hint)
    return data


def _read_upto(fd: int, size: int, most: int) -> bytes:
    """At most `most` bytes of the open file, `size` long when looked at: asked for
    as `size` and one more (a buffer of `most` would be reserved on every read), then
    on while it gives more (it may have grown since)."""
    parts = [os.read(fd, min(size + 1, most))]
    got = len(parts[0])
    while parts[-1] and got < most:
        parts.append(os.read(fd, most - got))
        got += len(parts[-1])
    return b"".join(parts)


def read_trace_file(path: Path) -> bytes:
    """A trace's own `trace.json`, `goals.json` or `approval.json` (`read_regular`).

    Its folders are checked once, where the trace is opened
    (`agentfs/store/trace.py:Trace.check_folders`) or listed, not at every read.

    Raises:
        FileNotFoundError: there is no such file.
        FileRefused: it is a link, not a regular file or too large.
    """
    return read_regular(path, MAX_CONTROL_BYTES, what="trace files")


def read_config_file(path: Path) -> bytes:
    """`agentfs.toml`'s bytes: a regular file (a link to one is followed: what
    `agentfs trust` trusts is its content, wherever it is) of at most
    `MAX_CONFIG_BYTES`, so a link to a device or a huge file cannot hang every
    command.

    Raises:
        FileNotFoundError: there is no such file.
        FileRefused: not a regular file, too large, or unreadable.
    """
    return read_regular(path, MAX_CONFIG_BYTES, what="agentfs.toml files", follow=True)


def over_limit(size: int, limit: int) -> str:
    """What is wrong with a file of `size` bytes where at most `limit` are read."""
    return f"file is {size:,} bytes, over the {limit:,}-byte limit"


def check_real_folder(path: Path | str) -> None:
    """Refuse `path` if it is a symlink: a trace's folders (its own, `messages/`
    and the folders in it) are read and written only where they are, inside the
    workspace; through a link, message files would be read from and written to
    wherever it leads, and Git would commit only the link.

    Raises:
        MessageFileError: naming the link and the fix.
    """
    if os.path.islink(path):
        raise linked_folder(path)


def check_trace_folders(folder: Path | str) -> None:
    """Refuse the trace at `folder` if it, `traces/` (its parent), its `messages/` or
    its `inbox/` is a symlink (`check_real_folder`), or `messages/` or `inbox/` is
    not a folder: checked once where a trace is opened or listed; the folders
    inside `messages/` are refused where they are listed or written. Strings, not
    pathlib: the trace list checks every trace.

    Raises:
        MessageFileError: naming the link or the file.
    """
    folder = os.fspath(folder)
    for checked in (os.path.dirname(folder), folder):
        check_real_folder(checked)
    for name, what in _TRACE_FOLDERS:
        path = f"{folder}/{name}"
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            continue  # none yet (a trace being made), or unreadable: listing it says so
        if stat.S_ISLNK(mode):
            raise linked_folder(path)
        if not stat.S_ISDIR(mode):
            raise MessageFileError(
                path, f"is a file, not {what}",
                hint="move the file away, then put the folder back with "
                f"`git checkout -- {name}` in the trace's folder")


#: The folders of a trace that must be folders of their own, and what each is.
_TRACE_FOLDERS = ((MESSAGES_DIR, "the folder of the trace's messages"),
                  (INBOX_DIR, "the trace's inbox folder"))


def linked_folder(path: Path | str) -> MessageFileError:
    """The refusal of a trace's folder that is a link (`check_real_folder`)."""
    return MessageFileError(
        path, "is a symlink, not a folder",
        hint="agentfs reads and writes a workspace's own folders only where they are: "
        "replace the link with a copy of the folder it points to",
    )


def check_real_folders(root: Path, path: str) -> None:
    """Refuse to write the file at `path` (a Git path below `root`) if a folder on the
    way is a symlink (`check_real_folder`): it could lead out of the workspace, and
    Git would commit only the link.

    Raises:
        MessageFileError: naming the link.
    """
    folder = root
    for part in path.split("/")[:-1]:
        folder = folder / part
        check_real_folder(folder)
