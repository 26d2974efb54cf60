"""Level 2 compression on Git side branches, and rewinding through it."""

from __future__ import annotations

import json
import re

from agentfs.core.sidebranch import SUMMARY_HEADER
from tests.conftest import assert_git_clean, git, message_paths, run_cli, side_branches, user


def setup_workspace(root, write_script, window: int):
    config = root / "agentfs.toml"
    config.write_text(config.read_text().replace("max_iterations = 50", "max_iterations = 200")
                      + f"\ncontext_window = {window}\ncompression_threshold = 1.0\n")
    git(root, "commit", "-qam", "small window")
    turns = [{"text": f"step {i}", "tool_calls": [
        {"name": "write_file", "input": {"path": f"notes/{i}.md", "content": "words " * 120}}]}
        for i in range(16)] + [{"text": "all done"}]
    compression = [{"text": "First summary: steps 0-5 written."},
                   {"text": "Second summary: steps up to 11 written."}]
    return write_script(turns, compression=compression)


def test_two_compressions_make_two_summary_commits_with_side_branches(workspace, write_script):
    script = setup_workspace(workspace, write_script, window=2200)
    done = run_cli("run", "t", "-m", "write the notes", "--model", f"replay:{script}",
                   cwd=workspace)
    assert "all done" in done.stdout
    summaries = git(workspace, "log", "--format=%H %P %s", "--grep", "^t: summary").splitlines()
    assert len(summaries) == 2
    branches = git(workspace, "branch", "--format=%(refname:short)").split()
    compressions = side_branches(workspace, "t", "compression")
    assert sorted(b for b in branches if b.startswith("agentfs/")) == sorted(compressions)
    assert len(compressions) == 2 and all(
        re.fullmatch(r"agentfs/t/compression-[0-9a-f]{8}", b) for b in compressions)
    for line in summaries:
        _sha, _first_parent, second_parent, *_ = line.split()
        branch_heads = {git(workspace, "rev-parse", b).strip() for b in branches
                        if b.startswith("agentfs/")}
        assert second_parent in branch_heads
    graph = git(workspace, "log", "--graph", "--oneline", "-40")
    assert "compression" in graph
    # the side branches' files never reach main's work tree
    on_disk = {p.name for p in message_paths(workspace / "traces/t/messages")}
    for branch in compressions:
        side = set(git(workspace, "ls-tree", "-r", "--name-only", branch,
                       "traces/t/messages").split())
        base = set(git(workspace, "ls-tree", "-r", "--name-only", f"{branch}~3",
                       "traces/t/messages").split())
        side_only = sorted(p.rsplit("/", 1)[1] for p in side - base)
        # the request for a summary and the answer, then the outcome: the summary
        assert [name.split("-")[1] for name in side_only] == ["user.md", "assistant.md",
                                                               "user.md"]
        assert not set(side_only[:2]) & on_disk
        assert side_only[2] in on_disk  # merged into main
    assert_git_clean(workspace)

    shown = json.loads(run_cli("show", "t", "--json", cwd=workspace).stdout)["messages"]
    roles = [m["role"] for m in shown]
    assert roles[:3] == ["system", "user", "user"]  # system, first user message, summary
    assert shown[2]["text"].startswith(SUMMARY_HEADER)
    assert "Second summary" in shown[2]["text"] and shown[2]["synthetic"] == "summary"
    assert shown[2]["parent_sequence"] == shown[1]["sequence"]

    # rewinding into the first compressed region puts the originals back on the path
    everything = json.loads(run_cli("show", "t", "--all", "--json", cwd=workspace).stdout)
    step4 = next(m for m in everything["messages"] if m["text"] == "step 4")
    target = step4["parent_sequence"]  # the last result of step 3
    run_cli("rewind", "t", str(target), cwd=workspace)
    after = json.loads(run_cli("show", "t", "--json", cwd=workspace).stdout)["messages"]
    assert any(m["text"] == "step 3" for m in after)
    assert not any(m["synthetic"] == "summary" for m in after)
    run_cli("run", "t", "-m", "go on", "--model", f"replay:{script}", cwd=workspace)
    assert_git_clean(workspace)


def test_compress_command_and_the_request_after_it(workspace, write_script):
    script = setup_workspace(workspace, write_script, window=100_000)
    run_cli("run", "t", "-m", "write the notes", "--model", f"replay:{script}",
            "--max-iterations", "3", cwd=workspace)
    out = run_cli("compress", "t", "--model", f"replay:{script}", cwd=workspace).stdout
    assert re.search(r"from agentfs/t/compression-[0-9a-f]{8}\b", out)
    as_sent = json.loads(run_cli("show", "t", "--json", "--as-sent", cwd=workspace).stdout)
    assert [m["role"] for m in as_sent["messages"]] == ["system", "user", "user"]
    assert "First summary" in as_sent["messages"][2]["text"]
    assert_git_clean(workspace)
    git(workspace, "fsck", "--strict")


def test_restoring_trace_files_with_git_then_running_continues_from_them(workspace, write_script):
    script = setup_workspace(workspace, write_script, window=100_000)
    run_cli("run", "t", "-m", "write the notes", "--model", f"replay:{script}",
            "--max-iterations", "2", cwd=workspace)
    older = git(workspace, "rev-parse", "HEAD").strip()
    run_cli("run", "t", "--model", f"replay:{script}", "--max-iterations", "2", cwd=workspace)
    head_before = json.loads(run_cli("show", "t", "--json", cwd=workspace).stdout)["head"]
    git(workspace, "checkout", older, "--", "traces/t")
    restored_head = json.loads((workspace / "traces/t/trace.json").read_text())["head"]
    assert restored_head < head_before
    run_cli("run", "t", "-m", "from the restored point", "--model", f"replay:{script}",
            "--max-iterations", "1", cwd=workspace)
    shown = json.loads(run_cli("show", "t", "--json", cwd=workspace).stdout)["messages"]
    sequences = [m["sequence"] for m in shown]
    assert restored_head in sequences and head_before not in sequences
    new_user = next(m for m in shown if m["text"] == "from the restored point")
    assert new_user["parent_sequence"] == restored_head
    assert "t: edit" in git(workspace, "log", "--format=%s", "-5")
    assert_git_clean(workspace)


def test_declared_skill_is_reinjected_after_compression(workspace, write_script):
    (workspace / "skills" / "notes.md").write_text(
        "---\nname: notes\ndescription: How to write notes.\n---\nKeep notes short.\n")
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "skill")
    script = setup_workspace(workspace, write_script, window=2200)
    run_cli("run", "t", "-m", "write the notes", "--model", f"replay:{script}",
            "--inject-skill", "notes", "--skill-recency", "50", cwd=workspace)
    everything = json.loads(run_cli("show", "t", "--all", "--json", cwd=workspace).stdout)
    summaries = [m for m in everything["messages"] if m["synthetic"] == "summary"]
    assert summaries
    first_summary = summaries[0]["sequence"]
    injections = [m for m in everything["messages"]
                  if m["synthetic"] == "skill" and m["role"] == "tool"]
    assert any(m["sequence"] < first_summary for m in injections)
    assert any(m["sequence"] > first_summary for m in injections), \
        "the skill compressed away must be injected again"


def test_a_side_branch_cut_short_is_never_merged(project, write_script):
    from agentfs.core.runner import Runner
    from agentfs.core.sidebranch import COMPRESSION
    from agentfs.models.replay import ReplayModel
    from agentfs.store.branches import branch_name
    from agentfs.store.trace import Trace

    project.new_trace("t", user("go"))
    looks = [{"tool_calls": [{"name": "list_files", "input": {}}]}] * 2
    script = write_script([*looks, {"text": "a"}],
                          compression=[{"text": "S1"}, {"text": "S2"}])
    runner = Runner(project.workspace, project.repo, ReplayModel(script), config=project.config)
    runner.run("t")
    trace = Trace(project.workspace, project.repo, "t")
    # a branch of the name the next compression gets, cut short after its request
    # and recorded nowhere (as a crash before its queue's commit would leave it)
    branch = branch_name(project.repo, "t", COMPRESSION, project.repo.head().decode())
    project.repo.create_branch(branch, project.repo.head())
    ask = trace.new_message("user", "summarize", branch_type=COMPRESSION, branch_id=branch)
    trace.commit_to_branch(branch, [ask])

    summary = runner.compress("t").summary
    assert summary.source_branch == f"{branch}-2"
    assert "S1" in summary.text  # the cut-short branch consumed no script entry
    root = project.workspace.root
    merged = git(root, "log", "--format=%P", "-1").split()
    assert git(root, "rev-parse", f"{branch}-2").strip() == merged[1]
    unmerged = git(root, "branch", "--no-merged", "main", "--format=%(refname:short)").split()
    assert branch in unmerged
    assert_git_clean(root)


def test_run_result_counts_the_tokens_of_side_branch_calls_too(workspace):
    """The summary requests cost tokens as well; the run's totals include them."""
    from agentfs.core.project import Project
    from agentfs.core.runner import Runner
    from agentfs.models.base import ModelResponse
    from agentfs.store.messages import ToolCall, Usage
    from agentfs.testing import FunctionModel

    config = workspace / "agentfs.toml"
    config.write_text(config.read_text() + "\ncontext_window = 2000\ncompression_threshold = 1.0\n")
    git(workspace, "commit", "-qam", "small window")
    turns = iter(range(12))
    reported = {"input": 0, "output": 0}

    def respond(request):
        size = sum(len(m.text) + len(str(m.tool_calls or "")) for m in request.messages) // 4
        usage = Usage(input_tokens=size, cache_read_input_tokens=20, output_tokens=7)
        reported["input"] += size + 20
        reported["output"] += 7
        if request.branch_type is not None:
            return ModelResponse(text="a summary", usage=usage)
        step = next(turns, None)
        if step is None:
            return ModelResponse(text="done", usage=usage)
        call = ToolCall(id=f"w{step}", name="write_file",
                        input={"path": f"notes/{step}.md", "content": "words " * 150})
        return ModelResponse(text=f"step {step}", tool_calls=[call], usage=usage)

    model = FunctionModel(respond)
    project = Project.open(workspace)
    project.new_trace("t", user("write the notes"))
    result = Runner(project.workspace, project.repo, model, config=project.config).run("t")
    side = [r for r in model.requests if r.branch_type is not None]
    assert side, "the window was meant to force a compression"
    assert result.input_tokens == reported["input"]
    assert result.output_tokens == reported["output"]
    assert_git_clean(workspace)


def test_compress_refuses_a_trace_too_small_to_shrink(workspace, write_script):

    script = write_script([{"text": "hi"}], compression=[{"text": "S"}])
    run_cli("run", "t", "-m", "go", "--model", f"replay:{script}", cwd=workspace)
    before = git(workspace, "rev-parse", "HEAD")
    refused = run_cli("compress", "t", "--model", f"replay:{script}", cwd=workspace, check=False)
    assert refused.returncode == 1 and "would not make it shorter" in refused.stderr
    assert git(workspace, "rev-parse", "HEAD") == before


def test_a_window_the_system_prompt_and_tools_fill_is_refused_saying_what_to_change(
    workspace, write_script
):
    config = workspace / "agentfs.toml"
    config.write_text(config.read_text() + "\ncontext_window = 1000\n"
                      "compression_threshold = 0.01\n")
    git(workspace, "commit", "-qam", "a window of 10 tokens")
    script = write_script([{"text": "never"}], compression=[{"text": "Summary."}] * 5)
    done = run_cli("run", "t", "-m", "hi", "--model", f"replay:{script}", cwd=workspace,
                   check=False)
    assert done.returncode == 1
    assert "the system prompt and the tools alone take about" in done.stderr
    assert "more than the 10 at which requests" in done.stderr
    assert "raise context_window" in done.stderr and "compression_threshold" in done.stderr
    assert git(workspace, "branch", "--list", "agentfs/*") == ""  # nothing was compressed
    assert_git_clean(workspace)
