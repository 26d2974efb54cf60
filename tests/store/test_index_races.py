"""`.git/index` follows HEAD for every path agentfs commits: under bursts, with several
processes and threads committing at once, and after any of them is SIGKILLed.

Checked with the real `git`: no staged change, a clean `git status`, the index
holding HEAD's blob for every committed path, and `git fsck --strict`.
"""

from __future__ import annotations

import fcntl
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agentfs.errors import GitStateError
from agentfs.store.git import lockfiles as gitlocks
from agentfs.store.git import rawindex
from agentfs.store.git.intents import DeadIntents, index_intent
from agentfs.store.git.lockfiles import GitLockFile
from agentfs.store.git.repo import MAIN, Change, GitRepo, UnsafePathError, init_repo
from tests.conftest import assert_git_clean, git

# A committing process: `ready`, then after `go` on stdin, each of its threads
# commits its own files (a new message and a state file it rewrites) and prints
# how many commits it made; `forever` keeps committing until it is killed.
COMMITTER = r"""
import sys, threading
from pathlib import Path
from agentfs.store.git.repo import GitRepo

root, tag, threads, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
shared = GitRepo(root)
out = threading.Lock()

def commit_burst(t):
    repo = shared if t % 2 == 0 else GitRepo(root)  # shared and own repositories
    folder = root / tag / str(t)
    folder.mkdir(parents=True, exist_ok=True)
    i = 0
    while count < 0 or i < count:
        (folder / f"m{i:05d}.md").write_text(f"{tag} {t} message {i}\n")
        (folder / "state.json").write_text(f'{{"head": {i}}}\n')
        repo.commit_worktree(
            [f"{tag}/{t}/m{i:05d}.md", f"{tag}/{t}/state.json"], f"{tag} {t} #{i}\n".encode()
        )
        i += 1
        with out:
            print(i, flush=True)

print("ready", flush=True)
sys.stdin.readline()
workers = [threading.Thread(target=commit_burst, args=(t,)) for t in range(threads)]
for w in workers:
    w.start()
for w in workers:
    w.join()
"""


def start_committer(root: Path, tag: str, threads: int, count: int) -> subprocess.Popen:
    """A committing child process, started and waiting for `go`."""
    child = subprocess.Popen(
        [sys.executable, "-c", COMMITTER, str(root), tag, str(threads), str(count)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert child.stdout is not None and child.stdout.readline() == "ready\n", child.stderr
    return child


def go(child: subprocess.Popen) -> None:
    assert child.stdin is not None
    child.stdin.write("go\n")
    child.stdin.flush()


def stop(child: subprocess.Popen) -> None:
    if child.poll() is None:
        child.kill()
    child.wait()
    for stream in (child.stdin, child.stdout, child.stderr):
        if stream is not None:
            stream.close()


def assert_index_matches_head(root: Path) -> None:
    """Nothing staged, and the index holds HEAD's entry for every path."""
    assert git(root, "diff", "--cached", "--name-status") == ""
    index = sorted(
        line.replace(" 0\t", "\t", 1) for line in git(root, "ls-files", "-s").splitlines()
    )
    head = sorted(
        line.replace(" blob ", " ", 1) for line in git(root, "ls-tree", "-r", "HEAD").splitlines()
    )
    assert index == head


def hash_object(root: Path, data: bytes, *, write: bool = False) -> str:
    args = ["git", "hash-object", *(["-w"] if write else []), "--stdin"]
    done = subprocess.run(args, cwd=root, input=data, capture_output=True, check=True)
    return done.stdout.decode().strip()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A repository on main with one commit."""
    root = tmp_path / "ws"
    root.mkdir()
    init_repo(root)
    (root / "seed.md").write_text("seed\n")
    repo = GitRepo(root)
    repo.commit_worktree(["seed.md"], b"seed\n")
    repo.close()
    return root


def commit_bursts(root: Path, tag: str, threads: int, count: int) -> list[BaseException]:
    """Commit from `threads` threads of this process at once; returns their errors."""
    errors: list[BaseException] = []
    repo = GitRepo(root)

    def burst(t: int) -> None:
        try:
            for i in range(count):
                path = f"{tag}/{t}/m{i:05d}.md"
                (root / path).parent.mkdir(parents=True, exist_ok=True)
                (root / path).write_text(f"{tag} {t} {i}\n")
                (root / f"{tag}/{t}/state.json").write_text(f"{i}\n")
                repo.commit_worktree([path, f"{tag}/{t}/state.json"], f"{tag} #{i}\n".encode())
        except BaseException as exc:  # noqa: BLE001 — reported by the test
            errors.append(exc)

    workers = [threading.Thread(target=burst, args=(t,)) for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return errors


def run_concurrent_bursts(root: Path, processes: int, threads: int, count: int) -> None:
    children = [start_committer(root, f"p{n}", threads, count) for n in range(processes)]
    try:
        for child in children:
            go(child)
        errors = commit_bursts(root, "local", threads, count)
        outcomes = [child.communicate(timeout=300) for child in children]
    finally:
        for child in children:
            stop(child)
    assert errors == []
    for child, (_, err) in zip(children, outcomes, strict=True):
        assert child.returncode == 0, err
    assert_index_matches_head(root)
    files = set(git(root, "ls-tree", "-r", "--name-only", "HEAD").splitlines())
    for tag in [f"p{n}" for n in range(processes)] + ["local"]:
        for t in range(threads):
            assert {f"{tag}/{t}/m{i:05d}.md" for i in range(count)} <= files
    assert_git_clean(root)


def test_processes_and_threads_committing_at_once_keep_the_index_on_head(root: Path) -> None:
    run_concurrent_bursts(root, processes=3, threads=3, count=30)


@pytest.mark.slow
def test_long_bursts_from_many_processes_keep_the_index_on_head(root: Path) -> None:
    run_concurrent_bursts(root, processes=4, threads=4, count=150)


def kill_campaign(root: Path, trials: int, seed: int) -> None:
    """Each trial: two processes commit; one is SIGKILLed at a random instant while the
    other goes on committing (and so repairs what the dead one left)."""
    rng = random.Random(seed)
    for trial in range(trials):
        victim = start_committer(root, f"v{trial}", threads=2, count=-1)
        survivor = start_committer(root, f"s{trial}", threads=1, count=-1)
        try:
            go(victim)
            go(survivor)
            assert victim.stdout is not None and survivor.stdout is not None
            for _ in range(rng.randrange(1, 20)):  # let it get going
                assert victim.stdout.readline(), victim.stderr
            time.sleep(rng.uniform(0, 0.004))  # a random instant, not a synchronisation
            victim.send_signal(signal.SIGKILL)
            assert victim.wait(timeout=30) == -signal.SIGKILL
            done = int(survivor.stdout.readline())
            while int(survivor.stdout.readline()) < done + 3:  # it commits after the kill
                pass
        finally:
            stop(victim)
            stop(survivor)
        repo = GitRepo(root)  # the next commit leaves the index in line with HEAD
        (root / "after.md").write_text(f"after trial {trial}\n")
        repo.commit_worktree(["after.md"], f"after trial {trial}\n".encode())
        assert_index_matches_head(root)
        # What the killed processes wrote but did not commit is theirs to adopt.
        leftovers = [
            (Path(folder) / name).relative_to(root).as_posix()
            for tag in (f"v{trial}", f"s{trial}")
            for folder, _, names in os.walk(root / tag)
            for name in names
        ]
        repo.commit_worktree(leftovers, b"adopt what the killed processes wrote\n")
        repo.close()
        assert_git_clean(root)


def test_committers_killed_at_random_instants_leave_the_index_repaired(root: Path) -> None:
    kill_campaign(root, trials=6, seed=7)


@pytest.mark.slow
def test_thirty_kills_leave_the_index_repaired(root: Path) -> None:
    kill_campaign(root, trials=30, seed=2026)


def test_repair_reads_head_under_the_index_lock(root: Path, monkeypatch) -> None:
    """A dead process's intent names a path that a live process then commits (e.g. a
    watcher took the trace over). The repair must not write back the older HEAD's
    entry: that was the staged deletion of a committed message."""
    path = "traces/demo/messages/000000-000999/000005-assistant.md"
    state = root / ".git" / "agentfs"
    # A process died after announcing `path`, before moving main: HEAD lacks it.
    (state / "intents").mkdir(parents=True, exist_ok=True)
    (state / "intents" / "4242-dead.json").write_text(f'["{path}"]')
    (root / path).parent.mkdir(parents=True)
    (root / path).write_text("the message, adopted by the live process\n")

    live = GitRepo(root)
    repairer = GitRepo(root)
    committed: list[bytes] = []
    worker = threading.Thread(
        target=lambda: committed.append(live.commit_worktree([path], b"adopt\n"))
    )
    real_head = repairer.head

    def head_then_a_live_commit(ref: bytes = MAIN) -> bytes | None:
        seen = real_head(ref)
        if not worker.is_alive() and not committed:
            worker.start()
            if not (root / ".git" / "index.lock").exists():
                # Read outside the lock: let the live commit land before the repair writes.
                worker.join(timeout=60)
        return seen

    monkeypatch.setattr(repairer, "head", head_then_a_live_commit)
    repairer.repair_index()
    worker.join(timeout=60)
    assert committed, "the live commit did not finish"
    assert_index_matches_head(root)
    assert_git_clean(root)
    assert git(root, "ls-files", path).strip() == path
    assert not (state / "intents" / "4242-dead.json").exists()


def test_a_dead_intent_is_repaired_by_the_next_commit(root: Path) -> None:
    """Killed between moving main and writing the index: the next commit puts the
    entries of the dead process's paths in line with HEAD."""
    repo = GitRepo(root)
    (root / "a.md").write_text("a\n")
    (root / "intents.md").write_text("x\n")
    state = root / ".git" / "agentfs" / "intents"
    state.mkdir(parents=True, exist_ok=True)
    (state / "4242-dead.json").write_text('["a.md", "../outside", "gone.md"]')
    # main moved with a.md, the index was never written
    repo._commit(MAIN, [Change("a.md", b"a\n")], b"a, index not written\n")
    assert git(root, "diff", "--cached", "--name-status") == "D\ta.md\n"
    repo.commit_worktree(["intents.md"], b"next\n")
    assert_index_matches_head(root)
    assert_git_clean(root)
    assert list(state.iterdir()) == []


def test_an_intent_finished_while_being_looked_at_is_not_taken_for_dead(
    root: Path, monkeypatch
) -> None:
    """A scanner can open a live intent just before its process deletes it and get the
    flock just after: that intent is done, not dead."""
    state = root / ".git" / "agentfs"
    holder = index_intent(state, ["a.md"])
    holder.__enter__()
    real_flock = fcntl.flock
    finished: list[bool] = []

    def flock(fd: int, operation: int) -> None:
        if operation & fcntl.LOCK_NB and not finished:
            holder.__exit__(None, None, None)  # its process finishes meanwhile
            finished.append(True)
        real_flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", flock)
    with DeadIntents(state) as dead:
        assert finished
        assert not dead and dead.paths == []


def test_an_index_rewritten_in_place_is_not_mistaken_for_the_cached_one(root: Path) -> None:
    """Inode numbers are reused at once and two writes in one clock tick share an mtime:
    an index with the cached one's inode, size and mtime but other bytes is re-read."""
    repo = GitRepo(root)
    (root / "a.md").write_text("a\n")
    repo.commit_worktree(["a.md"], b"a\n")  # parsed and cached by this process
    index = root / ".git" / "index"
    before = os.stat(index)
    keep = root / ".git" / "index.same-inode"
    os.link(index, keep)
    other = hash_object(root, b"changed by git\n", write=True)
    git(root, "update-index", "--cacheinfo", f"100644,{other},a.md")  # same size, new file
    keep.write_bytes(index.read_bytes())  # its bytes into the cached inode, in place
    os.utime(keep, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(keep, index)
    after = os.stat(index)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino, before.st_size, before.st_mtime_ns,
    )
    (root / "b.md").write_text("b\n")
    repo.commit_worktree(["b.md"], b"b\n")
    assert f"{other} 0\ta.md" in git(root, "ls-files", "-s", "a.md")  # git's entry kept


RACING_COMMIT = r"""
import sys
from pathlib import Path
from agentfs.store.git.repo import GitRepo
root = Path(sys.argv[1])
(root / "other.md").write_text("from another process\n")
GitRepo(root).commit_worktree(["other.md"], b"other\n")
"""


def test_an_index_replaced_right_after_ours_is_not_cached_as_ours(
    root: Path, monkeypatch
) -> None:
    """Another process can replace the index the moment we release index.lock; what
    this process caches must stay tied to the bytes it wrote."""
    repo = GitRepo(root)
    real_release = GitLockFile._release_owner
    raced: list[bool] = []

    def release_then_another_process_commits(self: GitLockFile, **kwargs: bool) -> None:
        real_release(self, **kwargs)
        if self.target.name == "index" and (root / "mine.md").exists() and not raced:
            raced.append(True)
            subprocess.run([sys.executable, "-c", RACING_COMMIT, str(root)], check=True)

    monkeypatch.setattr(GitLockFile, "_release_owner", release_then_another_process_commits)
    (root / "mine.md").write_text("mine\n")
    repo.commit_worktree(["mine.md"], b"mine\n")
    assert raced
    (root / "next.md").write_text("next\n")
    repo.commit_worktree(["next.md"], b"next\n")
    assert_index_matches_head(root)
    assert_git_clean(root)
    assert git(root, "ls-files", "other.md").strip() == "other.md"


def test_a_failed_index_write_leaves_the_cache_untouched(root: Path, monkeypatch) -> None:
    repo = GitRepo(root)
    index = root / ".git" / "index"
    cached, _ = rawindex.load(index)
    keys = list(cached.keys)

    real_write = GitLockFile.write

    def fail_on_the_index(self: GitLockFile, data: bytes) -> None:
        if self.target.name == "index":  # after main moved
            raise OSError("disk full")
        real_write(self, data)

    monkeypatch.setattr(GitLockFile, "write", fail_on_the_index)
    (root / "a.md").write_text("a\n")
    with pytest.raises(OSError, match="disk full"):
        repo.commit_worktree(["a.md"], b"a\n")
    assert cached.keys == keys
    assert rawindex.load(index)[0].keys == keys
    monkeypatch.undo()
    repo.commit_worktree(["a.md"], b"a\n")  # the intent left behind is repaired too
    assert_index_matches_head(root)
    assert_git_clean(root)


def test_a_lock_with_a_dead_processes_inode_but_made_later_is_not_removed(
    root: Path,
) -> None:
    """A killed agentfs leaves a record naming its `.lock` by inode and ctime; once that
    lock is gone the inode can be handed to git's own `.lock`, which must be waited for."""
    state = root / ".git" / "agentfs"
    target = root / ".git" / "index"
    lock = GitLockFile(target, state, wait=0.2)
    gits_lock = root / ".git" / "index.lock"
    gits_lock.write_bytes(b"")
    st = os.stat(gits_lock)
    record = f"inode {st.st_ino} ctime {st.st_ctime_ns - 1}".encode().ljust(gitlocks.RECORD_SIZE)
    lock.owner_path.parent.mkdir(parents=True, exist_ok=True)
    lock.owner_path.write_bytes(record)
    with pytest.raises(GitStateError, match="index.lock exists"):
        lock.acquire()
    assert gits_lock.exists()
    # The same record with the lock's own ctime is the dead process's: removed.
    lock.owner_path.write_bytes(
        f"inode {st.st_ino} ctime {st.st_ctime_ns}".encode().ljust(gitlocks.RECORD_SIZE)
    )
    with GitLockFile(target, state, wait=0.2) as taken:
        taken.write(target.read_bytes())
    assert not gits_lock.exists()
    assert_git_clean(root)


@pytest.mark.parametrize(
    "bad",
    ["/etc/passwd", "../outside.md", "a/../seed.md", "./seed.md", "a//b.md", "a/", "",
     ".git/config", "sub/.GIT/hooks/x"],
)
def test_paths_outside_the_work_tree_are_refused(root: Path, bad: str) -> None:
    repo = GitRepo(root)
    before = git(root, "rev-parse", "HEAD")
    (root / "fine.md").write_text("fine\n")
    with pytest.raises(UnsafePathError) as info:
        repo.commit_worktree(["fine.md", bad], b"mixed\n")
    assert repr(bad) in str(info.value)
    assert git(root, "rev-parse", "HEAD") == before
    assert git(root, "ls-files", "fine.md") == ""


def test_a_path_through_a_symlinked_folder_is_refused(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "etc"
    outside.mkdir()
    secret = b"root:x:0:0:secret\n"
    (outside / "passwd").write_bytes(secret)
    (root / "link").symlink_to(outside)
    (root / "real").mkdir()
    (root / "real" / "deep").symlink_to(outside)
    repo = GitRepo(root)
    before = git(root, "rev-parse", "HEAD")
    for path in ("link/passwd", "real/deep/passwd"):
        with pytest.raises(UnsafePathError) as info:
            repo.commit_worktree([path], b"steal\n")
        assert path in str(info.value)
    assert git(root, "rev-parse", "HEAD") == before
    blob = hash_object(root, secret)
    assert subprocess.run(
        ["git", "cat-file", "-e", blob], cwd=root, capture_output=True, check=False
    ).returncode != 0, "the file behind the symlink was written into the object store"
    # A symlink itself is committed as a symlink.
    repo.commit_worktree(["link"], b"the link itself\n")
    assert git(root, "ls-tree", "HEAD", "link").startswith("120000 blob ")
    assert git(root, "cat-file", "-p", "HEAD:link") == str(outside)
    (root / "real" / "deep").unlink()
    assert_git_clean(root)


def test_main_only_moves_with_the_index(root: Path) -> None:
    repo = GitRepo(root)
    with pytest.raises(ValueError, match="commit_worktree"):
        repo.commit_changes(MAIN, [Change("x.md", b"x\n")], b"x\n")
    with pytest.raises(ValueError, match="commit_worktree"):
        repo.create_branch("main", repo.head() or b"")
