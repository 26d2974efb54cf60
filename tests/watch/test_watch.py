"""Watch mode with real files and the real observer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from agentfs.core.project import Project
from agentfs.models.replay import ReplayModel
from agentfs.store.inbox import EMPTY_GRACE
from agentfs.watch.background import run_in_background
from agentfs.watch.watcher import Watcher
from tests.conftest import assert_git_clean, git, message_paths, run_cli


def wait_for(condition, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def replay_workspace(tmp_path: Path, answers: int, traces: tuple[str, ...] = ("t",)) -> Path:
    """A workspace whose model is a replay script of `answers` answers ("answer N"),
    holding `traces`, each with the user message "hello"."""
    root = tmp_path / "ws"
    run_cli("init", str(root), cwd=tmp_path)
    (root / "script.json").write_text(json.dumps({"turns": [{"text": f"answer {i}"}
                                                            for i in range(answers)]}))
    config = root / "agentfs.toml"
    config.write_text(config.read_text().replace(
        'model = "anthropic:claude-sonnet-4-5"', 'model = "replay:script.json"'))
    git(root, "add", "-A")
    git(root, "commit", "-qm", "setup")
    for trace in traces:
        run_cli("new", trace, "-m", "hello", cwd=root)
    return root


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return replay_workspace(tmp_path, 20)


@contextmanager
def live_watcher(ws: Path, model_for=None, *, settle: float, observed: bool = True,
                 **options):
    """A watcher looping on a thread (woken by the real observer) as `agentfs watch`
    runs it; yields it with the list of its events, and stops it on exit."""
    events: list[tuple[str, dict]] = []
    watcher = Watcher(Project.open(ws),
                      model_for or (lambda model, preset: ReplayModel(ws / "script.json")),
                      lambda e, d: events.append((e, d)), settle=settle, **options)
    with run_in_background(watcher, ws, observed=observed):
        yield watcher, events


def texts(root: Path, trace: str = "t") -> list[str]:
    shown = json.loads(run_cli("show", trace, "--json", cwd=root).stdout)
    return [m["text"] for m in shown["messages"]]


def test_once_takes_pending_drops_and_new_traces(ws):
    (ws / "skills" / "style-guide.md").write_text(
        "---\nname: style-guide\ndescription: Writing style.\n---\nShort lines.\n")
    git(ws, "add", "-A")
    git(ws, "commit", "-qm", "skill")
    (ws / "traces/t/inbox").mkdir(exist_ok=True)
    (ws / "traces/t/inbox/more.md").write_text("a follow-up\n")
    (ws / "traces/t/inbox/.more.md.swp").write_bytes(b"swap")
    (ws / "inbox" / "Fix the README.md").write_text(
        "---\ninject_skills: [style-guide]\n---\nplease fix\n")
    (ws / "inbox" / "bad.md").write_text("---\npreset: nope\n---\nx\n")
    out = run_cli("watch", "--once", "--settle", "0.2", "--json", cwd=ws).stdout
    events = [json.loads(line)["event"] for line in out.splitlines()]
    assert events.count("run_finished") == 2 and "new_trace" in events
    assert events.count("rejected") == 1 and "error" not in events  # bad.md: put aside once
    assert not (ws / "inbox" / "bad.md").exists()
    assert (ws / "inbox/.rejected/bad.md").read_text() == "---\npreset: nope\n---\nx\n"
    assert "unknown preset 'nope'" in (ws / "inbox/.rejected/bad.md.reason.txt").read_text()
    assert texts(ws)[-2:] == ["a follow-up", "answer 0"]
    assert "Fix-the-README" in Project.open(ws).workspace.trace_ids()
    fix = texts(ws, "Fix-the-README")
    assert fix[1] == "please fix" and fix[-1] == "answer 0"
    assert any("Short lines." in t for t in fix)  # the declared skill was injected
    assert (ws / "traces/t/inbox/.more.md.swp").exists()
    (ws / "traces/t/inbox/.more.md.swp").unlink()
    assert_git_clean(ws)


def test_live_watcher_with_editor_like_saves(ws):
    inbox = ws / "traces/t/inbox"
    with live_watcher(ws, settle=0.3) as (_, events):
        inbox.mkdir(exist_ok=True)
        # vim: probe file, swap file, then write by rename
        (inbox / "4913").write_text("")
        (inbox / ".note.md.swp").write_text("swap")
        (inbox / "note.md~").write_text("backup")
        tmp = inbox / ".note.md.tmp"
        tmp.write_text("first save\n")
        os.rename(tmp, inbox / "note.md")
        # VS Code: truncate, then write in place, quickly again
        (inbox / "note.md").write_text("")
        (inbox / "note.md").write_text("second save, the one that counts\n")
        wait_for(lambda: any(e == "run_finished" for e, _ in events), what="a run")
        assert texts(ws).count("second save, the one that counts") == 1
        assert "first save" not in texts(ws)
        started = sum(1 for e, _ in events if e == "run_started")
        assert started == 1
    for name in ("4913", ".note.md.swp", "note.md~"):
        (inbox / name).unlink()
    assert_git_clean(ws)


def test_sigterm_stops_cleanly(ws):
    proc = subprocess.Popen([sys.executable, "-m", "agentfs", "watch", "--settle", "0.2"],
                            cwd=ws, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = proc.stdout.readline().decode()
        assert "watching" in line
        (ws / "traces/t/inbox").mkdir(exist_ok=True)
        (ws / "traces/t/inbox/x.md").write_text("go\n")
        wait_for(lambda: texts(ws)[-2:] == ["go", "answer 0"], what="the run")
    finally:
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()
    assert_git_clean(ws)
    git(ws, "fsck", "--strict")


def message_texts_on_disk(root: Path, trace: str = "t") -> list[str]:
    from agentfs.store.messages import load_message

    folder = root / "traces" / trace / "messages"
    return [load_message(p).text for p in message_paths(folder)]


def drop_many(folder: Path, count: int) -> set[str]:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (folder / f"drop-{i:04d}.md").write_text(f"drop {i}\n")
    return {f"drop {i}" for i in range(count)}


def test_a_burst_of_files_is_ingested_exactly_once(ws):
    expected = drop_many(ws / "traces/t/inbox", 1000)
    run_cli("watch", "--once", "--settle", "0.2", cwd=ws, timeout=600)
    texts_on_disk = message_texts_on_disk(ws)
    assert sorted(t for t in texts_on_disk if t.startswith("drop ")) == sorted(expected)
    assert [p.name for p in (ws / "traces/t/inbox").iterdir()] == [".gitkeep"]
    assert_git_clean(ws)


def test_watcher_killed_mid_ingest_then_restarted(ws):
    from tests.conftest import kill_runs_at_random

    expected = drop_many(ws / "traces/t/inbox", 150)
    kills = kill_runs_at_random(["watch", "--settle", "0"], cwd=ws, times=4, seed=3,
                                delay=(0.8, 1.6))
    assert kills >= 1
    run_cli("watch", "--once", "--settle", "0.1", cwd=ws, timeout=300)
    drops = [t for t in message_texts_on_disk(ws) if t.startswith("drop ")]
    assert sorted(drops) == sorted(expected), "a drop was lost or taken twice"
    assert_git_clean(ws)


def test_two_watchers_never_run_a_trace_twice_at_once(ws):
    expected = drop_many(ws / "traces/t/inbox", 60)
    for i in range(40):  # new traces too, with names that collide once made ids
        (ws / "inbox" / f"job {i % 20}{'' if i < 20 else '!'}.md").write_text(f"new {i}\n")
    procs = [subprocess.Popen([sys.executable, "-m", "agentfs", "watch", "--once",
                               "--settle", "0.1", "--json"], cwd=ws,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(2)]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outputs]
    drops = [t for t in message_texts_on_disk(ws) if t.startswith("drop ")]
    assert sorted(drops) == sorted(expected)
    firsts = sorted(message_texts_on_disk(ws, trace)[1]
                    for trace in Project.open(ws).workspace.trace_ids() if trace.startswith("job"))
    assert firsts == sorted(f"new {i}" for i in range(40))  # each started exactly one trace
    assert [p.name for p in (ws / "inbox").iterdir()] == [".gitkeep"]
    assert_git_clean(ws)  # status and `git diff --cached` empty: the index matches HEAD


def test_a_failing_run_leaves_an_error_record_and_the_watcher_carries_on(ws):
    run_cli("new", "u", "-m", "other", cwd=ws)
    for trace in ("t", "u"):
        (ws / "traces" / trace / "inbox" / "go.md").write_text("go\n")
    from agentfs.testing import FakeAnthropicServer

    with FakeAnthropicServer() as server:
        server.fail_next(400, count=2)  # refused, so not retried
        out = run_cli("watch", "--once", "--settle", "0.1", "--json", "--model",
                      "anthropic:claude-test", cwd=ws,
                      env={"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": server.base_url})
    events = [json.loads(line) for line in out.stdout.splitlines()]
    errors = [e for e in events if e["event"] == "error"]
    assert {e["trace"] for e in errors} == {"t", "u"}
    for trace in ("t", "u"):
        meta = json.loads((ws / "traces" / trace / "trace.json").read_text())
        assert "Anthropic" in meta["context"]["last_error"]["error"]
        assert f"{trace}: error" in git(ws, "log", "--format=%s", "-3")
    assert_git_clean(ws)


def test_a_follow_up_waiting_for_a_running_trace_is_taken_by_that_run(ws):
    """The file waits (its trace is busy): the running run takes it, and the loop
    never reads it (reads would wake it, see below)."""
    from agentfs.models.base import ModelResponse
    from agentfs.testing import FunctionModel

    release = threading.Event()

    def slow(request):
        release.wait(10)
        return ModelResponse(text="done")

    inbox = ws / "traces/t/inbox"
    inbox.mkdir(exist_ok=True)
    try:
        with live_watcher(ws, lambda model, preset: FunctionModel(slow),
                          settle=0.2) as (watcher, events):
            (inbox / "first.md").write_text("first\n")
            wait_for(lambda: any(e == "run_started" for e, _ in events), what="the first run")
            (inbox / "second.md").write_text("second, while the model is busy\n")
            release.set()
            wait_for(lambda: not list(inbox.glob("*.md")), what="both files taken")
            wait_for(lambda: not watcher._busy(), what="the runs to end")
    finally:
        release.set()
    assert "second, while the model is busy" in texts(ws)
    assert_git_clean(ws)


def test_reading_a_file_never_wakes_the_loop(tmp_path):
    from watchdog.events import (
        FileClosedEvent,
        FileClosedNoWriteEvent,
        FileCreatedEvent,
        FileOpenedEvent,
    )

    from agentfs.watch.observe import _Wake

    woken: list[Path] = []
    handler = _Wake(tmp_path, woken.append)
    handler.on_any_event(FileOpenedEvent(str(tmp_path / "inbox/x.md")))
    handler.on_any_event(FileClosedNoWriteEvent(str(tmp_path / "inbox/x.md")))
    handler.on_any_event(FileCreatedEvent(str(tmp_path / ".git/agentfs/ingest/t/1")))
    assert woken == []
    handler.on_any_event(FileClosedEvent(str(tmp_path / "inbox/x.md")))  # a write ended
    assert woken == [tmp_path / "inbox/x.md"]


def test_a_trace_held_by_another_process_is_logged_busy_once_then_run(ws):
    held = Project.open(ws).trace("t").lock()
    held.acquire()  # as `agentfs run t` in another terminal would
    try:
        with live_watcher(ws, settle=0.1) as (_, events):
            (ws / "traces/t/inbox").mkdir(exist_ok=True)
            (ws / "traces/t/inbox/later.md").write_text("for when it is free\n")
            wait_for(lambda: any(e == "busy" for e, _ in events), what="busy")
            time.sleep(1.0)  # several ticks while it stays held
            assert [e for e, _ in events] == ["busy"]
            held.release()
            wait_for(lambda: any(e == "run_finished" for e, _ in events), what="the run")
    finally:
        held.release()
    assert texts(ws)[-2:] == ["for when it is free", "answer 0"]
    assert_git_clean(ws)


def test_the_settle_window_counts_from_the_files_mtime(ws):
    """A file the loop notices late (a slow tick, events held back) has been quiet since
    its mtime, for up to half the window: the other half the watcher sees for itself.
    A whole-second mtime (a coarse filesystem) earns nothing."""
    watcher = Watcher(Project.open(ws), lambda model, preset: ReplayModel(ws / "script.json"),
                      lambda e, d: None, settle=4.0)
    inbox = ws / "traces/t/inbox"
    inbox.mkdir(exist_ok=True)
    old, coarse, fresh = inbox / "old.md", inbox / "coarse.md", inbox / "fresh.md"
    for path in (old, coarse, fresh):
        path.write_text(f"{path.stem}\n")
    past = time.time() - 60.5
    os.utime(old, (past, past))
    os.utime(coarse, ns=(int(past) * 10**9, int(past) * 10**9))
    now = time.monotonic()
    for path in (old, coarse, fresh):
        assert not watcher.clock.ready(path, now)  # first sight
    assert not watcher.clock.ready(old, now + 1.9)
    assert watcher.clock.ready(old, now + 2.0)  # half the window credited
    assert not watcher.clock.ready(coarse, now + 2.0)
    assert watcher.clock.ready(coarse, now + 4.0)
    assert not watcher.clock.ready(fresh, now + 3.5)
    watcher.close()
    for path in (old, coarse, fresh):
        path.unlink()


def test_an_empty_file_waits_without_making_the_loop_wake_early(ws):
    inbox = ws / "traces/t/inbox"
    inbox.mkdir(exist_ok=True)
    (inbox / "empty.md").write_text("")
    past = time.time() - EMPTY_GRACE / 2  # an editor may still fill it
    os.utime(inbox / "empty.md", (past, past))
    watcher = Watcher(Project.open(ws), lambda model, preset: ReplayModel(ws / "script.json"),
                      lambda e, d: None, settle=0.2)
    for _ in range(3):
        watcher.tick()
        assert watcher.clock.next_due is None  # nothing will settle: no early wake-up
        assert watcher._wait_time(tick=0.2) == 0.2  # looked at each tick, no sooner
    assert not watcher._busy()
    watcher.close()
    assert (inbox / "empty.md").exists()  # never taken
    (inbox / "empty.md").unlink()


def test_a_trace_that_cannot_run_is_reported_once_and_retried_only_after_a_change(ws):
    (ws / "traces/t/messages/000000-000999/000002-user.md").unlink()  # breaks the main path
    (ws / "traces/t/inbox/more.md").write_text("more\n")
    events: list[tuple[str, dict]] = []
    watcher = Watcher(Project.open(ws), lambda model, preset: ReplayModel(ws / "script.json"),
                      lambda e, d: events.append((e, d)), settle=0)
    commits = git(ws, "rev-list", "--count", "HEAD")
    for _ in range(5):
        watcher.tick()
        wait_for(lambda: not watcher._busy(), what="the run to end")
    assert [e for e, _ in events] == ["run_started", "error"]
    assert "needs message #2" in events[1][1]["error"]
    assert int(git(ws, "rev-list", "--count", "HEAD")) == int(commits) + 1  # recorded once
    assert git(ws, "log", "-1", "--format=%s").startswith("t: error")
    assert "000002-user.md" in git(ws, "ls-tree", "-r", "--name-only", "HEAD")  # not deleted
    assert (ws / "traces/t/inbox/more.md").exists()  # waits for the trace to be fixed

    git(ws, "checkout", "--", "traces/t/messages/000000-000999/000002-user.md")  # the fix the error names
    watcher.tick()
    wait_for(lambda: not watcher._busy(), what="the run to end")
    watcher.close()
    assert [e for e, _ in events][-1] == "run_finished"
    assert texts(ws)[-2:] == ["more", "answer 0"]
    assert_git_clean(ws)


# --- where the loop looks: events, waiting files, rescans ---------------------------

NEVER = 3600.0  # a rescan interval no test outlives: only events can lead to a file


def copies_of_t(ws: Path, count: int) -> list[str]:
    """`count` more traces, copies of `t` once answered, committed in one commit (in a
    second, where making each with `agentfs new` would take minutes)."""
    Watcher(Project.open(ws), lambda model, preset: ReplayModel(ws / "script.json"),
            lambda e, d: None, settle=0).run_once()  # answers t: nothing left to resume
    ids = [f"c{n:03d}" for n in range(count)]
    for trace_id in ids:
        for name in git(ws, "ls-files", "traces/t").split():
            target = ws / "traces" / trace_id / Path(name).relative_to("traces/t")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes((ws / name).read_bytes())
        meta = ws / "traces" / trace_id / "trace.json"
        meta.write_text(json.dumps({**json.loads(meta.read_text()), "id": trace_id}, indent=2))
    git(ws, "add", "-A")
    git(ws, "commit", "-qm", f"{count} copies of t")
    return ids


def run_finished(events: list[tuple[str, dict]], trace: str) -> bool:
    return any(e == "run_finished" and d["trace"] == trace for e, d in events)


def test_a_file_dropped_into_one_of_300_traces_is_taken_through_its_event(ws):
    copies_of_t(ws, 299)
    with live_watcher(ws, settle=0.1, rescan=NEVER) as (watcher, events):
        wait_for(lambda: watcher.last_rescan is not None, what="the look at every inbox")
        started = watcher.last_rescan
        (ws / "traces/c150/inbox/go.md").write_text("go\n")
        wait_for(lambda: run_finished(events, "c150"), what="the run the drop starts")
        assert watcher.last_rescan == started  # its event led to it, not a rescan
    assert texts(ws, "c150")[-2] == "go"
    assert [e for e, _ in events].count("run_started") == 1
    assert_git_clean(ws)


def test_an_idle_tick_looks_in_no_inbox_and_an_event_in_one(ws, monkeypatch):
    import agentfs.watch.watcher as watcher_module
    from agentfs.store.inbox import waiting
    from agentfs.store.workspace import Workspace

    watcher = Watcher(Project.open(ws), lambda model, preset: ReplayModel(ws / "script.json"),
                      lambda e, d: None, settle=0.2, rescan=NEVER)
    watcher.tick()  # the first tick looks at every inbox
    looked: list[Path] = []

    def looking(folder: Path) -> list[Path]:
        looked.append(folder)
        return waiting(folder)

    def listing(self) -> list[str]:
        raise AssertionError("an idle tick listed every trace")

    monkeypatch.setattr(watcher_module, "waiting", looking)
    monkeypatch.setattr(Workspace, "trace_ids", listing)
    watcher.tick()
    watcher.tick()
    assert looked == []
    inbox = watcher.project.workspace.trace_dir("t") / "inbox"
    (inbox / "x.md").write_text("x\n")
    watcher.wake(inbox / "x.md")  # as the observer does
    watcher.wake(watcher.project.workspace.root / "notes.md")  # no inbox's business
    watcher.tick()
    assert looked == [inbox]
    watcher.tick()  # x.md waits to settle: its inbox is looked at again, no other
    assert looked == [inbox, inbox]
    watcher.close()
    (inbox / "x.md").unlink()


def test_a_file_whose_event_is_lost_is_taken_by_the_next_rescan(ws):
    with live_watcher(ws, settle=0.1, observed=False, rescan=0.3) as (watcher, events):
        wait_for(lambda: run_finished(events, "t"), what="the run resumed on start")
        rescanned = watcher.last_rescan
        assert rescanned is not None
        (ws / "traces/t/inbox/lost.md").write_text("no event told of this one\n")
        wait_for(lambda: "no event told of this one" in message_texts_on_disk(ws),
                 what="a rescan to find it")
        assert watcher.last_rescan > rescanned
    assert_git_clean(ws)


def test_a_trace_made_while_watching_is_watched(ws):
    with live_watcher(ws, settle=0.1, rescan=NEVER) as (watcher, events):
        wait_for(lambda: run_finished(events, "t"), what="the run resumed on start")
        rescanned = watcher.last_rescan
        run_cli("new", "late", "-m", "hello", cwd=ws)  # its folder appears: an event
        (ws / "traces/late/inbox/go.md").write_text("go\n")
        wait_for(lambda: run_finished(events, "late"), what="the run the drop starts")
        assert watcher.last_rescan == rescanned
    assert texts(ws, "late")[1:3] == ["hello", "go"]
    assert_git_clean(ws)


def test_an_inbox_made_again_is_watched_again(ws):
    inbox = ws / "inbox"
    with live_watcher(ws, settle=0.1, rescan=NEVER) as (watcher, events):
        wait_for(lambda: run_finished(events, "t"), what="the run resumed on start")
        rescanned = watcher.last_rescan
        (inbox / ".gitkeep").unlink()
        inbox.rmdir()
        inbox.mkdir()
        (inbox / ".gitkeep").write_text("")
        wait_for(lambda: watcher.last_rescan != rescanned,  # it looked: the folder is new
                 what="a look at every inbox once inbox/ is back")
        (inbox / "again.md").write_text("into the new folder\n")
        wait_for(lambda: run_finished(events, "again"), what="the run the drop starts")
    assert texts(ws, "again")[1] == "into the new folder"
    assert_git_clean(ws)


def test_without_inotify_watches_a_change_the_poller_sees_makes_the_loop_look_everywhere(
        ws, monkeypatch):
    import errno

    import agentfs.watch.observe as observe_module

    refused: list[bool] = []

    class OutOfWatches(observe_module.Observer):  # type: ignore[misc, valid-type]
        def start(self) -> None:
            refused.append(True)
            raise OSError(errno.ENOSPC, "inotify watch limit reached")

    monkeypatch.setattr(observe_module, "Observer", OutOfWatches)
    with live_watcher(ws, settle=0.1, rescan=NEVER) as (watcher, events):
        wait_for(lambda: run_finished(events, "t"), what="the run resumed on start")
        rescanned = watcher.last_rescan
        (ws / "traces/t/inbox/polled.md").write_text("seen by polling\n")
        wait_for(lambda: "seen by polling" in message_texts_on_disk(ws), what="the poller")
        assert watcher.last_rescan != rescanned
    assert refused == [True]
    assert_git_clean(ws)


def test_a_default_model_without_its_key_is_warned_about_and_traces_with_their_own_run(ws):
    """`agentfs watch` starts though agentfs.toml's model lacks its API key: a dropped
    file naming its own model runs; only traces without one would fail."""
    config = ws / "agentfs.toml"
    config.write_text(config.read_text().replace(
        'model = "replay:script.json"', 'model = "anthropic:claude-sonnet-4-5"'))
    git(ws, "commit", "-qam", "the default model needs a key")
    (ws / "inbox" / "own.md").write_text("---\nmodel: replay:script.json\n---\nhello\n")

    done = run_cli("watch", "--once", "--settle", "0.2", "--json", cwd=ws,
                   env={"ANTHROPIC_API_KEY": ""})

    assert "warning: model anthropic:claude-sonnet-4-5 needs ANTHROPIC_API_KEY" in done.stderr
    assert "traces that name no model of their own fail" in done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert any(e["event"] == "run_finished" and e["trace"] == "own" for e in events)
    assert texts(ws, "own")[-1] == "answer 0"


def test_watch_with_a_model_that_cannot_run_fails_at_start(ws):
    done = run_cli("watch", "--once", "--model", "anthropic:claude-sonnet-4-5", cwd=ws,
                   env={"ANTHROPIC_API_KEY": ""}, check=False)
    assert done.returncode == 1 and "needs ANTHROPIC_API_KEY" in done.stderr


def test_a_trace_that_failed_is_tried_again_once_agentfs_toml_changes(ws):
    """A trace whose model could not be made (agentfs.toml's default without its key)
    runs once agentfs.toml is fixed, not only after its own files change."""
    from agentfs.errors import AgentfsError

    fixed = threading.Event()

    def model_for(model, preset):
        if not fixed.is_set():
            raise AgentfsError("model anthropic:x needs ANTHROPIC_API_KEY, which is not set")
        return ReplayModel(ws / "script.json")

    (ws / "traces/t/inbox/more.md").write_text("more\n")
    events: list[tuple[str, dict]] = []
    watcher = Watcher(Project.open(ws), model_for, lambda e, d: events.append((e, d)), settle=0)
    for _ in range(3):
        watcher.tick()
        wait_for(lambda: not watcher._busy(), what="the run to end")
    assert [e for e, _ in events] == ["run_started", "error"]  # not retried every tick

    fixed.set()
    config = ws / "agentfs.toml"
    config.write_text(config.read_text() + "\n# the key is set now\n")
    watcher.tick()
    wait_for(lambda: not watcher._busy(), what="the run to end")
    watcher.close()
    assert [e for e, _ in events][-1] == "run_finished"
    assert texts(ws)[-2:] == ["more", "answer 0"]
