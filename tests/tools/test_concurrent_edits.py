"""edit_file works on the file the model last saw, and concurrent changes lose nothing."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from agentfs.tools import ToolContext, ToolRegistry
from agentfs.tools.files import file_tools

STALE = "changed since you last read it (someone else edited it); read it again"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / ".git").mkdir(parents=True)
    (root / "notes.md").write_text("one\ntwo\n")
    return root


@pytest.fixture
def tools() -> ToolRegistry:
    return ToolRegistry(file_tools())


def test_an_edit_after_an_outside_change_is_refused_until_the_file_is_read_again(root, tools):
    ctx = ToolContext(root, "t")
    assert tools.call("read_file", {"path": "notes.md"}, ctx).content == "one\ntwo\n"
    (root / "notes.md").write_text("one\ntwo\nthree (a person's line)\n")

    result = tools.call("edit_file", {"path": "notes.md", "old_text": "two", "new_text": "2"}, ctx)
    assert result.is_error and result.content == f"notes.md: {STALE}"
    assert (root / "notes.md").read_text() == "one\ntwo\nthree (a person's line)\n"

    tools.call("read_file", {"path": "notes.md"}, ctx)
    result = tools.call("edit_file", {"path": "notes.md", "old_text": "two", "new_text": "2"}, ctx)
    assert not result.is_error
    assert (root / "notes.md").read_text() == "one\n2\nthree (a person's line)\n"


def test_a_trace_can_edit_again_after_its_own_edits_and_writes(root, tools):
    ctx = ToolContext(root, "t")
    tools.call("read_file", {"path": "notes.md"}, ctx)
    for old, new in [("one", "1"), ("two", "2")]:
        result = tools.call("edit_file", {"path": "notes.md", "old_text": old, "new_text": new},
                            ctx)
        assert not result.is_error, result.content
    assert not tools.call("write_file", {"path": "notes.md", "content": "fresh\n"}, ctx).is_error
    assert not tools.call("write_file", {"path": "notes.md", "content": "more\n", "append": True},
                          ctx).is_error
    result = tools.call("edit_file", {"path": "notes.md", "old_text": "more", "new_text": "last"},
                        ctx)
    assert not result.is_error
    assert (root / "notes.md").read_text() == "fresh\nlast\n"


def test_an_edit_by_another_trace_makes_this_traces_edit_stale(root, tools):
    mine, theirs = ToolContext(root, "mine"), ToolContext(root, "theirs")
    tools.call("read_file", {"path": "notes.md"}, mine)
    assert not tools.call("edit_file", {"path": "notes.md", "old_text": "one", "new_text": "1"},
                          theirs).is_error
    result = tools.call("edit_file", {"path": "notes.md", "old_text": "two", "new_text": "2"}, mine)
    assert result.is_error and STALE in result.content
    assert (root / "notes.md").read_text() == "1\ntwo\n"


def test_an_append_does_not_count_as_seeing_a_change_the_trace_missed(root, tools):
    ctx = ToolContext(root, "t")
    tools.call("read_file", {"path": "notes.md"}, ctx)
    (root / "notes.md").write_text("one\nTWO\n")
    assert not tools.call("write_file", {"path": "notes.md", "content": "three\n",
                                         "append": True}, ctx).is_error
    result = tools.call("edit_file", {"path": "notes.md", "old_text": "one", "new_text": "1"}, ctx)
    assert result.is_error and STALE in result.content


def test_a_file_never_read_can_be_edited(root, tools):
    result = tools.call("edit_file", {"path": "notes.md", "old_text": "one", "new_text": "1"},
                        ToolContext(root, "t"))
    assert not result.is_error


def run_together(jobs) -> None:
    """Run the callables on threads started at once; re-raise the first failure."""
    start = threading.Barrier(len(jobs))
    errors: list[BaseException] = []

    def run(job):
        start.wait()
        try:
            job()
        except BaseException as exc:  # noqa: BLE001 — reported by the test below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors


def test_two_traces_appending_at_once_keep_all_one_hundred_lines(root, tools):
    def append(trace: str):
        ctx = ToolContext(root, trace)
        for n in range(50):
            result = tools.call("write_file", {"path": "log.md", "content": f"{trace} {n}\n",
                                               "append": True}, ctx)
            assert not result.is_error, result.content

    run_together([lambda: append("a"), lambda: append("b")])
    lines = (root / "log.md").read_text().splitlines()
    assert sorted(lines) == sorted(f"{t} {n}" for t in "ab" for n in range(50))


def test_edits_at_once_from_separate_runs_keep_every_change(root):
    (root / "log.md").write_text("END\n")

    def edit(trace: str):
        for n in range(50):  # a new run for each edit: none has read the file before
            result = ToolRegistry(file_tools()).call(
                "edit_file", {"path": "log.md", "old_text": "END", "new_text": f"{trace} {n}\nEND"},
                ToolContext(root, trace))
            assert not result.is_error, result.content

    run_together([lambda: edit("a"), lambda: edit("b")])
    lines = (root / "log.md").read_text().splitlines()
    assert lines[-1] == "END"
    assert sorted(lines[:-1]) == sorted(f"{t} {n}" for t in "ab" for n in range(50))
    assert [line for line in lines if line.startswith("a")] == [f"a {n}" for n in range(50)]


def test_changes_take_a_lock_file_under_git_so_other_processes_wait_too(root, tools):
    tools.call("write_file", {"path": "log.md", "content": "x\n"}, ToolContext(root, "t"))
    assert list((root / ".git" / "agentfs" / "locks" / "file-tools").glob("*.lock"))
