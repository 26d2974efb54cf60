"""A large index is written split (a small .git/index over a shared one), and the real
`git` reads, writes and keeps it consistent with what agentfs commits."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentfs.errors import GitStateError
from agentfs.store.git import index as index_module
from agentfs.store.git import rawindex, splitindex
from agentfs.store.git.repo import GitRepo, init_repo
from tests.conftest import assert_git_clean, git


@given(st.lists(st.integers(min_value=0, max_value=5000), unique=True))
def test_ewah_bitmaps_read_back_as_written(bits: list[int]) -> None:
    bits.sort()
    data = splitindex.encode_ewah(bits)
    assert splitindex.decode_ewah(b"xx" + data, 2) == (bits, 2 + len(data))


@pytest.fixture
def repo(tmp_path: Path, monkeypatch) -> GitRepo:
    monkeypatch.setattr(index_module, "SPLIT_AT", 40)
    root = tmp_path / "ws"
    root.mkdir()
    init_repo(root)
    return GitRepo(root)


def step(repo: GitRepo, n: int) -> None:
    """A trace-like step: one new file, one file that changes every time."""
    (repo.root / "m").mkdir(exist_ok=True)
    (repo.root / f"m/{n:04d}.md").write_text(f"message {n}\n")
    (repo.root / "state.json").write_text(f'{{"head": {n}}}\n')
    repo.commit_worktree([f"m/{n:04d}.md", "state.json"], f"step {n}\n".encode())


def shared_files(repo: GitRepo) -> list[str]:
    return sorted(n for n in os.listdir(repo.git_dir) if n.startswith("sharedindex."))


def test_a_large_index_is_written_split_and_git_agrees(repo: GitRepo) -> None:
    for n in range(200):
        step(repo, n)
    data = (repo.git_dir / "index").read_bytes()
    assert b"link" in data and shared_files(repo)
    assert len(data) < 100 * index_module.max_changes(201)  # not the whole index
    assert len(git(repo.root, "ls-files").split()) == 201
    assert_git_clean(repo.root)
    assert git(repo.root, "diff", "--cached", "--name-only", "HEAD") == ""
    git(repo.root, "fsck", "--strict")


def test_a_step_writes_the_changes_not_the_whole_index(repo: GitRepo) -> None:
    for n in range(300):
        step(repo, n)
    sizes = []
    for n in range(300, 340):
        step(repo, n)
        sizes.append(os.path.getsize(repo.git_dir / "index"))
    whole = len(rawindex.load(repo.git_dir / "index")[0].unsplit().encode())
    assert max(sizes) < whole / 2


def test_an_index_git_split_and_changed_is_read_and_kept(repo: GitRepo) -> None:
    root = repo.root
    for n in range(60):
        step(repo, n)
    git(root, "update-index", "--no-split-index")
    git(root, "update-index", "--split-index")  # git's own shared index
    (root / "m/0003.md").write_text("changed by hand\n")
    git(root, "add", "m/0003.md")  # a replaced entry (stored with an empty name)
    git(root, "rm", "-q", "--cached", "m/0005.md")  # a deleted one
    (root / "mine.txt").write_text("mine\n")
    git(root, "add", "mine.txt")  # an added one
    git(root, "commit", "-q", "-m", "by hand")
    (root / "m/0005.md").unlink()  # untracked since that commit
    for n in range(60, 80):
        step(repo, n)
    assert_git_clean(root)
    files = git(root, "ls-files").split()
    assert "mine.txt" in files and "m/0005.md" not in files and "m/0079.md" in files
    assert git(root, "show", "HEAD:m/0003.md") == "changed by hand\n"
    git(root, "fsck", "--strict")


def test_core_split_index_false_keeps_the_index_whole(repo: GitRepo) -> None:
    git(repo.root, "config", "core.splitIndex", "false")
    repo = GitRepo(repo.root)
    for n in range(60):
        step(repo, n)
    assert b"link" not in (repo.git_dir / "index").read_bytes()
    assert shared_files(repo) == []
    assert_git_clean(repo.root)


def test_old_shared_indexes_go_once_expired_the_named_one_stays(repo: GitRepo) -> None:
    for n in range(300):
        step(repo, n)
    old = shared_files(repo)
    assert len(old) >= 2  # written again as the changes grew; recent ones are kept
    past = 0
    for name in old:
        os.utime(repo.git_dir / name, (past, past))
    in_use = rawindex.load(repo.git_dir / "index")[0].base
    assert in_use is not None
    while shared_files(repo) == old:  # until the next shared index is written
        step(repo, n := n + 1)
    named = rawindex.load(repo.git_dir / "index")[0].base
    assert named is not None
    # the one named until now was in use a moment ago (freshened): it expires later
    assert shared_files(repo) == sorted({f"sharedindex.{named[0].hex()}",
                                         f"sharedindex.{in_use[0].hex()}"})
    assert_git_clean(repo.root)


def test_a_shared_index_in_use_is_kept_fresh_so_no_process_expires_it(repo: GitRepo) -> None:
    for n in range(300):
        step(repo, n)
    named = rawindex.load(repo.git_dir / "index")[0].base
    assert named is not None
    path = repo.git_dir / f"sharedindex.{named[0].hex()}"
    os.utime(path, (0, 0))  # written long ago, in use ever since
    step(repo, n + 1)
    assert rawindex.load(repo.git_dir / "index")[0].base[0] == named[0]  # still the base
    assert time.time() - path.stat().st_mtime < 60


def test_processes_sharing_a_split_index_lose_no_entry(repo: GitRepo) -> None:
    """Another process's write is read back (shared index included), not overwritten."""
    other = GitRepo(repo.root)
    rng = random.Random(7)
    for n in range(150):
        writer = rng.choice([repo, other])
        rawindex._cache.clear() if rng.random() < 0.3 else None
        rawindex._shared_cache.clear() if rng.random() < 0.3 else None
        step(writer, n)
    assert len(git(repo.root, "ls-files").split()) == 151
    assert_git_clean(repo.root)


def test_a_split_index_whose_shared_index_is_gone_is_refused_before_main_moves(
    repo: GitRepo,
) -> None:
    for n in range(60):
        step(repo, n)
    for name in shared_files(repo):
        (repo.git_dir / name).unlink()
    rawindex._cache.clear()
    rawindex._shared_cache.clear()
    before = repo.head()
    with pytest.raises(GitStateError) as info:
        step(repo, 60)
    assert "git read-tree HEAD" in str(info.value)
    assert repo.head() == before
    assert "m/0059.md" in git(repo.root, "ls-tree", "-r", "--name-only", "HEAD")
