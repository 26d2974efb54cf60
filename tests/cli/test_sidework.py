"""`agentfs reflect`, `agentfs knowledge evaluate` and `agentfs compress`: side work on the
command line, through the queue a run uses, killed and resumed."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import assert_git_clean, git, run_cli, side_branches
from tests.core.test_sidequeue import LESSONS, VERDICTS, Crash, crash_after_rename


def first_parent_subjects(root: Path) -> list[str]:
    return git(root, "log", "--first-parent", "--format=%s", "main").splitlines()


def trace_with_history(workspace: Path, write_script, steps: int = 4) -> Path:
    turns = [{"text": f"step {i}", "tool_calls": [{"name": "write_file", "input": {
        "path": f"notes/{i}.md", "content": "words " * 50}}]} for i in range(steps)]
    script = write_script([*turns, {"text": "all done"}],
                          reflection=[{"text": LESSONS}] * 3,
                          knowledge_eval=[{"text": VERDICTS}] * 3,
                          compression=[{"text": "The summary."}] * 3)
    run_cli("new", "t", "-m", "write the notes", "--model", f"replay:{script}", cwd=workspace)
    run_cli("run", "t", cwd=workspace)
    return script


def test_reflect_then_evaluate_save_and_judge_items_each_on_a_merged_branch(
        workspace, write_script):
    trace_with_history(workspace, write_script)
    head = json.loads((workspace / "traces/t/trace.json").read_text())["head"]
    out = json.loads(run_cli("reflect", "t", "--json", cwd=workspace).stdout)
    [branch] = out["branches"]
    assert branch["type"] == "reflection"
    assert [branch["branch"]] == side_branches(workspace, "t", "reflection")
    assert [(i["id"], i["status"]) for i in branch["items"]] == [
        ("lesson-a", "pending"), ("lesson-b", "pending")]
    assert {i["source_sequence"] for i in branch["items"]} == {head}
    merge = git(workspace, "log", "-1", "--format=%P", "main").split()
    assert merge[1] == git(workspace, "rev-parse", branch["branch"]).strip()
    assert "t: branch" in git(workspace, "log", "--format=%s", merge[1])

    judged = run_cli("knowledge", "evaluate", cwd=workspace).stdout
    assert "accepted  lesson-a: Lesson A — concrete" in judged
    assert "rejected  lesson-b: Lesson B — vague" in judged
    listing = json.loads(run_cli("knowledge", "--json", cwd=workspace).stdout)
    assert {i["id"]: i["status"] for i in listing} == {"lesson-a": "accepted",
                                                       "lesson-b": "rejected"}
    [judging] = side_branches(workspace, "t", "knowledge_eval")
    assert judging in git(workspace, "branch", "--merged", "main")
    assert json.loads((workspace / "traces/t/trace.json").read_text())["head"] == head
    again = run_cli("knowledge", "evaluate", cwd=workspace)
    assert "no pending knowledge items" in again.stderr
    assert_git_clean(workspace)


def test_evaluate_and_reflect_errors_name_what_is_wrong(workspace, write_script):
    trace_with_history(workspace, write_script)
    (workspace / "knowledge" / "stray.md").write_text(
        "---\nid: stray\ntitle: A stray lesson\nstatus: pending\nsource_trace: gone\n---\nText.\n")
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "an item from a deleted trace")
    orphan = run_cli("knowledge", "evaluate", cwd=workspace, check=False)
    assert orphan.returncode == 1 and "stray" in orphan.stderr
    assert "agentfs knowledge evaluate TRACE" in orphan.stderr
    unknown = run_cli("knowledge", "evaluate", "nope", cwd=workspace, check=False)
    assert unknown.returncode == 1 and "no trace 'nope'" in unknown.stderr
    unknown = run_cli("reflect", "nope", cwd=workspace, check=False)
    assert unknown.returncode == 1 and "no trace 'nope'" in unknown.stderr
    done = json.loads(run_cli("knowledge", "evaluate", "t", "--json", cwd=workspace).stdout)
    [record] = done["traces"]
    assert record["trace"] == "t"
    assert record["branches"][0]["items"] == []  # the verdicts do not name it
    assert "status: pending" in (workspace / "knowledge" / "stray.md").read_text()
    assert_git_clean(workspace)


@pytest.mark.parametrize("knowledge", ["file", "link", "broken item"])
def test_reflect_refuses_a_knowledge_folder_it_cannot_use_before_queueing_anything(
        workspace, write_script, tmp_path, knowledge):
    """Reflection writes its items into knowledge/: a `knowledge` that is a file or a
    link, or an item that cannot be read, is refused before a step is committed (the
    queue used to be committed first, and every later run failed on it)."""
    trace_with_history(workspace, write_script)
    folder = workspace / "knowledge"
    shutil.rmtree(folder)
    if knowledge == "file":
        folder.write_text("not a folder\n")
    elif knowledge == "link":
        (tmp_path / "elsewhere").mkdir()
        folder.symlink_to(tmp_path / "elsewhere")
    else:
        folder.mkdir()
        (folder / "broken.md").write_text("no frontmatter\n")
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", f"knowledge: {knowledge}")
    before = git(workspace, "rev-parse", "HEAD")
    for command in (["reflect", "t"], ["knowledge", "evaluate", "t"]):
        done = run_cli(*command, cwd=workspace, check=False)
        assert done.returncode == 1 and str(folder) in done.stderr, done.stderr
        assert git(workspace, "rev-parse", "HEAD") == before
    run_cli("run", "t", "-m", "still runs", cwd=workspace, check=False)
    assert "queue" not in git(workspace, "log", "--format=%s", f"{before.strip()}..HEAD")
    assert_git_clean(workspace)


def test_a_runs_own_knowledge_steps_are_left_out_while_knowledge_cannot_be_used(
        workspace, write_script):
    """The reflection after a final answer and Level 2's knowledge steps are a run's
    extra: with `knowledge` a file they are left out with a notice, and the run and
    the compression go on (they used to queue a step every later run failed on)."""
    config = workspace / "agentfs.toml"
    config.write_text(config.read_text() + "\n[knowledge]\nenable_extraction = true\n"
                      "enable_completion_extraction = true\n")
    shutil.rmtree(workspace / "knowledge")
    (workspace / "knowledge").write_text("not a folder\n")
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "extraction on, knowledge broken")
    trace_with_history(workspace, write_script)  # ends in a final answer
    done = run_cli("run", "t", "-m", "and now?", cwd=workspace)
    assert "knowledge work skipped, the run goes on" in done.stderr
    assert "is not a folder" in done.stderr
    compressed = run_cli("compress", "t", cwd=workspace)
    assert "knowledge work skipped" in compressed.stderr
    subjects = first_parent_subjects(workspace)
    assert not any("reflection" in s or "knowledge_eval" in s for s in subjects)
    assert any("summary" in s for s in subjects)
    assert run_cli("run", "t", "-m", "still fine?", cwd=workspace).returncode == 0
    assert_git_clean(workspace)


def test_a_script_without_reflection_entries_is_an_error_and_nothing_is_merged(
        workspace, write_script):
    script = write_script([{"tool_calls": [{"name": "list_files", "input": {}}]}] * 3
                          + [{"text": "done"}])
    run_cli("run", "t", "-m", "go", "--model", f"replay:{script}", cwd=workspace)
    before = first_parent_subjects(workspace)
    failed = run_cli("reflect", "t", "--model", f"replay:{script}", cwd=workspace, check=False)
    assert failed.returncode == 1 and "no more 'reflection' entries" in failed.stderr
    after = first_parent_subjects(workspace)
    assert not any(" outcome " in s for s in after[: len(after) - len(before)])
    assert_git_clean(workspace)


def test_compress_killed_after_reflection_resumes_in_run_before_anything_else(
        workspace, write_script):
    """`agentfs run` finishes the queue `agentfs compress` left, before the new message."""
    from agentfs.core.project import Project
    from agentfs.models.replay import ReplayModel

    config = workspace / "agentfs.toml"
    config.write_text(config.read_text() + "\n[knowledge]\nenable_extraction = true\n")
    git(workspace, "commit", "-qam", "extraction on")
    script = trace_with_history(workspace, write_script)
    counted: list[int] = []
    from agentfs.store import trace as trace_module

    real = trace_module.Trace.commit_step

    def stop_after_reflection(self, kind, *args, **kwargs):
        done = real(self, kind, *args, **kwargs)
        if kind == "outcome":
            raise Crash
        return done

    trace_module.Trace.commit_step = stop_after_reflection  # type: ignore[method-assign]
    try:
        with pytest.raises(Crash), crash_after_rename(None, counted):
            Project.open(workspace).runner(ReplayModel(script)).compress("t")
    finally:
        trace_module.Trace.commit_step = real  # type: ignore[method-assign]
    meta = json.loads((workspace / "traces/t/trace.json").read_text())
    assert [s["state"] for s in meta["side_queue"]["steps"]] == ["done", "running", "waiting"]

    run_cli("run", "t", "-m", "and now?", cwd=workspace)
    subjects = first_parent_subjects(workspace)
    assert [s.split()[1] for s in subjects[:5]] == ["assistant", "user", "summary", "outcome",
                                                   "outcome"]
    assert sum(" summary " in s for s in subjects) == 1
    assert sum("/reflection-" in s for s in subjects) == 1  # reflection ran once
    assert sorted(p.name for p in (workspace / "knowledge").glob("*.md")) == [
        "lesson-a.md", "lesson-b.md"]
    assert_git_clean(workspace)


def test_the_watcher_resumes_an_unfinished_queue(workspace, write_script):
    """A compression whose model failed on its branch is finished by the watcher."""
    script = trace_with_history(workspace, write_script)
    short = write_script([])  # no `compression` entries: the branch's call fails
    failed = run_cli("compress", "t", "--model", f"replay:{short}", cwd=workspace, check=False)
    assert failed.returncode == 1 and "no more 'compression' entries" in failed.stderr
    meta = json.loads((workspace / "traces/t/trace.json").read_text())
    assert meta["side_queue"]["steps"][-1]["state"] == "running"
    assert "status: idle" not in run_cli("status", cwd=workspace).stdout
    run_cli("watch", "--once", "--settle", "0", "--model", f"replay:{script}", cwd=workspace)
    assert sum(" summary " in s for s in first_parent_subjects(workspace)) == 1
    assert "side_queue" not in json.loads((workspace / "traces/t/trace.json").read_text())
    assert_git_clean(workspace)


def _compress_ready(workspace: Path, write_script) -> None:
    config = workspace / "agentfs.toml"
    config.write_text(config.read_text() + "\n[knowledge]\nenable_extraction = true\n")
    git(workspace, "commit", "-qam", "extraction on")
    trace_with_history(workspace, write_script, steps=6)


def _kill_then_finish(template: Path, root: Path, delay: float) -> bool:
    """Copy `template`, start `agentfs compress t` there, SIGKILL it after `delay`
    seconds unless it ended, run it again to the end; check the outcome. True if the
    kill landed inside the first run."""
    shutil.copytree(template, root, symlinks=True)
    proc = subprocess.Popen([sys.executable, "-m", "agentfs", "compress", "t"], cwd=root,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(delay)  # a random instant, not a synchronisation
    killed = proc.poll() is None
    if killed:
        os.kill(proc.pid, signal.SIGKILL)
    _, stderr = proc.communicate()
    assert proc.returncode in (0, -signal.SIGKILL), stderr.decode()
    done = run_cli("compress", "t", cwd=root, check=False, isolated=True)
    assert done.returncode == 0 or "would not make it shorter" in done.stderr, done.stderr
    subjects = first_parent_subjects(root)
    assert sum(" summary " in s for s in subjects) == 1, subjects
    assert sum(" outcome " in s and "reflection-" in s for s in subjects) == 1, subjects
    assert sorted(p.name for p in (root / "knowledge").glob("*.md")) == [
        "lesson-a.md", "lesson-b.md"]
    merge = git(root, "log", "-1", "--format=%P", "--grep", "^t: summary", "main").split()
    assert len(merge) == 2 and "t: branch" in git(root, "log", "--format=%s", merge[1])
    shown = json.loads(run_cli("show", "t", "--json", cwd=root).stdout)["messages"]
    assert [m["role"] for m in shown] == ["system", "user", "user"]
    assert "side_queue" not in json.loads((root / "traces/t/trace.json").read_text())
    assert_git_clean(root)
    return killed


def _sigkill_campaign(workspace: Path, write_script, tmp_path: Path, trials: int,
                      seed: int) -> int:
    _compress_ready(workspace, write_script)
    rng = random.Random(seed)
    return sum(_kill_then_finish(workspace, tmp_path / f"trial-{i}", rng.uniform(0.25, 1.25))
               for i in range(trials))


def test_compress_killed_at_random_instants_ends_in_one_summary(workspace, write_script,
                                                               tmp_path):
    _sigkill_campaign(workspace, write_script, tmp_path, trials=2, seed=12)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_compress_killed_at_many_instants_ends_in_one_summary(workspace, write_script,
                                                              tmp_path):
    kills = _sigkill_campaign(workspace, write_script, tmp_path, trials=30, seed=2026)
    print(f"{kills} of 30 runs killed inside")


def test_a_rewind_under_an_unfinished_queue_abandons_it_unmerged(workspace, write_script):
    script = trace_with_history(workspace, write_script)
    short = write_script([])
    run_cli("compress", "t", "--model", f"replay:{short}", cwd=workspace, check=False)
    assert "side_queue" in json.loads((workspace / "traces/t/trace.json").read_text())
    run_cli("rewind", "t", "4", cwd=workspace)
    run_cli("run", "t", "-m", "again", "--model", f"replay:{script}", cwd=workspace)
    subjects = first_parent_subjects(workspace)
    assert any(" queue " in s and "abandoned" in s for s in subjects)
    assert not any(" summary " in s for s in subjects)
    [branch] = side_branches(workspace, "t", "compression")
    assert branch in git(workspace, "branch", "--no-merged", "main")
    shown = json.loads(run_cli("show", "t", "--json", cwd=workspace).stdout)["messages"]
    assert [m["sequence"] for m in shown][:3] == [1, 2, 3] and shown[4]["text"] == "again"
    assert_git_clean(workspace)


def test_a_trace_compressed_after_its_answer_still_waits_for_the_user(tmp_path):
    """`agentfs compress` on a finished trace: the summary says the conversation it
    replaces ended in an answer (`answered`), so nothing runs (and nothing is paid)
    until the user writes again; a compression in the middle of a step does not."""
    ws = tmp_path / "demo"
    run_cli("demo", str(ws), cwd=tmp_path)
    run_cli("compress", "demo", cwd=ws)
    head = git(ws, "rev-parse", "HEAD")
    from agentfs.core.project import Project

    trace = Project.open(ws).trace("demo")
    assert not trace.unfinished() and trace.waits_for_user()  # what workers ask
    listed = json.loads(run_cli("status", "--json", cwd=ws).stdout)["traces"][0]
    assert listed["status"] == "waiting", listed
    nothing = run_cli("run", "demo", "--model", "anthropic:claude-test", cwd=ws,
                      env={"ANTHROPIC_API_KEY": ""})  # decided before a model is needed
    assert "waiting for a user message" in nothing.stderr + nothing.stdout
    run_cli("watch", "--once", cwd=ws)
    assert git(ws, "rev-parse", "HEAD") == head  # no model call, no commit
    run_cli("run", "demo", "-m", "and now?", cwd=ws)
    path = json.loads(run_cli("show", "demo", "--json", cwd=ws).stdout)["messages"]
    assert [m["role"] for m in path[-3:]] == ["user", "user", "assistant"]
    assert path[-3]["synthetic"] == "summary"
    assert_git_clean(ws)
