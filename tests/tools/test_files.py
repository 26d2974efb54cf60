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


def test_write_file_refuses_content_over_the_limit_and_says_to_write_in_parts(ctx):
    from agentfs.tools.files import MAX_WRITE_BYTES

    result = call(ctx, "write_file", path="big.txt", content="x" * (2 * 1024 * 1024))
    assert result.is_error
    assert f"'content' is 2,097,152 bytes; one call may carry at most {MAX_WRITE_BYTES:,}" \
        in result.content
    assert "write_file with append=true for each next part" in result.content
    assert not (ctx.root / "big.txt").exists()


def test_a_large_file_is_written_in_parts_with_append(ctx):
    from agentfs.tools.files import MAX_WRITE_BYTES

    part = "é" * (MAX_WRITE_BYTES // 2)  # exactly the limit, in 2-byte characters
    assert not call(ctx, "write_file", path="big.txt", content=part).is_error
    result = call(ctx, "write_file", path="big.txt", content=part, append=True)
    assert not result.is_error and f"(now {4 * len(part)} bytes)" in result.content
    assert (ctx.root / "big.txt").read_text() == part * 2
    assert not call(ctx, "write_file", path="new.txt", content="a", append=True).is_error
    assert (ctx.root / "new.txt").read_text() == "a"


def test_edit_file_refuses_text_over_the_limit(ctx):
    from agentfs.tools.files import MAX_WRITE_BYTES

    result = call(ctx, "edit_file", path="docs/a.md", old_text="alpha",
                  new_text="y" * MAX_WRITE_BYTES)
    assert result.is_error and "Make several smaller edits" in result.content
    assert (ctx.root / "docs/a.md").read_text() == "alpha\nbeta\n"


def read_all(ctx, path: str) -> str:
    """A file read the way the marker says: from each cut, on at the offset it names."""
    import re

    parts, offset = [], 1
    while True:
        text = call(ctx, "read_file", path=path, offset=offset).content
        marker = re.search(r"\[\.\.\. cut by agentfs: [\d,]+ more bytes; .*offset=(\d+)\]$", text)
        if marker is None:
            return "".join(parts) + text
        parts.append(text[: marker.start()])
        offset = int(marker[1])


def test_reading_a_ten_megabyte_file_is_cut_and_offset_limit_read_the_rest(ctx):
    from agentfs.tools.base import TOOL_RESULT_MAX_BYTES
    from agentfs.tools.files import MAX_READ_CHARS

    lines = [f"{n:07d} {'ab€' * 18}x\n" for n in range(1, 100_001)]  # 100 bytes a line
    (ctx.root / "big.log").write_text("".join(lines))
    first = call(ctx, "read_file", path="big.log").content
    assert len(first) <= MAX_READ_CHARS + 200 and len(first.encode()) <= TOOL_RESULT_MAX_BYTES
    head, marker = first.rsplit("[... cut by agentfs: ", 1)
    shown = head.count("\n")
    assert head == "".join(lines[:shown])
    assert marker == (f"{10_000_000 - len(head.encode()):,} more bytes; read the rest in parts "
                      f"with offset/limit, from offset={shown + 1}]")
    assert call(ctx, "read_file", path="big.log", offset=shown + 1, limit=3).content \
        == "".join(lines[shown:shown + 3])
    assert call(ctx, "read_file", path="big.log", offset=99_999).content == "".join(lines[-2:])


def test_a_file_read_in_parts_comes_back_whole(ctx):
    text = "".join(f"{n} {'word ' * (n % 50)}\n" for n in range(20_000))  # about 2.5 MB
    (ctx.root / "notes.md").write_text(text)
    assert read_all(ctx, "notes.md") == text


def test_a_line_longer_than_a_read_is_cut_and_the_next_line_is_named(ctx):
    from agentfs.tools.files import MAX_READ_BYTES

    (ctx.root / "min.js").write_text("€" * 5_000_000 + "\nnext line\n")
    result = call(ctx, "read_file", path="min.js").content
    head, marker = result.rsplit("\n[... cut by agentfs: ", 1)
    assert set(head) == {"€"} and len(head.encode()) <= MAX_READ_BYTES  # never a split character
    assert marker.endswith("line 1 alone is over what read_file shows at once; "
                           "the next line is offset=2]")
    assert int(marker.split(" ")[0].replace(",", "")) == 15_000_011 - len(head.encode())
    assert call(ctx, "read_file", path="min.js", offset=2).content == "next line\n"


def test_offset_and_limit_are_checked(ctx):
    assert call(ctx, "read_file", path="docs/a.md", offset=2).content == "beta\n"
    assert call(ctx, "read_file", path="docs/a.md", limit=1).content == "alpha\n"
    assert call(ctx, "read_file", path="docs/a.md", offset=3).content == ""
    result = call(ctx, "read_file", path="docs/a.md", offset=4)
    assert result.is_error and "offset 4 is past the end (2 lines)" in result.content
    for bad in (0, -1, "2", True, 1.5):
        result = call(ctx, "read_file", path="docs/a.md", offset=bad)
        assert result.is_error and "'offset' must be a whole number of lines" in result.content


def test_grep_cuts_long_lines_and_bounds_its_output_in_bytes(ctx):
    from agentfs.tools.files import MAX_GREP_BYTES

    (ctx.root / "wide.txt").write_text("needle " + "€" * 10_000 + "\n")
    hit = call(ctx, "grep", pattern="needle", path="wide.txt").content
    assert hit.endswith(" [... line cut]") and len(hit) < 400
    (ctx.root / "many.txt").write_text(("needle " + "€" * 290 + "\n") * 150)
    result = call(ctx, "grep", pattern="needle", path="many.txt").content
    assert len(result.encode()) <= MAX_GREP_BYTES + 200
    assert result.endswith("bytes of matches; narrow the search with path or glob]")
