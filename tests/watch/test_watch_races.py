"""The watcher against what other processes do meanwhile: `git gc` removing folders
under `.git`, a second watcher on the same workspace, an inbox swapped for a symlink.
Every dropped file ends as exactly the message (and trace) its name says."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from agentfs.core.project import Project
from agentfs.errors import AgentfsError
from agentfs.models.replay import ReplayModel
from agentfs.store import atomic
from agentfs.store.inbox import staged_in, waiting
from agentfs.store.messages import load_message
from agentfs.store.trace import Trace
from agentfs.watch.watcher import Watcher
from tests.conftest import assert_git_clean, git, message_paths, run_cli
from tests.watch.test_watch import replay_workspace


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return replay_workspace(tmp_path, 500, ("t", "u"))


def watcher(ws: Path, events: list) -> Watcher:
    return Watcher(Project.open(ws), lambda model, preset: ReplayModel(ws / "script.json"),
                   lambda e, d: events.append((e, d)), settle=0)


# --- git removing folders between our mkdir and our create ---------------------------


def test_a_loose_object_is_written_when_git_removes_its_folder_meanwhile(ws, monkeypatch):
    """`git gc` (prune-packed) removes empty `objects/xx/` folders at any instant, also
    between the writer's mkdir and its create."""
    project = Project.open(ws)
    real_open = os.open
    removed: list[str] = []

    def open_after_gc(path, flags, *args, **kwargs):
        path = Path(path)
        if "tmp_obj_" in path.name and len(removed) < 3:
            removed.append(path.parent.name)
            if path.parent.is_dir() and not any(path.parent.iterdir()):
                path.parent.rmdir()
        return real_open(path, flags, *args, **kwargs)

    for n in range(100_000):  # content whose folder does not exist yet
        data = b"a blob %d" % n
        sha1 = hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()
        if not (ws / ".git" / "objects" / sha1[:2]).exists():
            break
    monkeypatch.setattr(atomic.os, "open", open_after_gc)
    sha = project.repo.objects.add_raw(3, data)
    monkeypatch.undo()
    assert len(removed) == 3
    assert git(ws, "cat-file", "-t", sha.decode()).strip() == "blob"


# --- a watcher survives, and finishes what was cut short at its next rescan ----------


def crash_in_user_step(monkeypatch, times: int = 1) -> None:
    """The next `times` user steps write their files, then fail as a commit does when
    `git gc` pulls a folder away: trace.json ahead, message file untracked, claim staged."""
    real = Trace.commit_step
    left = [times]

    def failing(self, kind, messages=(), **kwargs):
        if kind == "user" and left[0] > 0:
            left[0] -= 1
            for message in messages:
                self.write_message(message)
            self.meta.head = messages[-1].sequence
            self.save_meta()
            raise FileNotFoundError(2, "No such file or directory",
                                    ".git/objects/de/tmp_obj_1_ab")
        return real(self, kind, messages, **kwargs)

    monkeypatch.setattr(Trace, "commit_step", failing)


def finished(ws: Path, trace_id: str, first: str) -> bool:
    trace = Project.open(ws).trace(trace_id)
    path = trace.main_path()
    return [m.content for m in path[1:2]] == [first] and path[-1].role == "assistant"


def test_a_watcher_survives_a_failed_commit_and_finishes_the_trace_at_its_next_rescan(
        ws, monkeypatch):
    events: list = []
    w = watcher(ws, events)
    w.tick()  # started: the first look is behind it
    (ws / "inbox" / "n1.md").write_text("first\n")
    crash_in_user_step(monkeypatch)
    w.tick(everywhere=True)  # the failure is logged, the loop goes on
    monkeypatch.undo()
    assert [e for e, _ in events if e == "error"] == ["error"]
    w.tick(everywhere=True)  # the next rescan finishes it
    w.close()
    assert finished(ws, "n1", "first")
    assert_git_clean(ws)


def test_a_second_watcher_finishes_what_the_first_left_half_done(ws, monkeypatch):
    events: list = []
    survivor = watcher(ws, events)
    survivor.tick()  # running since before the other one failed
    (ws / "inbox" / "n1.md").write_text("first\n")
    crash_in_user_step(monkeypatch)
    with pytest.raises(FileNotFoundError):
        Project.open(ws).start_trace(ws / "inbox" / "n1.md")  # the other watcher dies here
    monkeypatch.undo()
    survivor.tick(everywhere=True)  # its periodic rescan
    survivor.close()
    assert finished(ws, "n1", "first")
    assert_git_clean(ws)


# --- an inbox that is a symlink, or a file -----------------------------------------


@pytest.mark.parametrize("kind", ["symlink", "file"])
def test_an_inbox_replaced_by_a_symlink_or_a_file_takes_nothing_and_is_reported_once(
        ws, tmp_path, kind):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "n1.md").write_text("from elsewhere\n")
    git(ws, "rm", "-q", "-r", "inbox")
    git(ws, "commit", "-qm", "no inbox folder")
    if kind == "symlink":
        (ws / "inbox").symlink_to(elsewhere)
    else:
        (ws / "inbox").write_text("not a folder\n")
    git(ws, "add", "inbox")
    git(ws, "commit", "-qm", f"the inbox is a {kind}")
    before = git(ws, "rev-parse", "HEAD")
    events: list = []
    w = watcher(ws, events)
    for _ in range(3):
        w.tick(everywhere=True)
    w.close()
    assert git(ws, "rev-parse", "HEAD") == before  # nothing committed
    assert (elsewhere / "n1.md").read_text() == "from elsewhere\n"  # nothing moved
    assert staged_in(Project.open(ws).workspace.ingest_dir / "n1") == []
    errors = [d for e, d in events if e == "error"]
    said = {"symlink": "is a symlink", "file": "is a file, not a folder"}[kind]
    assert len(errors) == 1 and said in errors[0]["error"], errors
    doctor = run_cli("doctor", cwd=ws, check=False)  # and the check of the workspace
    assert doctor.returncode == 1 and f"inbox: {said}" in doctor.stdout + doctor.stderr
    assert_git_clean(ws)


# --- two watchers, `git gc` in a loop, a burst of drops --------------------------------


def race(ws: Path, drops: int, seed: int) -> None:
    """Two `agentfs watch` processes and a `git gc` loop while `drops` files are dropped
    (new traces `n<i>.md`, and follow-ups into traces t and u); then counts."""
    import random

    rng = random.Random(seed)
    watchers = [subprocess.Popen([sys.executable, "-m", "agentfs", "watch", "--settle", "0"],
                                 cwd=ws, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                for _ in range(2)]
    gc = subprocess.Popen(["sh", "-c", "while :; do git gc -q 2>/dev/null; done"], cwd=ws)
    new, old = [], []
    try:
        for i in range(drops):
            if rng.random() < 0.5:
                (ws / "inbox" / f"n{i}.md").write_text(f"new {i}\n")
                new.append(i)
            else:
                trace = rng.choice(["t", "u"])
                (ws / "traces" / trace / "inbox" / f"o{i}.md").write_text(f"old {i}\n")
                old.append(i)
            time.sleep(rng.uniform(0, 0.03))  # the pace of the drops, not a synchronisation
        deadline = time.monotonic() + 90  # under the per-test timeout, to report what is left
        while not _settled(ws, new):
            assert all(w.poll() is None for w in watchers), "a watcher died"
            assert time.monotonic() < deadline, "drops left unprocessed"
            time.sleep(0.2)
    finally:
        gc.terminate()
        gc.wait()
        for w in watchers:
            w.send_signal(signal.SIGTERM)
        errors = [w.communicate(timeout=120)[1].decode() for w in watchers]
    assert [w.returncode for w in watchers] == [0, 0], errors

    found: Counter = Counter()
    renamed = []
    for messages in (ws / "traces").glob("*/messages"):
        for path in message_paths(messages):
            text = load_message(path).text
            if text.startswith(("new ", "old ")):
                found[text] += 1
            if text.startswith("new ") and messages.parent.name != f"n{text.split()[1]}":
                renamed.append((messages.parent.name, text))
    dropped = [f"new {i}" for i in new] + [f"old {i}" for i in old]
    lost = [t for t in dropped if found[t] == 0]
    duplicated = [t for t, n in found.items() if n > 1]
    stuck = _stuck(ws)
    assert (lost, duplicated, renamed, stuck) == ([], [], [], []), \
        "lost, duplicated, renamed, stuck"
    assert_git_clean(ws)


def _stuck(ws: Path) -> list[str]:
    project = Project.open(ws)
    workspace = project.workspace
    stuck = [str(p) for p in waiting(workspace.inbox_dir)]
    for trace_id in workspace.trace_ids():
        trace = project.trace(trace_id)
        stuck += [str(p) for p in waiting(trace.inbox_dir)]
        stuck += [str(s.dir) for s in staged_in(workspace.ingest_dir / trace_id)]
        if trace.unfinished():
            stuck.append(f"trace {trace_id} left unanswered")
    project.repo.close()
    return stuck


def _settled(ws: Path, new: list[int]) -> bool:
    try:
        if _stuck(ws):
            return False
        ids = set(Project.open(ws).workspace.trace_ids())
    except (AgentfsError, OSError):  # a trace half made by a watcher at this instant: look again
        return False
    return all(f"n{i}" in ids for i in new)


def test_two_watchers_and_git_gc_lose_duplicate_rename_and_strand_nothing(ws):
    race(ws, drops=100, seed=7)


@pytest.mark.slow
def test_two_hundred_drops_beside_two_watchers_and_git_gc(ws):
    race(ws, drops=200, seed=2026)
