"""The folders' sequences saved across processes (`agentfs/store/foldernames.py`): a new
process answers `MessageDir.sequences` and a folded view from them without listing the
folders that did not change, sees every change, and ignores a damaged file."""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from agentfs.core.project import Project
from agentfs.store import dirmemory, foldernames
from agentfs.store import message_dir as message_dir_module
from agentfs.store.message_dir import SHARD_SIZE, MessageDir, shard_name
from agentfs.store.stamps import RACY_NS
from agentfs.store.trace import Trace
from tests.conftest import long_trace


def settle() -> None:
    """Let the folders' last changes settle, so their names are kept (and saved)."""
    time.sleep(RACY_NS / 1e9 + 0.05)


def new_process(root: Path) -> Trace:
    """Trace `demo` as a new process opens it: nothing listed or parsed in memory."""
    dirmemory.forget()
    return Project.open(root).trace("demo")


def folders_listed(monkeypatch: pytest.MonkeyPatch, messages: Path) -> list[str]:
    """The folders of `messages` listed from now on (`_file_names`): to learn what
    their names tell (what the folders' names are saved for), or the names of a
    page's own files (`MessageDir.window`), once per folder while it does not
    change."""
    listed: list[str] = []
    real = message_dir_module._file_names

    def listing(path: Path, *args, **kwargs) -> list[str]:
        if Path(path).parent == messages:
            listed.append(Path(path).name)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(message_dir_module, "_file_names", listing)
    return listed


def on_disk(messages: Path) -> list[int]:
    """The sequences of the message files below `messages`, listed here."""
    return sorted(int(p.name[:6]) for p in messages.rglob("*.md"))


@pytest.fixture
def compressed(project: Project) -> Trace:
    """Trace `demo` of 2,500 messages in three folders, #2450 continuing #2 (as a
    summary would): #3-#2449 are a fold; its folders' names saved by a first view."""
    long_trace(project, "demo", 2500, parents={2450: 2})
    settle()
    trace = new_process(project.workspace.root)
    assert trace.view(100).folds  # lists the folders of the fold, saves their names
    return trace


def test_a_new_process_answers_from_the_saved_names(
        project: Project, compressed: Trace, monkeypatch: pytest.MonkeyPatch) -> None:
    saved = json.loads(project.workspace.folder_names("demo").read_bytes())
    assert saved["folders"][shard_name(0)][3] == [[1, 999]]  # a dense folder: one run
    assert saved["folders"][shard_name(1000)][3] == [[1000, 1999]]
    listed = folders_listed(monkeypatch, compressed.messages_dir)
    trace = new_process(project.workspace.root)
    view = trace.view(100)
    assert [m.sequence for m in view.path][:3] == [1, 2, 2450]
    assert view.folds[0].count == 2447
    assert trace.message_dir.sequences(990, 1010) == list(range(990, 1010))
    assert trace.message_dir.previous(1000) == 999
    page, following = trace.files_from(3, 2450, 10)
    assert [m.sequence for m in page] == list(range(3, 13)) and following == 13
    # the folders of the pages' own files, once each; not one of the fold's
    assert sorted(listed) == [shard_name(0), shard_name(2000)]


def test_a_new_server_paints_a_folded_tree_without_listing_its_folders(
        project: Project, compressed: Trace, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentfs.server.app import create_app

    listed = folders_listed(monkeypatch, compressed.messages_dir)
    new_process(project.workspace.root)

    def no_model(*_: object) -> None:
        raise AssertionError("no model is called")

    app, _ = create_app(Project.open(project.workspace.root), no_model, access=None,
                        loopback=True, max_body=1 << 20)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        answer = client.get("/api/traces/demo/tree", params={"limit": 100})
    tree = answer.json()
    assert answer.status_code == 200, tree
    assert [(f["first"], f["last"], f["count"]) for f in tree["folds"]] == [(3, 2449, 2447)]
    assert sorted(listed) == [shard_name(0), shard_name(2000)]  # the page's, not the fold's


def test_a_change_after_saving_is_seen(
        project: Project, compressed: Trace, monkeypatch: pytest.MonkeyPatch) -> None:
    messages = compressed.messages_dir
    (messages / shard_name(0) / "000500-user.md").unlink()
    os.rename(messages / shard_name(1000) / "001500-user.md",
              messages / shard_name(1000) / "001500-user.md.bak")
    shutil.copy(messages / shard_name(1000) / "001502-user.md",
                messages / shard_name(1000) / "001998-user.md")
    (messages / shard_name(1000) / "001998-user.md").unlink()  # added, then removed
    shutil.copy(messages / shard_name(2000) / "002001-assistant.md",
                messages / shard_name(2000) / "002600-user.md")
    settle()
    listed = folders_listed(monkeypatch, messages)
    trace = new_process(project.workspace.root)
    expected = on_disk(messages)
    assert trace.message_dir.sequences(0) == expected
    assert 500 not in expected and 1500 not in expected and 2600 in expected
    assert sorted(listed) == [shard_name(0), shard_name(1000), shard_name(2000)]
    listed.clear()
    assert new_process(project.workspace.root).message_dir.sequences(0) == expected
    assert listed == []  # the changed folders were saved anew
    shutil.rmtree(messages / shard_name(1000))  # a folder gone
    assert new_process(project.workspace.root).message_dir.sequences(0) == on_disk(messages)
    saved = json.loads(project.workspace.folder_names("demo").read_bytes())
    assert shard_name(1000) not in saved["folders"]


def test_a_folder_changed_moments_ago_is_not_saved(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    long_trace(project, "demo", 1200)
    newest = project.workspace.root / "traces" / "demo" / "messages" / shard_name(1000)
    changed = max(os.stat(newest).st_mtime_ns, os.stat(newest).st_ctime_ns)
    # the folder of #1000-#1200 was written a moment ago (whatever the machine's
    # load): a change in the same clock tick could keep its stamp, so its names are
    # listed again next time (the racy rule)
    monkeypatch.setattr(message_dir_module.time, "time_ns", lambda: changed + RACY_NS // 2)
    trace = new_process(project.workspace.root)
    assert trace.message_dir.sequences(0) == list(range(1, 1201))
    saved = project.workspace.folder_names("demo")
    # the folder of #1-#999 may be saved: on a busy machine it settled before the end
    assert not saved.exists() or newest.name not in json.loads(saved.read_bytes())["folders"]


#: Saved files that are not names files: each is ignored.
DAMAGED = [
    b"not json", b'{"format": 1, "folders": {"000000-000999": [1, 2', b"[]", b"null",
    json.dumps({"format": 99, "folders": {}}).encode(),
    json.dumps({"format": foldernames.FORMAT, "folders": []}).encode(),
    json.dumps({"format": foldernames.FORMAT, "folders": {"notes": [1, 2, 3, [[1, 2]]]}}).encode(),
    b"[" * 100_000 + b"]" * 100_000,  # nested past the parser's depth
]
#: Runs of another shape for the folder of #1-#999: outside it, below it, out of order,
#: not integers, not pairs, not a list.
WRONG_RUNS: list[object] = [
    [[1, 999], [1000, 1005]], [[-5, 999]], [[500, 999], [1, 499]], [[1, 999.0]],
    [[True, 999]], [[1, 2, 3]], "1-999", [[1, 999], None],
]


def test_a_damaged_or_foreign_names_file_is_ignored(project: Project, compressed: Trace) -> None:
    saved = project.workspace.folder_names("demo")
    for damage in DAMAGED:
        saved.write_bytes(damage)
        trace = new_process(project.workspace.root)
        assert trace.message_dir.sequences(0) == list(range(1, 2501)), damage
        assert trace.view(100).folds[0].count == 2447


def test_a_names_entry_of_the_wrong_shape_is_listed_again(
        project: Project, compressed: Trace) -> None:
    """Even with the folder's true stamp, an entry of another shape is not used."""
    saved = project.workspace.folder_names("demo")
    stamp = json.loads(saved.read_bytes())["folders"][shard_name(0)][:3]
    for runs in WRONG_RUNS:
        saved.write_text(json.dumps({"format": foldernames.FORMAT,
                                     "folders": {shard_name(0): [*stamp, runs]}}))
        trace = new_process(project.workspace.root)
        assert trace.message_dir.sequences(0, 1010) == list(range(1, 1010)), runs
        assert trace.message_dir.previous(1000) == 999


def test_runs() -> None:
    assert foldernames.runs([]) == []
    assert foldernames.runs([1, 2, 3, 5, 7, 8]) == [[1, 3], [5, 5], [7, 8]]
    assert foldernames.runs(list(range(1000))) == [[0, 999]]
    assert foldernames.runs([0, 1, 2, 3, 5]) == [[0, 3], [5, 5]]
    assert foldernames.runs([1, 1, 3]) == [[1, 1], [1, 1], [3, 3]]


@pytest.mark.parametrize("seed", range(4))
def test_sparse_folders_give_the_same_answers_with_and_without_saved_names(
        tmp_path: Path, seed: int) -> None:
    """...and those answers are the message files' sequences in order: a file in the
    wrong folder or a folder named like a message file is none."""
    rng = random.Random(seed)
    messages, cache = tmp_path / "messages", tmp_path / "cache"
    present: list[int] = []
    for folder in range(5):
        density = rng.choice((0.0, 0.01, 0.3, 0.97, 1.0))
        start = folder * SHARD_SIZE
        chosen = [n for n in range(start, start + SHARD_SIZE) if rng.random() < density]
        (messages / shard_name(start)).mkdir(parents=True)
        for n in chosen:
            (messages / shard_name(start) / f"{n:06d}-{rng.choice(('user', 'assistant'))}.md"
             ).touch()
        present.extend(chosen)
    (messages / shard_name(0) / "notes.txt").touch()
    (messages / shard_name(3000) / "003007-user.md").touch()  # a sequence two files share
    (messages / shard_name(3000) / "003007-assistant.md").touch()
    present = sorted([*(n for n in present if n != 3007), 3007, 3007])
    (messages / shard_name(0) / "004500-user.md").touch()  # misplaced: no message here
    (messages / shard_name(5000) / "005001-user.md").mkdir(parents=True)  # no file at all
    settle()

    def opened(names: Path | None) -> MessageDir:
        dirmemory.forget()
        return MessageDir(messages, cache / "x.parsed", cache, durable=False, names_path=names)

    queries = [(rng.randrange(0, 5200), rng.choice((None, rng.randrange(0, 5200))),
                rng.choice((None, 0, 7, 300))) for _ in range(30)]
    asked = [rng.randrange(0, 5200) for _ in range(30)] + [5002, 4501]

    def answers(found: MessageDir) -> tuple[list, list]:
        return ([found.sequences(first, end, limit) for first, end, limit in queries],
                [found.previous(n) for n in asked])

    without = answers(opened(None))
    assert without[1][-2:] == [max(present), max(n for n in present if n <= 4500)]
    assert opened(cache / "x.names").sequences(0) == present  # saves the names
    assert answers(opened(cache / "x.names")) == without
    assert without[0][0] == [n for n in present if n >= queries[0][0]
                             and (queries[0][1] is None or n < queries[0][1])
                             ][:None if queries[0][2] is None else queries[0][2] + 1]


def test_the_next_sequence_never_comes_from_a_stale_entry(
        project: Project, compressed: Trace) -> None:
    """An entry with the newest folder's true stamp but fewer names (as a clock behind
    the file system's can leave) does not make a new message reuse a sequence."""
    saved = project.workspace.folder_names("demo")
    data = json.loads(saved.read_bytes())
    newest = shard_name(2000)
    data["folders"][newest] = [*data["folders"][newest][:3], [[2000, 2200]]]
    saved.write_text(json.dumps(data))
    trace = new_process(project.workspace.root)
    assert trace.message_dir.highest() == 2500
    assert trace.next_sequence() == 2501


def test_saved_names_of_folders_that_do_not_exist_are_never_expanded(
        project: Project, compressed: Trace) -> None:
    """A foreign file naming many folders (each a run of 1,000) costs only its parse."""
    saved = project.workspace.folder_names("demo")
    data = json.loads(saved.read_bytes())
    for n in range(10, 5_000):
        data["folders"][shard_name(n * SHARD_SIZE)] = [1, 2, 3, [[n * SHARD_SIZE, n * SHARD_SIZE + 999]]]
    saved.write_text(json.dumps(data))
    trace = new_process(project.workspace.root)
    assert trace.message_dir.highest() == 2500
    assert trace.message_dir.sequences(0) == list(range(1, 2501))
    kept = trace.message_dir._names
    assert set(kept) <= {shard_name(0), shard_name(1000), shard_name(2000)}
