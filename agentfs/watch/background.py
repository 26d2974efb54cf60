"""Running a watcher on a thread of your own program, woken by the observer.

`agentfs watch` runs the loop in the foreground and stops on a signal; this
is the same loop for code that embeds a watcher (and for the tests and
benchmarks):

    with run_in_background(watcher, workspace_root):
        ...  # files dropped into inboxes start runs
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from agentfs.watch.observe import observe
from agentfs.watch.watcher import Watcher


@contextmanager
def run_in_background(
    watcher: Watcher, root: Path, *, observed: bool = True, join_timeout: float = 60.0
) -> Iterator[Watcher]:
    """Loop `watcher` on a daemon thread, told by a watchdog observer of `root` where
    files changed (unless not `observed`: then it finds them only when it looks at every
    inbox, every `watcher.rescan` seconds); on exit, stop it after the steps in progress."""
    observer = observe(root, watcher.wake)[0] if observed else None
    thread = threading.Thread(target=watcher.run_forever, name="agentfs-watch", daemon=True)
    thread.start()
    try:
        yield watcher
    finally:
        watcher.stopping.set()
        watcher.wake()
        thread.join(timeout=join_timeout)
        if observer is not None:
            observer.stop()
            observer.join()
