"""Per-step persistence: one message file + its commit + the index refresh.

Measured in traces of 100, 1,000 and 10,000 messages, with the default
`fsync = "files"` and again with `fsync = "all"`, side by side with peers
doing the same work: appending the same records to a JSONL file with fsync
(the floor: one durable write), making the same commits with the `git` CLI
(`git add` + `git commit`), and LangGraph's SqliteSaver, the checkpointer
agent builders pick instead, used as a graph with a `messages` channel uses
it (`put_writes`, then `put` of a checkpoint holding every message; only with
the `bench` extra installed).

A step also creates about a dozen small files (temp files renamed into
place, seven loose objects, lock files), and what that costs varies a lot
with the filesystem and with what else the disk is doing. So another
series does only that, with no Git or agentfs logic: 12 small files created
and renamed into place, 2 of them fsynced. The series run round-robin,
one step of each in turn, so they all see the same disk weather.

The disk agentfs' series leaves behind is measured too: how much the objects
in `.git` grew per step, how many are left loose (they are packed once about
`LOOSE_LIMIT` pile up), and the objects beside what `git gc` makes of a copy.
Only `.git/objects` is counted: `git gc` changes nothing else, and the rest
(the index, agentfs' parse cache) does not grow with every step.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from agentfs.store.git.packing import LOOSE_LIMIT, loose_objects
from agentfs.store.messages import Message, render_message
from bench.fixtures import (
    TRACE,
    clone_workspace,
    git,
    long_trace,
    message,
    objects_after_gc,
    tree_bytes,
)
from bench.report import Results, median, p95

try:  # the `bench` extra: pip install -e '.[bench]'
    from langgraph.checkpoint.sqlite import SqliteSaver
except ImportError:
    SqliteSaver = None

SIZES = (100, 1_000, 10_000)
FILES_PER_STEP, FSYNCED_PER_STEP = 12, 2


def run(results: Results, quick: bool, scratch: Path) -> None:
    steps = 40 if quick else 150
    medians: dict[int, float] = {}
    for size in SIZES:
        template = scratch / f"template-{size}"
        long_trace(template, size)
        agentfs_root = clone_workspace(template, scratch / f"agentfs-{size}")
        durable_root = clone_workspace(template, scratch / f"agentfs-all-{size}")
        _set_fsync(durable_root, "all")
        series = {
            "agentfs": _agentfs_steps(agentfs_root, size),
            "agentfs-all": _agentfs_steps(durable_root, size),
            "jsonl": _jsonl_steps(scratch / f"floor-{size}.jsonl", size),
            "git": _git_cli_steps(clone_workspace(template, scratch / f"git-{size}"), size),
            "files": _file_steps(scratch / f"files-{size}"),
        }
        if SqliteSaver is not None:
            series["sqlite"] = _sqlite_steps(scratch / f"sqlite-{size}.db", size)
        objects = agentfs_root / ".git" / "objects"
        before = tree_bytes(objects)
        timings = _round_robin(series, steps)
        agentfs, jsonl, git_cli, files = (timings[k] for k in ("agentfs", "jsonl", "git", "files"))
        durable = timings["agentfs-all"]
        after = tree_bytes(objects)
        medians[size] = median(agentfs)
        label = f"{size:,} msgs"
        add = results.add
        add("persistence", f"agentfs step, median ({label})", median(agentfs), "ms")
        add("persistence", f"agentfs step, p95 ({label})", p95(agentfs), "ms")
        add("persistence", f"agentfs step, fsync = \"all\", median ({label})", median(durable),
            "ms", 'the same steps with fsync = "all" in agentfs.toml')
        add("persistence", f"  fsync = \"all\" costs, median ({label})",
            median(durable) - median(agentfs), "ms", 'more per step than fsync = "files"')
        add("persistence", f"JSONL append+fsync, median ({label})", median(jsonl), "ms")
        add("persistence", f"JSONL append+fsync, p95 ({label})", p95(jsonl), "ms")
        add("persistence", f"git CLI add+commit, median ({label})", median(git_cli), "ms")
        add("persistence", f"git CLI add+commit, p95 ({label})", p95(git_cli), "ms")
        add("persistence", f"a step's file operations alone, median ({label})", median(files),
            "ms", f"{FILES_PER_STEP} files created and renamed, {FSYNCED_PER_STEP} fsynced")
        add("persistence", f"agentfs / JSONL floor ({label})",
            median(agentfs) / median(jsonl), "x", "lower is better")
        add("persistence", f"agentfs / file operations alone ({label})",
            median(agentfs) / median(files), "x", "what agentfs adds to the filesystem's cost")
        add("persistence", f"git CLI / agentfs ({label})",
            median(git_cli) / median(agentfs), "x", "budget >= 4")
        if "sqlite" in timings:
            sqlite = timings["sqlite"]
            add("persistence", f"LangGraph SqliteSaver step, median ({label})", median(sqlite),
                "ms", "put_writes + put of the state with every message")
            add("persistence", f"LangGraph SqliteSaver step, p95 ({label})", p95(sqlite), "ms")
            add("persistence", f"agentfs / SqliteSaver ({label})",
                median(agentfs) / median(sqlite), "x", "budget < 1 at every size")
        add("persistence", f".git/objects bytes per step ({label})", (after - before) / steps,
            "bytes", f"growth over the {steps} steps, from a packed start")
        add("persistence", f"loose objects at the end ({label})", len(loose_objects(objects)[0]),
            "objects", f"packed once about {LOOSE_LIMIT} pile up")
        add("persistence", f".git/objects / the same after git gc, at the end ({label})",
            after / objects_after_gc(agentfs_root, scratch), "x", "budget <= 3")
        shutil.rmtree(template)
    results.add("persistence", "growth of the median, 100 -> 10,000 msgs",
                medians[10_000] / medians[100], "x", "budget <= 2")
    if SqliteSaver is None:
        print("   LangGraph's SqliteSaver is not installed: no peer figures "
              "(pip install -e '.[bench]' adds it)", flush=True)


def _round_robin(series: dict[str, Iterator[None]], steps: int) -> dict[str, list[float]]:
    """Time one step of each series in turn, `steps` times."""
    timings: dict[str, list[float]] = {name: [] for name in series}
    for started in series.values():
        next(started)  # setup, not timed
    for _ in range(steps):
        for name, steps_of in series.items():
            began = time.perf_counter()
            next(steps_of)
            timings[name].append((time.perf_counter() - began) * 1000)
    for name, steps_of in series.items():
        steps_of.close()
    return timings


def _sequences(size: int) -> Iterator[int]:
    sequence = size + 1
    while True:
        yield sequence
        sequence += 1


def _agentfs_steps(root: Path, size: int) -> Iterator[None]:
    from agentfs.core.project import Project

    trace = Project.open(root).trace(TRACE)
    with trace.lock():
        trace.recover()  # what a run does first; not part of a step
        yield
        try:
            for sequence in _sequences(size):
                template = message(sequence)
                m = trace.new_message(template.role, template.content,
                                      tool_calls=template.tool_calls,
                                      tool_call_id=template.tool_call_id)
                trace.commit_step(m.role, [m])
                yield
        finally:
            git(root, "fsck", "--no-dangling")  # what was measured is a valid repository


def _set_fsync(root: Path, value: str) -> None:
    """Set `fsync` in the workspace's agentfs.toml (and commit it, as a user would)."""
    config = root / "agentfs.toml"
    lines = [line for line in config.read_text().splitlines() if not line.startswith("fsync")]
    config.write_text("\n".join([*lines, f'fsync = "{value}"']) + "\n")
    git(root, "commit", "-q", "-m", f"bench: fsync = {value}", "--", "agentfs.toml")


def _sqlite_steps(path: Path, size: int) -> Iterator[None]:
    """LangGraph's SqliteSaver as a graph with a `messages` channel (the default
    `add_messages` reducer) uses it: per step, the step's write (`put_writes`), then a
    checkpoint holding the whole state, every message so far (`put`)."""
    assert SqliteSaver is not None
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.base.id import uuid6

    conn = sqlite3.connect(path, check_same_thread=False)  # as from_conn_string opens it
    saver = SqliteSaver(conn)
    state = [_record(message(sequence)) for sequence in range(2, size + 1)]
    config: dict = {"configurable": {"thread_id": TRACE, "checkpoint_ns": ""}}

    def checkpoint(step: int) -> dict:
        made = empty_checkpoint()
        made["id"] = str(uuid6(clock_seq=step))
        made["channel_values"] = {"messages": state}
        made["channel_versions"] = {"messages": step}
        return made

    try:
        config = saver.put(config, checkpoint(size), {"source": "loop", "step": size},
                           {"messages": size})  # the trace so far: not timed
        yield
        for sequence in _sequences(size):
            record = _record(message(sequence))
            state.append(record)
            saver.put_writes(config, [("messages", [record])], task_id=str(uuid6()))
            config = saver.put(config, checkpoint(sequence),
                               {"source": "loop", "step": sequence}, {"messages": sequence})
            yield
    finally:
        conn.close()


def _record(m: Message) -> dict:
    """A message as JSON-able data, the same for the JSONL floor and SqliteSaver."""
    return m.model_dump(mode="json", exclude_none=True)


def _jsonl_steps(path: Path, size: int) -> Iterator[None]:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        yield
        for sequence in _sequences(size):
            m = message(sequence)
            os.write(fd, json.dumps(_record(m)).encode() + b"\n")
            os.fsync(fd)
            yield
    finally:
        os.close(fd)


def _git_cli_steps(root: Path, size: int) -> Iterator[None]:
    messages_dir = root / "traces" / TRACE / "messages"
    meta_path = root / "traces" / TRACE / "trace.json"
    meta = json.loads(meta_path.read_text())
    yield
    for sequence in _sequences(size):
        m = message(sequence)
        path = messages_dir / m.file_name()
        path.write_bytes(render_message(m))
        meta["head"], meta["next_sequence"] = sequence, sequence + 1
        meta_path.write_text(json.dumps(meta, indent=2) + "\n")
        git(root, "add", "--", str(path), str(meta_path))
        git(root, "commit", "-q", "-m", f"{TRACE}: {m.role} #{sequence}")
        yield


def _file_steps(folder: Path) -> Iterator[None]:
    folder.mkdir()
    write: Callable[[Path, bool], None] = _create_and_rename
    yield
    for step in _sequences(0):
        for n in range(FILES_PER_STEP):
            write(folder / f"{step}-{n}", n < FSYNCED_PER_STEP)
        yield


def _create_and_rename(path: Path, fsync: bool) -> None:
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, b"x" * 300)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)
