"""`agentfs watch`: runs started by files dropped into inboxes.

A file in `traces/<id>/inbox/` continues that trace; a file in the
workspace's `inbox/` starts a new trace named after it. A file is taken only
once it has settled (its size and mtime unchanged for the settle window, not
empty, and parseable), so an editor saving twice in quick succession yields
one message. watchdog events only wake the loop early: the loop rescans the
inboxes on every tick, since inotify can drop events silently.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from agentfs.core.runner import Runner
from agentfs.core.workspace import Project
from agentfs.errors import AgentfsError, MessageFileError, TraceLocked
from agentfs.models.base import Model
from agentfs.store.atomic import fsync_dir
from agentfs.store.messages import load_dropped
from agentfs.store.trace import is_ignored_name
from agentfs.store.workspace import INBOX_DIR, TRACE_ID

Log = Callable[[str, dict], None]


@dataclass
class _Seen:
    size: int
    mtime_ns: int
    since: float
    parses: bool = False  # parsed fine at this size and mtime: no need to read it again


@dataclass
class Watcher:
    """Watches one workspace; `run_once()` or `run_forever()`."""

    project: Project
    model_for: Callable[[str | None, str | None], Model]  # (trace's model, preset) -> model
    log: Log
    settle: float = 1.0
    max_parallel: int = 2
    runner_options: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._seen: dict[Path, _Seen] = {}
        self._rejected: dict[Path, tuple[int, int]] = {}  # left alone until they change
        self._running: dict[str, Future] = {}
        self._pool = ThreadPoolExecutor(max_workers=self.max_parallel)
        self._wake = threading.Event()
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._next_due: float | None = None  # when the next waiting file will have settled
        self._held_logged: set[str] = set()  # traces another process holds, already logged

    # --- scanning ---------------------------------------------------------------

    def drops(self) -> list[tuple[str | None, Path]]:
        """(trace id or None for a new trace, file) of every candidate file, in name order."""
        ws = self.project.workspace
        found: list[tuple[str | None, Path]] = [
            (None, p) for p in _files(ws.inbox_dir)
        ]
        for trace_id in ws.trace_ids():
            found += [(trace_id, p) for p in _files(ws.trace_dir(trace_id) / INBOX_DIR)]
        return found

    def settled(self, path: Path, now: float, *, parse: bool = True) -> bool:
        """True once `path` kept its size and mtime for the settle window and parses.

        The window starts at the file's mtime (at most a window ago): a file the
        loop notices late is not kept waiting longer. It is still looked at twice.

        Without `parse` only the settle clock is kept (for a file whose trace is
        running): reading a file makes inotify events that would wake the loop.
        """
        try:
            st = path.stat()
        except FileNotFoundError:
            self._seen.pop(path, None)
            return False
        if self._rejected.get(path) == (st.st_size, st.st_mtime_ns):
            return False
        seen = self._seen.get(path)
        changed = seen is None or (seen.size, seen.mtime_ns) != (st.st_size, st.st_mtime_ns)
        if seen is None or changed:
            seen = self._seen[path] = _Seen(
                st.st_size, st.st_mtime_ns, now - self._quiet_before(st.st_mtime_ns)
            )
        if changed or st.st_size == 0 or now - seen.since < self.settle:
            due = seen.since + self.settle
            if due > now:  # an empty file is past due and waits for a change, not a tick
                self._next_due = due if self._next_due is None else min(self._next_due, due)
            return False  # an editor may truncate first and write in place after
        if not parse:
            return False
        if not seen.parses:
            try:
                load_dropped(path)
            except MessageFileError as exc:
                if not path.exists():  # taken meanwhile (by the running run): not invalid
                    self._seen.pop(path, None)
                elif now - seen.since >= self.settle * 5:
                    self.log("invalid", {"file": str(path), "error": str(exc)})
                    self._rejected[path] = (st.st_size, st.st_mtime_ns)
                return False
            seen.parses = True
        return True

    def _quiet_before(self, mtime_ns: int) -> float:
        """How long a file just noticed had already been quiet, by its mtime.

        A tick, or an event watchdog held back, can notice a file late; counting
        from its mtime keeps the run from starting late. At most half the window
        is credited, so the watcher itself always sees the file unchanged for the
        other half, and none when the mtime is in whole seconds (a filesystem
        with coarse timestamps, where it can look older than it is).
        """
        if mtime_ns % 1_000_000_000 == 0:
            return 0.0
        return min(max(0.0, time.time() - mtime_ns / 1e9), self.settle / 2)

    # --- acting -----------------------------------------------------------------

    def tick(self) -> None:
        """One scan: start runs for settled drops whose trace is not running."""
        now = time.monotonic()
        self._next_due = None
        with self._lock:
            self._running = {t: f for t, f in self._running.items() if not f.done()}
            running = set(self._running)
        for trace_id, path in self.drops():
            waits = trace_id is not None and trace_id in running  # its run takes it, or the next
            if self.stopping.is_set() or not self.settled(path, now, parse=not waits):
                continue
            if trace_id is None:
                trace_id = self._start_trace(path)
                if trace_id is None:
                    continue
            with self._lock:
                if trace_id in self._running:
                    continue  # the running run takes the file at its next iteration
            if self._held_elsewhere(trace_id):
                continue
            with self._lock:
                self._running[trace_id] = self._pool.submit(self._run, trace_id)

    def _held_elsewhere(self, trace_id: str) -> bool:
        """True while another process (e.g. `agentfs run`) holds the trace; logged once
        per spell as `busy`, and the file waits for a later tick."""
        if not self.project.trace(trace_id).is_running():
            self._held_logged.discard(trace_id)
            return False
        if trace_id not in self._held_logged:
            self._held_logged.add(trace_id)
            self.log("busy", {"trace": trace_id})
        return True

    @property
    def _staging(self) -> Path:
        return self.project.workspace.ingest_dir / "new"

    def _start_trace(self, path: Path) -> str | None:
        """Create a trace from a file in the workspace inbox, taken exactly once: it is
        renamed into a staging folder first, and `finish_staged` completes a creation
        a crash interrupted."""
        trace_id = _unique_id(path.stem, set(self.project.workspace.trace_ids()))
        staged = self._staging / f"{trace_id}--{path.name}"
        staged.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(path, staged)  # from here on the file cannot be taken twice
        except FileNotFoundError:
            return None
        return self._create_from(staged)

    def finish_staged(self) -> None:
        """Creations a crash interrupted: finish them (or drop a leftover copy)."""
        for staged in sorted(self._staging.iterdir()) if self._staging.is_dir() else []:
            self._create_from(staged)

    def _create_from(self, staged: Path) -> str | None:
        trace_id, _, name = staged.name.partition("--")
        source = self.project.workspace.inbox_dir / name
        if trace_id not in self.project.workspace.trace_ids():
            try:
                message = load_dropped(staged)
                fields = message.model_extra or {}
                skills = fields.get("inject_skills") or []
                self.project.new_trace(
                    trace_id, message, preset=fields.get("preset"), model=fields.get("model"),
                    inject_skills=[skills] if isinstance(skills, str) else list(skills),
                )
            except AgentfsError as exc:
                os.rename(staged, source)  # give it back, untouched
                st = source.stat()
                self._rejected[source] = (st.st_size, st.st_mtime_ns)
                self.log("error", {"file": name, "error": str(exc)})
                return None
            self.log("new_trace", {"trace": trace_id, "file": name})
        if _committed(self.project, source):
            self.project.repo.commit_worktree(
                [self.project.workspace.relpath(source)],
                f"agentfs: {name} started trace {trace_id}\n".encode(),
            )
        staged.unlink(missing_ok=True)
        fsync_dir(staged.parent)
        return trace_id

    def _run(self, trace_id: str) -> None:
        started = time.monotonic()
        self.log("run_started", {"trace": trace_id})
        try:
            meta = self.project.trace(trace_id).meta
            runner = Runner(self.project.workspace, self.project.repo,
                            self.model_for(meta.model, meta.preset),
                            config=self.project.config, stop=self.stopping.is_set,
                            **self.runner_options)
            result = runner.run(trace_id, inject_skills=meta.context.get("inject_skills", []))
        except TraceLocked:
            self.log("busy", {"trace": trace_id})  # another process runs it; retried later
            return
        except AgentfsError as exc:
            self.log("error", {"trace": trace_id, "error": str(exc)})
            self._record_error(trace_id, str(exc))
            return
        self.log("run_finished", {"trace": trace_id, "iterations": result.iterations,
                                  "stop": result.stop, "input_tokens": result.input_tokens,
                                  "output_tokens": result.output_tokens,
                                  "seconds": round(time.monotonic() - started, 3)})

    def _record_error(self, trace_id: str, error: str) -> None:
        """A failed run leaves an `error` commit in its trace; the watcher carries on."""
        trace = self.project.trace(trace_id)
        try:
            with trace.lock():
                trace.record_error(error)
        except AgentfsError as exc:
            self.log("error", {"trace": trace_id, "error": f"could not record: {exc}"})

    def wake(self) -> None:
        self._wake.set()

    def run_once(self, tick: float = 0.1) -> None:
        """Take everything pending (waiting for it to settle), wait for the runs, return."""
        self.finish_staged()
        deadline = time.monotonic() + self.settle * 10 + 5
        while time.monotonic() < deadline and not self.stopping.is_set():
            self.tick()
            if not self.drops() and not self._busy():
                break
            self._wake.wait(tick)
            self._wake.clear()
        self.close()

    def run_forever(self, tick: float = 0.2, rescan: float = 5.0) -> None:
        """Until `stopping` is set; ticks on events, when a waiting file has settled, and
        at least every `rescan` seconds."""
        self.finish_staged()
        while not self.stopping.is_set():
            self.tick()
            self._wake.wait(self._wait_time(tick, rescan))
            self._wake.clear()
        self.close()

    def _wait_time(self, tick: float, rescan: float) -> float:
        """Until the next tick, or sooner if a waiting file settles before it."""
        wait = min(tick, rescan)
        if self._next_due is not None:
            wait = max(0.0, min(wait, self._next_due - time.monotonic()))
        return wait

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def _busy(self) -> bool:
        with self._lock:
            return any(not f.done() for f in self._running.values())


def _files(folder: Path) -> list[Path]:
    try:
        entries = sorted(folder.iterdir())
    except FileNotFoundError:
        return []
    return [p for p in entries if p.is_file() and not is_ignored_name(p.name)
            and p.name != ".gitkeep"]


def _unique_id(stem: str, taken: set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9_-]+", "-", stem).strip("-_")[:56] or "trace"
    if not TRACE_ID.match(base):
        base = f"t-{base}"
    candidate, number = base, 2
    while candidate in taken:
        candidate, number = f"{base}-{number}", number + 1
    return candidate


def _committed(project: Project, path: Path) -> bool:
    return project.repo.tree_lookup(project.repo.head(), project.workspace.relpath(path)) is not None
