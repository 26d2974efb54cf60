"""File tools stay inside the workspace and fail as error results, never crashes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentfs.tools import FILE_TOOLS, ToolContext, ToolRegistry


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    root = tmp_path / "ws"
    (root / ".git").mkdir(parents=True)
    (root / ".git" / "config").write_text("[core]\n")
    (root / "traces" / "t").mkdir(parents=True)
    (root / "traces" / "t" / "trace.json").write_text("{}")
    (root / "docs").mkdir()
    (root / "docs" / "a.md").write_text("alpha\nbeta\n")
    (root / "docs" / "b.txt").write_text("beta gamma\n")
    (tmp_path / "secret.txt").write_text("outside\n")
    return ToolContext(root, "t")


def call(ctx, name, **arguments):
    return ToolRegistry(FILE_TOOLS).call(name, arguments, ctx)


def test_read_write_edit_round_trip(ctx):
    assert call(ctx, "read_file", path="docs/a.md").content == "alpha\nbeta\n"
    result = call(ctx, "write_file", path="new/dir/c.md", content="one\ntwo\n")
    assert not result.is_error and "created" in result.content
    assert (ctx.root / "new/dir/c.md").read_text() == "one\ntwo\n"
    result = call(ctx, "edit_file", path="new/dir/c.md", old_text="two", new_text="three")
    assert not result.is_error
    assert (ctx.root / "new/dir/c.md").read_text() == "one\nthree\n"
    assert ctx.changed == {"new/dir/c.md"}


@pytest.mark.parametrize(
    ("name", "arguments", "needle"),
    [
        ("read_file", {"path": "../secret.txt"}, "outside the workspace"),
        ("read_file", {"path": "/etc/passwd"}, "outside the workspace"),
        ("read_file", {"path": ".git/config"}, ".git directories are off limits"),
        ("write_file", {"path": ".git/hooks/x", "content": "x"}, ".git directories"),
        ("write_file", {"path": "vendor/lib/.git/config", "content": "x"}, ".git directories"),
        ("write_file", {"path": "agentfs.toml", "content": "[tools]\nbash = true\n"},
         "may read it but not change it"),
        ("edit_file", {"path": "skills/x.md", "old_text": "a", "new_text": "b"},
         "may read it but not change it"),
        ("write_file", {"path": "traces/t/trace.json", "content": "{}"}, "may read it but not change it"),
        ("edit_file", {"path": "traces/t/trace.json", "old_text": "{", "new_text": "["},
         "may read it but not change it"),
        ("read_file", {"path": "nope.md"}, "no such file"),
        ("read_file", {}, "'path' must be"),
        ("write_file", {"path": "x.md"}, "'content' must be a string"),
        ("edit_file", {"path": "docs/b.txt", "old_text": "zzz", "new_text": "y"}, "not found"),
        ("grep", {"pattern": "("}, "invalid regular expression"),
        ("no_such_tool", {}, "unknown tool"),
    ],
)
def test_refusals_are_error_results(ctx, name, arguments, needle):
    result = call(ctx, name, **arguments)
    assert result.is_error
    assert needle in result.content
    assert (ctx.root / "traces/t/trace.json").read_text() == "{}"


def test_symlinks_cannot_lead_outside(ctx):
    os.symlink(ctx.root.parent / "secret.txt", ctx.root / "docs" / "link.txt")
    os.symlink(ctx.root.parent, ctx.root / "up")
    assert call(ctx, "read_file", path="docs/link.txt").is_error
    assert call(ctx, "write_file", path="up/evil.txt", content="x").is_error
    assert not (ctx.root.parent / "evil.txt").exists()
    assert "outside" not in call(ctx, "grep", pattern="outside").content.replace(
        "no matches for 'outside'", "")
    assert "link.txt" not in call(ctx, "list_files").content


def test_edits_keep_line_endings_and_the_executable_bit(ctx):
    script = ctx.root / "run.sh"
    script.write_bytes(b"#!/bin/sh\r\necho one\r\n")
    script.chmod(0o755)
    result = call(ctx, "edit_file", path="run.sh", old_text="one", new_text="two")
    assert not result.is_error
    assert script.read_bytes() == b"#!/bin/sh\r\necho two\r\n"
    assert script.stat().st_mode & 0o777 == 0o755


def test_edit_requires_unique_match_unless_replace_all(ctx):
    (ctx.root / "dup.txt").write_text("x x x")
    result = call(ctx, "edit_file", path="dup.txt", old_text="x", new_text="y")
    assert result.is_error and "3 times" in result.content
    result = call(ctx, "edit_file", path="dup.txt", old_text="x", new_text="y", replace_all=True)
    assert not result.is_error
    assert (ctx.root / "dup.txt").read_text() == "y y y"


def test_list_and_grep(ctx):
    listing = call(ctx, "list_files", pattern="**/*.md").content.splitlines()
    assert "docs/a.md" in listing and "docs/b.txt" not in listing
    assert not any(line.startswith(".git") for line in call(ctx, "list_files").content.splitlines())
    hits = call(ctx, "grep", pattern="beta", glob="**/*.txt").content
    assert hits == "docs/b.txt:1: beta gamma"
    assert "docs/a.md:2: beta" in call(ctx, "grep", pattern="^beta").content
