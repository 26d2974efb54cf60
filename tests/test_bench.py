"""The benchmarks still measure what they say on the current API (tiny sizes; no
figure is checked: tests never assert on time)."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest

from bench import listing, persistence, startup, wholerun
from bench.fixtures import TRACE
from tests.conftest import assert_git_clean


def test_wholerun_times_whole_runs_that_add_messages_to_a_linear_trace(tmp_path):
    template = wholerun.prepare(tmp_path / "template", 30)
    root = wholerun._copy(template, tmp_path / "copy")
    figures = wholerun.run_in_process(root, 3)
    assert figures["messages"] >= 6  # an assistant turn and its tool result per iteration
    assert figures["per_message_ms"] > 0 and figures["steady_ms"] > 0
    command = wholerun.run_command(root, 2)
    assert command["messages"] >= 4 and command["wall_ms"] > 0
    meta = json.loads((root / "traces" / TRACE / "trace.json").read_text())
    shown = json.loads(_show(root))
    assert shown["head"] == meta["head"] == meta["next_sequence"] - 1
    assert len(shown["messages"]) == meta["head"]  # linear: every message is on the path
    assert_git_clean(root)


def _show(root: Path) -> str:
    from tests.conftest import run_cli

    return run_cli("show", TRACE, "--json", cwd=root).stdout


def test_startup_runs_each_command_round_robin(workspace):
    commands = {"bare": [sys.executable, "-c", "pass"],
                "status": [*startup.command_line(), "status"]}
    times = startup.round_robin(commands, workspace, rounds=2)
    assert {name: len(samples) for name, samples in times.items()} == {"bare": 2, "status": 2}


@pytest.mark.skipif(persistence.SqliteSaver is None, reason="the bench extra is not installed")
def test_sqlite_peer_stores_a_checkpoint_with_every_message_per_step(tmp_path):
    steps = persistence._sqlite_steps(tmp_path / "peer.db", 10)
    next(steps)  # setup: the trace so far
    for _ in range(3):
        next(steps)
    steps.close()
    with sqlite3.connect(tmp_path / "peer.db") as conn:
        assert conn.execute("select count(*) from checkpoints").fetchone() == (4,)
        assert conn.execute("select count(*) from writes").fetchone() == (3,)


def test_listing_times_the_trace_list_and_runs_with_nothing_to_do(tmp_path):
    figures = listing.measure_listing(tmp_path / "list", 1, traces=3)
    assert {"first", "status --json", "status", "GET /api/traces",
            "workspace_status in process", "kept rows in process", "bare"} <= set(figures)
    assert all(value > 0 for value in figures.values())
    rows = json.loads(_show_status(tmp_path / "list"))["traces"]
    assert [(r["status"], r["messages"], r["title"]) for r in rows] == [
        ("waiting", 3, f"Task {n}: summarise notes/{n}.md") for n in range(3)]
    idle = listing.measure_nothing_to_do(tmp_path / "idle", (12, 20), 1)  # each said "waiting"
    assert set(idle) == {12, 20}


def _show_status(root: Path) -> str:
    from tests.conftest import run_cli

    return run_cli("status", "--json", cwd=root).stdout


def test_bigfiles_commits_a_big_file_then_steps(tmp_path, capsys):
    from bench import bigfiles

    assert bigfiles.main(["--mb", "1", "--steps", "20", "--scratch", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "of the same bytes again" in printed and "still loose" in printed
    assert "x git gc" in printed


def test_the_watcher_benchmark_takes_a_drop_and_runs_it(tmp_path):
    """One drop through `bench/watcher.py`'s live watcher (its API drifted once unseen:
    a `runner_options` the watcher no longer took)."""
    from bench import watcher

    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [{"text": "answer"}] * 3}))
    [(started, committed)] = watcher._drops(tmp_path / "ws", script, 1, new=False, delay=0)
    assert started > 0 and committed > 0
