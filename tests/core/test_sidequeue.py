"""The side-branch queue survives a crash at any instant: it resumes the step it was in,
never repeats a finished one, and ends in exactly one summary per compression.

A crash is injected right after the N-th rename agentfs makes (every durable change,
be it a message file, trace.json, a Git object, a ref or the index, is a rename into
place), so trying every N tries every state a kill can leave between two of them. (A
kill can also leave a Git `.lock` file behind, which an exception in this process
would clean up: the campaign of real processes killed with SIGKILL covers that.)
The steps of a run's loop repeat the same renames, so the longest campaign tries
each place a rename is made from (agentfs's frames on the stack) at its first,
middle and last time in the run rather than every N.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import shutil
from contextlib import contextmanager
from pathlib import Path

import pytest

import agentfs
from agentfs.core.project import Project
from agentfs.core.sidebranch import SUMMARY_HEADER
from agentfs.errors import AgentfsError
from agentfs.models.replay import ReplayModel
from agentfs.store.meta import FORMAT_VERSION
from tests.conftest import assert_git_clean, git, run_cli, side_branches, user

LESSONS = "## Lesson A\nKeep notes short.\n\n## Lesson B\nWrite tests first.\n"
VERDICTS = "accept lesson-a: concrete\nreject lesson-b: vague\naccept old: still true"


TIME = re.compile(r"(?<=## Current time\n)\S+")  # context injections say when they ran


class Crash(BaseException):
    """A kill: nothing catches it, nothing after it runs."""


@contextmanager
def crash_after_rename(instant: int | None, counted: list[int], sites: list | None = None):
    """Raise `Crash` right after the `instant`-th rename (None: never); `counted`
    receives how many renames were made, `sites` where each was made from."""
    real = {name: getattr(os, name) for name in ("replace", "rename")}
    seen = [0]

    def wrap(name):
        def call(*args, **kwargs):
            done = real[name](*args, **kwargs)
            seen[0] += 1
            if sites is not None:
                sites.append(_site())
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


PACKAGE = os.path.dirname(agentfs.__file__) + os.sep


def _site() -> tuple[tuple[str, int], ...]:
    """Where a rename was made from: the file and line of each of agentfs's frames."""
    frame, found = inspect.currentframe(), []
    while frame is not None:
        if frame.f_code.co_filename.startswith(PACKAGE):
            found.append((frame.f_code.co_filename, frame.f_lineno))
        frame = frame.f_back
    return tuple(found)


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


def run_trial(template: Path, script: Path, tmp: Path, instant: int | None,
              sites: list | None = None) -> dict:
    root = tmp / f"run-{instant}"
    shutil.copytree(template, root, symlinks=True)
    counted: list[int] = []
    try:
        with crash_after_rename(instant, counted, sites):
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
def test_a_run_cut_short_after_a_rename_from_any_place_ends_as_an_uninterrupted_one(
        tmp_path, write_script):
    template, script = level2_workspace(tmp_path, write_script)
    sites: list[tuple] = []
    baseline = run_trial(template, script, tmp_path, None, sites)
    total = baseline.pop("renames")
    seen: dict[tuple, list[int]] = {}
    for instant, site in enumerate(sites, 1):
        seen.setdefault(site, []).append(instant)
    assert len(seen) > 100  # the loop, the queue's three branches, the summary, packing
    # first and last: a crash before and after the other times the place is passed
    chosen = {times[i] for times in seen.values() for i in (0, -1)}
    for instant in sorted(chosen):
        state = run_trial(template, script, tmp_path, instant)
        state.pop("renames")
        assert state == baseline, f"crash after rename {instant} of {total}"


@pytest.mark.parametrize(("step", "problem"), [
    ({"type": "magic", "state": "running", "branch": "agentfs/t/magic-1", "first": 9},
     "unknown side-branch type 'magic'"),
    ({"type": "compression", "state": "running", "branch": "main", "first": 9},
     "branch 'main' is not named agentfs/t/compression-<base commit>"),
    ({"type": "compression", "state": "running", "branch": "agentfs/other/compression-1",
      "first": 9}, "is not named agentfs/t/compression-<base commit>"),
    ({"type": "compression", "state": "running", "branch": "agentfs/t/reflection-0a1b2c3d",
      "first": 9}, "is not named agentfs/t/compression-<base commit>"),
    ({"type": "compression", "state": "running", "branch": "agentfs/t/compression-main",
      "first": 9}, "is not named agentfs/t/compression-<base commit>"),
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


# --- side branch names: the type and the commit the step started from ----------------

NAME = re.compile(r"agentfs/t/compression-[0-9a-f]{8}")


def queue_step_at(root: Path, subject_start: str) -> tuple[str, dict]:
    """The running step of the queue that main's first commit whose subject starts with
    `subject_start` recorded, and that commit's parent (the step's start)."""
    log = git(root, "log", "--first-parent", "--format=%H %P%n%s", "main").splitlines()
    for line, subject in zip(log[::2], log[1::2], strict=True):
        if subject.startswith(subject_start):
            sha, parent = line.split()[:2]
            meta = json.loads(git(root, "show", f"{sha}:traces/t/trace.json"))
            return parent, next(s for s in meta["side_queue"]["steps"]
                                if s["state"] == "running")
    raise AssertionError(f"no commit {subject_start!r}")


def test_a_side_branch_is_named_after_the_main_commit_its_step_started_from(
        workspace, write_script):
    script = script_for(write_script, 2)
    run_cli("run", "t", "-m", "go", "--model", f"replay:{script}", cwd=workspace)
    summary = Project.open(workspace).runner(ReplayModel(script)).compress("t").summary
    base, step = queue_step_at(workspace, "t: queue")
    assert step["base"] == base and step["branch"] == f"agentfs/t/compression-{base[:8]}"
    assert summary is not None and summary.source_branch == step["branch"]
    assert side_branches(workspace, "t", "compression") == [step["branch"]]
    assert json.loads((workspace / "traces/t/trace.json").read_text())["context"] == {
        "side_calls": {"compression": 1}}  # no count of the names given
    assert_git_clean(workspace)


def summarized_then_continued(workspace: Path, write_script) -> Path:
    """Trace `t` compressed once, then continued by two messages."""
    script = write_script([{"text": "step", "tool_calls": [{"name": "list_files", "input": {}}]}]
                          * 3 + [{"text": "all done"}, {"text": "more done"}],
                          compression=[{"text": "Summary one."}, {"text": "Summary two."}])
    run_cli("run", "t", "-m", "go", "--model", f"replay:{script}", cwd=workspace)
    Project.open(workspace).runner(ReplayModel(script)).compress("t")
    run_cli("run", "t", "-m", "more", "--model", f"replay:{script}", cwd=workspace)
    return script


def plan_in_clone(root: Path) -> str:
    """Plan a compression in the clone at `root`, and die: the branch it names."""
    from agentfs.core.sidebranch import COMPRESSION
    from agentfs.core.sidequeue import plan
    from agentfs.store.trace import Trace

    project = Project.open(root)
    queue = plan(Trace(project.workspace, project.repo, "t"), "compress", [COMPRESSION])
    assert queue is not None and queue.steps[0].branch is not None
    return queue.steps[0].branch


def take_over(root: Path, other: Path) -> None:
    """Make `root`'s main the other clone's, as a worker's mirror does (its own
    `agentfs/` branches stay)."""
    git(root, "fetch", "-q", str(other), "main")
    git(root, "reset", "-q", "--hard", "FETCH_HEAD")


def test_a_queue_step_taken_over_never_merges_an_older_branch_of_the_trace(
        workspace, write_script, tmp_path):
    """The reviewer's case, from the numbered names' time: this clone merged a
    compression long ago; a queue another clone planned later must not merge that
    outcome again (the head would go back). Its name is another commit's now."""
    script = summarized_then_continued(workspace, write_script)
    [old] = side_branches(workspace, "t", "compression")
    old_head = git(workspace, "rev-parse", old).strip()
    other = tmp_path / "clone-b"
    git(tmp_path, "clone", "-q", str(workspace), str(other))
    planned = plan_in_clone(other)
    assert NAME.fullmatch(planned) and planned != old
    take_over(workspace, other)

    summary = Project.open(workspace).runner(ReplayModel(script)).compress("t").summary
    assert summary is not None and summary.source_branch == planned
    assert "Summary two." in summary.text
    assert git(workspace, "rev-parse", old).strip() == old_head
    merged = git(workspace, "log", "--format=%P", "-1").split()
    assert merged[1] == git(workspace, "rev-parse", planned).strip()
    assert json.loads((workspace / "traces/t/trace.json").read_text())["head"] == summary.sequence
    assert_git_clean(workspace)


def test_a_clone_whose_unpushed_work_moved_main_names_its_branches_apart(
        workspace, write_script, tmp_path):
    """Clone A ran a step B never saw, then compressed: A's branch summarizes that step.
    B compresses from the commit both had and dies; A takes B's queue over: a branch of
    its own starting elsewhere is another name, so B's step runs anew in A."""
    script = write_script([{"text": "step", "tool_calls": [{"name": "list_files", "input": {}}]}]
                          * 3 + [{"text": "all done"}, {"text": "local work"}],
                          compression=[{"text": "Summary one."}, {"text": "Summary two."}])
    run_cli("run", "t", "-m", "go", "--model", f"replay:{script}", cwd=workspace)
    other = tmp_path / "clone-b"
    git(tmp_path, "clone", "-q", str(workspace), str(other))
    run_cli("run", "t", "-m", "unpushed", "--model", f"replay:{script}", cwd=workspace)
    Project.open(workspace).runner(ReplayModel(script)).compress("t")
    [own] = side_branches(workspace, "t", "compression")
    planned = plan_in_clone(other)
    assert planned != own
    take_over(workspace, other)

    summary = Project.open(workspace).runner(ReplayModel(script)).compress("t").summary
    assert summary is not None and summary.source_branch == planned
    assert "unpushed" not in summary.text and "local work" not in summary.text
    assert git(workspace, "branch", "--list", own, "--merged", "main") == ""
    assert_git_clean(workspace)


def test_a_clone_taking_over_a_step_it_ran_from_the_same_commit_merges_its_own_branch(
        workspace, write_script, tmp_path):
    """Two clones that start a compression from one commit start it on one history: the
    branch either made is the step's outcome. Clone A compressed from M and never
    pushed; B planned a compression from M and died; A takes it over and merges its
    own branch, with no model call."""
    script = write_script([{"text": "step", "tool_calls": [{"name": "list_files", "input": {}}]}]
                          * 3 + [{"text": "all done"}],
                          compression=[{"text": "Summary one."}])
    run_cli("run", "t", "-m", "go", "--model", f"replay:{script}", cwd=workspace)
    other = tmp_path / "clone-b"
    git(tmp_path, "clone", "-q", str(workspace), str(other))
    Project.open(workspace).runner(ReplayModel(script)).compress("t")
    [own] = side_branches(workspace, "t", "compression")
    own_head = git(workspace, "rev-parse", own).strip()
    assert plan_in_clone(other) == own
    take_over(workspace, other)

    no_more = write_script([])  # a model call would fail: there is nothing to replay
    summary = Project.open(workspace).runner(ReplayModel(no_more)).compress("t").summary
    assert summary is not None and summary.source_branch == own
    assert summary.text.startswith(SUMMARY_HEADER) and "Summary one." in summary.text
    assert git(workspace, "log", "--format=%P", "-1").split()[1] == own_head
    assert_git_clean(workspace)


def test_main_moved_back_to_where_a_step_started_gives_the_next_one_a_new_name(
        workspace, write_script):
    """A person resets main to before a compression and compresses again: the same
    start, so `-2` keeps the first branch, a record of work, apart from the new one."""
    script = script_for(write_script, 2)
    run_cli("run", "t", "-m", "go", "--model", f"replay:{script}", cwd=workspace)
    before = git(workspace, "rev-parse", "main").strip()
    Project.open(workspace).runner(ReplayModel(script)).compress("t")
    [first] = side_branches(workspace, "t", "compression")
    first_head = git(workspace, "rev-parse", first).strip()
    git(workspace, "reset", "-q", "--hard", before)

    summary = Project.open(workspace).runner(ReplayModel(script)).compress("t").summary
    assert summary is not None and summary.source_branch == f"{first}-2"
    assert side_branches(workspace, "t", "compression") == [first, f"{first}-2"]
    assert git(workspace, "rev-parse", first).strip() == first_head
    assert git(workspace, "log", "--format=%P", "-1").split()[1] == git(
        workspace, "rev-parse", f"{first}-2").strip()
    assert_git_clean(workspace)


# --- a queue an older agentfs left unfinished ----------------------------------------


def old_queue(workspace: Path, write_script, state: str) -> Path:
    """Trace `t` as agentfs 2 left it, killed in a compression: trace.json in format 2
    (it counted the branches it named), the running step on a numbered branch, and
    that branch `state`: `named` (not made yet), `asked` (the request committed on
    it), `outcome` (the summary committed on it) or `merging` (the merge on main cut
    short before its commit)."""
    from agentfs.store.commits import StepKind
    from agentfs.store.messages import render_message

    script = write_script([{"text": "step", "tool_calls": [{"name": "list_files", "input": {}}]}]
                          * 3 + [{"text": "all done"}, {"text": "and more"}],
                          compression=[{"text": "Summary one."}, {"text": "Summary two."}])
    run_cli("run", "t", "-m", "go", "--model", f"replay:{script}", cwd=workspace)
    meta_path = workspace / "traces/t/trace.json"
    meta = json.loads(meta_path.read_text())
    branch = "agentfs/t/compression-1"
    meta["format_version"] = 2
    meta["context"]["side_branches"] = {"compression": 1}
    meta["side_queue"] = {"reason": "compress", "head": meta["head"], "steps": [
        {"type": "compression", "state": "running", "branch": branch,
         "first": meta["next_sequence"], "base": git(workspace, "rev-parse", "main").strip()}]}
    meta_path.write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
    git(workspace, "commit", "-qam", "t: queue #4 compress: compression")
    if state == "named":
        return script
    git(workspace, "branch", branch, "main")
    trace = Project.open(workspace).trace("t")
    ask = trace.new_message("user", "Summarize.", branch_type="compression", branch_id=branch)
    trace.commit_to_branch(branch, [ask])
    if state == "asked":
        return script
    answer = trace.new_message("assistant", "Summary one.", branch_type="compression",
                               branch_id=branch)
    answer.parent_sequence = ask.sequence
    trace.commit_to_branch(branch, [answer])
    summary = trace.new_message("user", f"{SUMMARY_HEADER}\n\nSummary one.", synthetic="summary",
                                source_branch=branch)
    summary.parent_sequence = 2
    trace.commit_to_branch(branch, [summary], StepKind.OUTCOME)
    if state == "merging":  # the summary copied onto main and trace.json written, then killed
        folder = next(p for p in (workspace / "traces/t/messages").iterdir())
        (folder / summary.file_name()).write_bytes(render_message(summary))
        meta["side_queue"]["steps"][0]["state"] = "done"
        meta["head"], meta["next_sequence"] = summary.sequence, summary.sequence + 1
        meta_path.write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
    return script


@pytest.mark.parametrize("state", ["named", "asked", "outcome", "merging"])
def test_a_queue_an_older_agentfs_left_on_a_numbered_branch_finishes_after_the_upgrade(
        workspace, write_script, state):
    script = old_queue(workspace, write_script, state)
    before = git(workspace, "rev-parse", "main").strip()
    head = json.loads(git(workspace, "show", "main:traces/t/trace.json"))["head"]

    summary = Project.open(workspace).runner(ReplayModel(script)).compress("t").summary
    assert summary is not None and summary.source_branch == "agentfs/t/compression-1"
    assert "Summary one." in summary.text
    subjects = git(workspace, "log", "--first-parent", "--format=%s", f"{before}..main")
    assert subjects.splitlines() == [
        f"t: summary #{summary.sequence} from agentfs/t/compression-1",
        f"t: upgrade #{head} trace.json in format {FORMAT_VERSION}"]
    merged = git(workspace, "log", "--format=%P", "-1").split()
    assert merged[1] == git(workspace, "rev-parse", "agentfs/t/compression-1").strip()
    meta = json.loads((workspace / "traces/t/trace.json").read_text())
    assert meta["format_version"] == FORMAT_VERSION and meta["head"] == summary.sequence
    assert "side_queue" not in meta and "side_branches" not in meta["context"]
    shown = json.loads(run_cli("show", "t", "--json", cwd=workspace).stdout)["messages"]
    assert [m["role"] for m in shown] == ["system", "user", "user"]
    assert_git_clean(workspace)

    assert NAME.fullmatch(plan_in_clone(workspace))  # the next one is named after its commit
