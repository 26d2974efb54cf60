"""`agentfs watch`: runs started by files dropped into inboxes.

A file in `traces/<id>/inbox/` continues that trace; a file in the
workspace's `inbox/` starts a new trace named after it. A file is taken only
once it is ready (`agentfs/store/inbox.py:SettleClock`: not empty, size and
mtime unchanged for the settle window), so an editor saving twice in quick
succession yields one message; a file that cannot be used is put aside in
`.rejected/` once.

Idle, the loop costs nothing per trace: it looks only at the inboxes that
watchdog events named since the last tick and those that held waiting files
the last time it looked, and at every inbox on start and every `rescan`
seconds, because inotify can drop events (see docs/watch.md, "Events and
rescans").
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentfs.core.project import Project
from agentfs.core.status import record_failure
from agentfs.errors import AgentfsError, TraceLocked, TraceNotFound
from agentfs.models.base import Model
from agentfs.store.approval import APPROVAL_FILE, read_pending
from agentfs.store.inbox import SettleClock, exclude_temp_names, inbox_problem, waiting
from agentfs.store.ingest import Rejected, claimed_traces, pending_new
from agentfs.store.message_dir import folders
from agentfs.store.stamps import Stamp, stamp_of
from agentfs.store.workspace import INBOX_DIR, MESSAGES_DIR, TRACE_ID, TRACES_DIR

Log = Callable[[str, dict], None]


@dataclass
class Watcher:
    """Watches one workspace; `run_once()` or `run_forever()`.

    The rules for which files wait, when they are ready and how they are taken
    are the inbox's (`agentfs/store/inbox.py`, `agentfs/store/ingest.py`); the
    watcher only decides when to start runs.
    """

    project: Project
    model_for: Callable[[str | None, str | None], Model]  # (trace's model, preset) -> model
    log: Log
    settle: float | None = None  # default: `settle` in agentfs.toml
    max_parallel: int = 2
    #: The `RunnerOptions` fields of a run starting now (`agentfs/cli/context.py:LiveOptions`).
    runner_options: Callable[[], dict[str, Any]] = dict
    rescan: float = 30.0  # seconds between looks at every inbox (inotify can drop events)

    def __post_init__(self) -> None:
        window = self.project.config.settle if self.settle is None else self.settle
        self.settle = window
        self.clock = SettleClock(window)
        self._running: dict[str, Future] = {}
        self._pool = ThreadPoolExecutor(max_workers=self.max_parallel)
        self._wake = threading.Event()
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._held_logged: set[str] = set()  # traces another process holds, already logged
        self._config_error: str | None = None  # agentfs.toml's, while it stops every run
        self._held_by_config: set[str] = set()  # traces whose run it stopped: tried again
        self._held_stamp: Stamp | None = None  # agentfs.toml's stamp when it stopped them
        self._failed: dict[str, tuple] = {}  # traces whose run failed: what they looked like
        self._changed: set[Path] = set()  # inboxes that events named since the last tick
        self._everywhere = True  # look at every inbox at the next tick (the first one does)
        self._waiting_in: set[Path] = set()  # inboxes holding waiting files at the last look
        self._looked: dict[Path, float] = {}  # running traces' inboxes: when last looked at
        self._reported: set[Path] = set()  # inboxes whose problem was logged
        self._next_rescan = 0.0
        #: `time.monotonic()` when the last look at every inbox began (None before the
        #: first): every file dropped before then has been seen.
        self.last_rescan: float | None = None

    # --- scanning ---------------------------------------------------------------

    def drops(self, inboxes: Iterable[Path] | None = None) -> list[tuple[str | None, Path]]:
        """(trace id or None for a new trace, file) of every file waiting in `inboxes`
        (inbox folders; None: every inbox), in name order."""
        ws = self.project.workspace
        if inboxes is None:
            look_in = [ws.inbox_dir] + [ws.trace_dir(t) / INBOX_DIR for t in ws.trace_ids()]
        else:  # the workspace's inbox first, then the traces' by id, as for every inbox
            look_in = sorted(inboxes, key=lambda folder: (folder != ws.inbox_dir, folder))
        found: list[tuple[str | None, Path]] = []
        for folder in look_in:
            trace_id = None if folder == ws.inbox_dir else folder.parent.name
            if inboxes is not None and trace_id is not None and not self._is_trace(trace_id):
                continue  # a folder on its way to being a trace, or no longer one
            self._report_problem(folder)
            found += [(trace_id, p) for p in waiting(folder)]
        return found

    def _report_problem(self, folder: Path) -> None:
        """Log once (until it is fixed) an inbox nothing can be taken from."""
        problem = inbox_problem(folder)
        if problem is None:
            self._reported.discard(folder)
        elif folder not in self._reported:
            self._reported.add(folder)
            self.log("error", {"file": self.project.workspace.relpath(folder), "error": problem})

    def _is_trace(self, trace_id: str) -> bool:
        try:
            self.project.workspace.resolve_trace(trace_id)
        except TraceNotFound:
            return False
        return True

    def wake(self, changed: str | Path | None = None) -> None:
        """Wake the loop. `changed`: where a watchdog event says something changed; the
        next tick looks at the inbox it concerns (if any). None: at every inbox."""
        inbox = None if changed is None else self._inbox_of(Path(changed))
        with self._lock:
            if changed is None:
                self._everywhere = True
            elif inbox is not None:
                self._changed.add(inbox)
        if changed is None or inbox is not None:
            self._wake.set()

    def _inbox_of(self, path: Path) -> Path | None:
        """The inbox a change at `path` concerns: anything under `traces/<id>/` concerns
        that trace's inbox (its `trace.json` or the folder itself may appear after the
        files dropped into it)."""
        ws = self.project.workspace
        try:
            parts = path.relative_to(ws.root).parts
        except ValueError:
            return None
        if parts[:1] == (INBOX_DIR,):
            return ws.inbox_dir
        if len(parts) >= 2 and parts[0] == TRACES_DIR and TRACE_ID.fullmatch(parts[1]):
            return ws.traces_dir / parts[1] / INBOX_DIR
        return None

    # --- acting -----------------------------------------------------------------

    def tick(self, everywhere: bool = False) -> None:
        """One pass: start runs for ready drops whose trace is not running.

        Looks at the inboxes that events named since the last tick and those that
        held waiting files at the last pass (so settling files, and files whose trace
        was busy, are looked at again); at every inbox when `everywhere`, at the first
        tick and once `rescan` seconds have passed since the last look at all.
        """
        self._wake.clear()  # before taking the changes: a later wake ends the next wait
        now = time.monotonic()
        with self._lock:
            changed, self._changed = self._changed, set()
            everywhere = everywhere or self._everywhere or now >= self._next_rescan
            self._everywhere = False
            self._running = {t: f for t, f in self._running.items() if not f.done()}
        self.clock.next_due = None
        if everywhere and self.last_rescan is not None:
            self.finish_cut_short()  # another process may have been cut short since
        running = set(self._running)
        look_at = changed | self._waiting_in
        postponed = set() if everywhere else self._postponed(look_at, running, now)
        found = self.drops(None if everywhere else look_at - postponed)
        if everywhere:
            self._next_rescan = now + self.rescan
            self.last_rescan = now
        self._waiting_in = {path.parent for _, path in found} | postponed
        ws = self.project.workspace
        looked_at = (set(ws.trace_ids()) if everywhere
                     else {i.parent.name for i in changed if i != ws.inbox_dir})
        for answered in sorted(looked_at):
            if not self.stopping.is_set() and self._answered(answered):
                self._schedule(answered)  # its waiting tool call was answered
        for stopped in self._take_held():  # agentfs.toml stopped them: changed since?
            if not self.stopping.is_set():
                self._schedule(stopped)
        for trace_id, path in found:
            if self.stopping.is_set() or not self.clock.ready(path, now):
                continue
            if trace_id is not None:
                self._schedule(trace_id)
                continue
            self.clock.forget(path)
            started = self._start_trace(path)
            if started is not None:
                self._schedule(started)

    def _postponed(self, inboxes: set[Path], running: set[str], now: float) -> set[Path]:
        """The inboxes of running traces looked at less than half a settle window ago:
        looked at again later, not at this tick.

        A run takes what is dropped into its trace's inbox at its next iteration, and
        each file it takes is an event; looking at the whole inbox at every such event
        made a burst of N files cost N looks at up to N files. Half a window loses no
        time: the settle clock counts a file's quiet time from its mtime, up to half the
        window (`SettleClock`)."""
        ws = self.project.workspace
        self._looked = {i: t for i, t in self._looked.items() if i.parent.name in running}
        postponed = set()
        for inbox in inboxes:
            if inbox == ws.inbox_dir or inbox.parent.name not in running:
                continue
            if now - self._looked.get(inbox, -float("inf")) < (self.settle or 0) / 2:
                postponed.add(inbox)
            else:
                self._looked[inbox] = now
        return postponed

    def _take_held(self) -> list[str]:
        """The traces agentfs.toml held back, once it changed since (and their refused
        run has ended): to be run again."""
        with self._lock:
            if not self._held_by_config or self._config_stamp() == self._held_stamp:
                return []
            held = sorted(t for t in self._held_by_config if t not in self._running)
            self._held_by_config.difference_update(held)
            return held

    def _config_stamp(self) -> Stamp | None:
        try:
            return stamp_of(os.stat(self.project.workspace.config_path))
        except OSError:
            return None

    def _answered(self, trace_id: str) -> bool:
        """True if the trace's `approval.json` holds an answer its run has not acted on
        (an edit, `agentfs approve --no-run`, the page)."""
        path = self.project.workspace.trace_dir(trace_id) / APPROVAL_FILE
        try:
            pending = read_pending(path)
        except AgentfsError:
            return True  # the run reports what is wrong with it
        return pending is not None and pending.answer is not None

    def _schedule(self, trace_id: str) -> None:
        """Run the trace unless it runs already (its run takes new files at its next
        iteration) or another process holds it."""
        with self._lock:
            if trace_id in self._running:
                return
        failed = self._failed.get(trace_id)
        if failed is not None:
            if failed == self._fingerprint(trace_id):
                return  # failed, and nothing changed since: no retry every tick
            del self._failed[trace_id]
        if self._held_elsewhere(trace_id):
            return
        with self._lock:
            self._running[trace_id] = self._pool.submit(self._run, trace_id)

    def _start_trace(self, path: Path) -> str | None:
        """A new trace from a file of the workspace `inbox/` (see `Project.start_trace`).
        A failure is logged; what it left half done, a later rescan finishes
        (`finish_cut_short`)."""
        try:
            outcome = self.project.start_trace(path)
        except (AgentfsError, OSError) as exc:
            self.log("error", {"file": path.name, "error": str(exc)})
            return None
        return self._created(outcome, path.name)

    def _created(self, outcome: str | Rejected | None, name: str) -> str | None:
        if isinstance(outcome, Rejected):
            self.log("rejected", {"file": str(outcome.origin), "moved_to": str(outcome.moved_to),
                                  "reason": outcome.reason})
            return None
        if outcome is not None:
            self.log("new_trace", {"trace": outcome, "file": name})
        return outcome

    def resume(self) -> None:
        """On start: finish trace creations a crash cut short, and run every trace left
        with an unanswered user message, a claimed file, a tool step in flight or an
        unfinished side-branch queue (`Trace.unfinished`)."""
        exclude_temp_names(self.project.workspace.root)
        self.finish_cut_short()
        for trace_id in self.project.workspace.trace_ids():
            try:
                unfinished = self.project.trace(trace_id).unfinished()
            except AgentfsError as exc:
                self.log("error", {"trace": trace_id, "error": str(exc)})
                continue
            if unfinished and not self.stopping.is_set():
                self._schedule(trace_id)

    def finish_cut_short(self) -> None:
        """Finish what a process cut short left claimed (this one, after an error, or
        any other): trace creations (`pending_new`), and claimed files of existing
        traces (`claimed_traces`), whose trace is run. Cheap: one look at the
        staging area. On start and at every rescan."""
        workspace = self.project.workspace
        try:
            for trace_id, staged in pending_new(workspace):
                try:
                    outcome = self.project.create_from_claim(trace_id, staged)
                except (AgentfsError, OSError) as exc:
                    self.log("error", {"trace": trace_id, "error": str(exc)})
                    continue
                if self._created(outcome, staged.origin) is not None:
                    self._schedule(trace_id)
            for trace_id in claimed_traces(workspace):
                if not self.stopping.is_set():
                    self._schedule(trace_id)
        except (AgentfsError, OSError) as exc:
            self.log("error", {"error": f"staged files: {exc}"})

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

    def _run(self, trace_id: str) -> None:
        started = time.monotonic()
        stamp = self._config_stamp()  # before the read: a change after it is seen
        try:
            fields = self.runner_options()
        except AgentfsError as exc:  # agentfs.toml: the workspace's, not this trace's
            with self._lock:  # run again at a tick once agentfs.toml changes
                self._held_by_config.add(trace_id)
                self._held_stamp = stamp
            if str(exc) != self._config_error:  # once, not at every look until it is fixed
                self.log("error", {"trace": trace_id, "error": str(exc)})
            self._config_error = str(exc)
            return
        self._config_error = None
        self.log("run_started", {"trace": trace_id})
        try:
            meta = self.project.trace(trace_id).meta
            options: dict[str, Any] = {"on_event": self._run_event, **fields}
            runner = self.project.runner(self.model_for(meta.model, meta.preset),
                                         stop=self.stopping.is_set, **options)
            result = runner.run(trace_id, inject_skills=meta.context.inject_skills,
                                clock=self.clock)
        except TraceLocked:
            self.log("busy", {"trace": trace_id})  # another process runs it; retried later
            return
        except AgentfsError as exc:
            self.log("error", {"trace": trace_id, "error": str(exc)})
            problem = record_failure(self.project, trace_id, exc, unattended=True)
            if problem is not None:  # the failure is logged above; its record is not
                self.log("error", {"trace": trace_id, "error": f"could not record: {problem}"})
            self._failed[trace_id] = self._fingerprint(trace_id)  # not retried until it changes
            return
        except OSError as exc:  # what another process did to the files: tried again later
            self.log("error", {"trace": trace_id, "error": str(exc)})
            return
        self.log("run_finished", {"trace": trace_id, "iterations": result.iterations,
                                  "stop": result.stop, "input_tokens": result.input_tokens,
                                  "output_tokens": result.output_tokens,
                                  "cached_tokens": result.cached_tokens,
                                  "model_ms": result.model_ms,
                                  "cost": self.project.prices.cost(result.spent).record(),
                                  "seconds": round(time.monotonic() - started, 3)})

    def _run_event(self, kind: str, data: dict[str, Any]) -> None:
        """A run's events worth a line in the watch log."""
        if kind in ("ingested", "rejected", "recovered", "approval_waiting", "approval",
                    "knowledge_skipped"):
            self.log(kind, data)

    def _fingerprint(self, trace_id: str) -> tuple:
        """What a person changes to fix a failed trace: trace.json, approval.json,
        messages/ and its folders, the inbox; and agentfs.toml (a default model that
        could not be made, say)."""
        folder = self.project.workspace.trace_dir(trace_id)
        stamps: list[tuple] = [("agentfs.toml", self._config_stamp())]
        for path in [folder / "trace.json", folder / APPROVAL_FILE,
                     *folders(folder / MESSAGES_DIR),
                     *waiting(folder / INBOX_DIR)]:
            try:
                st = path.lstat()
            except FileNotFoundError:
                stamps.append((str(path), None))
                continue
            stamps.append((str(path), st.st_mtime_ns, st.st_size, st.st_ino))
        return tuple(stamps)

    def run_once(self, tick: float = 0.1) -> None:
        """Take everything pending (waiting for it to settle), wait for the runs, return.
        Empty files are left waiting (an editor may be about to write them). There is no
        observer: every tick looks at every inbox."""
        self.resume()
        assert self.settle is not None
        deadline = time.monotonic() + self.settle * 10 + 5
        while time.monotonic() < deadline and not self.stopping.is_set():
            self.tick(everywhere=True)
            if not self._busy() and not any(_has_content(p) for _, p in self.drops()):
                break
            self._wake.wait(tick)
        self.close()

    def run_forever(self, tick: float = 0.2) -> None:
        """Until `stopping` is set; ticks on events, when a waiting file has settled,
        every `tick` seconds while files wait, and at the next rescan."""
        self.resume()
        while not self.stopping.is_set():
            self.tick()
            if not self.stopping.is_set():  # the tick cleared any wake that came before
                self._wake.wait(self._wait_time(tick))
        self.close()

    def _wait_time(self, tick: float) -> float:
        """Until the next rescan; until the next tick while files wait (to see them
        settle, or their trace become free); sooner if a waiting file settles first."""
        now = time.monotonic()
        wait = self._next_rescan - now
        if self._waiting_in or self._held_by_config:  # files, or agentfs.toml, to look at
            wait = min(wait, tick)
        if self.clock.next_due is not None:
            wait = min(wait, self.clock.next_due - now)
        return max(0.0, wait)

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def _busy(self) -> bool:
        with self._lock:
            return any(not f.done() for f in self._running.values())


def _has_content(path: Path) -> bool:
    try:
        return path.lstat().st_size > 0
    except FileNotFoundError:
        return False
