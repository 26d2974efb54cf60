"""Talking to a Git remote with the real `git` binary: fetches, and pushes that
move several refs at once, each only if it still holds the value we saw.

A push is `git push --atomic --porcelain` with one `--force-with-lease=<ref>:<expect>`
per ref: the server checks every expected value under its ref locks and applies
all the updates or none (see docs/remote.md, "Refs"). An empty expected value
means "the ref must not exist", which makes creating a ref a compare-and-swap
too. Any server speaking the Git protocol (ssh, `git daemon`, smart HTTP) does
this; there is nothing agentfs-specific on the server.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from agentfs.errors import GitStateError, RemoteError

__all__ = ["EMPTY_TREE", "GitRemote", "RefUpdate", "git", "git_lines", "git_paths",
           "identity", "is_ancestor", "said"]

#: Git's empty tree, present in every repository without being written.
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

#: No auto-gc or maintenance inside agentfs' own git calls (agentfs packs on its own
#: schedule), and bytes committed as they are.
_OPTIONS = ("-c", "gc.auto=0", "-c", "maintenance.auto=false", "-c", "core.autocrlf=false")


#: Git's own words, whatever the user's language: lost races are told apart by them.
_ENV = {"LC_ALL": "C", "LANGUAGE": ""}

#: The reasons `git push --porcelain` gives, on a rejected ref's status line, for a ref
#: that no longer held what the push expected (a lost race): the client's own check
#: ("stale info", ...), the server's under its ref locks ("atomic transaction failed",
#: "cannot lock ref ...: is at X but expected Y"), and "atomic push failed" for the refs
#: an atomic push left alone.
_LOST_RACE = ("stale info", "fetch first", "non-fast-forward", "atomic push failed",
              "already exists", "failed to update ref", "failed to lock", "cannot lock ref",
              "but expected", "incorrect old value", "atomic transaction failed")


def git(root: Path, *args: str, timeout: float = 120.0, check: bool = True,
        input: bytes | None = None, pass_fds: Sequence[int] = ()
        ) -> subprocess.CompletedProcess[bytes]:
    """Run `git` in `root`; a failure is a `GitStateError` quoting git's own words.

    `pass_fds` stay open in git's process: an flock held through one of them is
    then held until git exits, even if this process is killed first."""
    try:
        done = subprocess.run(["git", *_OPTIONS, *args], cwd=root, capture_output=True,
                              timeout=timeout, input=input, check=False, pass_fds=pass_fds,
                              env={**os.environ, **_ENV})
    except subprocess.TimeoutExpired:  # killed, and waited for
        raise RemoteError(f"git {_verb(args)} did not finish in {timeout:g} s in {root}"
                          ) from None
    if check and done.returncode != 0:
        raise GitStateError(f"git {_verb(args)} failed in {root}: {said(done)}")
    return done


def git_paths(root: Path, *args: str) -> list[str]:
    """The paths a `git ... -z` listing names, as the file system spells them (a name
    that is not UTF-8 keeps its bytes as surrogates)."""
    listed = git(root, *args).stdout
    return [p for p in listed.decode(errors="surrogateescape").split("\0") if p]


def is_ancestor(root: Path, commit: str, of: str) -> bool:
    """Whether commit `of` holds `commit` (`git merge-base --is-ancestor`, which does
    not go by commit times). A failure of git is raised, never taken for a no."""
    done = git(root, "merge-base", "--is-ancestor", commit, of, check=False)
    if done.returncode not in (0, 1):
        raise GitStateError(f"git merge-base failed in {root}: {said(done)}")
    return done.returncode == 0


def git_lines(root: Path, *args: str) -> Iterator[bytes]:
    """The lines `git` writes, read as it writes them, for a long listing that the
    caller may stop early: closing the iterator ends git."""
    with subprocess.Popen(["git", *_OPTIONS, *args], cwd=root, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          env={**os.environ, **_ENV}) as listing:
        assert listing.stdout is not None
        try:
            yield from (line.rstrip(b"\n") for line in listing.stdout)
        finally:
            listing.kill()
    if listing.returncode not in (0, -signal.SIGKILL):
        raise GitStateError(f"git {_verb(args)} failed in {root} (exit {listing.returncode})")


def said(done: subprocess.CompletedProcess[bytes]) -> str:
    """What a failed git command wrote on stderr, or, if nothing, how it ended: a
    `git push` killed by a signal (Ctrl-C at a terminal reaches the whole process
    group) says nothing, and an error must still say something."""
    text = done.stderr.decode(errors="replace").strip()
    if text:
        return text
    if done.returncode < 0:
        try:
            name = signal.Signals(-done.returncode).name
        except ValueError:
            name = f"signal {-done.returncode}"
        return f"git was stopped by {name}, before it said anything"
    return f"git exited with status {done.returncode} and said nothing"


def _verb(args: Sequence[str]) -> str:
    """The git command among `args`: the first that is neither an option nor the value
    of `-c` or `-C`."""
    after_option = False
    for arg in args:
        if not after_option and not arg.startswith("-"):
            return arg
        after_option = arg in ("-c", "-C") and not after_option
    return ""


def identity(root: Path) -> list[str]:
    """Options giving `git commit` agentfs' identity when the clone has none configured."""
    if git(root, "config", "user.email", check=False).returncode == 0:
        return []
    return ["-c", "user.name=agentfs", "-c", "user.email=agentfs@localhost"]


@dataclass(frozen=True)
class RefUpdate:
    """Move `ref` to `new` (hex; None deletes it) if it holds `expect` (None: absent)."""

    ref: str
    new: str | None
    expect: str | None


class GitRemote:
    """One remote (a name configured in the clone, or a URL) seen from clone `root`."""

    def __init__(self, root: Path, remote: str, *, timeout: float = 60.0) -> None:
        self.root = root
        self.remote = remote
        self.timeout = timeout
        self._empty_tree_written = False

    def fetch(self, refspecs: Sequence[str], *, prune: bool = True) -> None:
        """Fetch `refspecs` (forced, `+src:dst`); a missing source ref is no error.

        Raises:
          RemoteError: the remote cannot be reached or refused to answer.
        """
        args = ["fetch", "--quiet", "--no-tags", "--no-write-fetch-head"]
        if prune:
            args.append("--prune")
        done = git(self.root, *args, self.remote, *refspecs, timeout=self.timeout, check=False)
        if done.returncode != 0:
            raise RemoteError(f"cannot fetch from {self.remote}: {said(done)}",
                              hint="check that the remote is reachable; agentfs retries")

    def push(self, updates: Sequence[RefUpdate]) -> bool:
        """Apply `updates` on the remote all together, or none of them.

        Returns:
          True if the remote took them all; False if one ref no longer held its
          expected value (someone else moved it), so nothing changed.

        Raises:
          RemoteError: the remote cannot be reached, or refused for another reason.
        """
        args = ["push", "--atomic", "--porcelain", "--no-verify", self.remote]
        for update in updates:
            args.append(f"--force-with-lease={update.ref}:{update.expect or ''}")
        args += [f"{update.new or ''}:{update.ref}" for update in updates]
        done = git(self.root, *args, timeout=self.timeout, check=False)
        lines = done.stdout.decode(errors="replace").splitlines()
        # Porcelain status lines: "<flag>\t<src>:<dst>\t<summary> (<reason>)".
        status = [line.split("\t") for line in lines if line[:1] in ("!", " ", "*", "-", "+", "=")
                  and line.count("\t") >= 2]
        rejected = [s for s in status if s[0] == "!"]
        if done.returncode == 0 and status and not rejected:
            return True
        if rejected and all(any(reason in s[2] for reason in _LOST_RACE) for s in rejected):
            return False
        problem = "; ".join(f"{s[1].rpartition(':')[2]} {s[2]}" for s in rejected)
        problem = "\n".join(p for p in (problem, done.stderr.decode(errors="replace").strip())
                             if p) or "\n".join(lines) or said(done)
        raise RemoteError(f"cannot push to {self.remote}: {problem}",
                          hint="check that the remote is reachable and accepts pushes")

    # --- local refs and objects (plumbing, in the clone) -------------------------

    def local_ref(self, ref: str) -> str | None:
        done = git(self.root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}",
                   check=False)
        return done.stdout.decode().strip() or None

    def local_refs(self, prefix: str) -> dict[str, tuple[str, str]]:
        """Refs below `prefix` in the clone: name → (sha, commit message)."""
        done = git(self.root, "for-each-ref", "--format=%(refname)%00%(objectname)%00"
                   "%(contents)%00%00", prefix)
        found: dict[str, tuple[str, str]] = {}
        for record in done.stdout.decode(errors="replace").split("\0\0"):
            parts = record.lstrip("\n").split("\0")
            if len(parts) == 3:
                found[parts[0]] = (parts[1], parts[2])
        return found

    def note_commit(self, text: str) -> str:
        """A parentless commit of the empty tree whose message is `text` (a claim)."""
        if not self._empty_tree_written:  # written, not only Git's virtual one
            git(self.root, "hash-object", "-w", "-t", "tree", "--stdin", input=b"")
            self._empty_tree_written = True
        done = git(self.root, *identity(self.root), "commit-tree", EMPTY_TREE,
                   input=text.encode())
        return done.stdout.decode().strip()
