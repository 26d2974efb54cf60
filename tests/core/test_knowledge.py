"""Reflection and knowledge evaluation on side branches; knowledge search."""

from __future__ import annotations

import json

import pytest

from agentfs.core.knowledge import KnowledgeItem, load_items
from agentfs.errors import AgentfsError
from tests.conftest import assert_git_clean, git, run_cli


def configure(root, extra: str) -> None:
    config = root / "agentfs.toml"
    config.write_text(config.read_text() + extra)
    git(root, "commit", "-qam", "config")


def test_completion_reflection_saves_pending_items(workspace, write_script):
    configure(workspace, "\n[knowledge]\nenable_completion_extraction = true\n")
    script = write_script(
        [{"text": "done with the task"}],
        reflection=[
            {"tool_calls": [{"name": "save_knowledge", "input": {
                "title": "Use tmp_path fixtures", "content": "Tests write into tmp_path."}},
                {"name": "save_knowledge", "input": {
                    "title": "Guessing", "content": "Probably fine."}}]},
            {"text": "saved two lessons"}],
    )
    run_cli("run", "t", "-m", "do it", "--model", f"replay:{script}", cwd=workspace)
    listing = run_cli("knowledge", cwd=workspace).stdout
    assert "pending   use-tmp-path-fixtures" in listing and "guessing" in listing
    outcome = git(workspace, "log", "-1", "--format=%P %s", "--grep", "t: outcome").split()
    assert len(outcome) >= 3 and outcome[2] == "t:"  # two parents, then the subject
    assert "agentfs/t/reflection-1" in git(workspace, "branch", "--format=%(refname:short)")
    assert not any(p.name.startswith("0") for p in (workspace / "knowledge").iterdir())
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
        knowledge_eval=[{"tool_calls": [{"name": "judge_knowledge", "input": {
            "id": "tmp-fixtures", "verdict": "accept", "reason": "concrete"}}]},
            {"text": "judged"}],
        compression=[{"text": "summary"}] * 5,
    )
    run_cli("run", "t", "-m", "go", "--model", f"replay:{script}", cwd=workspace)
    listing = run_cli("knowledge", "--status", "accepted", cwd=workspace).stdout
    assert "tmp-fixtures" in listing and "concrete" in listing
    shown = json.loads(run_cli("show", "t", "--all", "--json", cwd=workspace).stdout)["messages"]
    found = [m for m in shown if m["role"] == "tool" and "Use tmp_path fixtures" in m["text"]]
    assert found, "knowledge_search should find the accepted item"
    branches = git(workspace, "branch", "--format=%(refname:short)")
    assert "agentfs/t/knowledge_eval-1" in branches and "agentfs/t/compression-1" in branches
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
