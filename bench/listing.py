"""The trace list of 1,000 traces, and `agentfs run` with nothing to do on long traces.

`python -m bench.listing [--quick]`

- *Trace list*: a workspace of `TRACES` traces (system, user and assistant
  messages each, committed in one pack by `git fast-import`, so no agentfs step
  wrote their summaries), each with an empty inbox and a lock file, as after
  `agentfs new` and a run. The first `agentfs status` builds every summary
  (`agentfs/store/summary.py`) and saves the rows: timed once, as "first list".
  Then, round-robin with new processes, the whole `agentfs status --json` and
  `agentfs status` commands beside a bare interpreter, and `GET /api/traces` on
  a real `agentfs serve --no-token` process (sequential requests, urllib), each
  the median of its samples. The list in this process is reported too, the part
  agentfs itself spends without starting Python: from the saved rows
  (`agentfs/core/listcache.py:ListCache`, as a new process) and with every row
  made afresh (`agentfs/core/status.py:workspace_status`). Budget ≤ 100 ms
  (design section 8).
- *Run with nothing to do*: linear traces of 100, 10,000 and (not with
  `--quick`: building it takes minutes) 100,000 messages ending in a final
  answer (`bench/fixtures.py:long_trace` with one message more, so the last is
  an answer); the whole `agentfs run long` command in a new process, round-robin
  over the sizes, median of its samples; each must say it waits for a user
  message. Budget: at 10,000 and 100,000 ≤ 1.5× at 100 (issue 23).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from agentfs.core.listcache import ListCache
from agentfs.core.project import Project, init_workspace
from agentfs.core.status import workspace_status
from agentfs.prices import PriceTable
from agentfs.store.messages import Message, render_message
from agentfs.store.meta import Spending, TraceMeta, dump_meta
from agentfs.store.trace import Trace
from agentfs.store.tracelock import TraceLock
from agentfs.store.workspace import INBOX_DIR
from bench.fixtures import TRACE, _commit_with_fast_import, long_trace
from bench.report import Results, median
from bench.startup import byte_compile, command_line, round_robin

TRACES = 1_000
SIZES = (100, 10_000, 100_000)
QUICK_SIZES = (100, 10_000)


def run(results: Results, quick: bool, scratch: Path) -> None:
    """`python -m bench` entry: the figures into `results`."""
    byte_compile()  # new processes are timed: as an installed agentfs starts
    rounds = 7 if quick else 21
    listing = measure_listing(scratch / "list", rounds)
    results.add("listing", f"first list, {TRACES:,} traces (summaries built)",
                listing["first"], "ms", "agentfs status --json, once, new process")
    for name, note in (("status --json", "whole command, new process"),
                       ("status", "whole command, new process, as text"),
                       ("GET /api/traces", "agentfs serve, sequential requests")):
        results.add("listing", f"{name}, {TRACES:,} traces", listing[name], "ms",
                    f"{note}, median of {rounds}; budget <= 100")
    for name, note in (("kept rows in process", "a new ListCache on the saved rows"),
                       ("workspace_status in process", "every row made afresh")):
        results.add("listing", f"{name}, {TRACES:,} traces", listing[name], "ms",
                    f"{note}: agentfs' own part, median of {rounds}")
    results.add("listing", "bare Python (python -c pass)", listing["bare"], "ms",
                f"median of {rounds}, beside the command")
    sizes = QUICK_SIZES if quick else SIZES
    idle = measure_nothing_to_do(scratch / "idle", sizes, rounds)
    for size in sizes:
        results.add("listing", f"run with nothing to do ({size:,} msgs)", idle[size], "ms",
                    f"whole command, new process, median of {rounds}")
    for size in sizes[1:]:
        results.add("listing", f"run with nothing to do, {size:,} / {sizes[0]:,}",
                    idle[size] / idle[sizes[0]], "x", "budget <= 1.5")


def many_traces(root: Path, count: int) -> Path:
    """A workspace of `count` short traces, each ending in an answer, committed in one
    pack (their summaries are not written: the first list builds them)."""
    init_workspace(root)
    project = Project.open(root)
    files: dict[Path, bytes] = {}
    for n in range(count):
        trace = Trace(project.workspace, project.repo, f"t{n:04d}")
        messages = [
            Message(id="msg-000001", sequence=1, role="system", content="You are helpful."),
            Message(id="msg-000002", sequence=2, parent_sequence=1, role="user",
                    content=f"Task {n}: summarise notes/{n}.md\n\nKeep it short."),
            Message(id="msg-000003", sequence=3, parent_sequence=2, role="assistant",
                    content=f"notes/{n}.md says three things.", model="replay",
                    stop_reason="end_turn",
                    usage={"input_tokens": 1200 + n, "output_tokens": 300}),
        ]
        meta = TraceMeta(id=trace.id, head=3, next_sequence=4, usage=Spending())
        assert meta.usage is not None
        meta.usage.count(messages)
        files[trace.meta_path] = dump_meta(meta)
        for message in messages:
            files[trace.message_path(message)] = render_message(message)
    for path, data in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    _commit_with_fast_import(root, files, f"bench: {count} traces")
    for n in range(count):  # as after `agentfs new` and a run: an empty inbox, a lock file
        (project.workspace.trace_dir(f"t{n:04d}") / INBOX_DIR).mkdir()
        lock = TraceLock(project.workspace.lock_dir, f"t{n:04d}")
        lock.acquire()
        lock.release()
    return root


def measure_listing(scratch: Path, rounds: int, traces: int = TRACES) -> dict[str, float]:
    """Median wall times (ms) of the list of `traces` traces, by each way of asking."""
    root = many_traces(scratch, traces)
    status = [*command_line(), "status", "--json"]
    began = time.perf_counter()
    subprocess.run(status, cwd=root, capture_output=True, check=True)
    first = (time.perf_counter() - began) * 1000
    times = round_robin({"status --json": status, "status": status[:-1],
                         "bare": [sys.executable, "-c", "pass"]}, root, rounds)
    figures = {"first": first, **{name: median(samples) for name, samples in times.items()}}
    workspace = Project.open(root).workspace
    prices = PriceTable.in_config(workspace.config_path)
    afresh, kept = [], []
    for _ in range(rounds):
        began = time.perf_counter()
        listed = workspace_status(workspace, prices)
        afresh.append((time.perf_counter() - began) * 1000)
        began = time.perf_counter()
        document = ListCache(workspace, prices, saved=workspace.trace_list).listed().document(
            str(root))
        kept.append((time.perf_counter() - began) * 1000)
    assert len(listed.traces) == traces and all(t.title for t in listed.traces)
    assert json.loads(document)["traces"] == [row.record() for row in listed.traces]
    figures["workspace_status in process"] = median(afresh)
    figures["kept rows in process"] = median(kept)
    figures["GET /api/traces"] = median(_served_list(root, rounds))
    return figures


def _served_list(root: Path, rounds: int) -> list[float]:
    """Wall time (ms) of `rounds` GETs of /api/traces on `agentfs serve`, after one."""
    server = subprocess.Popen([*command_line(), "serve", "--port", "0", "--no-token"],
                              cwd=root, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True)
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        if not line.startswith("agentfs serve: http://"):
            raise RuntimeError(f"agentfs serve did not start: {line!r}")
        url = line.split()[2].rstrip("/") + "/api/traces"
        samples = []
        for attempt in range(rounds + 1):
            began = time.perf_counter()
            with urllib.request.urlopen(url, timeout=60) as response:  # noqa: S310 -- loopback
                response.read()
            if attempt:
                samples.append((time.perf_counter() - began) * 1000)
        return samples
    finally:
        server.terminate()
        server.wait(timeout=30)
        if server.stdout is not None:
            server.stdout.close()


def measure_nothing_to_do(scratch: Path, sizes: tuple[int, ...], rounds: int,
                          ) -> dict[int, float]:
    """Median wall time (ms) of `agentfs run` on a trace of each size ending in an answer
    (sizes are multiples of 4: `long_trace`'s turns are 4 messages after the first)."""
    roots = {}
    for size in sizes:
        roots[size] = scratch / f"long-{size}"
        long_trace(roots[size], size + 1)  # the message after `size` is an answer
        said = subprocess.run([*command_line(), "run", TRACE], cwd=roots[size],
                              capture_output=True, text=True, check=True)
        if "waiting for a user message" not in said.stderr:
            raise RuntimeError(f"{size}: the run had something to do: {said.stderr}")
    times = round_robin({str(size): [*command_line(), "run", TRACE] for size in sizes},
                        {str(size): root for size, root in roots.items()}, rounds)
    return {size: median(times[str(size)]) for size in sizes}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.listing", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="without the 100,000-message trace")
    args = parser.parse_args()
    results = Results(quick=args.quick)
    scratch_dir = Path(__file__).parent / ".scratch"  # as `python -m bench` (ignored by Git)
    scratch_dir.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="listing-", dir=scratch_dir) as scratch:
        run(results, args.quick, Path(scratch))
    print(results.table())


if __name__ == "__main__":
    main()
