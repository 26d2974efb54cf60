"""Reading part of a long trace: one message, a window of sequences, the last messages
of the main path, reading only those (`MessageDir.one`/`window`, `Trace.path_slice`)."""

from __future__ import annotations

import os
import time

import pytest

from agentfs.core.project import Project
from agentfs.errors import AgentfsError, MessageFileError
from agentfs.store import message_dir as message_dir_module
from agentfs.store.message_dir import shard_name
from agentfs.store.messages import Message, render_message
from agentfs.store.stamps import RACY_NS
from agentfs.store.trace import Fold, Trace
from tests.conftest import long_trace as write_long_trace


def long_trace(project: Project, count: int, *, parents: dict[int, int | None] | None = None
               ) -> Trace:
    """Trace `demo` with messages 1..count on disk (`tests/conftest.py:long_trace`), as a
    new process opens it."""
    write_long_trace(project, "demo", count, parents=parents)
    return Project.open(project.workspace.root).trace("demo")


def sequences(messages: list[Message]) -> list[int]:
    return [m.sequence for m in messages]


def test_the_tail_reads_only_its_own_folders(project: Project) -> None:
    trace = long_trace(project, 1100)
    broken = trace.messages_dir / shard_name(500) / "000500-user.md"
    broken.write_text("---\nnot: [closed\n")  # a folder the tail never reads
    tail = trace.path_slice(50)
    assert sequences(tail.messages) == list(range(1051, 1101))
    assert tail.older == 1051
    with pytest.raises(MessageFileError):
        trace.messages()  # the whole trace does read it


def test_pages_before_each_other_make_the_main_path(project: Project) -> None:
    trace = long_trace(project, 1100)
    pages, before = [], None
    while True:
        page = trace.path_slice(400, before=before)
        pages.insert(0, sequences(page.messages))
        if page.older is None:
            break
        before = page.older
    assert [s for page in pages for s in page] == sequences(trace.main_path())
    assert pages[0][0] == 1 and len(pages) == 3


def test_a_slice_follows_a_compression_jump_and_stops_at_since(project: Project) -> None:
    trace = long_trace(project, 1500, parents={1400: 2})  # #1400: a summary continuing #2
    assert sequences(trace.path_slice(5).messages) == [1496, 1497, 1498, 1499, 1500]
    jump = trace.path_slice(103)
    assert sequences(jump.messages) == [1, 2, *range(1400, 1501)]
    assert jump.older is None
    since = trace.path_slice(since=1450)
    assert sequences(since.messages) == list(range(1450, 1501))
    assert since.older == 1450  # more of the path lies before it
    assert sequences(trace.path_slice(since=1450, limit=3).messages) == [1498, 1499, 1500]


def test_one_window_and_previous_read_by_sequence(project: Project) -> None:
    trace = long_trace(project, 1010, parents={1001: None})  # #1001: no parent_sequence
    for gone in (1000, 999):
        trace.message_dir.path_of(trace.message_dir.one(gone)).unlink()
    messages = trace.message_dir
    assert messages.one(1005).text == "#1005"
    assert messages.one(1000) is None and messages.one(5000) is None
    assert sequences(list(messages.window(995, 1003).values())) == [995, 996, 997, 998, 1001, 1002]
    assert messages.previous(1001) == 998  # across a folder's boundary, by name only
    assert messages.previous(1) is None
    # a file without parent_sequence follows the file before it, as on the whole path
    assert sequences(trace.path_slice(4, before=1002).messages) == [996, 997, 998, 1001]


def test_before_must_name_a_message(project: Project) -> None:
    trace = long_trace(project, 10)
    with pytest.raises(AgentfsError) as info:
        trace.path_slice(5, before=99)
    assert "no message #99" in info.value.message and "older" in (info.value.hint or "")


def test_a_window_tells_what_a_file_is_as_the_whole_listing_does(project: Project,
                                                                 tmp_path) -> None:
    trace = long_trace(project, 40)
    folder = trace.messages_dir / shard_name(0)
    (folder / "000050-user.md").mkdir()  # a folder named like a message file: no message
    os.mkfifo(folder / "000051-user.md")  # nor a FIFO
    (folder / "000052-user.md.swp").write_text("an editor's")  # a temp file: ignored
    for gone in (12, 13):  # a gap
        trace.message_dir.path_of(trace.message_dir.one(gone)).unlink()
    whole = trace.message_dir.messages(refresh=True)
    for first, end in ((1, None), (5, 20), (11, 14), (30, 60), (45, None)):
        window = trace.message_dir.window(first, end)
        assert window == {n: m for n, m in whole.items()
                          if n >= first and (end is None or n < end)}, (first, end)
    linked = trace.message_dir.path_of(whole[20])
    outside = tmp_path / "outside.md"
    outside.write_bytes(linked.read_bytes())
    linked.unlink()
    linked.symlink_to(outside)  # a link: refused, by name
    for read in (lambda: trace.message_dir.window(15, 25),
                 lambda: trace.message_dir.messages(refresh=True)):
        with pytest.raises(MessageFileError, match=f"{linked.name}: is a symlink"):
            read()
    assert trace.message_dir.window(21, 25) == {n: whole[n] for n in range(21, 25)}


def test_a_page_of_a_folder_that_did_not_change_is_read_without_listing_it(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server pages through a folder of 1,000 files: its names are listed for the
    first page and kept while the folder keeps its stamp (settled), so the next pages
    `lstat` their own files only; a file added or removed is seen at once."""
    trace = long_trace(project, 40)
    folder = trace.messages_dir / shard_name(0)
    (folder / "000050-user.md").mkdir()  # still no message when the names are kept
    os.mkfifo(folder / "000051-user.md")
    time.sleep(RACY_NS / 1e9 + 0.05)  # the folder's last change settled
    messages = trace.message_dir
    whole = messages.messages(refresh=True)
    listed: list[str] = []
    real = message_dir_module._file_names

    def listing(path, *args, **kwargs):
        listed.append(str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(message_dir_module, "_file_names", listing)
    assert messages.window(5, 60) == {n: m for n, m in whole.items() if 5 <= n < 60}
    assert messages.window(10, 20) == {n: whole[n] for n in range(10, 20)}
    assert messages.window(38) == {n: whole[n] for n in (38, 39, 40)}
    assert listed == [str(folder)]  # for the first page only

    (folder / "000041-user.md").write_bytes(
        render_message(Message(id="x", sequence=41, parent_sequence=40, role="user", content="x")))
    messages.path_of(whole[7]).unlink()
    for _ in range(2):  # changed moments ago: listed each time until it settles
        window = messages.window(5, 60)
        assert 41 in window and 7 not in window
        assert sorted(window) == [*range(5, 7), *range(8, 42)]
    assert listed == [str(folder)] * 3


def test_a_window_refuses_a_misplaced_file_from_kept_names_too(project: Project) -> None:
    trace = long_trace(project, 1010)
    (trace.messages_dir / shard_name(0) / "001500-user.md").write_bytes(
        render_message(Message(id="x", sequence=1500, parent_sequence=None, role="user",
                               content="in the wrong folder")))
    for _ in range(2):  # listed, then (settled) from the names kept
        with pytest.raises(MessageFileError, match="001500-user.md"):
            trace.message_dir.window(990, 2000)
        time.sleep(RACY_NS / 1e9 + 0.05)
    assert 1500 not in trace.message_dir.sequences(0)  # not a message of that folder


def test_a_folder_named_like_a_message_file_is_never_a_sequence(project: Project) -> None:
    """The listing for the next sequence (`previous(afresh=True)`) takes a folder's
    name too, so a new file never lands on it; what it found is not kept for
    `sequences`, which counts message files."""
    trace = long_trace(project, 40)
    (trace.messages_dir / shard_name(0) / "000050-user.md").mkdir()
    time.sleep(RACY_NS / 1e9 + 0.05)
    messages = trace.message_dir
    assert messages.previous(60, afresh=True) == 50
    assert messages.sequences(35) == [35, 36, 37, 38, 39, 40]


def test_a_loose_file_sharing_a_sequence_is_refused_in_a_window(project: Project) -> None:
    trace = long_trace(project, 10)
    (trace.messages_dir / "000007-user.md").write_bytes(
        render_message(Message(id="x", sequence=7, parent_sequence=6, role="user", content="x")))
    with pytest.raises(MessageFileError) as info:
        trace.message_dir.window(5, 9)
    assert "also used by" in info.value.message


def test_a_view_folds_long_runs_off_the_path_without_reading_them(project: Project) -> None:
    # #1400 continues #2 (as a summary would): #3-#1399 are off the path
    trace = long_trace(project, 1500, parents={1400: 2, 1480: 1470})  # and #1471-#1479
    broken = trace.messages_dir / shard_name(500) / "000500-user.md"
    broken.write_text("---\nnot: [closed\n")  # inside the fold: never read
    view = trace.view(200)
    assert [m.sequence for m in view.path][:3] == [1, 2, 1400]
    assert view.folds == (Fold(after=2, before=1400, first=3, last=1399, count=1397),)
    assert sorted(view.messages) == [1, 2, *range(1400, 1501)]  # a run of 9 stays
    assert trace.message_dir.sequences(995, 1003) == list(range(995, 1003))
    # the fold is read a page at a time, up to the broken file
    page, following = trace.files_from(3, 1400, 100)
    assert sequences(page) == list(range(3, 103)) and following == 103
    page, following = trace.files_from(1390, 1400, 100)
    assert sequences(page) == list(range(1390, 1400)) and following is None
    with pytest.raises(MessageFileError):
        trace.files_from(450, 1400, 100)


def test_sequences_come_from_names_and_see_a_folder_change(project: Project) -> None:
    trace = long_trace(project, 30)
    folder = trace.messages_dir / shard_name(0)
    time.sleep(RACY_NS / 1e9 + 0.05)  # the folder's last change settled: its names are kept
    messages = trace.message_dir
    assert messages.sequences(5, 9) == [5, 6, 7, 8]
    assert shard_name(0) in messages._names
    assert messages.sequences(0, limit=3) == [1, 2, 3, 4]  # the first 3 and the next
    (folder / "000031-user.md").write_bytes(
        render_message(Message(id="x", sequence=31, parent_sequence=30, role="user", content="x")))
    (folder / "notes.txt").write_text("not a message")
    (folder / "x\n000040-user.md").write_text("a name with a line break is no message")
    assert messages.sequences(29) == [29, 30, 31]  # listed again: the folder changed
