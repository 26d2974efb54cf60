"""The server's trace list keeps each row while the files it was made from keep their
stamps, and makes it again when one changes (`agentfs/core/listcache.py:ListCache`)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from agentfs.core import status
from agentfs.core.listcache import ListCache
from agentfs.core.project import Project
from agentfs.store.message_dir import RACY_NS
from tests.conftest import replay_workspace, run_cli

SCRIPT = {"turns": [{"text": "Done."}]}


@pytest.fixture
def made(monkeypatch) -> list[str]:
    """The traces whose rows were made (not reused), in order."""
    made: list[str] = []
    real = status._trace_status

    def counted(workspace, trace_id, prices, places):
        made.append(trace_id)
        return real(workspace, trace_id, prices, places)

    monkeypatch.setattr(status, "_trace_status", counted)
    return made


def settle() -> None:
    """Let the files just written leave the clock ticks in which they could change
    unseen (rows made from such files are not kept)."""
    time.sleep(2 * RACY_NS / 1e9)


def test_rows_are_kept_until_one_of_their_files_changes(tmp_path: Path, made: list[str]):
    ws = replay_workspace(tmp_path / "ws", SCRIPT)
    run_cli("run", "t", "-m", "Answer me", cwd=ws)
    run_cli("new", "u", "-m", "Later", cwd=ws)
    project = Project.open(ws)
    cache = ListCache(project.workspace, project.prices)
    settle()

    def listed() -> dict[str, status.TraceStatus]:
        made.clear()
        rows = {row.trace: row for row in cache.status().traces}
        by_cache = list(made)
        assert list(rows.values()) == status.workspace_status(
            project.workspace, project.prices).traces  # the same as the list made afresh
        made[:] = by_cache
        return rows

    assert set(listed()) == {"t", "u"} and sorted(made) == ["t", "u"]
    rows = listed()
    assert made == [] and rows["t"].status == status.TraceState.WAITING

    (ws / "traces/u/inbox/more.md").write_text("more\n")
    settle()
    assert listed()["u"].pending_inbox == ["more.md"] and made == ["u"]

    (ws / "traces/t/approval.json").write_text("{not json")
    settle()
    assert listed()["t"].approval is not None and made == ["t"]

    with project.trace("t").lock():
        assert listed()["t"].status == status.TraceState.RUNNING and made == ["t"]
    assert listed()["t"].status != status.TraceState.RUNNING

    shutil.rmtree(ws / "traces/u")
    assert set(listed()) == {"t"} and made == []
    assert set(cache._rows) == {"t"}  # the row of a trace that is gone is dropped


def test_a_row_made_from_a_file_changed_just_now_is_made_again(tmp_path: Path, made: list[str]):
    ws = replay_workspace(tmp_path / "ws", SCRIPT)
    run_cli("new", "t", "-m", "Answer me", cwd=ws)
    project = Project.open(ws)
    cache = ListCache(project.workspace, project.prices)
    (ws / "traces/t/inbox/now.md").write_text("now\n")  # may change again unseen
    cache.status()
    cache.status()
    assert made == ["t", "t"]
