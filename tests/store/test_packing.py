"""The repository stays packed: loose objects move into packs as commits go on, small
packs are merged, and nothing is ever lost, whoever packs and whenever a packer dies.

Checked with the real `git`: `git fsck --strict`, every object reachable from the
branches readable with `git cat-file`, and `.git` compared with a copy after `git gc`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
import zlib
from pathlib import Path

import pytest
from dulwich.object_format import SHA1
from dulwich.objects import Blob
from dulwich.pack import Pack, apply_delta, write_pack_index
from hypothesis import given, settings
from hypothesis import strategies as st

from agentfs.errors import RemoteError
from agentfs.store.git import packing
from agentfs.store.git.lineage import changed_entries, predecessors, skip_delta_bases, tree_entries
from agentfs.store.git.packfile import install_pack, make_delta, whole
from agentfs.store.git.repo import GitRepo, init_repo
from agentfs.store.locking import FileLock, is_held
from tests.conftest import git

TEXT = "The notes mention three follow-ups: migrate the build, own the checklist. " * 6


@pytest.fixture(params=["git", "dulwich"])
def merger(request, monkeypatch) -> str:
    """Packs merged by `git pack-objects --stdin-packs`, and with `git` hidden, by dulwich."""
    monkeypatch.setattr(packing, "MIN_PACKS", 2)
    if request.param == "dulwich":
        monkeypatch.setattr(packing, "GIT", None)
    return request.param


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    init_repo(root)
    return root


def commit_message(repo: GitRepo, n: int, trace: str = "t") -> bytes:
    """One step of a trace: a new message file and the trace's state file, committed."""
    folder = repo.root / "traces" / trace
    (folder / "messages").mkdir(parents=True, exist_ok=True)
    name = f"traces/{trace}/messages/{n:06d}-user.md"
    (repo.root / name).write_text(f"---\nsequence: {n}\n---\n{TEXT}{n}\n")
    (folder / "trace.json").write_text(f'{{"id": "{trace}", "head": {n}, "next": {n + 1}}}\n')
    return repo.commit_worktree([name, f"traces/{trace}/trace.json"], f"{trace}: #{n}\n".encode())


def one_pack_a_step(root: Path, steps: int) -> GitRepo:
    """A repository whose `steps` steps each went into a pack of their own, unmerged;
    its `GitRepo`, with packing after commits turned off."""
    repo = GitRepo(root)
    repo.packer.after_commit = lambda: None  # type: ignore[method-assign]
    for n in range(1, steps + 1):
        commit_message(repo, n)
        packing.pack_loose_objects(root / ".git", read=repo.objects.read_raw)
    return repo


def loose_count(root: Path) -> int:
    return len(packing.loose_objects(root / ".git" / "objects")[0])


def delta_count(root: Path) -> int:
    """How many entries of the repository's packs are deltas."""
    count = 0
    for name in packs(root):
        with Pack(str(root / ".git" / "objects" / "pack" / name), object_format=SHA1) as pack:
            count += sum(entry.pack_type_num in (6, 7) for entry in pack.data.iter_unpacked())
    return count


def packs(root: Path) -> list[str]:
    return sorted(p.stem for p in (root / ".git" / "objects" / "pack").glob("*.idx"))


def tree_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def size_after_gc(root: Path, scratch: Path) -> int:
    """`.git`'s size once `git gc` has packed a copy of it."""
    copy = scratch / "gc-copy"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(root / ".git", copy / ".git", symlinks=True)
    git(copy, "gc", "-q")
    size = tree_size(copy / ".git")
    shutil.rmtree(copy)
    return size


def assert_everything_readable(root: Path) -> None:
    """fsck clean, and every object reachable from a branch read back by `git cat-file`."""
    assert packing.wait_for_packing(root / ".git", timeout=120)
    git(root, "fsck", "--strict", "--no-dangling")
    listed = git(root, "rev-list", "--objects", "--all")
    ids = "".join(line.split(" ", 1)[0] + "\n" for line in listed.splitlines())
    done = subprocess.run(["git", "cat-file", "--batch-check"], cwd=root, input=ids,
                          capture_output=True, text=True, check=True)
    assert "missing" not in done.stdout
    assert len(done.stdout.splitlines()) == len(ids.splitlines())


def assert_messages_committed(root: Path, count: int, trace: str = "t") -> None:
    """Message files 1..count of `trace` are in HEAD with the content they were given."""
    wanted = [f"HEAD:traces/{trace}/messages/{n:06d}-user.md" for n in range(1, count + 1)]
    done = subprocess.run(["git", "cat-file", "--batch"], cwd=root, capture_output=True,
                          input="\n".join(wanted).encode() + b"\n", check=True)
    out, n = done.stdout, 0
    at = 0
    while at < len(out):
        header_end = out.index(b"\n", at)
        header = out[at:header_end].split()
        assert header[-1] != b"missing", header
        size = int(header[2])
        n += 1
        expected = f"---\nsequence: {n}\n---\n{TEXT}{n}\n".encode()
        assert out[header_end + 1 : header_end + 1 + size] == expected
        at = header_end + 1 + size + 1
    assert n == count


# --- deltas and chains --------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(base=st.binary(max_size=3000), edits=st.lists(
    st.tuples(st.integers(0, 3000), st.integers(0, 40), st.binary(max_size=60)), max_size=4))
def test_a_delta_rebuilds_its_target_from_its_base(base: bytes, edits) -> None:
    target = bytearray(base)
    for offset, cut, insert in edits:
        at = min(offset, len(target))
        target[at : at + cut] = insert
    delta = make_delta(base, bytes(target))
    rebuilt = apply_delta(base, delta)
    assert (b"".join(rebuilt) if isinstance(rebuilt, list) else rebuilt) == bytes(target)


def test_a_directory_that_gains_an_entry_costs_a_delta_of_about_that_entry() -> None:
    entries = [b"100644 %06d-user.md\0" % n + os.urandom(20) for n in range(5000)]
    old, new = b"".join(entries), b"".join(entries) + b"100644 005000-user.md\0" + b"x" * 20
    assert len(make_delta(old, new)) < 80


def _tree(entries: dict[bytes, tuple[bytes, bytes]]) -> bytes:
    key = {name: name + b"/" if mode == b"40000" else name for name, (mode, _) in entries.items()}
    return b"".join(mode + b" " + name + b"\0" + sha
                    for name, (mode, sha) in sorted(entries.items(), key=lambda e: key[e[0]]))


ENTRIES = st.dictionaries(
    st.binary(min_size=1, max_size=6).filter(lambda n: b"\0" not in n and b"/" not in n),
    st.tuples(st.sampled_from([b"100644", b"40000", b"120000"]), st.binary(min_size=20, max_size=20)),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(old=ENTRIES, changes=ENTRIES, removed=st.sets(st.binary(max_size=6), max_size=5))
def test_changed_entries_are_those_whose_id_changed(old, changes, removed) -> None:
    new = {name: entry for name, entry in {**old, **changes}.items() if name not in removed}
    before, after = _tree(old), _tree(new)
    found = sorted(changed_entries(after, before))
    parsed_old, parsed_new = tree_entries(before), tree_entries(after)
    assert found == sorted(
        (mode, sha, *parsed_old[name]) for name, (mode, sha) in parsed_new.items()
        if name in parsed_old and parsed_old[name][1] != sha
    )


def test_the_kth_version_is_based_on_the_one_k_and_minus_k_back() -> None:
    chain = [f"{n:040x}".encode() for n in range(9)]  # chain[n] continues chain[n - 1]
    previous = {chain[n]: chain[n - 1] for n in range(1, 9)}
    bases, position = skip_delta_bases(previous, chain)
    assert [position[sha] for sha in chain] == list(range(9))
    assert chain[0] not in bases
    assert {chain.index(sha): chain.index(base) for sha, base in bases.items()} == {
        1: 0, 2: 0, 3: 2, 4: 0, 5: 4, 6: 4, 7: 6, 8: 0,
    }


def test_a_path_that_goes_back_to_older_content_does_not_loop() -> None:
    a, b = b"a" * 40, b"b" * 40
    bases, position = skip_delta_bases({a: b, b: a}, [a, b])
    assert sorted(position.values()) == [0, 1]
    assert len(bases) == 1


def test_versions_outside_the_batch_start_a_chain() -> None:
    a, b, c = b"a" * 40, b"b" * 40, b"c" * 40
    bases, position = skip_delta_bases({b: a, c: b}, [b, c])  # a is in an older pack
    assert position == {b: 0, c: 1} and bases == {c: b}


def test_new_trees_and_files_are_matched_with_the_same_path_in_the_parent(root: Path) -> None:
    repo = GitRepo(root)
    commit_message(repo, 1)
    first = repo.head()
    commit_message(repo, 2)
    second = repo.head()
    assert first is not None and second is not None
    loose = packing.loose_objects(root / ".git" / "objects")[0]
    batch = {sha: found for sha in loose if (found := packing.read_loose(loose[sha], sha))}
    found = predecessors(batch, repo.objects.read_raw)
    before, after = repo.commit(first), repo.commit(second)
    assert found[after.tree] == before.tree
    old_state = repo.tree_lookup(first, "traces/t/trace.json")
    new_state = repo.tree_lookup(second, "traces/t/trace.json")
    assert old_state and new_state and found[new_state[1]] == old_state[1]
    new_message = repo.tree_lookup(second, "traces/t/messages/000002-user.md")
    assert new_message and new_message[1] not in found  # new at its path: nothing to continue
    repo.close()



def test_a_file_paired_with_a_folder_is_not_stored_as_a_delta_of_it(root: Path) -> None:
    """A delta takes its base's type, so one across types rebuilds the wrong object.
    Odd names can pair a file with a folder: `changed_entries` parses a tree from
    where an id byte 0 is followed, 20 bytes on, by a name holding "100644 "."""
    repo = GitRepo(root)
    repo.packer.after_commit = lambda: None  # type: ignore[method-assign]
    odd = root / "w" / "b100644 rest"  # its entry: "40000 b100644 rest\0<id>"
    odd.mkdir(parents=True)
    names = [f"w/b100644 rest/f{i:02d}" for i in range(30)]
    for name in names:
        (root / name).write_text(f"{name}\n")
    n = 0  # "w/a", the entry before it, gets an id whose 7th byte is 0
    while hashlib.sha1(b"blob %d\0%d\n" % (len(b"%d\n" % n), n), usedforsecurity=False).digest()[6]:
        n += 1
    (root / "w/a").write_text(f"{n}\n")
    repo.commit_worktree(["w/a", *names], b"one\n")
    folder = git(root, "rev-parse", "HEAD:w/b100644 rest").strip()
    raw = subprocess.run(["git", "cat-file", "tree", folder], cwd=root, capture_output=True,
                         check=True).stdout
    (root / names[0]).write_text("changed\n")
    (root / "w/rest").write_bytes(raw[:-1] + b"!")  # a file much like that folder's tree
    repo.commit_worktree([names[0], "w/rest"], b"two\n")
    repo.pack()
    assert loose_count(root) == 0
    assert_everything_readable(root)
    assert (root / "w/rest").read_bytes() == subprocess.run(
        ["git", "cat-file", "blob", "HEAD:w/rest"], cwd=root, capture_output=True,
        check=True).stdout
    repo.close()


# --- a run stays packed -------------------------------------------------------------


def run_stays_packed(root: Path, scratch: Path, commits: int, check_every: int) -> None:
    repo = GitRepo(root)
    bound = packing.LOOSE_LIMIT + 8  # what one more commit adds
    for n in range(1, commits + 1):
        commit_message(repo, n)
        assert loose_count(root) <= bound
        if n % check_every == 0:
            packed = size_after_gc(root, scratch)
            assert tree_size(root / ".git") <= 3 * packed, (n, tree_size(root / ".git"), packed)
    assert repo.packer.last_error is None
    assert len(packs(root)) <= 8 + 6
    assert_everything_readable(root)
    assert_messages_committed(root, commits)
    old = repo.head()
    for _ in range(commits // 2):  # dulwich reads old commits back too
        assert old is not None
        old = repo.commit(old).parents[0] if repo.commit(old).parents else None
    assert old is not None and repo.read_file(old, "traces/t/messages/000001-user.md")
    repo.close()


def test_a_run_of_commits_keeps_loose_objects_bounded_and_git_near_its_gc_size(
    root: Path, tmp_path: Path, merger: str, monkeypatch
) -> None:
    monkeypatch.setattr(packing, "MIN_PACKS", 8)
    run_stays_packed(root, tmp_path, commits=700, check_every=175)


@pytest.mark.slow
@pytest.mark.timeout(900)  # 3,000 commits and ten `git gc` copies: minutes on a busy machine
# Packs merged by `git`, as wherever a `git` is on PATH; dulwich's merges (no `git`) are
# held to the same bound over 700 commits above, and fuzzed in test_packing_fuzz.py.
@pytest.mark.parametrize("merger", ["git"], indirect=True)
def test_three_thousand_commits_stay_within_three_times_the_gc_size(
    root: Path, tmp_path: Path, merger: str, monkeypatch
) -> None:
    monkeypatch.setattr(packing, "MIN_PACKS", 8)
    run_stays_packed(root, tmp_path, commits=3000, check_every=300)


def test_trees_in_packs_are_stored_as_deltas_against_their_previous_version(root: Path) -> None:
    repo = GitRepo(root)
    for n in range(1, 120):
        commit_message(repo, n)
    repo.pack()
    # `messages/` is a new version at every commit; small objects are not worth a delta
    assert delta_count(root) >= 90
    repo.close()


def test_a_backlog_of_loose_objects_is_packed_a_batch_at_a_time(root: Path) -> None:
    repo = GitRepo(root)
    repo.packer.after_commit = lambda: None  # type: ignore[method-assign]  # old agentfs
    for n in range(1, 60):
        commit_message(repo, n)
    backlog = loose_count(root)
    report = repo.packer.pack(limit=100)
    assert report is not None and report.packed == 100
    assert loose_count(root) == backlog - 100
    while loose_count(root):
        repo.packer.pack(limit=100)
    assert_everything_readable(root)
    assert_messages_committed(root, 59)
    repo.close()


def test_a_batch_cut_by_its_size_takes_the_oldest_objects(root: Path, monkeypatch) -> None:
    repo = GitRepo(root)
    repo.packer.after_commit = lambda: None  # type: ignore[method-assign]
    for n in range(1, 40):
        commit_message(repo, n)
    loose = packing.loose_objects(root / ".git" / "objects")[0]
    mtimes = {sha: os.stat(path).st_mtime_ns for sha, path in loose.items()}
    monkeypatch.setattr(packing, "BATCH_BYTES", 20_000)
    name, count = packing.pack_loose_objects(root / ".git", read=repo.objects.read_raw)
    assert name is not None and 0 < count < len(loose)
    left = packing.loose_objects(root / ".git" / "objects")[0]
    packed = set(loose) - set(left)
    assert max(mtimes[sha] for sha in packed) <= min(mtimes[sha] for sha in left)
    repo.close()


def test_another_process_packing_meanwhile_makes_packing_skip(root: Path) -> None:
    repo = GitRepo(root)
    commit_message(repo, 1)
    with FileLock(packing._lock_path(root / ".git"), wait=0) as lock:
        assert lock.held
        assert repo.pack() is None
    assert repo.pack() is not None
    repo.close()


# --- merging packs -----------------------------------------------------------------


def fake_pack(pack_dir: Path, name: str, count: int) -> None:
    """An index that lists `count` made-up objects, beside an empty pack."""
    pack_dir.mkdir(parents=True, exist_ok=True)
    ids = sorted(hashlib.sha1(b"%s %d" % (name.encode(), i), usedforsecurity=False).digest()
                 for i in range(count))
    with open(pack_dir / f"{name}.idx", "wb") as f:
        write_pack_index(f, [(sha, i, 0) for i, sha in enumerate(ids)], bytes(20), version=2)
    (pack_dir / f"{name}.pack").write_bytes(b"")


def test_small_packs_are_merged_geometrically_and_kept_packs_never(tmp_path: Path) -> None:
    pack_dir = tmp_path / "pack"
    counts = {"pack-a": 260, "pack-b": 250, "pack-c": 255, "pack-d": 270, "pack-e": 255,
              "pack-f": 258, "pack-g": 262, "pack-h": 4000, "pack-big": 100_000}
    for name, count in counts.items():
        fake_pack(pack_dir, name, count)
    (pack_dir / "pack-k.keep").write_text("")
    fake_pack(pack_dir, "pack-k", 10)
    chosen = packing.packs_to_merge(pack_dir)
    assert set(chosen) == {"pack-a", "pack-b", "pack-c", "pack-d", "pack-e", "pack-f", "pack-g"}
    for name in chosen[2:]:
        for ext in (".idx", ".pack"):
            (pack_dir / f"{name}{ext}").unlink()
    assert packing.packs_to_merge(pack_dir) == []  # too few packs to bother


def test_merged_packs_hold_every_object_and_keep_their_deltas(root: Path, merger: str) -> None:
    repo = GitRepo(root)
    repo.packer.after_commit = lambda: None  # type: ignore[method-assign]
    made, done = [], 0
    for size in (120, 20, 20, 20):
        for n in range(done + 1, done + size + 1):
            commit_message(repo, n)
        done += size
        made.append(packing.pack_loose_objects(root / ".git", read=repo.objects.read_raw)[0])
    deltas = delta_count(root)
    due = packing.packs_to_merge(root / ".git/objects/pack")
    assert len(due) >= 3
    assert packing.merge_packs(root / ".git") == due
    assert not set(due) & set(packs(root)) and len(packs(root)) < len(made)
    assert delta_count(root) >= deltas  # copied as they were, or better
    assert_everything_readable(root)
    assert_messages_committed(root, 180)
    repo.close()


def test_a_reader_that_has_a_merged_pack_open_goes_on_reading(root: Path, merger: str) -> None:
    writer = GitRepo(root)
    for n in range(1, 30):
        commit_message(writer, n)
    writer.pack()
    reader = GitRepo(root)
    first = writer.head()
    assert first is not None and reader.read_file(first, "traces/t/messages/000001-user.md")
    for n in range(30, 60):
        commit_message(writer, n)
    writer.pack()
    for n in range(60, 90):
        commit_message(writer, n)
    report = writer.pack()
    assert report is not None and report.merged
    head = writer.head()
    assert head is not None
    for n in (1, 45, 89):  # in a pack the reader had open, one it never saw, the newest
        assert reader.read_file(head, f"traces/t/messages/{n:06d}-user.md")
    reader.close()
    writer.close()


# --- races ---------------------------------------------------------------------------


def test_an_object_found_loose_and_then_packed_stays_readable(root: Path) -> None:
    """A writer that finds an object loose does not write it again; a packer deletes
    the loose file right after: the commit that uses the object is still whole."""
    packer, writer = GitRepo(root), GitRepo(root)
    (root / "a.md").write_text("shared\n")
    packer.commit_worktree(["a.md"], b"a\n")
    real = writer.objects.add_raw
    skipped = []

    def add_raw(type_num: int, data: bytes) -> bytes:
        written = writer.objects.written
        sha = real(type_num, data)
        if data == b"shared\n":
            skipped.append(writer.objects.written == written)  # it was found loose
            packer.pack()
        return sha

    writer.objects.add_raw = add_raw  # type: ignore[method-assign]
    (root / "b.md").write_text("shared\n")  # the same blob
    writer.commit_worktree(["b.md"], b"b\n")
    assert skipped == [True]
    assert not (root / ".git/objects/ba").exists() or loose_count(root) < 5
    assert_everything_readable(root)
    packer.close()
    writer.close()


def test_a_read_that_misses_both_pack_and_loose_object_looks_again(root: Path) -> None:
    """dulwich looks in the packs, then among the loose objects; if a packer moves
    the object in between, the first look finds nothing."""
    packer, reader = GitRepo(root), GitRepo(root)
    commit_message(packer, 1)
    head = packer.head()
    assert head is not None
    store = reader.store
    real = store._get_loose_object
    moved = []

    def pack_first(sha):
        if not moved:
            moved.append(packer.pack())  # between dulwich's two looks
        return real(sha)

    store._get_loose_object = pack_first
    assert reader.read_file(head, "traces/t/trace.json")
    assert moved and loose_count(root) == 0
    packer.close()
    reader.close()


def test_threads_sharing_a_repository_commit_while_its_packs_are_merged(
    root: Path, monkeypatch, merger: str
) -> None:
    """dulwich's list of open packs is shared by the threads of a `GitRepo` (the
    watcher's); merged packs disappear from under it while they read."""
    monkeypatch.setattr(packing, "LOOSE_LIMIT", 16)
    monkeypatch.setattr(packing, "CHECK_EVERY", 4)
    repo = GitRepo(root)
    errors: list[BaseException] = []

    def commits(t: int) -> None:
        try:
            for n in range(1, 60):
                commit_message(repo, n, trace=f"t{t}")
                # a lookup that misses has dulwich look for new and gone packs
                assert b"0" * 40 not in repo.objects
        except BaseException as exc:  # noqa: BLE001 — reported by the test
            errors.append(exc)

    workers = [threading.Thread(target=commits, args=(t,)) for t in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert errors == [], "".join(traceback.format_exception(errors[0]))
    assert repo.packer.last_error is None
    for t in range(4):
        assert_messages_committed(root, 59, trace=f"t{t}")
    assert_everything_readable(root)
    repo.close()


# A process that commits (or only packs), printing what it committed. With `die_at`
# `<operation>:<k>` it SIGKILLs itself at the k-th time its packing calls that file
# operation (`_write` is a chunk of the pack being written).
CHILD = r"""
import os, signal, sys
from pathlib import Path
from agentfs.errors import GitStateError
from agentfs.store.git import packing
from agentfs.store.git.repo import GitRepo

root, role, die_at = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
packing.LOOSE_LIMIT, packing.CHECK_EVERY, packing.MIN_PACKS = 24, 4, 2
if os.environ.get("HIDE_GIT"):
    packing.GIT = None
kind, _, k = die_at.partition(":")
seen, packing_now = [0], [False]

def counted(fn):
    def run(*args, **kwargs):
        if packing_now[0] and fn.__name__ == kind:
            seen[0] += 1
            if seen[0] == int(k):
                os.kill(os.getpid(), signal.SIGKILL)
        return fn(*args, **kwargs)
    return run

for name in ("replace", "unlink", "fsync", "chmod"):
    setattr(os, name, counted(getattr(os, name)))
import builtins, io
real_open = builtins.open

class Writes:  # a file being written while packing: each chunk is a `_write`
    def __init__(self, f):
        self._f = f
    def write(self, data):
        return _write(self._f, data)
    def __getattr__(self, name):
        return getattr(self._f, name)
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        self._f.close()

@counted
def _write(f, data):
    return f.write(data)

def open_counting(*args, **kwargs):
    f = real_open(*args, **kwargs)
    return Writes(f) if packing_now[0] and isinstance(f, io.BufferedWriter) else f
builtins.open = open_counting
real_pack = packing.Packer.pack
def pack(self, **kwargs):
    packing_now[0] = True
    try:
        return real_pack(self, **kwargs)
    finally:
        packing_now[0] = False
packing.Packer.pack = pack

repo = GitRepo(root)
print("ready", flush=True)
sys.stdin.readline()
if role == "packer":  # packs without the lock, as `git gc` would
    for _ in range(int(sys.argv[4])):
        packing.pack_loose_objects(root / ".git", read=repo.objects.read_raw)
        try:
            packing.merge_packs(root / ".git")
        except GitStateError:
            pass  # two merges at once: one may give up, as with two `git gc`
    print("done", flush=True)
    sys.exit(0)
n = int(sys.argv[4])
folder = root / "traces" / role
(folder / "messages").mkdir(parents=True, exist_ok=True)
while True:
    name = f"traces/{role}/messages/{n:06d}-user.md"
    (root / name).write_text(f"---\nsequence: {n}\n---\n" + "x" * 300 + f"{n}\n")
    (folder / "trace.json").write_text(f'{{"head": {n}}}\n')
    sha = repo.commit_worktree([name, f"traces/{role}/trace.json"], f"{role} #{n}\n".encode())
    print(n, sha.decode(), flush=True)
    n += 1
"""


def start(root: Path, role: str, die_at: str, arg: int, *, hide_git: bool = False
          ) -> subprocess.Popen:
    env = {**os.environ, "HIDE_GIT": "1" if hide_git else ""}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(root), role, str(die_at), str(arg)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env,
    )
    assert child.stdout is not None and child.stdout.readline() == "ready\n", child.stderr
    assert child.stdin is not None
    child.stdin.write("go\n")
    child.stdin.flush()
    return child


def finish(child: subprocess.Popen) -> tuple[str, str]:
    out, err = child.communicate(timeout=120)
    return out, err


#: The file operations of packing, and how many of each one run can make.
OPERATIONS = {"_write": 300, "fsync": 9, "chmod": 6, "replace": 9, "unlink": 60}


def kill_while_packing(root: Path, trials: int, seed: int) -> None:
    """Each trial a committer packs every few commits and SIGKILLs itself at a random
    file operation of its packing: writing the pack or its index, fsyncing, renaming
    them into place, deleting loose objects or merged packs. Every other trial merges
    through dulwich (`git` hidden)."""
    rng = random.Random(seed)
    committed: dict[str, int] = {}
    next_n = 1
    for trial in range(trials):
        kind = sorted(OPERATIONS)[trial % len(OPERATIONS)]
        die_at = f"{kind}:{rng.randrange(1, OPERATIONS[kind] + 1)}"
        child = start(root, "t", die_at=die_at, arg=next_n, hide_git=trial % 2 == 1)
        out, err = finish(child)
        assert child.returncode == -signal.SIGKILL, f"{die_at}: {err}"
        lines = [line.split() for line in out.splitlines()]
        for n, sha in lines:
            committed[sha] = int(n)
        main = set(git(root, "rev-list", "main").split())
        assert set(committed) <= main, f"trial {trial}: a commit was lost"
        assert_everything_readable(root)
        next_n = max(committed.values()) + 1 if committed else 1
        # what the dead process wrote but did not commit is adopted, as a run would
        repo = GitRepo(root)
        repo.commit_worktree(["traces/t/trace.json", f"traces/t/messages/{next_n:06d}-user.md"],
                             b"adopt\n")
        next_n += 1
        repo.pack()
        repo.close()
        assert_everything_readable(root)
        assert not list((root / ".git/objects/pack").glob("tmp_*")), "a dead temp was kept"


def test_a_committer_killed_while_packing_leaves_the_repository_whole(root: Path) -> None:
    kill_while_packing(root, trials=5, seed=11)


@pytest.mark.slow
def test_forty_kills_while_packing_leave_the_repository_whole(root: Path) -> None:
    kill_while_packing(root, trials=40, seed=2026)


def test_processes_packing_at_once_lose_nothing(root: Path) -> None:
    """Two processes pack and merge without the lock, as `git gc` would (one merging
    with `git`, one through dulwich), while two others commit and pack under it."""
    committers = [start(root, f"c{i}", "", 1) for i in range(2)]
    packers: list[subprocess.Popen] = []
    seen = [0, 0]
    try:
        for i, committer in enumerate(committers):  # both are committing
            assert committer.stdout is not None
            while seen[i] < 30:
                assert committer.stdout.readline(), committer.stderr
                seen[i] += 1
        packers = [start(root, "packer", "", 40, hide_git=i == 1) for i in range(2)]
        for packer in packers:
            out, err = finish(packer)
            assert packer.returncode == 0 and out == "done\n", err
        for i, committer in enumerate(committers):  # still committing after them
            assert committer.stdout is not None
            for _ in range(10):
                assert committer.stdout.readline(), committer.stderr
                seen[i] += 1
    except BaseException:
        for child in [*committers, *packers]:  # no process left behind a failed check
            child.kill()
            child.communicate()
        raise
    finally:
        for committer in committers:
            committer.kill()
    counts = []
    for i, committer in enumerate(committers):
        out, err = finish(committer)
        assert committer.returncode == -signal.SIGKILL, err
        counts.append(seen[i] + len(out.splitlines()))
    repo = GitRepo(root)
    for i in range(2):  # what a killed committer wrote but did not commit
        folder = f"traces/c{i}"
        leftovers = [p.relative_to(root).as_posix() for p in (root / folder).rglob("*")
                     if p.is_file()]
        repo.commit_worktree(leftovers, b"adopt\n")
    repo.close()
    assert_everything_readable(root)
    files = set(git(root, "ls-tree", "-r", "--name-only", "HEAD").splitlines())
    for i, count in enumerate(counts):
        assert {f"traces/c{i}/messages/{n:06d}-user.md" for n in range(1, count + 1)} <= files


#: A `git` that stops at `pack-objects` until the test lets it go, then runs the real one.
SLOW_GIT = """#!/bin/sh
case " $* " in *" pack-objects "*)
  : > "$GATE/started"
  while [ ! -e "$GATE/go" ]; do sleep 0.01; done ;;
esac
exec "$REAL_GIT" "$@"
"""

#: Two packs, then a packing run that merges them (`MIN_PACKS` lowered to 2).
MERGER = r"""
import sys
from pathlib import Path
from agentfs.store.git import packing
from agentfs.store.git.repo import GitRepo
from tests.store.test_packing import commit_message
packing.MIN_PACKS = 2
repo = GitRepo(Path(sys.argv[1]))
repo.packer.after_commit = lambda: None
for n in range(1, 4):
    commit_message(repo, n)
    repo.pack()
"""


def test_a_git_merge_that_outlives_its_killed_process_keeps_the_packing_lock(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed while its `git pack-objects` merges packs, a process leaves that git
    running (it writes the merged pack): the packing lock stays held until then, so
    no other packer starts meanwhile and `wait_for_packing` waits for it. The packs
    it merged stay until the next merge (their objects are in two packs meanwhile)."""
    gate, bin_dir = tmp_path / "gate", tmp_path / "bin"
    gate.mkdir()
    bin_dir.mkdir()
    (bin_dir / "git").write_text(SLOW_GIT)
    (bin_dir / "git").chmod(0o755)
    env = {**os.environ, "GATE": str(gate), "REAL_GIT": shutil.which("git") or "git",
           "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    child = subprocess.Popen([sys.executable, "-c", MERGER, str(root)], env=env,
                             cwd=Path(__file__).parents[2], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not (gate / "started").exists():
            assert child.poll() is None, child.stderr.read() if child.stderr else ""
            assert time.monotonic() < deadline, "the merge never started"
            time.sleep(0.01)
        child.kill()
        child.wait()
        lock = root / ".git" / "agentfs" / "locks" / "pack.lock"
        assert is_held(lock), "the lock went with the killed process"
        assert not packing.wait_for_packing(root / ".git", timeout=0.2)
        assert GitRepo(root).pack() is None  # another packer stays out meanwhile
        (gate / "go").touch()
        assert packing.wait_for_packing(root / ".git", timeout=60)
    finally:
        (gate / "go").touch()
        child.kill()
        child.wait()
        if child.stderr is not None:
            child.stderr.close()
    assert not is_held(lock)
    assert len(packs(root)) == 3  # the merged pack beside the two it merged
    assert_everything_readable(root)
    monkeypatch.setattr(packing, "MIN_PACKS", 2)
    report = GitRepo(root).pack()
    assert report is not None and report.merged
    assert len(packs(root)) == 1
    assert_everything_readable(root)


def test_a_merge_that_runs_out_of_time_is_killed_and_leaves_the_lock_free(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate, bin_dir = tmp_path / "gate", tmp_path / "bin"
    gate.mkdir()
    bin_dir.mkdir()
    (bin_dir / "git").write_text(SLOW_GIT)
    (bin_dir / "git").chmod(0o755)
    monkeypatch.setenv("GATE", str(gate))
    monkeypatch.setenv("REAL_GIT", shutil.which("git") or "git")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(packing, "MIN_PACKS", 2)
    monkeypatch.setattr(packing, "MERGE_TIMEOUT", 0.5)
    repo = GitRepo(root)
    repo.packer.after_commit = lambda: None  # type: ignore[method-assign]
    commit_message(repo, 1)
    repo.pack()
    commit_message(repo, 2)
    with pytest.raises(RemoteError, match="git pack-objects did not finish in"):
        repo.pack()
    assert not is_held(root / ".git" / "agentfs" / "locks" / "pack.lock")
    assert len(packs(root)) == 2  # nothing merged, nothing lost
    (gate / "go").touch()
    report = repo.pack()
    assert report is not None and len(report.merged) == 2
    repo.close()
    assert_everything_readable(root)


def test_a_merge_killed_before_it_deleted_what_it_merged_is_finished_by_the_next(
    root: Path, monkeypatch: pytest.MonkeyPatch, merger: str
) -> None:
    """Its `git` installed the merged pack; the packs it merged would otherwise stay
    beside it for good once that pack is too big to merge again (`MERGE_LIMIT`)."""
    monkeypatch.setattr(packing, "MIN_PACKS", 2)
    repo = one_pack_a_step(root, 4)
    due = packing.packs_to_merge(root / ".git" / "objects" / "pack")
    assert len(due) == 4
    # what a process killed after its `git pack-objects` and before the deletes leaves
    record = root / ".git" / "agentfs" / packing.MERGING
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text("".join(f"{name}\n" for name in due))
    listed = "".join(f"{name}.pack\n" for name in due)
    subprocess.run(["git", "pack-objects", "--stdin-packs", "-q", ".git/objects/pack/pack"],
                   cwd=root, input=listed.encode(), check=True, capture_output=True)
    assert len(packs(root)) == 5
    commit_message(repo, 5)
    monkeypatch.setattr(packing, "MERGE_LIMIT", 3)  # the merged pack is too big to merge
    report = repo.pack()
    assert report is not None and sorted(report.merged) == sorted(due)
    assert len(packs(root)) == 2  # the merged pack and the new one
    assert not record.exists()
    repo.close()
    assert_everything_readable(root)


def test_a_merge_is_one_pack_whatever_pack_size_limit_says(
    root: Path, merger: str
) -> None:
    git(root, "config", "pack.packSizeLimit", "1m")
    repo = GitRepo(root)
    repo.packer.after_commit = lambda: None  # type: ignore[method-assign]
    merged = []
    for n in range(2):  # two packs of 700 KB: a merge writes 1.4 MB
        (root / f"noise{n}.bin").write_bytes(random.Random(n).randbytes(700_000))
        repo.commit_worktree([f"noise{n}.bin"], b"noise\n")
        report = repo.pack()
        assert report is not None
        merged += report.merged
    assert len(merged) == 2
    assert len(packs(root)) == 1
    repo.close()
    assert_everything_readable(root)


def test_a_pack_git_repack_is_installing_is_never_merged(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`git repack` writes `.tmp-<pid>-pack-*` then renames it: taken meanwhile, its
    rename fails."""
    monkeypatch.setattr(packing, "MIN_PACKS", 2)
    repo = one_pack_a_step(root, 3)
    pack_dir = root / ".git" / "objects" / "pack"
    name = packs(root)[0]
    for ext in (".pack", ".idx"):
        shutil.copy(pack_dir / f"{name}{ext}", pack_dir / f".tmp-4242-pack-{'0' * 40}{ext}")
    due = packing.packs_to_merge(pack_dir)
    assert due and not any(name.startswith(".tmp-") for name in due)
    repo.close()


# --- leftovers -------------------------------------------------------------------------


def test_what_killed_packers_left_is_removed(root: Path) -> None:
    repo = GitRepo(root)
    commit_message(repo, 1)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    pack_dir = root / ".git/objects/pack"
    pack_dir.mkdir(parents=True, exist_ok=True)
    stale = [pack_dir / f"tmp_pack_{dead}_00ff00ff", pack_dir / f"tmp_idx_{dead}_00ff00ff",
             root / f".git/objects/ab/tmp_obj_{dead}_1",
             root / f".git/objects/tmp_obj_{dead}_2"]  # a big file's blob, being streamed
    live = [pack_dir / f"tmp_pack_{os.getpid()}_00ff00ff",
            root / f".git/objects/tmp_obj_{os.getpid()}_3"]
    orphan = pack_dir / f"pack-{'1' * 40}.pack"  # killed between the .pack and .idx renames
    installing = pack_dir / f"pack-{'2' * 40}.pack"  # maybe a `git` command, right now
    for path in [*stale, *live, orphan, installing]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    two_hours_ago = os.stat(orphan).st_mtime - 7200
    os.utime(orphan, (two_hours_ago, two_hours_ago))
    repo.pack()
    assert not any(path.exists() for path in [*stale, orphan])
    assert all(path.exists() for path in [*live, installing])
    repo.close()


def test_temp_files_of_git_itself_are_never_taken_for_a_dead_process(root: Path) -> None:
    """Git names its temp files `tmp_obj_XXXXXX` with 6 random letters and digits;
    all digits is a number that is rarely a live pid, but it is Git's file, being
    written: only `<prefix><pid>_<random>` names are ours to sweep."""
    from agentfs.store.atomic import alive

    repo = GitRepo(root)
    commit_message(repo, 1)
    number = next(n for n in range(999_999, 100_000, -1) if not alive(n))
    theirs = [root / f".git/objects/ab/tmp_obj_{number}",
              root / f".git/objects/pack/tmp_pack_{number}",
              root / f".git/objects/pack/tmp_idx_{number}"]
    for path in theirs:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    repo.pack()
    assert all(path.exists() for path in theirs)
    # ... until they have not been written for an hour: a `git` killed while
    # it wrote a pack (a merge that ran out of time) leaves them for good
    two_hours_ago = time.time() - 7200
    abandoned = [*theirs[1:], root / ".git/objects/pack/.tmp-4-pack-abc.pack"]
    abandoned[-1].write_bytes(b"")
    for path in abandoned:
        os.utime(path, (two_hours_ago, two_hours_ago))
    repo.pack()
    assert not any(path.exists() for path in abandoned)
    assert theirs[0].exists()  # loose temps are git prune's business
    repo.close()


def test_a_damaged_pack_fails_packing_but_never_the_commit(
    root: Path, monkeypatch, merger: str
) -> None:
    repo = one_pack_a_step(root, 3)
    del repo.packer.after_commit
    pack_dir = root / ".git/objects/pack"
    victim = min(pack_dir.glob("*.pack"))
    kept = victim.read_bytes()
    victim.chmod(0o644)
    victim.write_bytes(kept[:-30] + bytes(10) + kept[-20:])
    monkeypatch.setattr(packing, "LOOSE_LIMIT", 0)
    commit_message(repo, 10)  # packs, and tries to merge
    assert repo.packer.last_error is not None
    assert victim.exists()  # still there, for `git fsck` to report
    repo.close()


def test_a_damaged_entry_is_never_merged_over_a_good_copy(
    root: Path, monkeypatch, merger: str
) -> None:
    """An object in two packs, damaged in one: Git reads the good copy. A merge
    that copied the damaged one and deleted the other pack would lose it."""
    repo = GitRepo(root)
    repo.packer.after_commit = lambda: None  # type: ignore[method-assign]
    commit_message(repo, 1)
    first = packing.pack_loose_objects(root / ".git", read=repo.objects.read_raw)[0]
    assert first is not None
    blob = git(root, "rev-parse", "HEAD:traces/t/messages/000001-user.md").strip()
    text = git(root, "cat-file", "blob", blob).encode()
    pack_dir = root / ".git/objects/pack"
    # a second copy, as `git gc` racing us may make
    install_pack(pack_dir, [whole(bytes.fromhex(blob), Blob.type_num, text)], 1)
    with Pack(str(pack_dir / first), object_format=SHA1) as pack:
        offset = pack.index.object_offset(bytes.fromhex(blob))
    damaged = bytearray((pack_dir / f"{first}.pack").read_bytes())
    damaged[offset + 8] ^= 0xFF
    (pack_dir / f"{first}.pack").chmod(0o644)
    (pack_dir / f"{first}.pack").write_bytes(damaged)
    assert git(root, "cat-file", "blob", blob).encode() == text  # from the good copy
    with contextlib.suppress(Exception):  # failing is fine; losing the good copy is not
        packing.merge_packs(root / ".git")
    assert git(root, "cat-file", "blob", blob).encode() == text
    repo.close()


def test_a_damaged_loose_object_is_left_for_fsck_to_report(root: Path) -> None:
    repo = GitRepo(root)
    commit_message(repo, 1)
    bad = root / ".git/objects/ee" / ("e" * 38)
    bad.parent.mkdir(exist_ok=True)
    bad.write_bytes(zlib.compress(b"blob 3\0abc"))  # content that does not hash to its name
    repo.pack()
    assert bad.exists() and loose_count(root) == 1
    repo.close()


def test_git_gc_after_agentfs_packs_keeps_everything(root: Path) -> None:
    repo = GitRepo(root)
    for n in range(1, 80):
        commit_message(repo, n)
    repo.pack()
    git(root, "gc", "-q")
    for n in range(80, 120):
        commit_message(repo, n)
    repo.pack()
    assert_everything_readable(root)
    assert_messages_committed(root, 119)
    repo.close()
