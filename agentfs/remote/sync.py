"""`agentfs sync`: a person's clone and the shared remote, brought together.

1. What waits here is committed: first each trace's uncommitted files, as a
   run would commit them (`agentfs/store/recovery.py:recover`: a person's edits
   as `edit` steps, refused if they break the trace; files a crash left adopted;
   `trace.json`'s count of the model's turns kept right), then files dropped into
   inboxes and changes to other files Git already tracks, one `sync` commit.
2. The remote's `main` and its trace refs are fetched, the refs' steps folded
   onto `main` (`agentfs/remote/tracerefs.py:fold`: sync sees every trace's
   newest step, running ones included; the steps of a ref whose steps changed
   a file main changed too are carried in line all the same, settled as a
   clone's are, `_fold`), and the result merged
   (`agentfs/store/git/carry.py:merge`):
   traces are disjoint directories, so work on different traces merges path
   by path. agentfs' own JSON files (`trace.json`, `goals.json`) changed on
   both sides are merged key by key (`merge_json`; a count of files, `iterations`,
   as the sum of both sides' changes). The same file changed two
   ways (a message edited on two machines) is a real conflict: the remote's
   version stays at the path, this clone's is kept beside it, and sync stops
   before pushing, saying which files to look at.
3. The result is pushed with a compare and swap on `main` and on each trace ref
   folded, which it deletes (a push lost to a worker's is merged and tried
   again), then the work tree and the index follow
   with `git merge --ff-only` (Git keeps the index).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Collection
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentfs.errors import AgentfsError, MergeConflict, RemoteError, TraceLocked
from agentfs.remote.diverged import crossed, numbered_twice, refusal, remote_wins
from agentfs.remote.tracerefs import MAIN_REF, TRACES, Folded, fold, seen_traces
from agentfs.store.commits import StepKind
from agentfs.store.git.carry import merge
from agentfs.store.git.conflicts import CONFLICT_COPY
from agentfs.store.git.remote import GitRemote, RefUpdate, git, identity, is_ancestor
from agentfs.store.git.repo import GitRepo
from agentfs.store.inbox import waiting
from agentfs.store.trace import Trace
from agentfs.store.tracelock import TraceLock
from agentfs.store.unicode import load_json
from agentfs.store.wording import counted
from agentfs.store.workspace import GOALS_FILE, TRACE_FILE, TRACES_DIR, Workspace

__all__ = ["SyncReport", "merge_json", "sync"]

FETCHED = "refs/agentfs/sync/main"
FETCHED_TRACES = "refs/agentfs/sync/traces/"
#: Trace refs a sync carried with a path kept both ways, then stopped on: the copy of
#: the ref's last step in this clone, and the ref's value then (`_held`).
CARRIED = "refs/agentfs/sync/carried/"
CARRIED_FROM = "refs/agentfs/sync/carried-from/"
#: Pushes lost to workers' pushes in a row before sync gives up.
ATTEMPTS = 100


@dataclass
class SyncReport:
    committed: int = 0  # local files committed before the merge
    #: trace id → the kinds of step its uncommitted files were committed as (`edit`...)
    recovered: dict[str, list[str]] = field(default_factory=dict)
    pulled: bool = False  # the remote had commits this clone did not
    pushed: bool = False
    resolved: list[str] = field(default_factory=list)
    kept_aside: dict[str, str] = field(default_factory=dict)  # path → where the copy went
    #: path → the trace whose ref's version was kept beside main's (`_fold`)
    kept_for: dict[str, str] = field(default_factory=dict)
    #: traces asked for with `theirs` whose changes here the merge left out
    theirs_kept: list[str] = field(default_factory=list)


def sync(workspace: Workspace, remote: str, *, durable: bool = False,
         theirs: Collection[str] = ()) -> SyncReport:
    """Commit, pull and push `workspace` against `remote` (a name or a URL);
    `durable`: the traces' own commits fsync what they write (`fsync = "all"`);
    `theirs`: traces whose remote version the merge keeps, whatever this clone did
    to them (their inboxes aside).

    Raises:
      MergeConflict: files were changed both here and on the remote; both are kept
        (see `SyncReport.kept_aside` in the error's hint) and nothing was pushed.
      RemoteError: the remote cannot be reached.
      AgentfsError: a trace is running here (its files are half-way through a step).
      MergeConflict: also when a trace not in `theirs` was run both here and on the
        remote (`agentfs/remote/diverged.py`); nothing was merged then.
    """
    root = workspace.root
    copies = _conflict_copies(root)
    if copies:
        raise MergeConflict(
            f"an earlier sync left conflict copies not yet resolved: {', '.join(copies[:5])}"
            + (f" and {len(copies) - 5} more" if len(copies) > 5 else ""), copies,
            hint="keep the version you want at each path (edit it; delete the .conflict- "
            "copy), then run `agentfs sync` again")
    with ExitStack() as held:
        _lock_traces(workspace, held)
        recovered = _recover_traces(workspace, durable)
        return _sync_locked(workspace, remote, recovered, theirs)


def _recover_traces(workspace: Workspace, durable: bool) -> dict[str, list[str]]:
    """Commit each trace's uncommitted files as the next run would, before the
    `sync` commit takes what is left (the caller holds every trace's lock); returns
    the kinds of step committed, by trace."""
    repo = GitRepo(workspace.root, durable=durable)
    try:
        done = {t: Trace(workspace, repo, t).recover() for t in workspace.trace_ids()}
        return {t: kinds for t, kinds in done.items() if kinds}
    finally:
        repo.close()


def _sync_locked(workspace: Workspace, remote: str, recovered: dict[str, list[str]],
                 keep_theirs: Collection[str]) -> SyncReport:
    root = workspace.root
    report = SyncReport(committed=_commit_local(workspace), recovered=recovered)
    client = GitRemote(root, remote)
    ours = client.local_ref(MAIN_REF)
    if ours is None:
        raise AgentfsError(f"{root} has no commit on main", hint="run `agentfs init`")
    has_main = _remote_has_main(root, remote)
    for attempt in range(ATTEMPTS):
        # Each attempt is a fetch, a merge in the object store and a push: short, so
        # that workers pushing steps all the time leave a window; the work tree
        # follows once, at the end.
        main = theirs = folded = None
        folds: list[RefUpdate] = []
        report.resolved, report.kept_aside, report.kept_for = [], {}, {}
        if has_main:
            client.fetch([f"+{MAIN_REF}:{FETCHED}", f"+{TRACES}*:{FETCHED_TRACES}*"])
            main = theirs = client.local_ref(FETCHED)
        if main is not None:
            folded = _fold(client, main, seen_traces(client, FETCHED_TRACES), ours, report)
            theirs = folded.tip
            folds = [u for u in folded.updates() if u.ref != MAIN_REF]  # the refs deleted
        tip, ahead = ours, True  # ahead: ours holds commits the remote lacks
        if theirs is not None and theirs != ours:
            base = _merge_base(root, ours, theirs)
            ahead = base != ours
            if not ahead:
                tip = theirs
            elif base != theirs:
                _settle_diverged(root, base, ours, theirs, keep_theirs=keep_theirs, report=report)
                tip = _merge(root, base, ours, theirs, keep_theirs=keep_theirs, report=report)
            report.pulled = base != theirs
        elif theirs == ours:
            ahead = False
        _check_before_push(client, main, tip, folded=folded, keep_theirs=keep_theirs,
                           report=report)  # before anything is checked out
        if report.kept_aside:
            _remember_kept(client, folded)
            _stop(root, tip, report)
        if tip == main or client.push([RefUpdate(MAIN_REF, tip, main), *folds]):
            _forget_kept(client)
            if tip != ours:
                _check_out(root, tip)
            report.pushed = ahead and tip != main
            return report
        has_main = True
        time.sleep(random.uniform(0, 0.01 * min(attempt + 1, 20)))
    raise AgentfsError(f"main on {remote} kept moving during {ATTEMPTS} attempts",
                       hint="workers are pushing fast; run `agentfs sync` again")


def _fold(client: GitRemote, main: str, refs: dict[str, str], ours: str,
          report: SyncReport) -> Folded:
    """The remote's main with every trace ref's steps carried on top, each ref folded
    deleted. Steps that change a file main changed too (a ref the workers' folds left
    out) are carried all the same, in line, so `git log --first-parent main` and
    every trace's log keep them: agentfs' own JSON files merged, another file kept
    both ways (`agentfs/store/git/carry.py:BothKept`), and sync stops for the person.
    A ref an earlier sync of this clone carried so and stopped on, unchanged since, is
    only deleted: `_held`."""
    repo = GitRepo(client.root)
    try:
        held = _held(client, refs, ours)
        folded = fold(repo, main, {t: v for t, v in refs.items() if t not in held},
                      resolve=_resolve)
        folded.taken.update({t: refs[t] for t in held})
        for trace_id, kept in folded.kept.items():
            report.resolved += kept.resolved
            report.kept_aside.update(kept.kept_aside)
            report.kept_for.update(dict.fromkeys(kept.kept_aside, trace_id))
        return folded
    finally:
        repo.close()


def _held(client: GitRemote, refs: dict[str, str], ours: str) -> set[str]:
    """The refs an earlier sync of this clone carried and stopped on (`_remember_kept`),
    at the value they still have, with that carry still in this clone: their steps
    reach main with this clone's, so they are only deleted."""
    kept = client.local_refs(CARRIED)
    held = set()
    for name, (copy, _) in kept.items():
        trace_id = name.removeprefix(CARRIED)
        if client.local_ref(CARRIED_FROM + trace_id) == refs.get(trace_id) and is_ancestor(
                client.root, copy, ours):
            held.add(trace_id)
    return held


def _remember_kept(client: GitRemote, folded: Folded | None) -> None:
    """Before a sync stops on a conflict: for each trace ref it carried with a path
    kept both ways, its value and the copy of its last step, for `_held`."""
    if folded is None:
        return
    for trace_id in folded.kept:
        git(client.root, "update-ref", CARRIED + trace_id, folded.carried_to[trace_id])
        git(client.root, "update-ref", CARRIED_FROM + trace_id, folded.taken[trace_id])


def _forget_kept(client: GitRemote) -> None:
    """After a push: no carried ref is waiting any more."""
    for prefix in (CARRIED, CARRIED_FROM):
        for name in client.local_refs(prefix):
            git(client.root, "update-ref", "-d", name)


def _lock_traces(workspace: Workspace, held: ExitStack) -> None:
    """Hold every trace's run lock for the whole sync: no run commits a step half-way
    through it, and none starts until the work tree is the merged one."""
    running = []
    for trace_id in workspace.trace_ids():
        try:
            held.enter_context(TraceLock(workspace.lock_dir, trace_id))
        except TraceLocked:
            running.append(trace_id)
    if running:
        raise AgentfsError(f"trace(s) {', '.join(running)} are running in {workspace.root}",
                           hint="let them finish (or stop them), then sync")


def _conflict_copies(root: Path) -> list[str]:
    """Copies of an unresolved sync conflict still in the work tree (deleting a copy is
    how a person resolves it)."""
    listed = git(root, "ls-files", "-z", "--", ":(glob)**/*.conflict-*").stdout
    return [p for p in listed.decode(errors="replace").split("\0")
            if p and CONFLICT_COPY.match(p) and (root / p).exists()]


def _check_out(root: Path, tip: str) -> None:
    """Move main, the index and the work tree to `tip`, a descendant of main."""
    git(root, "merge", "--ff-only", "--quiet", tip)


def _commit_local(workspace: Workspace) -> int:
    """Commit the inboxes' waiting files and changes to tracked files; returns how many."""
    root = workspace.root
    drops = [workspace.relpath(p) for p in waiting(workspace.inbox_dir)]
    for trace_id in workspace.trace_ids():
        drops += [workspace.relpath(p) for p in waiting(workspace.trace_dir(trace_id) / "inbox")]
    if drops:
        git(root, "add", "--", *drops)
    git(root, "add", "-u")
    names = git(root, "diff", "--cached", "--name-only", "-z").stdout.split(b"\0")
    count = len([n for n in names if n])
    if count:
        git(root, *identity(root), "commit", "-q", "--no-verify", "-m",
            f"sync: {counted(count, 'file')} from {root.name}\n\n"
            f"Agentfs-Kind: {StepKind.SYNC}")
    return count


def _remote_has_main(root: Path, remote: str) -> bool:
    done = git(root, "ls-remote", "--heads", remote, "main", check=False)
    if done.returncode != 0:
        raise RemoteError(f"cannot reach {remote}: {done.stderr.decode(errors='replace').strip()}",
                          hint="check the remote's name or URL, and the network")
    return bool(done.stdout.strip())


def _merge_base(root: Path, ours: str, theirs: str) -> str | None:
    done = git(root, "merge-base", ours, theirs, check=False)
    return done.stdout.decode().strip() or None


def _settle_diverged(root: Path, base: str | None, ours: str, theirs: str, *,
                     keep_theirs: Collection[str], report: SyncReport) -> None:
    """Stop before the merge if a trace was run both here and on the remote since
    `base`, unless the person asked for the remote's version of it
    (`agentfs/remote/diverged.py`)."""
    repo = GitRepo(root)
    try:
        found = crossed(repo, base, ours, theirs)
    finally:
        repo.close()
    unsettled = {t: c for t, c in found.items() if t not in keep_theirs}
    if unsettled:
        raise refusal(unsettled)
    report.theirs_kept = sorted(found)


def _check_before_push(client: GitRemote, main: str | None, tip: str, *,
                       folded: Folded | None, keep_theirs: Collection[str],
                       report: SyncReport) -> None:
    """Refuse `--theirs` for a trace that was not run on both sides (it would take
    whatever the remote has of it, even nothing), and a push that gives a trace two
    message files of one number: a trace ref's steps (a worker's run) carried onto
    newer steps of the same trace on main, made meanwhile by a run elsewhere
    (`agentfs/remote/diverged.py:numbered_twice`)."""
    unknown = sorted(set(keep_theirs) - set(report.theirs_kept))
    if unknown:
        raise AgentfsError(
            f"--theirs {unknown[0]}: trace {unknown[0]} was not run both here and on the "
            "remote since this clone last synced; nothing was merged or pushed",
            hint="sync without --theirs: the merge keeps both sides' work")
    found = numbered_twice(client.root, main, tip) if main not in (None, tip) else {}
    if not found:
        return
    trace_id = next(iter(found))
    named = "; ".join(f"{t}: #{', #'.join(map(str, n))}" for t, n in found.items())
    ref = f"{TRACES}{trace_id}"
    on_ref = folded is not None and trace_id in folded.taken
    sha = folded.taken[trace_id] if folded is not None and on_ref else ""
    raise MergeConflict(
        f"pushing would give two messages one number ({named}); nothing was pushed",
        [f"{TRACES_DIR}/{t}" for t in found],
        hint=(f"trace {trace_id}'s steps on {ref} (a run elsewhere) cross newer steps of "
              f"it on main. To keep that run, save it as a branch (sync fetched it): "
              f"`git branch {trace_id}-run-{sha[:8]} {sha}`; then drop it "
              f"from the remote if it has not moved: `git push --force-with-lease={ref}:"
              f"{sha} {client.remote} :{ref}`, and sync again") if on_ref else
        "`agentfs doctor` says which files to rename or delete")


def _merge(root: Path, base: str | None, ours: str, theirs: str, *,
           keep_theirs: Collection[str], report: SyncReport) -> str:
    """The merge commit of ours and theirs (not checked out); the paths kept both ways
    are added to `report`; the traces in `keep_theirs` keep the remote's files."""
    repo = GitRepo(root)
    try:
        result = merge(repo, base.encode() if base else None, ours.encode(), theirs.encode(),
                       resolve=_resolve, theirs_wins=remote_wins(keep_theirs),
                       message=f"sync: merge the remote's main\n\n"
                               f"Agentfs-Kind: {StepKind.SYNC}\n".encode())
    finally:
        repo.close()
    report.resolved += result.resolved
    report.kept_aside.update(result.kept_aside)
    return result.commit.decode()


def _stop(root: Path, tip: str, report: SyncReport) -> None:
    """A real conflict: the merge `tip` is checked out, with both sides kept, and
    `MergeConflict` raised: nothing is pushed."""
    _check_out(root, tip)
    lines = []
    for path, aside in report.kept_aside.items():
        trace_id = report.kept_for.get(path)
        if trace_id is not None:  # the version of a trace ref the fold left out
            whose = f"trace {trace_id}'s steps changed it too, theirs is at"
            lines.append(f"{path}: {whose} {aside}" if aside
                         else f"{path}: deleted by trace {trace_id}'s steps, changed on main (kept)")
        else:
            lines.append(f"{path}: yours is at {aside}" if aside
                         else f"{path}: deleted here, changed there (kept)")
    raise MergeConflict(
        f"changed both here and on the remote: {'; '.join(lines)}", list(report.kept_aside),
        hint="the remote's version is at each path; keep the one you want (edit the file, "
        "delete the .conflict- copy), then run `agentfs sync` again to push")


def _resolve(path: str, base: bytes | None, ours: bytes | None,
             theirs: bytes | None) -> bytes | None:
    """agentfs' own files merged; anything else changed both ways is a real conflict."""
    if path.rsplit("/", 1)[-1] in (TRACE_FILE, GOALS_FILE) and ours is not None \
            and theirs is not None:
        return merge_json(base, ours, theirs)
    return None


def merge_json(base: bytes | None, ours: bytes, theirs: bytes) -> bytes | None:
    """Three-way merge of two JSON objects key by key (`trace.json`, `goals.json`):
    a key changed on one side takes that side. A key changed both ways takes both
    changes for a count of files (`_COUNTS`), else the remote's value when the
    remote's trace is further along (a higher `head`) or when the values are equal;
    otherwise None (a real conflict)."""
    try:
        old = load_json(base) if base else {}  # a lone surrogate escape: a real conflict
        mine, other = load_json(ours), load_json(theirs)
    except (ValueError, UnicodeDecodeError):
        return None
    if not all(isinstance(x, dict) for x in (old, mine, other)):
        return None
    merged: dict[str, Any] = {}
    for key in [*mine, *(k for k in other if k not in mine)]:
        a, b, o = mine.get(key, _GONE), other.get(key, _GONE), old.get(key, _GONE)
        if b in (a, o):
            value = a
        elif a == o:
            value = b
        elif key in _COUNTS and all(type(v) is int for v in (a, b, o)):
            value = a + b - o  # each side's files added or removed
        elif _ahead(other, mine):
            value = b
        else:
            return None
        if value is not _GONE:
            merged[key] = value
    return (json.dumps(merged, indent=2, ensure_ascii=False) + "\n").encode()


_GONE = object()
#: Keys that count files of the trace (`trace.json`'s `iterations`: the model's turns
#: in `messages/`): changed on both sides, each side's change is added, as the merge
#: adds each side's files (the same file changed two ways is a conflict instead).
_COUNTS = frozenset({"iterations"})


def _ahead(theirs: dict, ours: dict) -> bool:
    head_theirs, head_ours = theirs.get("head"), ours.get("head")
    return isinstance(head_theirs, int) and (not isinstance(head_ours, int)
                                             or head_theirs >= head_ours)
