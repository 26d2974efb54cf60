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

#: Events that change nothing; the watcher's own reads make them.
_READS = {EVENT_TYPE_OPENED, EVENT_TYPE_CLOSED_NO_WRITE}


class _Wake(FileSystemEventHandler):
    def __init__(self, wake: Callable[[], None]) -> None:
        self.wake = wake

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type not in _READS and "/.git/" not in str(event.src_path):
            self.wake()


def observe(root: Path, wake: Callable[[], None]) -> tuple[BaseObserver, str]:
    """Start an observer of `root` calling `wake` on changes; (observer, kind)."""
    # watchdog warns (with a screenful of repr) when a folder it watches is made again,
    # as `.git/agentfs/ingest/<trace>` is at each ingest; the watch is simply renewed.
    warnings.filterwarnings(
        "ignore", message="Callback with id", category=RuntimeWarning, module="watchdog"
    )
    handler = _Wake(wake)
    observer: BaseObserver = Observer()
    try:
        observer.schedule(handler, str(root), recursive=True)
        observer.start()
        return observer, "native"
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EMFILE):
            raise
    observer = PollingObserver(timeout=1.0)  # inotify watches ran out
    observer.schedule(handler, str(root), recursive=True)
    observer.start()
    return observer, "polling"
