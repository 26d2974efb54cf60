"""Reflection and knowledge evaluation on side branches; knowledge search."""

from __future__ import annotations

import json
import os

import pytest

from agentfs.core.knowledge import KnowledgeItem, load_items
from agentfs.errors import AgentfsError
from agentfs.store.messages import MAX_MESSAGE_BYTES
from tests.conftest import assert_git_clean, git, run_cli, side_branches


def configure(root, extra: str) -> None:
    config = root / "agentfs.toml"
    config.write_text(config.read_text() + extra)
    git(root, "commit", "-qam", "config")


def test_completion_reflection_saves_pending_items(workspace, write_script):
    configure(workspace, "\n[knowledge]\nenable_completion_extraction = true\n")
    script = write_script(
        [{"text": "done with the task"}],
        reflection=[
            {"text": "Let me check a file first.",
             "tool_calls": [{"name": "list_files", "input": {}},
                            {"name": "write_file", "input": {"path": "x.md", "content": "x"}}]},
            {"text": "Two lessons.\n\n## Use tmp_path fixtures\nTests write into tmp_path.\n\n"
                     "## Guessing\nProbably fine.\n"}],
    )
    run_cli("run", "t", "-m", "do it", "--model", f"replay:{script}", cwd=workspace)
    listing = run_cli("knowledge", cwd=workspace).stdout
    assert "pending   use-tmp-path-fixtures" in listing and "guessing" in listing
    item = (workspace / "knowledge" / "use-tmp-path-fixtures.md").read_text()
    assert item.endswith("\nTests write into tmp_path.\n")
    assert not (workspace / "x.md").exists()  # only read-only tools run on a side branch
    [branch] = side_branches(workspace, "t", "reflection")
    files = git(workspace, "ls-tree", "-r", "--name-only", branch, "traces/t/messages/").split()
    results = [git(workspace, "show", f"{branch}:{f}") for f in files if f.endswith("-tool.md")]
    assert ["is_error: true" in r for r in results] == [False, True]
    assert "write_file does not run on a reflection side branch" in results[1]
    outcome = git(workspace, "log", "-1", "--format=%P %s", "--grep", "t: outcome").split()
    assert len(outcome) >= 3 and outcome[2] == "t:"  # two parents, then the subject
    assert branch in git(workspace, "branch", "--merged", "main", "--format=%(refname:short)")
    assert not any(p.name.startswith("0") for p in (workspace / "knowledge").iterdir())
    assert_git_clean(workspace)


def test_a_side_branch_turn_that_is_not_valid_unicode_is_stored_readable(workspace, write_script):
    """As on the main path (`agentfs/core/fit.py:fit_turn`): U+FFFD in the text, and a call
    whose input holds a lone surrogate answered, not run."""
    configure(workspace, "\n[knowledge]\nenable_completion_extraction = true\n")
    script = write_script(
        [{"text": "done with the task"}],
        reflection=[
            {"text": "Reading caf\udce9.", "tool_calls": [
                {"name": "read_file", "input": {"path": "caf\udce9.md"}}]},
            {"text": "## Check names\nSome are not UTF-8.\n"}],
    )
    run_cli("run", "t", "-m", "do it", "--model", f"replay:{script}", cwd=workspace)
    assert "pending   check-names" in run_cli("knowledge", cwd=workspace).stdout
    [branch] = side_branches(workspace, "t", "reflection")
    files = git(workspace, "ls-tree", "-r", "--name-only", branch, "traces/t/messages/").split()
    turn, result = (git(workspace, "show", f"{branch}:{f}") for f in files
                    if f.endswith(("5-assistant.md", "6-tool.md")))
    assert "reflection" in turn and turn.endswith("---\nReading caf\ufffd.\n")
    assert "is_error: true" in result and "not valid Unicode" in result
    assert_git_clean(workspace)


def test_knowledge_eval_runs_in_the_queue_and_search_finds_accepted(workspace, write_script):
    (workspace / "knowledge" / "tmp-fixtures.md").write_text(
        "---\nid: tmp-fixtures\ntitle: Use tmp_path fixtures\nstatus: pending\n"
        "source_trace: old\n---\nTests write into tmp_path fixtures.\n")
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "a pending item")
    configure(workspace, "context_window = 1200\ncompression_threshold = 1.0\n")
    turns = [{"text": f"step {i}", "tool_calls": [{"name": "write_file", "input": {
        "path": f"n{i}.md", "content": "words " * 150}}]} for i in range(6)]
    turns += [{"tool_calls": [{"name": "knowledge_search", "input": {"query": "tmp_path fixtures"}}]},
              {"text": "finished"}]
    script = write_script(
        turns,
        knowledge_eval=[{"text": "accept tmp-fixtures: concrete\nreject nothing-here: no such item"}] * 10,
        compression=[{"text": "summary"}] * 10,
    )
    run_cli("run", "t", "-m", "go", "--model", f"replay:{script}", cwd=workspace)
    listing = run_cli("knowledge", "--status", "accepted", cwd=workspace).stdout
    assert "tmp-fixtures" in listing and "concrete" in listing
    shown = json.loads(run_cli("show", "t", "--all", "--json", cwd=workspace).stdout)["messages"]
    found = [m for m in shown if m["role"] == "tool" and "Use tmp_path fixtures" in m["text"]]
    assert found, "knowledge_search should find the accepted item"
    assert side_branches(workspace, "t", "knowledge_eval")
    assert side_branches(workspace, "t", "compression")
    assert_git_clean(workspace)


def test_a_knowledge_item_renders_and_loads_back(tmp_path):
    item = KnowledgeItem(id="a", title="yes", source_trace="t", source_sequence=3,
                         reason="on", body="Line one.\n\n---\n\nLine two.\n\n")
    (tmp_path / "a.md").write_bytes(item.render())
    [loaded] = load_items(tmp_path)
    assert loaded == item.model_copy(update={"body": "Line one.\n\n---\n\nLine two."})
    assert loaded.render() == item.render()


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"just text\n", "no frontmatter"),
        (b"---\nid: a\ntitle: t\n", "no closing '---' line"),
        (b"---\nid: &x a\ntitle: *x\nsource_trace: t\n---\n", "YAML anchor &x"),
        (b"---\nid: a\ntitle: t\nsource_trace: t\nx: " + b"[" * 50 + b"]" * 50 + b"\n---\n",
         "nested more than 32 levels"),
        (b"---\nid: a\ntitle: caf\xe9\n---\n", "not valid UTF-8"),
        (b"---\nid: a\nstatus: maybe\n---\n", "invalid knowledge item"),
    ],
)
def test_a_broken_knowledge_file_is_one_error_naming_it(tmp_path, data, problem):
    path = tmp_path / "item.md"
    path.write_bytes(data)
    with pytest.raises(AgentfsError) as info:
        load_items(tmp_path)
    assert str(info.value).startswith(f"{path}: ")
    assert problem in str(info.value)
    assert "\n" not in str(info.value)


def test_a_symlinked_knowledge_file_is_refused(tmp_path):
    outside = tmp_path / "outside.md"
    outside.write_text("---\nid: a\ntitle: t\nsource_trace: t\nstatus: accepted\n---\nsecret\n")
    folder = tmp_path / "knowledge"
    folder.mkdir()
    (folder / "a.md").symlink_to(outside)
    with pytest.raises(AgentfsError, match="is a symlink"):
        load_items(folder)
    (folder / "a.md").unlink()
    folder.rmdir()
    folder.symlink_to(outside.parent)  # the whole folder, as a clone may bring it
    with pytest.raises(AgentfsError, match="is a symlink, not a folder"):
        load_items(folder)


@pytest.mark.parametrize("kind", ["fifo", "oversize"])
def test_a_knowledge_file_that_is_no_file_or_too_large_is_refused_unread(tmp_path, kind):
    folder = tmp_path / "knowledge"
    folder.mkdir()
    path = folder / "a.md"
    if kind == "fifo":
        os.mkfifo(path)  # reading it would wait for a writer forever
    else:
        with path.open("wb") as f:
            f.truncate(MAX_MESSAGE_BYTES + 1)
    with pytest.raises(AgentfsError) as info:
        load_items(folder)
    assert str(info.value).startswith(f"{path}: ")
    assert ("not a regular file" if kind == "fifo" else "over the") in str(info.value)


def test_every_side_branch_sends_the_main_paths_system_tools_and_messages(workspace):
    """Reflection, knowledge evaluation and compression continue the main request as it
    was sent: only their own user message is added (the prefix stays byte-identical)."""
    from agentfs.core.project import Project
    from agentfs.models.base import ModelResponse
    from agentfs.store.messages import ToolCall
    from agentfs.testing import FunctionModel
    from tests.conftest import user

    (workspace / "knowledge" / "old.md").write_text(
        "---\nid: old\ntitle: An old lesson\nstatus: pending\nsource_trace: x\n---\nText.\n")
    git(workspace, "add", "-A")
    git(workspace, "commit", "-qm", "a pending item")
    configure(workspace, "context_window = 1500\ncompression_threshold = 1.0\n"
                         "[knowledge]\nenable_completion_extraction = true\n")
    steps = iter(range(8))

    def respond(request):
        if request.branch_type == "knowledge_eval":
            return ModelResponse(text="reject old: too vague")
        if request.branch_type is not None:
            return ModelResponse(text="## A lesson\nKeep notes short.")
        step = next(steps, None)
        if step is None:
            return ModelResponse(text="done")
        call = ToolCall(id=f"w{step}", name="write_file",
                        input={"path": f"notes/{step}.md", "content": "words " * 120})
        return ModelResponse(text=f"step {step}", tool_calls=[call])

    model = FunctionModel(respond)
    project = Project.open(workspace)
    project.new_trace("t", user("write the notes"))
    project.runner(model).run("t")
    kinds = {r.branch_type for r in model.requests}
    assert kinds == {None, "knowledge_eval", "compression", "reflection"}
    last_main = model.requests[0]
    for request in model.requests:
        if request.branch_type is None:
            last_main = request
            continue
        assert request.tools == last_main.tools and request.system == last_main.system
        assert request.messages[: len(last_main.messages)] == last_main.messages
        added = request.messages[len(last_main.messages):]
        own = [m for m in added if m.branch_type is not None]
        assert own and all(m.branch_type == request.branch_type for m in own)
        assert added[: len(added) - len(own)] == [m for m in added if m.branch_type is None]
    assert "rejected" in run_cli("knowledge", cwd=workspace).stdout


def test_the_queue_runs_reflection_then_knowledge_evaluation_then_compression(
        workspace, write_script):
    configure(workspace, "context_window = 1200\ncompression_threshold = 1.0\n"
              "[knowledge]\nenable_extraction = true\n")
    turns = [{"text": f"step {i}", "tool_calls": [{"name": "write_file", "input": {
        "path": f"n{i}.md", "content": "words " * 150}}]} for i in range(6)]
    turns += [{"text": "finished"}]
    script = write_script(
        turns,
        reflection=[{"text": "## Write notes in parts\nLong notes go in several files."}] * 10,
        knowledge_eval=[{"text": "accept write-notes-in-parts: useful"}] * 10,
        compression=[{"text": "summary"}] * 10,
    )
    run_cli("run", "t", "-m", "go", "--model", f"replay:{script}", cwd=workspace)
    order = git(workspace, "log", "--first-parent", "--reverse", "--format=%s",
                "main").splitlines()
    first = {kind: next(i for i, s in enumerate(order)
                        if side_branches(workspace, "t", kind)[0] in s)
             for kind in ("reflection", "knowledge_eval", "compression")}
    assert first["reflection"] < first["knowledge_eval"] < first["compression"]
    assert "accepted" in run_cli("knowledge", cwd=workspace).stdout
    assert_git_clean(workspace)
