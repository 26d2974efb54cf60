"""Big files in steps, and the merges of packs after them.

`python -m bench.bigfiles [--mb 200] [--steps 2000]` measures, in one
repository each, through `GitRepo` (the commit path without a trace):

- a new file of `--mb` megabytes committed, then the same bytes written and
  committed again (seconds each): the second commit needs no new blob;
- after that file, `--steps` steps of a trace (a message file and the state
  file each), with the packing and merging they bring: the slowest step, and
  whether the big file's blob is still loose;
- `--steps` steps alone, then one last pack: `.git/objects` against what
  `git gc` makes of it, and the packs left.

Figures for docs/performance.md ("Merging packs without the loose objects").
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from agentfs.store.git import packing
from agentfs.store.git.repo import GitRepo, init_repo


def step(repo: GitRepo, n: int) -> None:
    """One step of a trace: a new message file and the trace's state file."""
    folder = repo.root / "traces" / "t"
    (folder / "messages").mkdir(parents=True, exist_ok=True)
    name = f"traces/t/messages/{n:06d}-user.md"
    (repo.root / name).write_text(f"---\nsequence: {n}\n---\nstep {n} of a long trace\n")
    (folder / "trace.json").write_text(f'{{"id": "t", "head": {n}, "next": {n + 1}}}\n')
    repo.commit_worktree([name, "traces/t/trace.json"], f"t: #{n}\n".encode())


def fresh(scratch: Path, name: str) -> GitRepo:
    root = scratch / name
    root.mkdir()
    init_repo(root)
    return GitRepo(root)


def tree_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def big_file(scratch: Path, megabytes: int, steps: int) -> None:
    repo = fresh(scratch, "big")
    half = megabytes * 2**20 // 2
    data = os.urandom(half) + bytes(half)  # half of it compresses, as real output does
    (repo.root / "big.bin").write_bytes(data)
    began = time.perf_counter()
    repo.commit_worktree(["big.bin"], b"big\n")
    first = time.perf_counter() - began
    (repo.root / "big.bin").write_bytes(data)
    began = time.perf_counter()
    repo.commit_worktree(["big.bin"], b"again\n")
    again = time.perf_counter() - began
    print(f"commit of a new {megabytes} MB file: {first:.2f} s; "
          f"of the same bytes again: {again:.2f} s")
    slowest = 0.0
    for n in range(1, steps + 1):
        began = time.perf_counter()
        step(repo, n)
        slowest = max(slowest, time.perf_counter() - began)
    head = repo.head()
    assert head is not None
    found = repo.tree_lookup(head, "big.bin")
    assert found is not None
    loose = packing.loose_objects(repo.root / ".git" / "objects")[0]
    print(f"then {steps} steps: the slowest {slowest * 1000:.0f} ms; "
          f"the big blob {'still loose' if found[1] in loose else 'packed'}")
    repo.close()


def packed_size(scratch: Path, steps: int) -> None:
    repo = fresh(scratch, "steps")
    for n in range(1, steps + 1):
        step(repo, n)
    repo.pack()
    repo.close()
    git_dir = repo.root / ".git"
    objects = tree_bytes(git_dir / "objects")
    packs = len(list((git_dir / "objects" / "pack").glob("*.pack")))
    copy = scratch / "gc"
    shutil.copytree(git_dir, copy)
    subprocess.run(["git", f"--git-dir={copy}", "gc", "-q", "--prune=now"], check=True)
    gc = tree_bytes(copy / "objects")
    print(f"{steps} steps, then one pack: .git/objects {objects / 1e6:.2f} MB, "
          f"{objects / gc:.2f}x git gc ({gc / 1e6:.2f} MB), {packs} packs")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bigfiles", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=200, help="size of the big file")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--scratch", type=Path, default=Path(__file__).parent / ".scratch")
    args = parser.parse_args(argv)
    args.scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bigfiles-", dir=args.scratch) as session:
        big_file(Path(session), args.mb, args.steps)
        packed_size(Path(session), args.steps)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
