"""A git command that fails without a word still gets an error that says something
(`agentfs/store/git/remote.py:said`): a worker stopped with Ctrl-C at a terminal
had its `git push` killed too, and logged `cannot push to origin: ` with nothing
after it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentfs.errors import RemoteError
from agentfs.store.git.remote import GitRemote, RefUpdate


@pytest.fixture
def dying_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `git` first on PATH that says nothing: killed by SIGTERM, or exiting 3."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "git"
    fake.write_text('#!/bin/sh\n[ -e "$0.exit" ] && exit 3\nkill -TERM $$\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return fake


def test_a_push_killed_by_a_signal_says_so(tmp_path: Path, dying_git: Path) -> None:
    remote = GitRemote(tmp_path, "origin")
    with pytest.raises(RemoteError) as info:
        remote.push([RefUpdate("refs/heads/main", "0" * 40, None)])
    assert str(info.value).startswith(
        "cannot push to origin: git was stopped by SIGTERM, before it said anything")


def test_a_fetch_that_exits_without_a_word_says_its_status(tmp_path: Path, dying_git: Path
                                                           ) -> None:
    Path(f"{dying_git}.exit").touch()
    with pytest.raises(RemoteError) as info:
        GitRemote(tmp_path, "origin").fetch(["+refs/heads/main:refs/remotes/origin/main"])
    assert str(info.value).startswith(
        "cannot fetch from origin: git exited with status 3 and said nothing")
