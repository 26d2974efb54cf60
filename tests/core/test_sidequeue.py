"""The side-branch queue survives a crash at any instant: it resumes the step it was in,
never repeats a finished one, and ends in exactly one summary per compression.

A crash is injected right after the N-th rename agentfs makes (every durable change,
be it a message file, trace.json, a Git object, a ref or the index, is a rename into
place), so trying every N tries every state a kill can leave between two of them. (A
kill can also leave a Git `.lock` file behind, which an exception in this process
would clean up: the campaign of real processes killed with SIGKILL covers that.)
"""

from __future__ import annotations

import json
import os
import re
import shutil
from contextlib import contextmanager
from pathlib import Path

import pytest

from agentfs.core.project import Project
from agentfs.errors import AgentfsError
from agentfs.models.replay import ReplayModel
from tests.conftest import assert_git_clean, git, run_cli, user

LESSONS = "## Lesson A\nKeep notes short.\n\n## Lesson B\nWrite tests first.\n"
VERDICTS = "accept lesson-a: concrete\nreject lesson-b: vague\naccept old: still true"


TIME = re.compile(r"(?<=## Current time\n)\S+")  # context injections say when they ran


class Crash(BaseException):
    """A kill: nothing catches it, nothing after it runs."""


@contextmanager
def crash_after_rename(instant: int | None, counted: list[int]):
    """Raise `Crash` right after the `instant`-th rename (None: never); `counted`
    receives how many renames were made."""
    real = {name: getattr(os, name) for name in ("replace", "rename")}
    seen = [0]

    def wrap(name):
        def call(*args, **kwargs):
            done = real[name](*args, **kwargs)
            seen[0] += 1
            if seen[0] == instant:
                raise Crash
            return done
        return call

    for name in real:
        setattr(os, name, wrap(name))
    try:
        yield
    finally:
        for name, function in real.items():
            setattr(os, name, function)
        counted.append(seen[0])


def configure(root: Path, extra: str) -> None:
    config = root / "agentfs.toml"
    config.write_text(config.read_text() + extra)
    git(root, "commit", "-qam", "config")


def write_old_item(root: Path) -> None:
    (root / "knowledge" / "old.md").write_text(
        "---\nid: old\ntitle: An old lesson\nstatus: pending\nsource_trace: x\n---\nText.\n")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "a pending item")


def script_for(write_script, steps: int):
    turns = [{"text": f"step {i}", "tool_calls": [{"name": "write_file", "input": {
        "path": f"notes/{i}.md", "content": "words " * 120}}]} for i in range(steps)]
    return write_script([*turns, {"text": "all done"}],
                        reflection=[{"text": LESSONS}] * 4,
                        knowledge_eval=[{"text": VERDICTS}] * 4,
                        compression=[{"text": "Summary one."}, {"text": "Summary two."}])


@pytest.fixture
def compressible(tmp_path, write_script) -> tuple[Path, Path]:
    """A workspace with extraction on, a pending item and a trace worth compressing."""
    root = tmp_path / "template"
    from agentfs.core.project import init_workspace

    init_workspace(root)
    configure(root, "\n[knowledge]\nenable_extraction = true\n")
    write_old_item(root)
    script = script_for(write_script, 4)
    project = Project.open(root)
    project.new_trace("t", user("write the notes"))
    project.runner(ReplayModel(script)).run("t")
    return root, script


def state_of(root: Path, *, tool_results: bool = True) -> dict:
    """What must come out the same whatever was killed. Without `tool_results`, tool
    results are left out: a tool step cut short answers its running call
    "interrupted" instead (docs/git-model.md, "Crash recovery")."""
    log = git(root, "log", "--first-parent", "--format=%H %P%n%s", "main").splitlines()
    summaries = [(line.split(), subject) for line, subject in zip(log[::2], log[1::2], strict=True)
                 if subject.startswith("t: summary")]
    for (_sha, *parents), _subject in summaries:
        assert len(parents) == 2  # merged: the side history hangs off the second parent
        assert "t: branch" in git(root, "log", "--format=%s", "-3", parents[1])
    items = {p.name: p.read_text() for p in sorted((root / "knowledge").glob("*.md"))}
    shown = json.loads(run_cli("show", "t", "--json", cwd=root).stdout)["messages"]
    meta = json.loads((root / "traces/t/trace.json").read_text())
    assert "side_queue" not in meta
    return {"summaries": len(summaries), "items": items,
            "path": [(m["sequence"], m["role"], TIME.sub("", m["text"])
                      if tool_results or m["role"] != "tool" else "") for m in shown]}


def compress(root: Path, script: Path) -> None:
    Project.open(root).runner(ReplayModel(script)).compress("t")


def resume_compress(root: Path, script: Path) -> None:
    """Run `compress` again: it finishes the queue that was cut short; if the summary
    had already landed, a new compression is refused (the trace is too short)."""
    try:
        compress(root, script)
    except AgentfsError as exc:
        assert "would not make it shorter" in str(exc)


def compress_trial(template: Path, script: Path, tmp: Path, instant: int | None) -> dict:
    root = tmp / f"trial-{instant}"
    shutil.copytree(template, root, symlinks=True)
    counted: list[int] = []
    try:
        with crash_after_rename(instant, counted):
            compress(root, script)
    except Crash:
        resume_compress(root, script)
    assert_git_clean(root)
    state = state_of(root)
    state["renames"] = counted[0]
    return state


def test_compress_cut_short_at_any_rename_resumes_to_the_same_end(compressible, tmp_path):
    template, script = compressible
    baseline = compress_trial(template, script, tmp_path, None)
    assert baseline["summaries"] == 1
    assert set(baseline["items"]) == {"lesson-a.md", "lesson-b.md", "old.md"}
    assert "status: accepted" in baseline["items"]["old.md"]
    total = baseline.pop("renames")
    step = max(1, total // 7)
    for instant in range(1, total + 1, step):
        state = compress_trial(template, script, tmp_path, instant)
        state.pop("renames")
        assert state == baseline, f"crash after rename {instant} of {total}"


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_compress_cut_short_at_every_rename_resumes_to_the_same_end(compressible, tmp_path):
    template, script = compressible
    baseline = compress_trial(template, script, tmp_path, None)
    total = baseline.pop("renames")
    for instant in range(1, total + 1):
        state = compress_trial(template, script, tmp_path, instant)
        state.pop("renames")
        assert state == baseline, f"crash after rename {instant} of {total}"


def level2_workspace(tmp_path: Path, write_script) -> tuple[Path, Path]:
    root = tmp_path / "template"
    from agentfs.core.project import init_workspace

    init_workspace(root)
    configure(root, "context_window = 2200\ncompression_threshold = 1.0\n"
                    "[knowledge]\nenable_extraction = true\n")
    write_old_item(root)
    script = script_for(write_script, 10)
    Project.open(root).new_trace("t", user("write the notes"))
    return root, script


def run_trial(template: Path, script: Path, tmp: Path, instant: int | None) -> dict:
    root = tmp / f"run-{instant}"
    shutil.copytree(template, root, symlinks=True)
    counted: list[int] = []
    try:
        with crash_after_rename(instant, counted):
            Project.open(root).runner(ReplayModel(script)).run("t")
    except Crash:
        Project.open(root).runner(ReplayModel(script)).run("t")
    assert_git_clean(root)
    state = state_of(root, tool_results=False)
    state["renames"] = counted[0]
    return state


def test_a_run_cut_short_inside_its_level2_queue_ends_as_an_uninterrupted_one(
        tmp_path, write_script):
    template, script = level2_workspace(tmp_path, write_script)
    baseline = run_trial(template, script, tmp_path, None)
    total = baseline.pop("renames")
    assert baseline["summaries"] >= 1
    assert "status: accepted" in baseline["items"]["old.md"]
    for instant in range(total // 3, total, max(1, total // 8)):
        state = run_trial(template, script, tmp_path, instant)
        state.pop("renames")
        assert state == baseline, f"crash after rename {instant} of {total}"


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_a_run_cut_short_at_every_rename_ends_as_an_uninterrupted_one(tmp_path, write_script):
    template, script = level2_workspace(tmp_path, write_script)
    baseline = run_trial(template, script, tmp_path, None)
    total = baseline.pop("renames")
    for instant in range(1, total + 1):
        state = run_trial(template, script, tmp_path, instant)
        state.pop("renames")
        assert state == baseline, f"crash after rename {instant} of {total}"


@pytest.mark.parametrize(("step", "problem"), [
    ({"type": "magic", "state": "running", "branch": "agentfs/t/magic-1", "first": 9},
     "unknown side-branch type 'magic'"),
    ({"type": "compression", "state": "running", "branch": "main", "first": 9},
     "branch 'main' is not named agentfs/t/compression-<n>"),
    ({"type": "compression", "state": "running", "branch": "agentfs/other/compression-1",
      "first": 9}, "is not named agentfs/t/compression-<n>"),
    ({"type": "compression", "state": "running"}, "without its branch"),
])
def test_a_hand_edited_queue_that_names_no_branch_of_the_trace_is_refused(
        workspace, write_script, step, problem):
    script = script_for(write_script, 2)
    run_cli("run", "t", "-m", "go", "--model", f"replay:{script}", cwd=workspace)
    meta_path = workspace / "traces/t/trace.json"
    meta = json.loads(meta_path.read_text())
    meta["side_queue"] = {"reason": "compress", "head": meta["head"], "steps": [step]}
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    git(workspace, "commit", "-qam", "a queue edited by hand")
    branches = git(workspace, "branch")
    failed = run_cli("run", "t", "-m", "more", "--model", f"replay:{script}", cwd=workspace,
                     check=False)
    assert failed.returncode == 1 and problem in failed.stderr
    assert "delete its side_queue" in failed.stderr
    assert git(workspace, "branch") == branches
    assert_git_clean(workspace)


# --- a branch of the running step's name that is not its branch ----------------------


def summarized_twice(workspace: Path, write_script) -> Path:
    """Trace `t` compressed once (compression-1), then continued by two messages."""
    script = write_script([{"text": "step", "tool_calls": [{"name": "list_files", "input": {}}]}]
                          * 3 + [{"text": "all done"}, {"text": "more done"}],
                          compression=[{"text": "Summary one."}, {"text": "Summary two."}])
    run_cli("run", "t", "-m", "go", "--model", f"replay:{script}", cwd=workspace)
    Project.open(workspace).runner(ReplayModel(script)).compress("t")
    run_cli("run", "t", "-m", "more", "--model", f"replay:{script}", cwd=workspace)
    return script


def queue_naming(root: Path, branch: str, *, base: str | None) -> None:
    """Commit the queue another clone (with no branch of that name) would push."""
    meta_path = root / "traces/t/trace.json"
    meta = json.loads(meta_path.read_text())
    step = {"type": "compression", "state": "running", "branch": branch,
            "first": meta["next_sequence"]}
    if base is not None:  # "main": main's head, as the clone planning it would record
        step["base"] = git(root, "rev-parse", "main").strip() if base == "main" else base
    meta["side_queue"] = {"reason": "compress", "head": meta["head"], "steps": [step]}
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    git(root, "commit", "-qam", "t: queue planned by another clone")


@pytest.mark.parametrize("base", ["main", None, "0" * 40, "not a commit"],
                         ids=["with-base", "older-queue-without-base", "unknown-base", "bad-base"])
def test_a_queue_step_never_merges_an_older_branch_of_its_name(workspace, write_script, base):
    """Reviewer's reproduction: the running step names compression-1, which this clone
    merged long ago; that outcome must not be merged again (the head would go back)."""
    script = summarized_twice(workspace, write_script)
    old = git(workspace, "rev-parse", "agentfs/t/compression-1").strip()
    head_before = json.loads((workspace / "traces/t/trace.json").read_text())["head"]
    queue_naming(workspace, "agentfs/t/compression-1", base=base)

    report = Project.open(workspace).runner(ReplayModel(script)).compress("t")
    summary = report.summary
    assert summary is not None and summary.source_branch == "agentfs/t/compression-2"
    assert "Summary two." in summary.text and summary.sequence > head_before
    meta = json.loads((workspace / "traces/t/trace.json").read_text())
    assert meta["head"] == summary.sequence and "side_queue" not in meta
    assert git(workspace, "rev-parse", "agentfs/t/compression-1").strip() == old
    merged = git(workspace, "log", "--format=%P", "-1").split()
    assert merged[1] == git(workspace, "rev-parse", "agentfs/t/compression-2").strip()
    # main's own line: a plain `git log` orders by commit date, and the branch's commits
    # come before main's when they were made a second later (as under load)
    subjects = git(workspace, "log", "--first-parent", "--format=%s", "-2").splitlines()
    assert "agentfs/t/compression-1 is an older branch" in subjects[1]
    assert_git_clean(workspace)
    git(workspace, "fsck", "--strict")


def plan_in_clone(root: Path) -> str:
    """Plan a compression in the clone at `root`, and die: the branch it names."""
    from agentfs.core.sidebranch import COMPRESSION
    from agentfs.core.sidequeue import plan
    from agentfs.store.trace import Trace

    project = Project.open(root)
    queue = plan(Trace(project.workspace, project.repo, "t"), "compress", [COMPRESSION])
    assert queue is not None and queue.steps[0].branch is not None
    return queue.steps[0].branch


def test_a_clone_taking_a_queue_over_ignores_its_own_older_branch_of_that_name(
        workspace, write_script, tmp_path):
    """Fleet: clone A compressed (compression-1) but its work never reached clone B,
    which plans a compression naming compression-1 too, pushes and dies. A mirrors
    the remote's main (its refs under agentfs/ stay) and takes the queue over."""
    script = write_script([{"text": "step", "tool_calls": [{"name": "list_files", "input": {}}]}]
                          * 3 + [{"text": "all done"}],
                          compression=[{"text": "Summary one."}, {"text": "Summary two."}])
    run_cli("run", "t", "-m", "go", "--model", f"replay:{script}", cwd=workspace)
    other = tmp_path / "clone-b"
    git(tmp_path, "clone", "-q", str(workspace), str(other))
    Project.open(workspace).runner(ReplayModel(script)).compress("t")  # never pushed
    old = git(workspace, "rev-parse", "agentfs/t/compression-1").strip()
    assert plan_in_clone(other) == "agentfs/t/compression-1"
    git(workspace, "fetch", "-q", str(other), "main")
    git(workspace, "reset", "-q", "--hard", "FETCH_HEAD")  # as a worker's mirror does

    summary = Project.open(workspace).runner(ReplayModel(script)).compress("t").summary
    assert summary is not None and summary.source_branch == "agentfs/t/compression-2"
    merged = git(workspace, "log", "--format=%P", "-1").split()
    assert merged[1] == git(workspace, "rev-parse", "agentfs/t/compression-2").strip()
    assert git(workspace, "rev-parse", "agentfs/t/compression-1").strip() == old
    assert json.loads((workspace / "traces/t/trace.json").read_text())["head"] == summary.sequence
    assert_git_clean(workspace)
    git(workspace, "fsck", "--strict")


def test_a_clone_names_a_branch_after_those_another_clone_named(
        workspace, write_script, tmp_path):
    """Side branches are never pushed, but the names they took are, in trace.json."""
    summarized_twice(workspace, write_script)
    other = tmp_path / "clone-b"
    git(tmp_path, "clone", "-q", str(workspace), str(other))
    assert not git(other, "branch", "--list", "agentfs/*").strip()
    assert plan_in_clone(other) == "agentfs/t/compression-2"
