"""Per-step persistence: one message file + its commit + the index refresh.

Measured in traces of 100, 1,000 and 10,000 messages, side by side with two
baselines doing the same work: appending the same records to a JSONL file
with fsync (the floor: one durable write), and making the same commits with
the `git` CLI (`git add` + `git commit`).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from agentfs.store.messages import render_message
from bench.fixtures import TRACE, git, long_trace, message
from bench.report import Results, median, p95

SIZES = (100, 1_000, 10_000)


def run(results: Results, quick: bool, scratch: Path) -> None:
    steps = 40 if quick else 150
    medians: dict[int, float] = {}
    for size in SIZES:
        template = scratch / f"template-{size}"
        long_trace(template, size)
        agentfs_ms = _agentfs_steps(_copy(template, scratch / f"agentfs-{size}"), size, steps)
        jsonl_ms = _jsonl_steps(scratch / f"floor-{size}.jsonl", size, steps)
        git_ms = _git_cli_steps(_copy(template, scratch / f"git-{size}"), size, steps)
        medians[size] = median(agentfs_ms)
        label = f"{size:,} msgs"
        results.add("persistence", f"agentfs step, median ({label})", median(agentfs_ms), "ms")
        results.add("persistence", f"agentfs step, p95 ({label})", p95(agentfs_ms), "ms")
        results.add("persistence", f"JSONL append+fsync, median ({label})", median(jsonl_ms), "ms")
        results.add("persistence", f"JSONL append+fsync, p95 ({label})", p95(jsonl_ms), "ms")
        results.add("persistence", f"git CLI add+commit, median ({label})", median(git_ms), "ms")
        results.add("persistence", f"git CLI add+commit, p95 ({label})", p95(git_ms), "ms")
        results.add("persistence", f"agentfs / JSONL floor ({label})",
                    median(agentfs_ms) / median(jsonl_ms), "x", "lower is better")
        results.add("persistence", f"git CLI / agentfs ({label})",
                    median(git_ms) / median(agentfs_ms), "x", "budget >= 4")
        shutil.rmtree(template)
    results.add("persistence", "growth of the median, 100 -> 10,000 msgs",
                medians[10_000] / medians[100], "x", "budget <= 2")


def _copy(template: Path, target: Path) -> Path:
    shutil.copytree(template, target, symlinks=True)
    return target


def _agentfs_steps(root: Path, size: int, steps: int) -> list[float]:
    from agentfs.core.workspace import Project

    project = Project.open(root)
    trace = project.trace(TRACE)
    timings = []
    with trace.lock():
        trace.recover()  # what a run does first; not part of a step
        for sequence in range(size + 1, size + 1 + steps):
            template = message(sequence)
            started = time.perf_counter()
            m = trace.new_message(template.role, template.content,
                                  tool_calls=template.tool_calls,
                                  tool_call_id=template.tool_call_id)
            trace.commit_step(m.role, [m])
            timings.append((time.perf_counter() - started) * 1000)
    git(root, "fsck", "--no-dangling")  # what was measured is a valid repository
    return timings


def _jsonl_steps(path: Path, size: int, steps: int) -> list[float]:
    timings = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for sequence in range(size + 1, size + 1 + steps):
            m = message(sequence)
            started = time.perf_counter()
            record = json.dumps(m.model_dump(mode="json", exclude_none=True)).encode() + b"\n"
            os.write(fd, record)
            os.fsync(fd)
            timings.append((time.perf_counter() - started) * 1000)
    finally:
        os.close(fd)
    return timings


def _git_cli_steps(root: Path, size: int, steps: int) -> list[float]:
    messages_dir = root / "traces" / TRACE / "messages"
    meta_path = root / "traces" / TRACE / "trace.json"
    meta = json.loads(meta_path.read_text())
    timings = []
    for sequence in range(size + 1, size + 1 + steps):
        m = message(sequence)
        started = time.perf_counter()
        path = messages_dir / m.file_name()
        path.write_bytes(render_message(m))
        meta["head"], meta["next_sequence"] = sequence, sequence + 1
        meta_path.write_text(json.dumps(meta, indent=2) + "\n")
        git(root, "add", "--", str(path), str(meta_path))
        git(root, "commit", "-q", "-m", f"{TRACE}: {m.role} #{sequence}")
        timings.append((time.perf_counter() - started) * 1000)
    return timings
