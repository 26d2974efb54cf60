"""The workspace's control files are read-only to the file tools; `.git` is out of reach."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

import pytest

from agentfs.config import DEFAULT_READ_ONLY
from agentfs.core.project import Project
from agentfs.core.runner import Runner
from agentfs.errors import ConfigError
from agentfs.models.replay import ReplayModel
from agentfs.tools import ToolContext, ToolRegistry
from agentfs.tools.files import WritePolicy, file_tools
from tests.conftest import user

CONTROL_FILES = ["inbox/x.md", "knowledge/x.md", "traces/t/messages/000000-000999/000009-user.md",
                 "skills/x.md", "agentfs.toml"]


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    root = tmp_path / "ws"
    for folder in (".git", "inbox", "knowledge", "traces/t/messages", "skills", "docs"):
        (root / folder).mkdir(parents=True)
    (root / ".git" / "config").write_text("[core]\n")
    (root / "agentfs.toml").write_text("format = 1\n")
    return ToolContext(root, "t")


def call(ctx, name, read_only=DEFAULT_READ_ONLY, **arguments):
    return ToolRegistry(file_tools(read_only)).call(name, arguments, ctx)


def files_below(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("path", [*CONTROL_FILES, "INBOX/x.md", "./knowledge/../knowledge/y.md",
                                  "docs/../inbox/x.md"])
def test_writing_a_control_file_is_refused_and_writes_nothing(ctx, path):
    before = files_below(ctx.root)
    for name, arguments in [
        ("write_file", {"content": "status: accepted\n"}),
        ("write_file", {"content": "more\n", "append": True}),
        ("edit_file", {"old_text": "format", "new_text": "x"}),
    ]:
        result = call(ctx, name, path=path, **arguments)
        assert result.is_error, (name, path)
        assert "is read-only: the file tools may read it but not change it" in result.content
        assert "`[tools] read_only` in agentfs.toml" in result.content
    assert files_below(ctx.root) == before
    assert ctx.changed == set()


@pytest.mark.parametrize("path", [".git/config", ".GIT/config", "vendor/.Git/hooks/pre-commit",
                                  "docs/../.git/HEAD"])
def test_git_folders_are_neither_written_nor_read_in_any_letter_case(ctx, path):
    before = files_below(ctx.root)
    result = call(ctx, "write_file", path=path, content="x")
    assert result.is_error and ".git directories are off limits" in result.content
    result = call(ctx, "read_file", path=path)
    assert result.is_error and ".git directories are off limits" in result.content
    assert files_below(ctx.root) == before


def test_a_symlink_into_a_control_folder_is_followed_and_refused(ctx):
    os.symlink(ctx.root / "inbox", ctx.root / "docs" / "drop")
    os.symlink(ctx.root / "agentfs.toml", ctx.root / "docs" / "settings.toml")
    before = files_below(ctx.root)
    result = call(ctx, "write_file", path="docs/drop/run-me.md", content="start a trace")
    assert result.is_error and "inbox is read-only" in result.content
    result = call(ctx, "edit_file", path="docs/settings.toml", old_text="format = 1",
                  new_text="[tools]\nbash = true")
    assert result.is_error and "agentfs.toml is read-only" in result.content
    assert files_below(ctx.root) == before
    assert not (ctx.root / "inbox" / "run-me.md").exists()


def test_control_files_can_still_be_read_listed_and_searched(ctx):
    (ctx.root / "knowledge" / "k.md").write_text("---\nstatus: accepted\n---\nA lesson.\n")
    assert call(ctx, "read_file", path="agentfs.toml").content == "format = 1\n"
    assert call(ctx, "read_file", path="knowledge/k.md").content.endswith("A lesson.\n")
    assert "knowledge/k.md" in call(ctx, "list_files").content.splitlines()
    assert call(ctx, "grep", pattern="lesson").content == "knowledge/k.md:4: A lesson."
    listing = call(ctx, "list_files").content
    assert ".git" not in listing


def test_an_empty_read_only_list_lets_the_tools_write_control_folders_but_never_git(ctx):
    result = call(ctx, "write_file", read_only=(), path="inbox/x.md", content="hello\n")
    assert not result.is_error
    assert (ctx.root / "inbox" / "x.md").read_text() == "hello\n"
    result = call(ctx, "write_file", read_only=(), path=".git/config", content="x")
    assert result.is_error and ".git directories are off limits" in result.content


def test_the_read_only_list_replaces_the_default_and_covers_everything_below_a_folder(ctx):
    only_docs = ("docs/final",)
    assert not call(ctx, "write_file", read_only=only_docs, path="skills/x.md", content="x").is_error
    result = call(ctx, "write_file", read_only=only_docs, path="docs/final/deep/a.md", content="x")
    assert result.is_error and "docs/final is read-only" in result.content
    assert not call(ctx, "write_file", read_only=only_docs, path="docs/finally.md",
                    content="x").is_error


def test_the_write_policy_is_one_rule_over_resolved_paths():
    policy = WritePolicy()
    for rel in ["inbox", "inbox/a.md", "Traces/t/trace.json", "agentfs.toml", "AGENTFS.TOML",
                "sub/.git/x", "knowledge/k.md"]:
        assert policy.refusal(PurePosixPath(rel)) is not None, rel
    for rel in ["docs/a.md", "inboxes/a.md", "notes/inbox/a.md", "agentfs.toml.bak"]:
        assert policy.refusal(PurePosixPath(rel)) is None, rel
    everything = WritePolicy((".",))
    assert everything.refusal(PurePosixPath("docs/a.md")) is not None


@pytest.mark.parametrize("entry", ["", "/etc", "../outside", "docs/../../x"])
def test_a_read_only_entry_outside_the_workspace_is_a_config_error(entry):
    with pytest.raises(ConfigError, match=r"\[tools\] read_only"):
        WritePolicy((entry,))


def run_writing(project: Project, write_script, path: str):
    """Run a new trace whose model writes `path`; the tool's result message."""
    script = write_script([
        {"text": "Writing.", "tool_calls": [
            {"name": "write_file", "input": {"path": path, "content": "hello\n"}}]},
        {"text": "Done."},
    ])
    project.new_trace("t1", user("Write the file."))
    Runner(project.workspace, project.repo, ReplayModel(script), config=project.config).run("t1")
    return next(m for m in project.trace("t1").main_path() if m.role == "tool")


def test_a_run_refuses_to_write_the_inbox_by_default(workspace, write_script):
    result = run_writing(Project.open(workspace), write_script, "inbox/x.md")
    assert result.is_error and "inbox is read-only" in result.text
    assert not (workspace / "inbox" / "x.md").exists()


def test_a_workspace_with_an_empty_read_only_list_lets_a_run_write_the_inbox(workspace,
                                                                            write_script):
    config = workspace / "agentfs.toml"
    config.write_text(config.read_text() + "\n[tools]\nread_only = []\n")
    result = run_writing(Project.open(workspace), write_script, "inbox/x.md")
    assert not result.is_error, result.text
    assert (workspace / "inbox" / "x.md").read_text() == "hello\n"
