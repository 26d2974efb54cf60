"""Carrying commits onto another tip path by path, and the three-way merge of sync,
checked against the real git binary."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentfs.errors import MergeConflict
from agentfs.store.git.carry import carry, merge, new_commits
from agentfs.store.git.repo import GitRepo
from tests.conftest import git


def commit(root: Path, files: dict[str, str | None], message: str) -> str:
    for name, text in files.items():
        path = root / name
        if text is None:
            path.unlink()
            git(root, "rm", "-q", name)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            git(root, "add", name)
    git(root, "commit", "-qm", message)
    return git(root, "rev-parse", "HEAD").strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "r"
    root.mkdir()
    git(root, "init", "-q", "--initial-branch=main")
    commit(root, {"traces/a/m1.md": "a1\n", "traces/b/m1.md": "b1\n", "shared.md": "s\n"}, "base")
    return root


def test_commits_carried_onto_another_tip_keep_both_sides_work(repo):
    base = git(repo, "rev-parse", "HEAD").strip()
    mine = [commit(repo, {"traces/a/m2.md": "a2\n"}, "a: step 2"),
            commit(repo, {"traces/a/m1.md": None, "traces/a/m3.md": "a3\n"}, "a: step 3")]
    git(repo, "checkout", "-q", "-b", "other", base)
    theirs = commit(repo, {"traces/b/m2.md": "b2\n"}, "b: step 2")
    gitrepo = GitRepo(repo)
    assert [c.decode() for c in new_commits(gitrepo, base.encode(), mine[-1].encode())] == mine
    tip = carry(gitrepo, [c.encode() for c in mine], theirs.encode()).decode()
    gitrepo.close()
    files = git(repo, "ls-tree", "-r", "--name-only", tip).split()
    assert files == ["shared.md", "traces/a/m2.md", "traces/a/m3.md", "traces/b/m1.md",
                     "traces/b/m2.md"]
    log = git(repo, "log", "--format=%s", "--first-parent", tip).splitlines()
    assert log == ["a: step 3", "a: step 2", "b: step 2", "base"]
    git(repo, "fsck", "--strict", "--no-dangling")


def test_a_path_changed_on_both_sides_is_a_conflict_when_carried(repo):
    base = git(repo, "rev-parse", "HEAD").strip()
    mine = commit(repo, {"shared.md": "mine\n"}, "mine")
    git(repo, "checkout", "-q", "-b", "other", base)
    theirs = commit(repo, {"shared.md": "theirs\n"}, "theirs")
    with pytest.raises(MergeConflict) as caught:
        carry(GitRepo(repo), [mine.encode()], theirs.encode())
    assert caught.value.paths == ["shared.md"]


def test_merge_keeps_both_sides_of_a_real_conflict_and_resolves_what_it_can(repo):
    base = git(repo, "rev-parse", "HEAD").strip()
    ours = commit(repo, {"shared.md": "mine\n", "traces/a/m1.md": "a1 edited\n"}, "ours")
    git(repo, "checkout", "-q", "-b", "other", base)
    theirs = commit(repo, {"shared.md": "theirs\n", "traces/a/m1.md": "a1 changed\n"}, "theirs")

    def resolve(path, old, mine, other):
        return b"both\n" if path == "traces/a/m1.md" else None

    result = merge(GitRepo(repo), base.encode(), ours.encode(), theirs.encode(),
                   resolve=resolve, message=b"merge\n")
    sha = result.commit.decode()
    assert result.resolved == ["traces/a/m1.md"]
    aside = f"shared.md.conflict-{ours[:12]}"
    assert result.kept_aside == {"shared.md": aside}
    assert git(repo, "show", f"{sha}:shared.md") == "theirs\n"
    assert git(repo, "show", f"{sha}:{aside}") == "mine\n"
    assert git(repo, "show", f"{sha}:traces/a/m1.md") == "both\n"
    assert git(repo, "log", "--format=%P", "-1", sha).split() == [ours, theirs]
    git(repo, "fsck", "--strict", "--no-dangling")


def test_a_file_made_a_link_is_one_change_shown_as_git_shows_it(repo):
    """dulwich reports a type change as a deletion and an addition of one path; read as
    one change, it is carried without a false conflict, and diffed as `git show` does."""
    from agentfs.store.stepdiff import changed_files, render_diff

    base = git(repo, "rev-parse", "HEAD").strip()
    (repo / "shared.md").unlink()
    (repo / "shared.md").symlink_to("traces/a/m1.md")
    git(repo, "add", "shared.md")
    git(repo, "commit", "-qm", "a link now")
    tip = git(repo, "rev-parse", "HEAD").strip()
    git_repo = GitRepo(repo)
    [change] = changed_files(git_repo, tip.encode(), outside=None)
    assert (change.path, change.old[0], change.new[0]) == ("shared.md", 0o100644, 0o120000)
    shown = git(repo, "show", "--format=", tip)
    assert render_diff(git_repo, [change]) == shown
    carried = carry(git_repo, [tip.encode()], base.encode())  # onto its own parent
    assert git(repo, "ls-tree", carried.decode(), "shared.md").startswith("120000")
