"""Every file tool is bounded in time and bytes: slow patterns, huge trees, huge files."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from agentfs.tools import ToolContext, ToolRegistry, files, search
from agentfs.tools.base import ToolFailure
from agentfs.tools.files import file_tools


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    root = tmp_path / "ws"
    (root / ".git").mkdir(parents=True)
    return ToolContext(root, "t")


def call(ctx, name, timeout=files.FILE_TOOL_TIMEOUT, **arguments):
    return ToolRegistry(file_tools(timeout=timeout)).call(name, arguments, ctx)


def test_a_catastrophic_pattern_is_stopped_with_an_error_that_says_to_simplify_it(ctx):
    (ctx.root / "a.txt").write_text("a" * 5_000 + "b\n")
    result = call(ctx, "grep", timeout=0.2, pattern="(a+)+$")
    assert result.is_error
    assert result.content.startswith("grep: the search timed out after 0.2 s (1 file searched)")
    assert "simplify the pattern" in result.content


def test_grep_skips_files_over_its_size_limit_and_says_so(ctx, monkeypatch):
    monkeypatch.setattr(search, "MAX_GREP_FILE_BYTES", 1_000)
    (ctx.root / "small.txt").write_text("needle\n")
    (ctx.root / "big.txt").write_text("needle\n" + "x" * 2_000)
    result = call(ctx, "grep", pattern="needle").content
    assert result == ("small.txt:1: needle\n"
                      "[... skipped 1 file over 1,000 bytes; read them with read_file]")


def test_grep_stops_after_reading_its_byte_budget(ctx, monkeypatch):
    monkeypatch.setattr(search, "MAX_GREP_READ_BYTES", 2_500)
    for n in range(5):
        (ctx.root / f"{n}.txt").write_text(f"needle {n}\n" + "x" * 990)
    result = call(ctx, "grep", pattern="needle").content.splitlines()
    assert result[:2] == ["0.txt:1: needle 0", "1.txt:1: needle 1"]
    assert result[2] == ("[... stopped at 2,500 bytes of files read; narrow the search "
                         "with path or glob]")


def test_list_files_stops_after_its_entry_budget_and_says_so(ctx, monkeypatch):
    monkeypatch.setattr(search, "MAX_WALK_ENTRIES", 10)
    for n in range(4):
        folder = ctx.root / f"d{n}"
        folder.mkdir()
        for m in range(4):
            (folder / f"{m}.md").write_text("x")
    listing = call(ctx, "list_files").content.splitlines()
    assert listing[-1] == ("[... stopped after looking at 10 entries; narrow the listing "
                           "with path or pattern]")
    assert len(listing) - 1 < 16


def test_a_fifo_is_refused_rather_than_blocking_the_run(ctx):
    os.mkfifo(ctx.root / "pipe")
    (ctx.root / "a.txt").write_text("needle\n")
    result = call(ctx, "read_file", path="pipe")
    assert result.is_error and "not a regular file" in result.content
    result = call(ctx, "edit_file", path="pipe", old_text="a", new_text="b")
    assert result.is_error and "not a regular file" in result.content
    assert call(ctx, "grep", pattern="needle").content == "a.txt:1: needle"


def test_edit_and_append_refuse_files_over_their_size_limit(ctx, monkeypatch):
    monkeypatch.setattr(files, "MAX_EDIT_FILE_BYTES", 100)
    (ctx.root / "big.txt").write_text("x" * 101)
    for name, arguments in [("edit_file", {"old_text": "x", "new_text": "y", "replace_all": True}),
                            ("write_file", {"content": "more", "append": True})]:
        result = call(ctx, name, path="big.txt", **arguments)
        assert result.is_error and "over 100 bytes" in result.content
    assert (ctx.root / "big.txt").read_text() == "x" * 101


def test_grep_patterns_keep_python_syntax(ctx):
    (ctx.root / "a.py").write_text("def main():\n    return 1\n")
    assert call(ctx, "grep", pattern=r"^def (?P<name>\w+)\(").content == "a.py:1: def main():"
    result = call(ctx, "grep", pattern="(unclosed")
    assert result.is_error and "invalid regular expression" in result.content


class _Stalled:
    """A pattern whose search takes clock time but no CPU time, as a search does on a
    busy machine: it waits until released (or its own long cap)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Event()

    def search(self, line, timeout=None, concurrent=None) -> None:
        self.started.set()
        self.release.wait(timeout=120)


def test_grep_ends_at_its_deadline_by_the_clock_even_when_the_search_gets_no_cpu(ctx):
    """The regex timeout counts CPU time: on a busy machine a 10 s grep took 35-45 s."""
    (ctx.root / "a.txt").write_text("line\n" * 3)
    stalled = _Stalled()
    found = search.Search(stalled, time.monotonic() + 0.2, 0.2)
    try:
        with pytest.raises(ToolFailure, match="timed out after 0.2 s"):
            found.run(ctx.root.resolve(), [ctx.root.resolve() / "a.txt"])
        assert stalled.started.is_set() and not stalled.release.is_set()
    finally:
        stalled.release.set()
