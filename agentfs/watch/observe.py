"""Filesystem events (watchdog) that tell the watcher where to look; polling when
inotify runs out."""

from __future__ import annotations

import errno
import os
import warnings
from collections.abc import Callable
from pathlib import Path

from watchdog.events import (
    EVENT_TYPE_CLOSED_NO_WRITE,
    EVENT_TYPE_CREATED,
    EVENT_TYPE_MOVED,
    EVENT_TYPE_OPENED,
    DirCreatedEvent,
    DirDeletedEvent,
    DirModifiedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver, ObservedWatch
from watchdog.observers.polling import PollingObserver

from agentfs.store.workspace import Workspace

#: Events that change nothing; the watcher's own reads make them.
_READS = {EVENT_TYPE_OPENED, EVENT_TYPE_CLOSED_NO_WRITE}
#: The events asked for: all but the reads, which the kernel then does not even
#: report (a look at every inbox opens each folder: thousands of events to discard).
_CHANGES = [DirCreatedEvent, DirDeletedEvent, DirModifiedEvent, DirMovedEvent, FileClosedEvent,
            FileCreatedEvent, FileDeletedEvent, FileModifiedEvent, FileMovedEvent]


class _Wake(FileSystemEventHandler):
    """Calls `wake(path)` for each path an event reports in `inbox/` or `traces/`; or,
    when not `precise` (the polling observer), `wake()`: "look at every inbox"."""

    def __init__(self, root: Path, wake: Callable[..., None], *, precise: bool = True) -> None:
        workspace = Workspace(root)
        self.root = root
        self.folders = (workspace.inbox_dir, workspace.traces_dir)
        self.wake = wake
        self.precise = precise
        self.observer: BaseObserver | None = None
        self._watches: dict[Path, ObservedWatch] = {}

    def watch(self, observer: BaseObserver) -> None:
        """Schedule on `observer`: the root shallowly (to see `inbox/` and `traces/`
        appear), and those two folders with everything in them."""
        self.observer = observer
        observer.schedule(self, str(self.root), recursive=False, event_filter=_CHANGES)
        for folder in self.folders:
            if folder.is_dir():
                self._watches[folder] = self._schedule(folder)

    def _schedule(self, folder: Path) -> ObservedWatch:
        assert self.observer is not None
        return self.observer.schedule(self, str(folder), recursive=True, event_filter=_CHANGES)

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in _READS:
            return
        if event.is_directory and event.event_type in (EVENT_TYPE_CREATED, EVENT_TYPE_MOVED):
            made = Path(os.fsdecode(event.dest_path or event.src_path))
            if made in self.folders:
                self._watch_again(made)
                return
        for raw in (event.src_path, event.dest_path):
            path = Path(os.fsdecode(raw)) if raw else None
            if path is None or not any(path.is_relative_to(f) for f in self.folders):
                continue
            if self.precise:
                self.wake(path)
            else:
                self.wake()

    def _watch_again(self, folder: Path) -> None:
        """`inbox/` or `traces/` made (again): a watch dies with its folder. Then look
        at every inbox, for what was put there before the new watch began."""
        if self.observer is not None:
            try:
                if (old := self._watches.pop(folder, None)) is not None:
                    self.observer.unschedule(old)
                self._watches[folder] = self._schedule(folder)
            except (OSError, KeyError):
                pass  # no watches left: the watcher's periodic rescans still find files
        self.wake()


def observe(root: Path, wake: Callable[..., None]) -> tuple[BaseObserver, str]:
    """Start an observer of workspace `root` calling `wake(path)` with the paths that
    changed in `inbox/` and `traces/`; (observer, kind).

    The native observer (inotify) reports each change's path, so the watcher looks
    only at the inboxes concerned. When inotify watches run out, a polling observer
    is used instead, and it calls `wake()` (look at every inbox) on each change it
    finds. Only `inbox/` and `traces/` are watched (and the root itself, shallowly,
    to see them appear): every commit makes dozens of events in `.git`, which
    watchdog would build and deliver only for them to be ignored. (A file that an
    ingest renames out of these folders makes watchdog hold back later events for
    half a second, waiting for the other half of the move; settle windows counted
    from each file's mtime keep that from delaying runs.)
    """
    # watchdog warns (with a screenful of repr) when a folder it watches is made again,
    # as `.git/agentfs/ingest/<trace>` is at each ingest; the watch is simply renewed.
    warnings.filterwarnings(
        "ignore", message="Callback with id", category=RuntimeWarning, module="watchdog"
    )
    root = root.resolve()  # the paths events report are compared with the workspace's
    observer: BaseObserver = Observer()
    try:
        _Wake(root, wake).watch(observer)
        observer.start()
        return observer, "native"
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EMFILE):
            raise
        observer.unschedule_all()
    observer = PollingObserver(timeout=1.0)  # inotify watches ran out
    _Wake(root, wake, precise=False).watch(observer)
    observer.start()
    return observer, "polling"
