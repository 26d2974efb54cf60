"""Filesystem events (watchdog) that wake the watcher; polling when inotify runs out."""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver
from watchdog.observers.polling import PollingObserver


class _Wake(FileSystemEventHandler):
    def __init__(self, wake: Callable[[], None]) -> None:
        self.wake = wake

    def on_any_event(self, event: FileSystemEvent) -> None:
        if "/.git/" not in str(event.src_path):
            self.wake()


def observe(root: Path, wake: Callable[[], None]) -> tuple[BaseObserver, str]:
    """Start an observer of `root` calling `wake` on changes; (observer, kind)."""
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
