"""Watch mode with real files and the real observer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agentfs.core.workspace import Project
from agentfs.models.replay import ReplayModel
from agentfs.watch.observe import observe
from agentfs.watch.watcher import Watcher
from tests.conftest import assert_git_clean, git, run_cli


def wait_for(condition, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    run_cli("init", str(root), cwd=tmp_path)
    (root / "script.json").write_text(json.dumps({"turns": [{"text": f"answer {i}"}
                                                            for i in range(20)]}))
    config = root / "agentfs.toml"
    config.write_text(config.read_text().replace(
        'model = "anthropic:claude-sonnet-4-5"', 'model = "replay:script.json"'))
    git(root, "add", "-A")
    git(root, "commit", "-qm", "setup")
    run_cli("new", "t", "-m", "hello", cwd=root)
    return root


def texts(root: Path, trace: str = "t") -> list[str]:
    shown = json.loads(run_cli("show", trace, "--json", cwd=root).stdout)
    return [m["text"] for m in shown["messages"]]


def test_once_takes_pending_drops_and_new_traces(ws):
    (ws / "traces/t/inbox").mkdir(exist_ok=True)
    (ws / "traces/t/inbox/more.md").write_text("a follow-up\n")
    (ws / "traces/t/inbox/.more.md.swp").write_bytes(b"swap")
    (ws / "inbox" / "Fix the README.md").write_text("---\npreset: null\n---\nplease fix\n")
    out = run_cli("watch", "--once", "--settle", "0.2", "--json", cwd=ws).stdout
    events = [json.loads(line)["event"] for line in out.splitlines()]
    assert events.count("run_finished") == 2 and "new_trace" in events
    assert texts(ws)[-2:] == ["a follow-up", "answer 0"]
    assert "Fix-the-README" in Project.open(ws).workspace.trace_ids()
    assert texts(ws, "Fix-the-README")[1:] == ["please fix", "answer 0"]
    assert (ws / "traces/t/inbox/.more.md.swp").exists()
    git(ws, "rm", "-q", "--cached", "--ignore-unmatch", "traces/t/inbox/.more.md.swp")
    (ws / "traces/t/inbox/.more.md.swp").unlink()
    assert_git_clean(ws)


def test_live_watcher_with_editor_like_saves(ws):
    project = Project.open(ws)
    events: list[tuple[str, dict]] = []
    watcher = Watcher(project, ReplayModel(ws / "script.json"),
                      lambda e, d: events.append((e, d)), settle=0.3)
    observer, _ = observe(ws, watcher.wake)
    thread = threading.Thread(target=watcher.run_forever, daemon=True)
    thread.start()
    try:
        inbox = ws / "traces/t/inbox"
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
    finally:
        watcher.stopping.set()
        watcher.wake()
        thread.join(timeout=20)
        observer.stop()
        observer.join()
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
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()
    assert_git_clean(ws)
    git(ws, "fsck", "--strict")
