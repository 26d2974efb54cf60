"""Asking before acting without a terminal: `agentfs run --approve` stops at a call
that may change something, `approval.json` is committed, `agentfs approve` answers it
and the run goes on; `agentfs status` shows the trace waiting; a watcher resumes the
trace once the file is answered."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentfs.core.project import Project
from agentfs.models.replay import ReplayModel
from agentfs.watch.background import run_in_background
from agentfs.watch.watcher import Watcher
from tests.conftest import assert_git_clean, git, replay_workspace, run_cli
from tests.watch.test_watch import wait_for

SCRIPT = {"turns": [
    {"text": "Writing.", "tool_calls": [
        {"name": "write_file", "input": {"path": "notes.txt", "content": "one\n",
                                         "append": True}}]},
    {"text": "Written."},
    {"text": "Second try.", "tool_calls": [
        {"name": "write_file", "input": {"path": "notes.txt", "content": "two\n",
                                         "append": True}}]},
    {"text": "Understood, I will not."},
]}


def workspace(tmp_path: Path, approve: str = "none") -> Path:
    return replay_workspace(tmp_path / "ws", SCRIPT,
                            config={"max_iterations = 50":
                                    f'max_iterations = 50\n\n[tools]\napprove = "{approve}"'})


def pending(root: Path, trace: str = "t1") -> dict:
    return json.loads((root / f"traces/{trace}/approval.json").read_text())


def test_run_without_a_terminal_commits_the_waiting_call_and_approve_runs_it_once(tmp_path):
    root = workspace(tmp_path)

    stopped = run_cli("run", "t1", "-m", "note one", "--approve", cwd=root)

    assert "waits for your approval of a call to write_file" in stopped.stderr
    assert not (root / "notes.txt").exists()
    assert pending(root)["input"]["content"] == "one\n" and pending(root)["answer"] is None
    assert "traces/t1/approval.json" in git(root, "ls-files")
    assert "t1: approval #3 write_file waits for approval" in git(root, "log", "--format=%s")
    assert_git_clean(root)
    status = run_cli("status", cwd=root).stdout
    assert "waits for approval of write_file (agentfs approve t1)" in status
    listed = json.loads(run_cli("status", "--json", cwd=root).stdout)["traces"][0]
    assert listed["approval"] == "write_file"
    again = run_cli("run", "t1", cwd=root)  # still waiting: nothing runs
    assert "waits for your approval" in again.stderr

    answered = run_cli("approve", "t1", cwd=root)

    assert "write_file" in answered.stderr and "answered yes" in answered.stderr
    assert (root / "notes.txt").read_text() == "one\n"  # ran, once
    assert not (root / "traces/t1/approval.json").exists()
    log = git(root, "log", "--format=%s")
    assert "t1: approval #3 write_file answered yes" in log
    assert "traces/t1/approval.json" not in git(root, "ls-files")
    assert "approval" not in json.loads(run_cli("status", "--json", cwd=root).stdout)["traces"][0]
    assert_git_clean(root)
    second = run_cli("approve", "t1", check=False, cwd=root)
    assert second.returncode == 1 and "no tool call waiting for approval" in second.stderr
    assert (root / "notes.txt").read_text() == "one\n"


def test_a_refused_call_is_answered_refused_by_the_user_and_the_model_goes_on(tmp_path):
    root = workspace(tmp_path, approve="acting")  # the config default, no flag
    run_cli("run", "t1", "-m", "note one", cwd=root)
    run_cli("approve", "t1", cwd=root)
    run_cli("run", "t1", "-m", "note two", cwd=root)
    assert pending(root)["input"]["content"] == "two\n"

    run_cli("approve", "t1", "--no", cwd=root)

    assert (root / "notes.txt").read_text() == "one\n"
    shown = json.loads(run_cli("show", "t1", "--json", cwd=root).stdout)["messages"]
    refused = [m for m in shown if m["role"] == "tool"][-1]
    assert refused["is_error"] and refused["text"].startswith("refused by the user")
    assert shown[-1]["text"] == "Understood, I will not."
    assert_git_clean(root)


def test_no_approve_overrides_the_config_default(tmp_path):
    root = workspace(tmp_path, approve="acting")

    run_cli("run", "t1", "-m", "note one", "--no-approve", cwd=root)

    assert (root / "notes.txt").read_text() == "one\n"
    assert not (root / "traces/t1/approval.json").exists()


def test_an_answer_written_into_the_file_resumes_the_trace_in_a_live_watcher(tmp_path):
    root = workspace(tmp_path)
    run_cli("new", "t1", "-m", "note one", cwd=root)
    events: list[tuple[str, dict]] = []
    watcher = Watcher(Project.open(root), lambda model, preset: ReplayModel(
        root / "script.json"), lambda e, d: events.append((e, d)), settle=0.2,
        runner_options=lambda: {"approve": "acting"})
    with run_in_background(watcher, root, observed=True):
        wait_for(lambda: any(e == "approval_waiting" for e, _ in events), 60,
                 "the call to wait")
        wait_for(lambda: any(e == "run_finished" for e, _ in events), 60, "the run to stop")
        assert not (root / "notes.txt").exists()
        data = pending(root)
        data["answer"] = "yes"
        (root / "traces/t1/approval.json").write_text(json.dumps(data))  # by hand

        wait_for(lambda: sum(e == "run_finished" for e, _ in events) == 2, 60,
                 "the answered trace to be run again")

    assert (root / "notes.txt").read_text() == "one\n"
    assert not (root / "traces/t1/approval.json").exists()
    assert "t1: edit" in git(root, "log", "--format=%s")  # the hand-written answer, recorded
    assert_git_clean(root)


def test_a_live_watcher_runs_with_agentfs_toml_as_it_is_when_a_run_starts(tmp_path):
    """Approval turned on in agentfs.toml while `agentfs watch` runs applies to the
    next run (it ran every call unasked); an invalid agentfs.toml stops runs until it
    is fixed, rather than running with what it said before."""
    from agentfs.cli.context import LiveOptions

    root = workspace(tmp_path)
    events: list[tuple[str, dict]] = []
    project = Project.open(root)
    watcher = Watcher(project, lambda model, preset: ReplayModel(root / "script.json"),
                      lambda e, d: events.append((e, d)), settle=0.2,
                      runner_options=LiveOptions(project, {}))
    config = root / "agentfs.toml"
    with run_in_background(watcher, root, observed=True):
        (root / "inbox/first.md").write_text("note one\n")
        wait_for(lambda: any(e == "run_finished" for e, _ in events), 60, "the first run")
        assert (root / "notes.txt").read_text() == "one\n"  # approve = "none": unasked

        config.write_text(config.read_text().replace('approve = "none"', 'approve = "acting"'))
        (root / "inbox/second.md").write_text("note two\n")
        wait_for(lambda: any(e == "approval_waiting" for e, _ in events), 60,
                 "the second run to ask")
        assert (root / "notes.txt").read_text() == "one\n"
        assert pending(root, "second")["tool"] == "write_file"

        config.write_text(config.read_text() + "\nno_such_key = 1\n")
        (root / "inbox/third.md").write_text("note three\n")
        wait_for(lambda: any(e == "error" and "no_such_key" in d["error"]
                             for e, d in events), 60, "the third run to be refused")
        assert not list((root / "traces/third/messages").rglob("*-assistant.md"))
        assert "error" not in git(root, "log", "--format=%s")  # the workspace's, not the trace's

        config.write_text(config.read_text().replace("no_such_key = 1\n", ""))
        wait_for(lambda: any(e == "approval_waiting" and d.get("trace") == "third"
                             for e, d in events), 60, "the third run once it is fixed")


def test_runs_stay_refused_until_a_refused_change_is_read_whole(tmp_path):
    """A changed agentfs.toml that loads but does not go with the command's flags
    (--thinking over the new max_tokens) refuses every run until fixed, never falling
    back to the settings read before it."""
    from agentfs.cli.context import LiveOptions
    from agentfs.errors import ConfigError

    root = workspace(tmp_path)
    project = Project.open(root)
    live = LiveOptions(project, {}, thinking=(2048, False))
    assert live()["config"].tools.approve == "none"
    config = root / "agentfs.toml"
    before = config.read_text()
    config.write_text("max_tokens = 2000\n" + before.replace('approve = "none"',
                                                             'approve = "acting"'))
    for _ in range(2):
        with pytest.raises(ConfigError, match="budget_tokens"):
            live()
    config.write_text(before.replace('approve = "none"', 'approve = "acting"'))
    assert live()["config"].tools.approve == "acting"


def test_a_run_stopped_at_a_call_says_what_it_spent_and_where_a_message_waits(tmp_path):
    root = workspace(tmp_path)
    stopped = run_cli("run", "t1", "-m", "note one", "--approve", cwd=root)
    assert "waits for your approval" in stopped.stderr
    assert "t1: replay:script.json, 1 model call," in stopped.stderr  # the usage line
    queued = run_cli("run", "t1", "-m", "and this", cwd=root)
    assert "your message waits in traces/t1/inbox/ until the call is answered" in queued.stderr
    assert "waits for your approval" in queued.stderr and "model call" not in queued.stderr
