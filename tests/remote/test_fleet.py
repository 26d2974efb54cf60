"""Workers on several clones sharing one real Git server (`git daemon` on loopback):
every user message answered exactly once, no step committed twice, nothing stuck,
`git fsck --strict` clean everywhere, through bursts, kill -9 and partitions."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from agentfs.core.project import Project
from agentfs.store.messages import ToolCall
from agentfs.testing.gitserver import GitServer
from tests.conftest import assert_git_clean, git, run_cli
from tests.remote.fleet import (
    answers,
    drop_round,
    log_of,
    person_clone,
    pull,
    start_worker,
    steps_twice,
    wait_for,
    worker_clone,
)

TRACES = [f"t{i:02d}" for i in range(20)]


@pytest.fixture
def server(tmp_path: Path):
    with GitServer(tmp_path / "server") as served:
        yield served


def all_answered(person: Path, expected: list[str]) -> bool:
    pull(person)
    counts, stuck = answers(person)
    return not stuck and all(counts[key] >= 1 for key in expected)


def check_fleet(person: Path, server: GitServer, clones: list[Path], expected: list[str]) -> None:
    pull(person)
    counts, stuck = answers(person)
    lost = [key for key in expected if counts[key] == 0]
    duplicated = [key for key, n in counts.items() if n > 1]
    assert (lost, duplicated, stuck) == ([], [], []), "lost, duplicated, stuck"
    assert steps_twice(person) == []
    assert_git_clean(person)
    git(server.base / "ws.git", "fsck", "--strict", "--no-dangling")
    for clone in clones:
        git(clone, "fsck", "--strict", "--no-dangling")
        assert git(clone, "status", "--porcelain") == ""


def stop_all(workers: list[subprocess.Popen], clones: list[Path]) -> None:
    """SIGTERM each worker: it finishes its job and exits 0 (one signalled before its
    handler is installed dies of it, like a kill, which the fleet survives too)."""
    for proc in workers:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc, clone in zip(workers, clones, strict=True):
        proc.wait(timeout=60)
        log = log_of(clone).read_text()
        assert "Traceback" not in log, log[-3000:]
        assert proc.returncode in (0, -signal.SIGTERM, -signal.SIGKILL), log[-2000:]


def test_sync_then_one_worker_answers_a_message_and_a_new_trace(tmp_path, server):
    url = server.create("ws")
    person = person_clone(tmp_path, url, ("a",))
    clone = worker_clone(tmp_path, url, "w1")
    (person / "traces" / "a" / "inbox" / "q.md").write_text("question\n")
    (person / "inbox" / "job.md").write_text("new job\n")
    assert "pushed" in run_cli("sync", cwd=person).stdout
    done = run_cli("watch", "--remote", "origin", "--once", "--lease", "5", "--json",
                   cwd=clone, isolated=True)
    assert '"event": "released"' in done.stdout
    run_cli("sync", cwd=person)
    counts, stuck = answers(person)
    assert counts["a: question"] == 1 and counts["job: new job"] == 1, counts
    assert stuck == []
    assert not (person / "inbox" / "job.md").exists()
    assert git(url_dir(server), "for-each-ref", "refs/agentfs/claims/") == ""  # released
    check_fleet(person, server, [clone], ["a: question", "job: new job"])


def url_dir(server: GitServer) -> Path:
    return server.base / "ws.git"


def test_a_burst_of_100_messages_over_20_traces_is_answered_once_by_three_workers(
        tmp_path, server):
    url = server.create("ws")
    person = person_clone(tmp_path, url, tuple(TRACES))
    clones = [worker_clone(tmp_path, url, f"w{i}") for i in range(3)]
    workers = [start_worker(clone) for clone in clones]
    expected = [f"{t}: hello" for t in TRACES]
    try:
        for round_no in range(5):  # the person syncs while the workers push
            expected += drop_round(person, TRACES, round_no)
            run_cli("sync", cwd=person)
        wait_for(lambda: all_answered(person, expected), 300, "every message answered")
    finally:
        stop_all(workers, clones)
    assert len(expected) == 120
    check_fleet(person, server, clones, expected)


def busy_worker(server: GitServer, workers: list[subprocess.Popen]) -> int | None:
    """The index of a worker holding a claim on the remote right now (it is mid-job),
    or None: the kill then hits a random one, idle or starting."""
    leases = git(url_dir(server), "for-each-ref", "--format=%(contents)", "refs/agentfs/claims/")
    pids = {p.pid: i for i, p in enumerate(workers)}
    for line in leases.splitlines():
        if line.startswith("{"):
            holder = int(json.loads(line)["worker"].rsplit("-", 1)[1])
            if holder in pids:
                return pids[holder]
    return None


def kill_campaign(tmp_path: Path, server: GitServer, trials: int, seed: int) -> None:
    """Three workers; at random instants one is killed with SIGKILL (one holding a claim
    if there is one) and started again. Each trial drops messages into some traces
    (and sometimes a new trace's file)."""
    rng = random.Random(seed)
    url = server.create("ws")
    traces = TRACES[:8]
    person = person_clone(tmp_path, url, tuple(traces), answers=trials + 10)
    clones = [worker_clone(tmp_path, url, f"w{i}") for i in range(3)]
    workers = [start_worker(clone) for clone in clones]
    expected = [f"{t}: hello" for t in traces]
    kills = 0
    try:
        for trial in range(trials):
            expected += drop_round(person, rng.sample(traces, rng.randint(1, 4)), trial)
            if rng.random() < 0.5:  # a new trace too
                (person / "inbox" / f"job-{trial}.md").write_text(f"new {trial}\n")
                expected.append(f"job-{trial}: new {trial}")
            run_cli("sync", cwd=person)
            time.sleep(rng.uniform(0.05, 1.2))  # a random instant, not a synchronisation
            victim = busy_worker(server, workers)
            victim = rng.randrange(len(workers)) if victim is None else victim
            if workers[victim].poll() is None:
                os.kill(workers[victim].pid, signal.SIGKILL)
                kills += 1
            workers[victim].wait()
            workers[victim] = start_worker(clones[victim])
        wait_for(lambda: all_answered(person, expected), 300, "every message answered")
        # the claims of killed workers are released by whoever finishes their work, or
        # reaped once expired: none piles up on the remote
        wait_for(lambda: git(url_dir(server), "for-each-ref", "refs/agentfs/claims/") == "",
                 60, "every claim released or reaped")
    finally:
        stop_all(workers, clones)
    assert kills == trials
    check_fleet(person, server, clones, expected)


def test_workers_killed_at_random_instants_lose_duplicate_and_strand_nothing(tmp_path, server):
    kill_campaign(tmp_path, server, trials=4, seed=7)


@pytest.mark.slow
def test_twenty_five_kills_in_a_fleet_lose_duplicate_and_strand_nothing(tmp_path, server):
    kill_campaign(tmp_path, server, trials=25, seed=2026)


def test_a_tool_call_pushed_by_a_worker_that_died_is_answered_interrupted(tmp_path, server):
    """The remote holds an assistant turn whose tool call has no result (its worker
    died running it): the next worker answers it "interrupted", never runs it, goes on."""
    url = server.create("ws")
    person = person_clone(tmp_path, url, ("a",))
    project = Project.open(person)
    trace = project.trace("a")
    with trace.lock():
        call = ToolCall(id="toolu_gone_0", name="write_file",
                        input={"path": "notes.md", "content": "must not be written twice"})
        trace.commit_step("assistant", [trace.new_message("assistant", "", tool_calls=[call])])
    project.repo.close()
    git(person, "push", "-q", "origin", "main")
    clone = worker_clone(tmp_path, url, "w1")
    run_cli("watch", "--remote", "origin", "--once", "--lease", "5", cwd=clone, isolated=True)
    pull(person)
    shown = json.loads(run_cli("show", "a", "--json", cwd=person).stdout)["messages"]
    result = next(m for m in shown if m["role"] == "tool")
    assert result["is_error"] and result["text"].startswith("interrupted"), result
    assert shown[-1]["role"] == "assistant" and shown[-1]["text"].startswith("answer")
    assert not (person / "notes.md").exists()
    check_fleet(person, server, [clone], ["a: hello"])
