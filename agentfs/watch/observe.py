"""Filesystem events (watchdog) that wake the watcher; polling when inotify runs out."""

from __future__ import annotations

import errno
import warnings
from collections.abc import Callable
from pathlib import Path

from watchdog.events import (
    EVENT_TYPE_CLOSED_NO_WRITE,
    EVENT_TYPE_OPENED,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver
from watchdog.observers.polling import PollingObserver

from agentfs.store.workspace import Workspace

#: Events that change nothing; the watcher's own reads make them.
_READS = {EVENT_TYPE_OPENED, EVENT_TYPE_CLOSED_NO_WRITE}


class _Wake(FileSystemEventHandler):
    def __init__(self, wake: Callable[[], None]) -> None:
        self.wake = wake

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type not in _READS and "/.git/" not in str(event.src_path):
            self.wake()


def observe(root: Path, wake: Callable[[], None]) -> tuple[BaseObserver, str]:
    """Start an observer of workspace `root` calling `wake` on changes; (observer, kind).

    Only `inbox/` and `traces/` are watched (and the root itself, shallowly, to see
    them appear): every commit makes dozens of events in `.git`, which watchdog
    would build and deliver only for them to be ignored. (A file that an ingest
    renames out of these folders makes watchdog hold back later events for half a
    second, waiting for the other half of the move; the loop's ticks, and settle
    windows counted from each file's mtime, keep that from delaying runs.)
    """
    # watchdog warns (with a screenful of repr) when a folder it watches is made again,
    # as `.git/agentfs/ingest/<trace>` is at each ingest; the watch is simply renewed.
    warnings.filterwarnings(
        "ignore", message="Callback with id", category=RuntimeWarning, module="watchdog"
    )
    handler = _Wake(wake)
    workspace = Workspace(root)
    watched = [(root, False)] + [
        (folder, True) for folder in (workspace.inbox_dir, workspace.traces_dir)
        if folder.is_dir()
    ]
    observer: BaseObserver = Observer()
    try:
        for folder, recursive in watched:
            observer.schedule(handler, str(folder), recursive=recursive)
        observer.start()
        return observer, "native"
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EMFILE):
            raise
        observer.unschedule_all()
    observer = PollingObserver(timeout=1.0)  # inotify watches ran out
    for folder, recursive in watched:
        observer.schedule(handler, str(folder), recursive=recursive)
    observer.start()
    return observer, "polling"
