"""Carrying commits onto another tip path by path, and the three-way merge of sync,
checked against the real git binary."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentfs.errors import MergeConflict
from agentfs.remote.tracerefs import fold, unfolded
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




def test_a_carried_commit_is_never_older_than_its_new_parent(repo, monkeypatch):
    """Re-made on a newer tip, a commit keeps its author and author time, and takes the
    tip's commit time if its own is older, so that Git's walks see times in order."""
    base = git(repo, "rev-parse", "HEAD").strip()
    monkeypatch.setenv("GIT_COMMITTER_DATE", "1700000100 +0000")
    mine = commit(repo, {"traces/a/m2.md": "a2\n"}, "a: step 2")
    git(repo, "checkout", "-q", "-b", "other", base)
    monkeypatch.setenv("GIT_COMMITTER_DATE", "1700000900 +0000")
    theirs = commit(repo, {"traces/b/m2.md": "b2\n"}, "b: step 2")
    gitrepo = GitRepo(repo)
    try:
        tip = carry(gitrepo, [mine.encode()], theirs.encode()).decode()
        again = carry(gitrepo, [mine.encode()], theirs.encode()).decode()
    finally:
        gitrepo.close()
    shown = git(repo, "log", "-1", "--format=%at %ct", tip).split()
    assert shown == [git(repo, "log", "-1", "--format=%at", mine).strip(), "1700000900"]
    assert again == tip

def test_a_trace_ref_started_from_a_main_that_a_merge_put_on_its_second_parent_folds(
        repo, monkeypatch):
    """A sync merge puts the person's clone first: the remote's main it merged (with a
    step of trace a) hangs off a second parent. A trace ref b started from that earlier
    main carries only its own step, though commit times out of order (a step re-made
    keeps its times) end `git rev-list b ^main`'s walk before it finds a's step on
    main: carried again, that step would meet a's later one, and b would wait forever."""
    def at(seconds: int) -> None:
        monkeypatch.setenv("GIT_COMMITTER_DATE", f"{1_700_000_000 + seconds} +0000")

    base = git(repo, "rev-parse", "HEAD").strip()
    at(2000)
    old_main = commit(repo, {"traces/a/trace.json": "1\n"}, "a: step")
    at(3000)
    ref = commit(repo, {"traces/b/m2.md": "b2\n"}, "b: step")
    git(repo, "checkout", "-q", "-b", "person", base)
    at(100)
    commit(repo, {"traces/a/inbox/q.md": "q\n"}, "sync: 1 file")
    git(repo, "merge", "-q", "--no-edit", old_main)
    for n in range(8):  # a's later steps, pushed by a clock behind the others
        at(900 - n)
        commit(repo, {"traces/a/trace.json": f"{n + 2}\n"}, f"a: step {n + 2}")
    at(4000)
    main = commit(repo, {"traces/c/m1.md": "c1\n"}, "c: step")
    gitrepo = GitRepo(repo)
    try:
        assert unfolded(gitrepo, main, {"b": ref}) == {"b": [ref.encode()]}
        folded = fold(gitrepo, main, {"b": ref})
    finally:
        gitrepo.close()
    assert (folded.left, folded.taken) == ({}, {"b": ref})
    log = git(repo, "log", "--format=%s", "--first-parent", folded.tip).splitlines()
    assert log[:3] == ["b: step", "c: step", "a: step 9"]
    assert git(repo, "show", f"{folded.tip}:traces/a/trace.json") == "9\n"
