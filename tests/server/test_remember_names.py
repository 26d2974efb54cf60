"""A new server lists the message folders of long traces once, on a thread of its own
(`agentfs/server/app.py:remember_names`), so the page's first view of a long
compressed trace after a clone does not list them while its visitor waits."""

from __future__ import annotations

import functools
import threading
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

import agentfs.server.app
from agentfs.core.project import Project
from agentfs.server.app import create_app, remember_names
from agentfs.store.message_dir import shard_name
from tests.conftest import assert_git_clean, long_trace, run_cli
from tests.store.test_foldernames import folders_listed, new_process, settle


@pytest.fixture
def cloned(project: Project) -> Project:
    """Trace `demo` of 2,500 messages in three folders, #2450 continuing #2 (as a
    summary would), and trace `short` of a few in one folder; no view of either yet,
    so no folder's names are saved (as after a clone)."""
    long_trace(project, "demo", 2500, parents={2450: 2}, commit=True)
    long_trace(project, "short", 5, commit=True)
    settle()
    assert not project.workspace.folder_names("demo").exists()
    return project


def test_the_names_a_first_view_would_list_are_saved_ahead_of_it(
        cloned: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    root = cloned.workspace.root
    new_process(root)
    assert remember_names(Project.open(root), threading.Event(), more_than=2) == ["demo"]

    assert cloned.workspace.folder_names("demo").exists()
    assert not cloned.workspace.folder_names("short").exists()  # one folder: left to its view
    listed = folders_listed(monkeypatch, cloned.trace("demo").messages_dir)
    new_process(root)  # the server's next process, or a visitor after the thread

    def no_model(*_: object) -> None:
        raise AssertionError("no model is called")

    app, _ = create_app(Project.open(root), no_model, access=None, loopback=True,
                        max_body=1 << 20)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        answer = client.get("/api/traces/demo/tree", params={"limit": 100})
    tree = answer.json()
    assert answer.status_code == 200, tree
    assert [(f["first"], f["last"], f["count"]) for f in tree["folds"]] == [(3, 2449, 2447)]
    assert shard_name(1000) not in listed  # the fold's folder, only inside it: not listed
    assert_git_clean(root)


def test_a_trace_with_few_folders_or_a_stopped_server_lists_nothing(cloned: Project) -> None:
    root = cloned.workspace.root
    assert remember_names(Project.open(root), threading.Event(), more_than=3) == []
    stopped = threading.Event()
    stopped.set()
    assert remember_names(Project.open(root), stopped, more_than=0) == []
    assert not cloned.workspace.folder_names("demo").exists()


def test_agentfs_serve_lists_them_once_it_listens(
        cloned: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    import uvicorn

    looked: list[list[str]] = []

    def remember(project: Project, stop: threading.Event) -> list[str]:
        # the stubbed server stops at once: serve's stop would come before "demo"
        looked.append(remember_names(project, threading.Event(), more_than=2))
        return looked[-1]

    monkeypatch.setattr(agentfs.server.app, "remember_names", remember)
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: None)
    done = run_cli("serve", "--port", "0", cwd=cloned.workspace.root)
    assert done.returncode == 0, done.stderr
    assert looked == [["demo"]]  # done before serve returned: it waits for the thread
    assert cloned.workspace.folder_names("demo").exists()


def test_a_failing_listing_is_said_and_the_server_runs(
        cloned: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    import uvicorn

    def failing(project: Project, stop: threading.Event) -> list[str]:
        raise OSError("the disk went away")

    served: list[object] = []
    monkeypatch.setattr(agentfs.server.app, "remember_names", failing)
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: served.append(self))
    done = run_cli("serve", "--port", "0", cwd=cloned.workspace.root)
    assert done.returncode == 0, done.stderr
    assert "listing the folders of long traces failed (OSError('the disk went away'))" \
        in done.stderr
    assert len(served) == 1


def test_by_default_a_trace_of_three_folders_is_left_to_its_first_view(
        cloned: Project) -> None:
    remember = functools.partial(remember_names, Project.open(cloned.workspace.root),
                                 threading.Event())
    assert remember() == []  # 3 folders
    assert not Path(cloned.workspace.folder_names("demo")).exists()
