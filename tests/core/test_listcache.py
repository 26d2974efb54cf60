"""The trace list keeps each row while the files it was made from keep their stamps,
in a process and, through the saved file, from one process to the next; it makes a
row again when one of them changes (`agentfs/core/listcache.py:ListCache`)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from agentfs.core import listcache, status
from agentfs.core.listcache import ListCache
from agentfs.core.project import Project
from agentfs.prices import Price, PriceTable
from agentfs.store.stamps import RACY_NS
from tests.conftest import in_a_terminal, replay_workspace, run_cli

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


def afresh(project: Project) -> list[dict]:
    """The list made from the files, with nothing kept."""
    return [row.record() for row in status.workspace_status(project.workspace,
                                                            project.prices).traces]


def two_traces(tmp_path: Path) -> tuple[Path, Project]:
    ws = replay_workspace(tmp_path / "ws", SCRIPT)
    run_cli("run", "t", "-m", "Answer me", cwd=ws)
    run_cli("new", "u", "-m", "Later", cwd=ws)
    settle()
    return ws, Project.open(ws)


def lister(project: Project, made: list[str], cache: ListCache):
    def listed() -> dict[str, dict]:
        made.clear()
        rows = cache.listed().rows()
        by_cache = list(made)
        assert rows == afresh(project)  # the same as the list made afresh
        made[:] = by_cache
        return {row["trace"]: row for row in rows}

    return listed


def new_process(project: Project, prices: PriceTable | None = None) -> ListCache:
    """What a new `agentfs status` starts with: the saved rows, nothing in memory."""
    return ListCache(project.workspace, prices or project.prices,
                     saved=project.workspace.trace_list)


def test_rows_are_kept_until_one_of_their_files_changes(tmp_path: Path, made: list[str]):
    ws, project = two_traces(tmp_path)
    listed = lister(project, made, ListCache(project.workspace, project.prices))

    assert set(listed()) == {"t", "u"} and sorted(made) == ["t", "u"]
    rows = listed()
    assert made == [] and rows["t"]["status"] == "waiting"

    (ws / "traces/u/inbox/more.md").write_text("more\n")
    settle()
    assert listed()["u"]["pending_inbox"] == ["more.md"] and made == ["u"]

    (ws / "traces/t/approval.json").write_text("{not json")
    settle()
    assert listed()["t"].get("approval") is not None and made == ["t"]

    with project.trace("t").lock():
        assert listed()["t"]["status"] == "running" and made == ["t"]
    assert listed()["t"]["status"] != "running"

    shutil.rmtree(ws / "traces/u")
    assert set(listed()) == {"t"} and made == []


def test_a_row_made_from_a_file_changed_just_now_is_made_again(tmp_path: Path, made: list[str]):
    ws = replay_workspace(tmp_path / "ws", SCRIPT)
    run_cli("new", "t", "-m", "Answer me", cwd=ws)
    project = Project.open(ws)
    cache = ListCache(project.workspace, project.prices)
    (ws / "traces/t/inbox/now.md").write_text("now\n")  # may change again unseen
    cache.listed()
    cache.listed()
    assert made == ["t", "t"]


def test_a_new_process_lists_from_the_saved_rows_and_sees_every_change_since(
        tmp_path: Path, made: list[str]):
    ws, project = two_traces(tmp_path)
    first = new_process(project)
    first.listed()
    assert first.save() and not first.save()  # written once; nothing changed since
    assert sorted(made) == ["t", "u"]

    listed = lister(project, made, new_process(project))
    assert set(listed()) == {"t", "u"} and made == []  # no trace.json read

    # Each kind of change, made after the rows were saved, is seen by the next process.
    pending = {"call_id": "c1", "tool": "bash", "input": {}, "sequence": 2, "answer": None}
    changes = {
        "the trace's inbox": lambda: (ws / "traces/t/inbox/more.md").write_text("more\n"),
        "approval.json appears": lambda: (ws / "traces/u/approval.json").write_text(
            json.dumps(pending)),
        "an inbox's .rejected/ appears": (ws / "traces/t/inbox/.rejected").mkdir,
        "trace.json edited in place": lambda: _edit_in_place(ws / "traces/u/trace.json"),
        # approval.json exists now (seen above): an answer written into it in place
        # moves no folder, so its own stamp must have been kept
        "approval.json answered in place": lambda: _write_in_place(
            ws / "traces/u/approval.json", json.dumps({**pending, "answer": "no"})),
    }
    for what, change in changes.items():
        cache = new_process(project)
        cache.listed()
        cache.save()
        change()
        settle()
        listed = lister(project, made, new_process(project))
        rows = listed()  # asserts the rows equal the list made afresh
        assert made, what
    assert "approval" not in rows["u"]  # answered


def _write_in_place(path: Path, text: str) -> None:
    with open(path, "r+") as f:  # same inode: the folder's stamp does not move
        f.write(text)
        f.truncate()


def _edit_in_place(path: Path, error: str = "the network went away") -> None:
    """Record a failed run in trace.json without a new inode or a new folder entry."""
    data = json.loads(path.read_text())
    data["context"]["last_error"] = {"at": "2026-12-05T10:00:00+00:00", "error": error}
    _write_in_place(path, json.dumps(data))


def test_rows_saved_for_other_prices_are_made_again(tmp_path: Path, made: list[str]):
    _, project = two_traces(tmp_path)
    cache = new_process(project)
    cache.listed()
    cache.save()
    made.clear()
    other = PriceTable({"replay": Price(input=1, output=2)})
    rows = new_process(project, other).listed().rows()
    assert sorted(made) == ["t", "u"]
    assert rows == [row.record() for row in status.workspace_status(project.workspace,
                                                                    other).traces]


@pytest.mark.parametrize("damage", ["truncated", "byte flipped", "garbage", "empty",
                                    "old format", "a row without its stamp"])
def test_a_damaged_or_foreign_saved_file_is_ignored_whole(tmp_path: Path, made: list[str],
                                                           damage: str):
    _, project = two_traces(tmp_path)
    cache = new_process(project)
    cache.listed()
    cache.save()
    path = project.workspace.trace_list
    data = path.read_bytes()
    head, _, body = data.partition(b"\n")
    damaged = {
        "truncated": data[: len(data) - 40],
        "byte flipped": data[:-20] + bytes([data[-20] ^ 0x01]) + data[-19:],
        "garbage": b"\x00\xff" * 100,
        "empty": b"",
        "old format": head.replace(b'[2, "', b'[1, "', 1) + b"\n" + body,
        "a row without its stamp": head + b"\n" + b"t\t" + body.split(b"\t", 2)[2],
    }[damage]
    path.write_bytes(damaged)
    made.clear()
    listed = new_process(project).listed()
    assert sorted(made) == ["t", "u"]
    assert json.loads(listed.document("x"))["traces"] == afresh(project)


def test_a_row_made_while_a_run_took_the_lock_is_not_kept(tmp_path: Path, monkeypatch):
    # The lock is looked at before the row is made: a run that starts in between
    # makes a "running" row under a stamp that says "not locked". Kept, it would
    # say "running" long after that run ended without a commit.
    _, project = two_traces(tmp_path)
    cache = ListCache(project.workspace, project.prices)
    lock = project.trace("t").lock()
    real = status._trace_status

    def racing(workspace, trace_id, prices, places):
        if trace_id == "t":
            lock.acquire()  # a run starts after the stamp was taken
        return real(workspace, trace_id, prices, places)

    monkeypatch.setattr(status, "_trace_status", racing)
    try:
        assert cache.listed().rows()[0]["running"]
    finally:
        lock.release()  # the run ends, having committed nothing
    monkeypatch.undo()
    rows = {row["trace"]: row for row in cache.listed().rows()}
    assert not rows["t"]["running"] and rows == {r["trace"]: r for r in afresh(project)}


def test_text_the_file_cannot_split_survives_a_new_process(tmp_path: Path, made: list[str]):
    ws = replay_workspace(tmp_path / "ws", SCRIPT)
    run_cli("new", "t", "-m", "Résumé \"quoted\": \\ done", cwd=ws)
    error = "Réseau\u2028line two\u0085three\ttab \"quoted\": \\ \x1c end"
    _edit_in_place(ws / "traces/t/trace.json", error)
    settle()
    project = Project.open(ws)
    cache = new_process(project)
    cache.listed()  # builds the summary: the row is kept from the next list on
    settle()
    cache.listed()
    assert cache.save()
    made.clear()
    listed = new_process(project).listed()
    assert made == []  # the saved row was read back, not made again
    assert listed.ids == ["t"] and listed.rows() == afresh(project)
    row = json.loads(listed.document(str(ws)))["traces"][0]
    assert row["last_error"] == error and row["title"] == 'Résumé "quoted": \\ done'


def test_the_rows_shape_is_pinned_so_a_change_bumps_the_saved_format(tmp_path: Path):
    # A change to what a row holds (or to its stamp) must bump `listcache.FORMAT`:
    # rows saved by an older agentfs would otherwise be printed as they are. Then
    # update this shape. 2: rows stamp the folders a hand-written message lands in.
    assert listcache.FORMAT == 2
    ws = replay_workspace(tmp_path / "ws", SCRIPT)
    run_cli("run", "t", "-m", "Answer me", cwd=ws)
    project = Project.open(ws)
    row = new_process(project).listed().rows()[0]
    shape = {key: sorted(value) if isinstance(value, dict) else None
             for key, value in row.items()}
    shape["usage"] = {key: sorted(value) if isinstance(value, dict) else None
                      for key, value in row["usage"].items()}
    assert shape == {
        "trace": None, "head": None, "running": None, "pending_inbox": None, "rejected": None,
        "updated": None, "status": None, "last_activity": None, "messages": None,
        "title": None,
        "usage": {"calls": None, "input_tokens": None, "cached_tokens": None,
                  "output_tokens": None, "model_ms": None, "wall_ms": None,
                  "cost": ["estimated", "text", "unpriced", "usd"], "text": None},
    }
    assert set(status.TraceStatus.__dataclass_fields__) == {
        *shape, "error", "last_error", "approval", "watched"}  # watched: not in the row


def test_status_json_is_one_line_when_piped_and_indented_at_a_terminal(tmp_path: Path):
    ws = replay_workspace(tmp_path / "ws", SCRIPT)
    run_cli("new", "t", "-m", "Answer me", cwd=ws)
    piped = run_cli("status", "--json", cwd=ws).stdout
    assert piped.count("\n") == 1 and json.loads(piped)["traces"][0]["trace"] == "t"
    at_terminal, said = in_a_terminal("status", "--json", cwd=ws)
    at_terminal = at_terminal.replace("\r\n", "\n")
    assert not said
    assert at_terminal.count("\n") > 10 and json.loads(at_terminal) == json.loads(piped)


def test_an_edit_committed_without_a_change_to_trace_json_is_seen(tmp_path: Path,
                                                                   made: list[str]):
    # Recovery commits a hand edit and drops the summary, leaving trace.json alone:
    # the summary's folder is in the stamp, so the new title is listed.
    ws, project = two_traces(tmp_path)
    cache = new_process(project)
    cache.listed()
    cache.save()
    [user] = (ws / "traces/u/messages").rglob("*-user.md")
    user.write_text(user.read_text().replace("Later", "Edited title"))
    run_cli("fork", "u", "u2", cwd=ws)  # recovers u: an `edit` commit
    settle()
    rows = {row["trace"]: row for row in new_process(project).listed().rows()}
    assert rows["u"]["title"] == "Edited title" and list(rows.values()) == afresh(project)


def test_odd_entries_and_encodings_do_not_break_the_list(tmp_path: Path):
    ws = replay_workspace(tmp_path / "ws", SCRIPT)
    run_cli("new", "t", "-m", "Fix → the ✓ thing", cwd=ws)
    (ws / "traces/loopy").symlink_to("loopy")  # a link to itself: not a trace
    meta = ws / "traces/t/trace.json"
    committed = meta.read_text()
    # an error quoting a name that is not UTF-8, as agentfs records it (`unicode.escaped`)
    meta.write_text(committed.replace(
        '"context": {}',
        '"context": {"last_error": {"at": "2026-12-05T10:00:00+00:00", '
        '"error": "bad \\\\xff name ✓"}}'))
    settle()
    for _ in range(2):  # made, then from the saved rows
        done = run_cli("status", "--json", cwd=ws, env={"PYTHONIOENCODING": "latin-1"})
        [row] = json.loads(done.stdout)["traces"]
        assert row["title"] == "Fix → the ✓ thing" and row["last_error"] == "bad \\xff name ✓"
    # a lone surrogate escape no UTF-8 file can hold: the trace is listed as broken
    meta.write_text(committed.replace('"context": {}', '"context": {"x": "\\udcff"}'))
    settle()
    done = run_cli("status", "--json", cwd=ws, check=False)
    [row] = json.loads(done.stdout)["traces"]
    assert done.returncode == 1 and "a lone surrogate escape" in row["error"]


def test_which_failures_a_trace_records_is_one_rule():
    """A model's failure always; a refusal (a hand edit, a script) only for a run no one
    watches; a lock never (another run holds the trace and says how it went)."""
    from agentfs.core.status import records_failure
    from agentfs.errors import AgentfsError, ModelError, TraceLocked

    assert records_failure(ModelError("the API said 400"), unattended=False)
    assert not records_failure(AgentfsError("the edit changes the role"), unattended=False)
    assert records_failure(AgentfsError("the edit changes the role"), unattended=True)
    assert not records_failure(TraceLocked("in use"), unattended=True)
