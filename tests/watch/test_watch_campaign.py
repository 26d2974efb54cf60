"""A watcher killed with SIGKILL at random instants during bursts of drops, then
restarted: every dropped file ends as exactly one user message, none stuck."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from agentfs.core.project import Project
from agentfs.store.inbox import staged_in, waiting
from agentfs.store.messages import load_message
from tests.conftest import assert_git_clean, message_paths, run_cli
from tests.watch.test_watch import replay_workspace


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return replay_workspace(tmp_path, 500, ("t", "u"))


def drop_burst(root: Path, trial: int, rng: random.Random) -> list[str]:
    """New-trace drops (some with names that look like ids) and drops into existing
    traces; returns the texts dropped."""
    texts = []
    for i in range(rng.randint(1, 4)):
        text = f"new {trial}-{i}"
        name = rng.choice([f"job-{trial}-{i}.md", f"t--{trial}-{i}.md", f"u-{trial}-{i}.md"])
        (root / "inbox" / name).write_text(text + "\n")
        texts.append(text)
    for i in range(rng.randint(1, 6)):
        text = f"old {trial}-{i}"
        trace = rng.choice(["t", "u"])
        (root / "traces" / trace / "inbox" / f"o--{trial}-{i}.md").write_text(text + "\n")
        texts.append(text)
    return texts


def taken_texts(root: Path) -> Counter:
    """How many message files, across all traces, hold each dropped text."""
    found: Counter = Counter()
    for messages in (root / "traces").glob("*/messages"):
        for path in message_paths(messages):
            text = load_message(path).text
            if text.startswith(("new ", "old ")):
                found[text] += 1
    return found


def campaign(root: Path, trials: int, seed: int) -> None:
    rng = random.Random(seed)
    dropped: list[str] = []
    kills = 0
    for trial in range(trials):
        dropped += drop_burst(root, trial, rng)
        proc = subprocess.Popen([sys.executable, "-m", "agentfs", "watch", "--settle", "0"],
                                cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(rng.uniform(0.3, 1.6))  # a random instant, not a synchronisation
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            kills += 1
        _, stderr = proc.communicate()
        assert proc.returncode in (0, -signal.SIGKILL), stderr.decode()
    assert kills >= trials // 2, "the kills should land while the watcher works"
    run_cli("watch", "--once", "--settle", "0", cwd=root, timeout=600)

    found = taken_texts(root)
    lost = [t for t in dropped if found[t] == 0]
    duplicated = [t for t, n in found.items() if n > 1]
    project = Project.open(root)
    ws = project.workspace
    stuck = [str(p) for p in waiting(ws.inbox_dir)]
    for trace_id in ws.trace_ids():
        trace = project.trace(trace_id)
        stuck += [str(p) for p in waiting(trace.inbox_dir)]
        stuck += [str(s.dir) for s in staged_in(ws.ingest_dir / trace_id)]
        if trace.unfinished():
            stuck.append(f"trace {trace_id} left unanswered")
    assert (lost, duplicated, stuck) == ([], [], []), "lost, duplicated, stuck"
    assert len(dropped) == len(set(dropped))
    assert_git_clean(root)


def test_a_watcher_killed_at_random_instants_loses_and_duplicates_nothing(ws):
    campaign(ws, trials=4, seed=11)


@pytest.mark.slow
def test_fifty_kills_during_bursts_lose_duplicate_and_strand_nothing(ws):
    campaign(ws, trials=50, seed=2026)
