"""Views cost what they show: the page's first data, a page of messages, `show --tail`.

`python -m bench.views [--quick] [--sizes 10000,100000]`

Each size gets a linear trace built by `bench/fixtures.py:long_trace` (files and one
commit; 100,000 messages take about a minute to build, so that size is left out of
`--quick`). The API is the real application (`agentfs/server/app.py:create_app`)
called in this process as an ASGI app, by a sequential client (one request after
another, no network, no token: what a request costs the server, on one core):

- first paint: `GET /api/traces/long/tree?limit=100`, what the page asks for first;
  its time on a server that has read nothing of the trace yet (the module caches
  cleared, the application new and warmed up as `agentfs serve` does before it
  prints its address: `agentfs/server/app.py:warm_up`) and its median afterwards,
  and the bytes of the answer. Budget: ≤ 100 ms
  and ≤ 200 KB (design §8). At 10,000 messages the whole `/tree` (what the page read
  before paging) is timed once beside it.
- a page of 100 messages: `GET /api/traces/long/messages?limit=100&before=SEQ` for
  pages spread over the whole trace (their cursors found by walking `older` back),
  each read once first (a server in use has parsed them), then requested round
  robin; requests per second of wall time (budget: ≥ 100) and of this process's CPU
  time (what a busy machine does not change much).
- the first paint again on the trace compressed as `bench/load.py`'s (a summary
  continuing the first user message, 38 messages after it), at each size: its main
  path is 41 messages, so the tail page reaches the first message; the messages the
  summary replaced are a fold (a count and a range, docs/api.md, Pages), not read.
  New server and median, bytes (same budgets), and the first page of 100 of the
  fold (`/tree?first=&end=&limit=100`, what opening it reads), median. The new
  server finds the folders' names saved by an earlier view
  (`agentfs/store/foldernames.py`), as after any run or view of the trace; a second
  new server without them (a first view, as after a clone) lists every folder the
  fold covers; a third new server has them listed by its start
  (`agentfs/server/app.py:remember_names`, which `agentfs serve` runs on a thread
  once it listens) before the visitor's request, and that listing is timed too.
- `agentfs show long --tail 100` as a command (a new process each time), median,
  round-robin with the same command on a trace of 100 messages: its growth.
  Budget: ≤ 1.5×.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from bench.fixtures import TRACE, shared_long_trace
from bench.report import Results, median
from bench.startup import command_line, round_robin

SIZES = (10_000, 100_000)
QUICK_SIZES = (10_000,)
BASE = 100  # the trace `show --tail` is compared with
PAGE = 100
PAGES = 20  # distinct pages requested round robin
REQUESTS = 200
WARM = 20  # first-paint requests after the first
KEPT = 38  # the compressed trace's messages after its summary (as bench/load.py's)


def run(results: Results, quick: bool, scratch: Path,
        sizes: tuple[int, ...] | None = None) -> None:
    """`python -m bench` entry: the figures into `results`."""
    sizes = sizes or (QUICK_SIZES if quick else SIZES)
    roots = {size: shared_long_trace(scratch, size) for size in (BASE, *sizes)}
    shown = show_tail_ms(roots, 5 if quick else 11)
    results.add("views", f"show --tail {PAGE} ({BASE} msgs)", shown[BASE], "ms")
    for size in sizes:
        root = roots[size]
        f = measure(root, whole=size <= 10_000)
        label = f"({size:,} msgs)"
        results.add("views", f"first paint /tree?limit={PAGE}, new server {label}",
                    f["first_ms"], "ms", "budget <= 100")
        results.add("views", f"first paint /tree?limit={PAGE}, median {label}",
                    f["paint_ms"], "ms", "budget <= 100")
        results.add("views", f"first paint /tree?limit={PAGE}, bytes {label}",
                    f["paint_kb"], "KB", "budget <= 200")
        if "whole_ms" in f:
            results.add("views", f"whole /tree, before paging {label}", f["whole_ms"], "ms")
            results.add("views", f"whole /tree, bytes {label}", f["whole_kb"], "KB")
        results.add("views", f"GET a page of {PAGE} messages, sequential {label}",
                    f["pages_per_s"], "req/s", "budget >= 100")
        results.add("views", f"GET a page of {PAGE} messages, per CPU second {label}",
                    f["pages_per_cpu_s"], "req/s")
        squeezed = folded(shared_long_trace(scratch, size, kept=KEPT))
        results.add("views", f"first paint, compressed (path of {KEPT + 3}), new server "
                    f"{label}", squeezed["first_ms"], "ms", "budget <= 100")
        results.add("views", f"first paint, compressed, new server, no saved names, "
                    f"before its start listed the folders {label}", squeezed["unsaved_ms"], "ms")
        results.add("views", f"the same after its start listed them (after a clone) {label}",
                    squeezed["remembered_ms"], "ms", "budget <= 100")
        results.add("views", f"its start's listing of the folders, on its thread {label}",
                    squeezed["remember_ms"], "ms")
        results.add("views", f"first paint, compressed, median {label}",
                    squeezed["paint_ms"], "ms", "budget <= 100")
        results.add("views", f"first paint, compressed, bytes {label}",
                    squeezed["paint_kb"], "KB", "budget <= 200")
        results.add("views", f"a fold's first page of {PAGE}, median {label}",
                    squeezed["fold_ms"], "ms")
        results.add("views", f"show --tail {PAGE} {label}", shown[size], "ms")
        results.add("views", f"show --tail {PAGE} growth {BASE} → {size:,}",
                    shown[size] / shown[BASE], "×", "budget <= 1.5")


def folded(root: Path) -> dict[str, float]:
    """First paint of a compressed trace (new server with the folders' names saved,
    then warm), its fold's first page, median, and the first paint of a new server
    without saved names."""
    return asyncio.run(_folded(root))


async def _folded(root: Path) -> dict[str, float]:
    from agentfs.core.project import Project

    trace = Project.open(root).trace(TRACE)
    trace.view(PAGE)  # an earlier view: the names of the folders it covers saved
    app, figures, body = await _first_paint(root)
    [fold] = json.loads(body)["folds"]
    query = f"first={fold['first']}&end={fold['last'] + 1}&limit={PAGE}"
    figures["fold_ms"] = await _median_ms(app, f"/api/traces/{TRACE}/tree", query)
    trace.workspace.folder_names(TRACE).unlink(missing_ok=True)
    _, unsaved, _ = await _first_paint(root)
    figures["unsaved_ms"] = unsaved["first_ms"]
    trace.workspace.folder_names(TRACE).unlink(missing_ok=True)  # kept if settled
    _, remembered, _ = await _first_paint(root, remember=True)
    figures["remembered_ms"] = remembered["first_ms"]
    figures["remember_ms"] = remembered["remember_ms"]
    return figures


def measure(root: Path, *, whole: bool) -> dict[str, float]:
    """First paint (new server, then warm), the whole tree (if `whole`) and pages/s."""
    return asyncio.run(_measure(root, whole))


async def _first_paint(root: Path, *, remember: bool = False,
                       ) -> tuple[Any, dict[str, float], bytes]:
    """The app, the first paint on a server that has read nothing yet, then its median
    on it, and the first paint's body. `remember`: the server's start lists the long
    traces' folders first (`agentfs/server/app.py:remember_names`, a thread of
    `agentfs serve`, done here before the visitor comes), timed as `remember_ms`."""
    import threading

    from agentfs.core.project import Project
    from agentfs.server.app import remember_names, warm_up
    from agentfs.store import dirmemory

    dirmemory.forget()  # a server that has read nothing yet
    app = _app(root)
    await warm_up(app)  # as `agentfs serve` does before it prints its address
    figures: dict[str, float] = {}
    if remember:
        started = time.perf_counter()
        remember_names(Project.open(root), threading.Event())
        figures["remember_ms"] = (time.perf_counter() - started) * 1000
        dirmemory.forget()  # what the visitor's request reads is its own
    tree = f"/api/traces/{TRACE}/tree"
    started = time.perf_counter()
    body = await get(app, tree, f"limit={PAGE}")
    figures.update(first_ms=(time.perf_counter() - started) * 1000, paint_kb=len(body) / 1024)
    figures["paint_ms"] = await _median_ms(app, tree, f"limit={PAGE}")
    return app, figures, body


async def _median_ms(app: Any, path: str, query: str) -> float:
    samples = []
    for _ in range(WARM):
        started = time.perf_counter()
        await get(app, path, query)
        samples.append((time.perf_counter() - started) * 1000)
    return median(samples)


async def _measure(root: Path, whole: bool) -> dict[str, float]:
    app, figures, body = await _first_paint(root)
    tree = f"/api/traces/{TRACE}/tree"
    if whole:
        started = time.perf_counter()
        body = await get(app, tree, "")
        figures["whole_ms"] = (time.perf_counter() - started) * 1000
        figures["whole_kb"] = len(body) / 1024
    messages = f"/api/traces/{TRACE}/messages"
    cursors = await _cursors(app, messages, int(json.loads(body)["head"]))
    for before in cursors:  # each page read once: its files parsed (a server in use)
        await get(app, messages, f"limit={PAGE}&before={before}")
    started, cpu = time.perf_counter(), time.process_time()
    for n in range(REQUESTS):
        await get(app, messages, f"limit={PAGE}&before={cursors[n % len(cursors)]}")
    figures["pages_per_s"] = REQUESTS / (time.perf_counter() - started)
    figures["pages_per_cpu_s"] = REQUESTS / (time.process_time() - cpu)
    return figures


async def _cursors(app: Any, messages: str, head: int) -> list[int]:
    """`before` values of `PAGES` pages spread over the trace: the `older` of the tail,
    then of pages asked for before evenly spaced messages."""
    tail = json.loads(await get(app, messages, f"limit={PAGE}"))
    cursors = [tail["older"]]
    step = max(head // PAGES, PAGE + 1)
    for before in range(head - step, PAGE, -step):
        cursors.append(json.loads(await get(app, messages, f"limit={PAGE}&before={before}"))
                       ["older"])
    return [c for c in cursors if c is not None][:PAGES]


def _app(root: Path) -> Any:
    """The real application over `root`: no token (loopback), no model."""
    from agentfs.core.project import Project
    from agentfs.server.app import create_app

    def no_model(*_: object) -> Any:
        raise AssertionError("the views benchmark calls no model")

    app, _ = create_app(Project.open(root), no_model, access=None, loopback=True,
                        max_body=1 << 20)
    return app


async def get(app: Any, path: str, query: str) -> bytes:
    """One GET through the ASGI app; the body (a status other than 200 raises)."""
    from agentfs.server.app import get_in_process

    status, body = await get_in_process(app, path, query)
    if status != 200:
        raise RuntimeError(f"GET {path}?{query}: {status} {body[:300]!r}")
    return body


def show_tail_ms(roots: dict[int, Path], rounds: int) -> dict[int, float]:
    """Median wall time of `agentfs show TRACE --tail 100` in a new process, per size,
    run round-robin over the sizes so that each sees the same machine."""
    commands = {str(size): [*command_line(), "show", str(root / "traces" / TRACE),
                            "--tail", str(PAGE)] for size, root in roots.items()}
    times = round_robin(commands, Path.cwd(), rounds)
    return {size: median(times[str(size)]) for size in roots}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.views", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"only {QUICK_SIZES[0]:,} messages")
    parser.add_argument("--sizes", default="", help="comma-separated trace sizes")
    parser.add_argument("--scratch", type=Path, default=Path(__file__).parent / ".scratch" / "views",
                        help="where the traces are built (kept for the next run)")
    args = parser.parse_args(argv)
    sizes = tuple(int(s) for s in args.sizes.split(",")) if args.sizes else None
    results = Results(quick=args.quick)
    args.scratch.mkdir(parents=True, exist_ok=True)
    run(results, args.quick, args.scratch, sizes)
    print(results.table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
