"""A workspace that belongs to another user than agentfs's, for agentfs running as root."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentfs.core.project import init_workspace

#: The uid and gid the other user's workspace belongs to (`nobody` on Debian).
NOBODY = 65534
needs_root = pytest.mark.skipif(
    os.getuid() != 0, reason="needs agentfs to run as root (CI does): a workspace of "
    "another user, or root's own sandbox")


def chown_tree(root: Path, uid: int, gid: int) -> None:
    for directory, dirnames, filenames in os.walk(root):
        os.chown(directory, uid, gid)
        for name in dirnames + filenames:
            os.chown(os.path.join(directory, name), uid, gid, follow_symlinks=False)


@pytest.fixture
def nobodys_workspace(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A workspace owned by uid 65534, for agentfs running as root. It lies in a folder
    every user may enter (pytest's own temporary folders are root's alone), and git,
    run as root by the tests, is told to trust a repository owned by another user."""
    if os.getuid() != 0:
        pytest.skip("chowning a workspace to another user needs root")
    parent = Path(tempfile.mkdtemp(prefix="agentfs-owned-", dir="/var/tmp"))
    try:
        parent.chmod(0o755)
        root = parent / "ws"
        init_workspace(root)
        chown_tree(root, NOBODY, NOBODY)
        git_config = parent / "gitconfig"
        git_config.write_text("[safe]\n\tdirectory = *\n")
        monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(git_config))
        yield root.resolve()
    finally:
        shutil.rmtree(parent)
