"""Random histories packed and merged as traces run, checked by the real `git`.

Each step writes, rewrites or deletes files at a few paths that can turn from a
file into a folder and back (whose names hold tree-entry look-alikes), with
contents that are empty, tiny, big, binary, or an earlier content edited, and
commits; packing and merging run often. After the run `git fsck --strict` is
clean and every file of every commit is what was written.
"""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentfs.store.git import packing
from agentfs.store.git.repo import GitRepo, init_repo
from tests.conftest import git

PATHS = ["a", "a/b", "a/c", "d/e", "d/e/f", "d/e/g", "x 100644 y", "x 100644 y/z", "m/n"]

step = st.lists(st.tuples(
    st.sampled_from(PATHS),
    st.one_of(
        st.none(),  # delete
        st.tuples(st.sampled_from(["empty", "small", "edit", "big", "binary", "copy"]),
                  st.integers(0, 2**32)),
    ),
), min_size=1, max_size=4)


def content(kind: str, seed: int, model: dict[str, bytes]) -> bytes:
    rng = random.Random(seed)
    earlier = sorted(model.values(), key=len)
    if kind == "empty":
        return b""
    if kind == "small":
        return b"%d\n" % seed
    if kind == "copy" and earlier:
        return rng.choice(earlier)
    if kind == "edit" and earlier:
        old = bytearray(rng.choice(earlier) or b"x" * 600)
        at = rng.randrange(len(old) + 1)
        old[at : at + rng.randrange(20)] = rng.randbytes(rng.randrange(30))
        return bytes(old)
    if kind == "big":
        return b"".join(b"line %d of %d\n" % (n, seed) for n in range(rng.choice([60, 6000])))
    return rng.randbytes(rng.choice([1, 600, 70_000]))


def remove(root: Path, path: str, model: dict[str, bytes]) -> list[str]:
    """Delete `path` (a file, or a folder and all in it); the files deleted."""
    gone = [p for p in model if p == path or p.startswith(path + "/")]
    for p in gone:
        del model[p]
    target = root / path
    if target.is_dir():
        shutil.rmtree(target)
    elif target.exists():
        target.unlink()
    # and folders left empty (`commit_worktree` leaves out a path that is a folder now)
    folder = target.parent
    while folder != root and folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
        folder = folder.parent
    return gone


def run_history(tmp_path: Path, steps, monkeypatch, merger: str) -> None:
    monkeypatch.setattr(packing, "LOOSE_LIMIT", 8)
    monkeypatch.setattr(packing, "CHECK_EVERY", 1)
    monkeypatch.setattr(packing, "MIN_PACKS", 2)
    monkeypatch.setattr(packing, "DELTA_MIN", 1)
    monkeypatch.setattr(packing, "GIT", "git" if merger == "git" else None)
    root = tmp_path / "ws"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    init_repo(root)
    repo = GitRepo(root)
    model: dict[str, bytes] = {}
    commits = []
    try:
        for changes in steps:
            touched: list[str] = []
            for path, change in changes:
                if change is None:
                    touched += remove(root, path, model)
                    continue
                parts = path.split("/")
                for i in range(1, len(parts)):  # a file where a folder must be
                    ancestor = "/".join(parts[:i])
                    if ancestor in model:
                        touched += remove(root, ancestor, model)
                touched += [p for p in remove(root, path, model) if p != path]
                data = content(*change, model)
                (root / path).parent.mkdir(parents=True, exist_ok=True)
                (root / path).write_bytes(data)
                model[path] = data
                touched.append(path)
            commits.append((repo.commit_worktree(touched, b"step\n"), dict(model)))
            assert repo.packer.last_error is None, repo.packer.last_error
        repo.pack()
    finally:
        repo.close()
    git(root, "fsck", "--strict", "--no-dangling")
    for sha, files in commits:
        listed = git(root, "ls-tree", "-r", "--name-only", sha.decode()).splitlines()
        assert sorted(listed) == sorted(files)
        wanted = "".join(f"{sha.decode()}:{path}\n" for path in sorted(files))
        out = subprocess.run(["git", "cat-file", "--batch"], cwd=root, input=wanted.encode(),
                             capture_output=True, check=True).stdout
        at = 0
        for path in sorted(files):
            end = out.index(b"\n", at)
            size = int(out[at:end].split()[2])
            assert out[end + 1 : end + 1 + size] == files[path], path
            at = end + 1 + size + 1


@settings(max_examples=4, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(steps=st.lists(step, min_size=1, max_size=25))
@pytest.mark.parametrize("merger", ["git", "dulwich"])
def test_random_histories_stay_whole_when_packed_and_merged(tmp_path, steps, monkeypatch, merger):
    run_history(tmp_path, steps, monkeypatch, merger)


@pytest.mark.slow
@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(steps=st.lists(step, min_size=1, max_size=60))
@pytest.mark.parametrize("merger", ["git", "dulwich"])
def test_many_random_histories_stay_whole_when_packed_and_merged(
    tmp_path, steps, monkeypatch, merger
):
    run_history(tmp_path, steps, monkeypatch, merger)
