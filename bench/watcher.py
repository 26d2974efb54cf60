"""Watch mode: how soon a dropped file starts a run, and how fast a burst is taken.

Everything runs the real `Watcher` loop (`run_forever`, the CLI's tick) on a
thread, woken by the real watchdog observer, with the default settle window
and the offline replay model. Times are `time.monotonic()`, the watcher's own
clock, taken from its log (`run_started`, `run_finished`) and the runner's
events (`ingested`, emitted once the message is committed).

- *drop -> run started*: a user message file is written into an existing
  trace's `inbox/`; the latency runs from the end of that write to the
  watcher's `run_started` for the trace. Drops are sequential (the next is
  written once the run has finished), so each is pure latency, never
  queueing; to fit the time budget they run in two workspaces side by side,
  each with its own watcher, so each drop lands on an idle watcher as a
  user's would (the new-trace drops below run in a third at the same time). The design budget is the settle window + 100 ms; "median
  minus settle" shows the rest.
- *drop -> message committed*: the same drops, up to the runner's `ingested`.
- *new trace*: the same, for a file dropped into the workspace's `inbox/`
  (creating the trace is part of it), one at a time.
- *burst*: N files written at once into one trace's `inbox/` (as the burst
  test in tests/watch/test_watch.py); the time runs from the first write to
  the `run_finished` after the last ingest. Verified: each file became exactly
  one committed user message, the inbox is empty, `git status` is clean.
- *idle CPU*: a watcher on a workspace of 1 and of 1,000 answered traces, with
  nothing dropped: the process's CPU time (`time.process_time()`, every
  thread: the loop, the observer, this one asleep) over the wall time, from
  just after the watcher's look at every inbox on start to just after a later
  one, so the window holds whole rescan intervals (one of the default 30 s;
  with `--quick`, two of 5 s: six times as many rescans, an upper bound).
"""

from __future__ import annotations

import json
import shutil
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from agentfs.config import WorkspaceConfig
from agentfs.core.project import Project, init_workspace
from agentfs.models.replay import ReplayModel
from agentfs.store.ingest import parse_dropped_text
from agentfs.store.messages import load_message
from agentfs.watch.background import run_in_background
from agentfs.watch.watcher import Watcher
from bench.fixtures import TRACE, _commit_with_fast_import, git, long_trace
from bench.report import Results, median, p95

LANES = 2  # workspaces taking latency drops into an existing trace, side by side


class Events:
    """The watcher's log and the runner's events, each stamped with `time.monotonic()`."""

    def __init__(self) -> None:
        self.items: list[tuple[float, str, dict]] = []  # appended from several threads

    def __call__(self, event: str, data: dict) -> None:
        self.items.append((time.monotonic(), event, data))

    def find(self, event: str, start: int = 0, **match: object) -> float | None:
        """Time of the first `event` from index `start` whose data has `match`."""
        for stamp, name, data in self.items[start:]:
            if name == event and all(data.get(k) == v for k, v in match.items()):
                return stamp
        return None

    def count(self, event: str, **match: object) -> int:
        return sum(1 for _, name, data in self.items
                   if name == event and all(data.get(k) == v for k, v in match.items()))


def run(results: Results, quick: bool, scratch: Path) -> None:
    script = scratch / "script.json"
    script.write_text(json.dumps({"turns": [{"text": f"answer {i}"} for i in range(200)]}))
    drops, new_drops, files = (10, 2, 200) if quick else (50, 10, 1_000)
    with warnings.catch_warnings():
        # watchdog 7 warns (a long repr) when it re-adds a watch for a new folder
        warnings.filterwarnings("ignore", "Callback with id", RuntimeWarning)
        with ThreadPoolExecutor(LANES + 1) as pool:  # staggered, so runs rarely overlap
            lanes = [pool.submit(_drops, scratch / f"latency-{n}", script, drops // LANES,
                                 new=False, delay=0.4 * n) for n in range(LANES)]
            new = pool.submit(_drops, scratch / "new", script, new_drops, new=True, delay=0.2)
            timings = [timing for lane in lanes for timing in lane.result()]
            new_started = [start for start, _ in new.result()]
        burst_seconds, rejected = _burst(scratch / "burst", script, files)
    rescan, periods = (5.0, 2) if quick else (Watcher.rescan, 1)
    idle = {n: _idle_cpu(scratch / f"idle-{n}", script, n, rescan, periods) for n in (1, 1_000)}
    started = [start for start, _ in timings]
    settle_ms = WorkspaceConfig().settle * 1000  # the default, as `agentfs watch` has it
    results.add("watcher", "settle window (default)", settle_ms, "ms")
    results.add("watcher", "drop -> run started, median (existing trace)", median(started),
                "ms", f"{len(started)} drops, one at a time in each of {LANES} workspaces")
    results.add("watcher", "drop -> run started, p95 (existing trace)", p95(started), "ms")
    results.add("watcher", "drop -> run started, median minus settle",
                median(started) - settle_ms, "ms", "budget <= 100")
    results.add("watcher", "drop -> message committed, median (existing)",
                median([done for _, done in timings]), "ms")
    results.add("watcher", "drop -> run started, median (new trace)", median(new_started),
                "ms", f"{new_drops} drops into inbox/, one at a time")
    results.add("watcher", f"burst of {files:,} files, drop -> all committed", burst_seconds,
                "s", "into one trace's inbox/")
    results.add("watcher", f"burst of {files:,} files, rate", files / burst_seconds, "files/s")
    results.add("watcher", f"burst of {files:,} files, put aside", rejected, "files",
                "whole files rejected while still being written: must be 0")
    window = f"{periods * rescan:.0f} s idle, a rescan of every inbox each {rescan:.0f} s"
    results.add("watcher", "idle CPU, 1 trace", idle[1], "%", window)
    results.add("watcher", "idle CPU, 1,000 traces", idle[1_000], "%", f"budget <= 1; {window}")


def _drops(root: Path, script: Path, count: int, new: bool,
           delay: float) -> list[tuple[float, float]]:
    """`count` drops, one at a time, into trace `t`'s inbox of a new workspace (or, if
    `new`, into its `inbox/`, each starting a trace), watched by a watcher of its own."""
    time.sleep(delay)
    _workspace(root, () if new else ("t",))
    with _live(root, script) as (_, events):
        resumed = events.count("run_started")  # the setup trace's first message, answered
        if new:
            timings = [_drop(events, root / "inbox" / f"new-{i:03d}.md", f"new-{i:03d}",
                             taken="new_trace") for i in range(count)]
        else:
            timings = [_drop(events, root / "traces/t/inbox" / f"drop-{i:03d}.md", "t")
                       for i in range(count)]
    if (runs := events.count("run_started") - resumed) != count:
        raise RuntimeError(f"{count} drops started {runs} runs")
    if new:
        _check_clean(root, root / "inbox")
    else:
        _check_ingested(root, "t", "message ", count)
    return timings


def _burst(root: Path, script: Path, files: int) -> tuple[float, int]:
    """Seconds from the first write of `files` files into trace `t`'s inbox to the end of
    the run that took the last; and how many files were put aside meanwhile."""
    _workspace(root, ("t",))
    inbox = root / "traces" / "t" / "inbox"
    with _live(root, script) as (_, events):
        began = time.monotonic()
        for i in range(files):
            (inbox / f"burst-{i:04d}.md").write_text(f"burst {i}\n")

        def finished() -> float | None:
            if events.count("ingested", trace="t") < files:
                return None
            last = max(i for i, (_, name, _) in enumerate(events.items) if name == "ingested")
            return events.find("run_finished", last, trace="t")

        ended = _until(finished, 600, f"{files} burst files to be ingested", every=0.2)
    _check_ingested(root, "t", "burst ", files)
    return ended - began, events.count("rejected")


def _idle_cpu(root: Path, script: Path, traces: int, rescan: float, periods: int) -> float:
    """Percent of one CPU the process spends while its watcher of `traces` traces has
    nothing to do, over `periods` of its rescan intervals."""
    _many_traces(root, traces)
    with _live(root, script, rescan=rescan) as (watcher, events):
        began = _until(lambda: watcher.last_rescan, 600, "the look at every inbox on start",
                       every=0.1)
        cpu, wall = time.process_time(), time.monotonic()
        _until(lambda: watcher.last_rescan if watcher.last_rescan >= began + periods * rescan
               else None, periods * rescan + 60, f"{periods} rescans", every=0.2)
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    if events.items:
        raise RuntimeError(f"the idle watcher logged {events.items[:3]}")
    return 100 * cpu / wall


# --- helpers ---------------------------------------------------------------------


def _many_traces(root: Path, count: int) -> None:
    """A workspace of `count` answered traces (nothing to resume), built in seconds:
    trace `long` of 5 messages (system, user, tool call, result, answer), and copies of
    it under other ids, all committed in one pack."""
    long_trace(root, 5)
    template = root / "traces" / TRACE
    files: dict[Path, bytes] = {}
    for n in range(1, count):
        folder = root / "traces" / f"t{n:04d}"
        shutil.copytree(template, folder)
        meta = json.loads((folder / "trace.json").read_text())
        (folder / "trace.json").write_text(json.dumps({**meta, "id": folder.name}, indent=2))
        files.update((p, p.read_bytes()) for p in folder.rglob("*") if p.is_file())
    if files:
        _commit_with_fast_import(root, files, f"bench: {count} traces")


def _workspace(root: Path, trace_ids: tuple[str, ...]) -> None:
    init_workspace(root)
    project = Project.open(root)
    for trace_id in trace_ids:
        project.new_trace(trace_id, parse_dropped_text("<bench>", b"Hello."))


def _drop(events: Events, path: Path, trace_id: str,
          taken: str = "ingested") -> tuple[float, float]:
    """Write `path`, wait for the run it starts to finish; ms from the write to the run's
    start and to the event `taken` (the runner's `ingested`, the watcher's `new_trace`)
    for the file, both logged once the message is committed."""
    mark = len(events.items)
    path.write_text(f"message {path.stem}\n")
    dropped = time.monotonic()
    started = _until(lambda: events.find("run_started", mark, trace=trace_id), 30,
                     f"a run for {path}")
    committed = _until(lambda: events.find(taken, mark, trace=trace_id, file=path.name),
                       30, f"{path} to be taken")
    _until(lambda: events.find("run_finished", mark, trace=trace_id), 30,
           f"the run for {path} to finish")
    return (started - dropped) * 1000, (committed - dropped) * 1000


@contextmanager
def _live(root: Path, script: Path, **options: float) -> Iterator[tuple[Watcher, Events]]:
    """A watcher on `root` with the default settle window, looping on a thread and woken
    by the watchdog observer, as `agentfs watch` runs it; stopped on exit. Yielded once
    its first look at every inbox is done and the runs its start resumed (the setup
    traces' first messages) have ended: a measured drop must not meet one of them,
    whose `run_started` would be taken for the drop's."""
    events = Events()
    watcher = Watcher(Project.open(root), lambda model, preset: ReplayModel(script), events,
                      runner_options=lambda: {"on_event": events}, **options)
    with run_in_background(watcher, root):
        _until(lambda: time.monotonic() if watcher.last_rescan is not None
               and not watcher._busy() else None, 120, "the watcher's start")
        yield watcher, events
    if errors := [d for _, e, d in events.items if e in ("error", "busy")]:
        raise RuntimeError(f"the watcher reported {errors[:3]}")


def _until(found: Callable[[], float | None], timeout: float, what: str,
           every: float = 0.01) -> float:
    """Poll `found` until it gives a time; its stamp, not the poll, is what is measured."""
    deadline = time.monotonic() + timeout
    while (stamp := found()) is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)
    return stamp


def _check_ingested(root: Path, trace_id: str, prefix: str, expected: int) -> None:
    """Each dropped file is exactly one user message on disk, all of it committed."""
    folder = root / "traces" / trace_id / "messages"
    texts = Counter(m.text for m in map(load_message, sorted(folder.rglob("*-user.md")))
                    if m.text.startswith(prefix))
    if len(texts) != expected or set(texts.values()) != {1}:
        raise RuntimeError(f"{trace_id}: {sum(texts.values())} messages for {expected} drops "
                           f"({len(texts)} distinct)")
    _check_clean(root, root / "traces" / trace_id / "inbox")


def _check_clean(root: Path, inbox: Path) -> None:
    left = [p.name for p in inbox.iterdir() if p.name != ".gitkeep"]
    if left:
        raise RuntimeError(f"{inbox} still holds {left[:5]}")
    if status := git(root, "status", "--porcelain"):
        raise RuntimeError(f"{root} has uncommitted changes:\n{status}")
