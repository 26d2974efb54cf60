"""`agentfs watch --remote`: a worker of a fleet sharing one Git remote.

The worker's clone is a mirror of the remote's `main` between jobs. A job is
one trace (or one file of the workspace `inbox/`, which becomes a trace): the
worker claims it on the remote (`agentfs/remote/claims.py:Claims.take`),
fetches again (with the claim held, the remote's `main` and the trace's ref
are the whole truth about the trace), runs it like the local watcher would,
and pushes its steps to the trace's ref as they are committed, each push
renewing the claim (`agentfs/remote/publish.py:Publisher`). Then it folds the
steps into `main` and releases the claim, and mirrors the remote again. One job at a time per worker: run more workers for
more at once. See docs/remote.md.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentfs.core.project import Project
from agentfs.errors import AgentfsError, MergeConflict, RemoteError, TraceNotFound
from agentfs.models.base import Model
from agentfs.remote.claims import Claims, Held, new_trace_claim, rank, spread
from agentfs.remote.publish import Publisher, fetch
from agentfs.remote.tracerefs import Folded, backlog, fold, removed, seen_traces
from agentfs.store.git.lockfiles import clear_stale
from agentfs.store.git.remote import GitRemote, git, identity
from agentfs.store.git.repo import GitRepo
from agentfs.store.history import unanswered_calls
from agentfs.store.inbox import SettleClock, waiting
from agentfs.store.ingest import Rejected, finish_staged
from agentfs.store.workspace import INBOX_DIR, TRACE_ID, TRACES_DIR

Log = Callable[[str, dict], None]

#: `Worker.mirror`'s scope: every trace ref (the view), or none (main alone).
EVERY, NO_TRACE = "*", ""

__all__ = ["Worker"]


@dataclass
class Worker:
    """Takes jobs from `remote` into the clone at `root`; `run_forever()` or `run_once()`."""

    root: Path
    remote: str
    model_for: Callable[[str | None, str | None], Model]  # (trace's model, preset) -> model
    log: Log
    lease: float = 30.0  # seconds a claim lives without renewal
    poll: float = 1.0  # seconds between looks at the remote while idle
    runner_options: dict = field(default_factory=dict)
    name: str = ""

    def __post_init__(self) -> None:
        self.name = self.name or f"{socket.gethostname()}-{os.getpid()}"
        self.git = GitRemote(self.root, self.remote)
        self.claims = Claims(self.git, self.name, self.lease)
        self.stopping = threading.Event()
        self._failed: dict[str, str] = {}  # trace → its tree when its run failed
        self._mirrored: tuple | None = None  # (main, trace refs) the clone is, untouched since
        self._view: str | None = None  # the commit the clone was made
        self.main: str | None = None  # the remote's main, as last fetched
        self.trace_refs: dict[str, str] = {}  # trace id → its ref on the remote, as last fetched
        self._looked: dict[str, tuple[str, bool]] = {}  # trace → (tree, had work) last look
        self._waiting: dict[str, tuple[str, float]] = {}  # backlog: trace → (ref, seen since)
        self._left: set[str] = set()  # traces whose steps this worker's release left on refs
        #: the view's trace refs a fold leaves out (a path changed on main too): trace id →
        #: those paths. Not jobs until `agentfs sync` folds them, nor the inbox files they
        #: made traces of (`_taken`).
        self.left_out: dict[str, list[str]] = {}
        self._taken: set[str] = set()
        self._said_left: set[tuple[str, tuple[str, ...]]] = set()  # `not_folded` logged

    # --- the loop ---------------------------------------------------------------

    def run_forever(self) -> None:
        """Until `stopping` is set: a job when there is one, else a look every `poll`."""
        while not self.stopping.is_set():
            if not self._step():
                self.stopping.wait(self.poll)
        self.log("stopped", {})

    def run_once(self) -> None:
        """Take jobs until none is left that this worker may take, then return."""
        while not self.stopping.is_set() and self._step():
            pass

    def _step(self) -> bool:
        try:
            return self.take_one()
        except RemoteError as exc:
            self.log("unreachable", {"remote": self.remote, "error": exc.message})
        except (AgentfsError, OSError) as exc:  # e.g. a lock another program holds
            self.log("error", {"error": str(exc)})  # look again at the next poll
        return False

    def take_one(self) -> bool:
        """Mirror the remote, claim one job and run it. False if there was none (then
        expired claims on finished work are reaped and the backlog of unclaimed steps
        may be folded); True also when a take was lost, since the look that showed the
        job free is stale: look again before the next."""
        if self.mirror() is None:
            return False
        seen = self.claims.seen()
        jobs = self.jobs()
        for name, target in jobs:
            expect = self.claims.free(name, seen)
            if expect is False:
                continue
            held = self.claims.take(name, expect)
            if held is None:
                return True
            self.log("claimed", {"claim": name, "took_over": expect is not None})
            self._job(held, target)
            return True
        reaped = self.claims.reap(seen, {name for name, _ in jobs})
        if reaped:
            self.log("reaped", {"claims": reaped})
        self.fold_idle(seen)
        return False

    def mirror(self, scope: str = EVERY) -> str | None:
        """Fetch, and make the clone exactly the remote's main with the steps of the
        trace refs in `scope` (EVERY: all, the view jobs are chosen from; a trace id:
        that one, a job's start; NO_TRACE: none) carried on top. Work this clone did
        not push is not done (a killed worker's, or one whose claim was lost). The
        view's fold may leave refs out (their steps changed a file main changed too):
        `left_out` says which, for `jobs`. Returns the commit the clone now is; None if
        the remote has no main.

        Raises:
          MergeConflict: the trace in `scope` changed on main too (a person's edit).
        """
        for look in (1, 2):
            main = self.main = fetch(self.git)
            if main is None:
                return None
            self.trace_refs = seen_traces(self.git)
            refs = {t: sha for t, sha in self.trace_refs.items() if scope in (EVERY, t)}
            key = (scope, main, sorted(refs.items()))
            if key == self._mirrored:
                return self._view  # nothing ran here since, and the remote is the same
            folded = self._fold(main, refs) if refs else Folded(main, main)
            # A fold's push moves main before the remote deletes the refs it folded,
            # and a fetch in between sees both: such a ref seems left out. Once more.
            if not folded.left or look == 2:
                break
        assert main is not None  # the loop returned otherwise
        if folded.left and scope != EVERY:
            raise folded.left[scope]
        if scope == EVERY:
            self._left_out(main, refs, folded.left)
        view = folded.tip
        state = self.root / ".git" / "agentfs"
        for leftover in ("ingest", "in-flight", "intents"):  # records of unpushed work
            shutil.rmtree(state / leftover, ignore_errors=True)
        for target in ("index", "refs/heads/main"):  # a killed worker's locks
            clear_stale(self.root / ".git" / target, state)
        git(self.root, "reset", "--quiet", "--hard", view)
        git(self.root, "clean", "-fdq", "--", "traces", INBOX_DIR)
        self._mirrored, self._view = key, view
        return view

    def _fold(self, main: str, refs: dict[str, str]) -> Folded:
        """`refs` folded onto `main` in this clone (a view, or an idle fold)."""
        repo = GitRepo(self.root)
        try:
            return fold(repo, main, refs)
        finally:
            repo.close()

    def _left_out(self, main: str, refs: dict[str, str],
                  left: dict[str, MergeConflict]) -> None:
        """Remember the trace refs the view's fold left out, and the files of the
        workspace `inbox/` their steps took (the view still shows those waiting)."""
        self.left_out = {t: exc.paths for t, exc in left.items()}
        self._taken = {path for t in left for path in removed(self.root, main, refs[t], INBOX_DIR)}
        for trace_id, paths in sorted(self.left_out.items()):  # said once, by each worker
            self._say_not_folded(trace_id, paths)

    def _say_not_folded(self, trace_id: str, paths: list[str]) -> None:
        """Log that a trace's steps wait on its ref for `agentfs sync`, once per worker
        and set of paths: the release that left them there, or a view that finds them
        (a holder this worker reaped, a worker started since)."""
        key = (trace_id, tuple(sorted(paths)))
        if key not in self._said_left:
            self._said_left.add(key)
            self.log("not_folded", {"trace": trace_id, "paths": paths})

    def fold_idle(self, seen: dict) -> bool:
        """Fold into main the trace refs of traces nobody claims, when this worker has
        no job: at once if its own release left some there, else once the backlog has
        waited `Worker.fold_after` (any job's release folds the backlog along, so in a
        busy fleet it seldom waits that long). One try, a lost race is no loss.
        True if this worker's fold moved main."""
        refs = {t: sha for t, sha in backlog(self.trace_refs, seen).items()
                if t not in self.left_out}  # the same fold would leave them out again
        now = time.monotonic()
        waiting = {}
        for trace_id, sha in refs.items():
            earlier = self._waiting.get(trace_id)
            waiting[trace_id] = earlier if earlier and earlier[0] == sha else (sha, now)
        self._waiting = waiting
        self._left &= set(refs)
        if self.main is None or not any(
                t in self._left or now - since >= self.fold_after(sha)
                for t, (sha, since) in waiting.items()):
            return False
        folded = self._fold(self.main, refs)
        if folded.taken and self.git.push(folded.updates()):
            self.log("folded", {"traces": sorted(folded.taken)})
            return True
        return False

    def fold_after(self, sha: str) -> float:
        """Seconds another's leftover trace ref at `sha` waits before this idle worker
        folds it: between one and two leases, like a dead worker's claim, at a point
        in between that differs by worker and by ref, so that idle workers seldom fold
        the same backlog at once."""
        return self.lease * (1 + spread(self.name, sha))

    def jobs(self) -> list[tuple[str, str | None]]:
        """(claim name, trace id or None for a new trace's file) of the work in the
        clone: files in the workspace `inbox/`, traces with files in their inbox or
        left unanswered. In an order of this worker's own (by a hash of its name and
        the job's), so that workers do not all race for the same first job.

        A trace is looked at only when its tree changed since the last look (the clone
        is a mirror: the same tree, the same answer), so an idle poll of a workspace
        of many traces costs one `git ls-tree`."""
        project: Project | None = None
        found: list[tuple[str, str | None]] = [
            (new_trace_claim(f"{INBOX_DIR}/{path.name}"), None) for path in self._new_files()]
        trees = self._trace_trees()
        self._looked = {t: v for t, v in self._looked.items() if t in trees}
        for trace_id, tree in trees.items():
            if self._failed.get(trace_id) == tree or trace_id in self.left_out:
                continue  # its run failed and nothing changed since; its steps wait for sync
            if self._looked.get(trace_id, ("", False))[0] != tree:
                project = project or Project.open(self.root)
                self._looked[trace_id] = (tree, self._works(project, trace_id))
            if self._looked[trace_id][1]:
                found.append((trace_id, trace_id))
        if project is not None:
            project.repo.close()
        return sorted(found, key=lambda job: rank(self.name, job[0]))

    def _trace_trees(self) -> dict[str, str]:
        """Trace id → the tree of its folder at HEAD, for every trace folder."""
        listing = git(self.root, "ls-tree", "-z", "HEAD", f"{TRACES_DIR}/").stdout
        trees = {}
        for entry in listing.decode(errors="replace").split("\0"):
            info, _, path = entry.partition("\t")
            parts = info.split()
            name = path.removeprefix(f"{TRACES_DIR}/")
            if len(parts) == 3 and parts[1] == "tree" and TRACE_ID.fullmatch(name):
                trees[name] = parts[2]
        return trees

    # --- one job ----------------------------------------------------------------

    def _job(self, held: Held, trace_id: str | None) -> None:
        publisher: Publisher | None = None
        try:
            # With the claim held, main and the trace's ref are the whole truth about
            # the job. A new trace's file must still wait in the view (no trace ref
            # took it meanwhile); its trace starts from main alone.
            if trace_id is None and self._claimed_file(held.name, self.mirror()) is None:
                base = None
            else:
                base = self.mirror(trace_id or NO_TRACE)
            self._mirrored = None  # the job changes the clone
            assert self.main is not None
            publisher = Publisher(self.git, self.claims, [held], base or self.main,
                                  main=self.main, ref=self.trace_refs.get(trace_id or ""),
                                  trace_id=trace_id)
            if base is None:
                return  # taken meanwhile: released below
            project = Project.open(self.root)
            if trace_id is None:
                trace_id = self._create(project, held, publisher)
            if trace_id is not None and self._works(project, trace_id):
                self._run(project, trace_id, publisher)
            project.repo.close()
            self._tidy_inboxes(trace_id)
            self._final_push(publisher)
        except MergeConflict as exc:
            self.log("error", {"claim": held.name, "error": str(exc)})
        except RemoteError as exc:
            self.log("unreachable", {"remote": self.remote, "error": exc.message})
        finally:
            if publisher is not None:
                self._release(publisher)
                publisher.close()

    def _create(self, project: Project, held: Held, publisher: Publisher) -> str | None:
        """A new trace from the claimed file of the workspace `inbox/`, its first message
        ingested at once: the file leaves the inbox in the same push as the trace appears."""
        path = self._claimed_file(held.name, "")
        if path is None:
            return None  # taken meanwhile
        outcome = project.start_trace(path)
        if outcome is None or isinstance(outcome, Rejected):
            return None
        if outcome in self.trace_refs:  # made from another file, whose job the fold left out
            raise MergeConflict(f"trace {outcome} has steps on its ref that main lacks; "
                                "they reach main with the next fold, or with `agentfs sync` "
                                "if a fold left them out", [outcome])
        trace = project.trace(outcome)
        with trace.lock():
            finish_staged(trace)
        seen = self.claims.seen()
        expect = self.claims.free(outcome, seen)
        trace_claim = None if expect is False else self.claims.take(outcome, expect)
        if trace_claim is None:
            raise MergeConflict(f"trace id {outcome} is claimed by another worker", [outcome])
        publisher.held.append(trace_claim)
        publisher.trace_id = outcome
        self.log("new_trace", {"trace": outcome, "file": path.name})
        return outcome

    def _claimed_file(self, name: str, view: str | None) -> Path | None:
        """The file of the workspace `inbox/` that claim `name` is for, if it waits in
        the clone (None if `view` is None: the remote has no main)."""
        if view is None:
            return None
        return next((p for p in self._new_files()
                     if new_trace_claim(f"{INBOX_DIR}/{p.name}") == name), None)

    def _new_files(self) -> list[Path]:
        """The files waiting in the clone's workspace `inbox/` that no trace ref took:
        one the view's fold left out shows its file still waiting here."""
        return [p for p in waiting(self.root / INBOX_DIR)
                if f"{INBOX_DIR}/{p.name}" not in self._taken]

    def _works(self, project: Project, trace_id: str) -> bool:
        """Anything a run would take up: inbox files, an unanswered user message,
        unfinished work, or tool calls at the head no pushed step answered (their
        worker is gone): what `agentfs/store/trace.py:Trace.waits_for_user` says."""
        try:
            return not project.trace(trace_id).waits_for_user()
        except TraceNotFound:
            return False  # a folder of traces/ that is not a trace
        except AgentfsError as exc:
            self.log("error", {"trace": trace_id, "error": str(exc)})
            return False

    def _run(self, project: Project, trace_id: str, publisher: Publisher) -> None:
        """Run the trace while a thread pushes its steps and renews the claims."""
        try:
            trace = project.trace(trace_id)
            self._interrupted(trace)
        except AgentfsError as exc:  # a trace that cannot be read: not again until fixed
            self._failed_run(trace_id, exc)
            return
        done = threading.Event()
        pusher = threading.Thread(target=self._push_while, args=(publisher, done), daemon=True)
        pusher.start()
        started = time.monotonic()
        self.log("run_started", {"trace": trace_id})
        failure: AgentfsError | None = None
        try:
            meta = trace.meta
            options: dict[str, Any] = {**self.runner_options}
            runner = project.runner(self.model_for(meta.model, meta.preset),
                                    stop=lambda: self.stopping.is_set() or publisher.lost,
                                    **options)
            result = runner.run(trace_id, inject_skills=meta.context.inject_skills,
                                clock=SettleClock(0.0))
        except AgentfsError as exc:
            failure = exc
        finally:
            done.set()
            pusher.join()
        if failure is not None:
            self._failed_run(trace_id, failure)
            return
        self.log("run_finished", {"trace": trace_id, "iterations": result.iterations,
                                  "stop": result.stop,
                                  "seconds": round(time.monotonic() - started, 3)})

    def _failed_run(self, trace_id: str, failure: AgentfsError) -> None:
        """Log a run that failed, and take the trace up again only once its folder
        changes: the tree as the run left it (a trace this job created has no
        earlier look to go by)."""
        self.log("error", {"trace": trace_id, "error": str(failure)})
        self._failed[trace_id] = self._trace_trees().get(trace_id, "")

    def _interrupted(self, trace: Any) -> None:
        """Tool calls at the head that no step answered were in flight on a worker
        that is gone, which may have run any of them (its results were not pushed):
        the run answers each "interrupted" and never runs one a second time."""
        pending = unanswered_calls(trace.main_path())
        if pending and not trace.in_flight().received:
            trace.mark_taken_over([call.id for call in pending])

    def _push_while(self, publisher: Publisher, done: threading.Event) -> None:
        while not done.wait(0.05):
            if publisher.lost or not publisher.due():
                continue
            try:
                publisher.publish()
            except RemoteError as exc:  # partitioned: the run goes on, pushed later
                self.log("unreachable", {"remote": self.remote, "error": exc.message})
                done.wait(min(self.lease / 3, 2.0))
            except MergeConflict as exc:
                self.log("error", {"error": str(exc)})
                publisher.lost = True

    def _tidy_inboxes(self, trace_id: str | None) -> None:
        """Commit what left the inboxes without a message (files put aside as rejected),
        so the remote stops offering them."""
        folders = [INBOX_DIR] + ([f"traces/{trace_id}/{INBOX_DIR}"] if trace_id else [])
        folders = [f for f in folders if (self.root / f).exists() or _tracked(self.root, f)]
        if not folders:
            return
        git(self.root, "add", "-A", "--", *folders)
        if git(self.root, "diff", "--cached", "--quiet", check=False).returncode != 0:
            git(self.root, *identity(self.root), "commit", "-q", "--no-verify", "-m", f"{trace_id or 'inbox'}: rejected files "
                "taken out of the inbox")

    def _final_push(self, publisher: Publisher) -> None:
        """Push the last steps and release the claims in one push, retrying while the
        remote is unreachable and the lease lives (after that, another worker may
        have taken the job over)."""
        deadline = time.monotonic() + self.lease
        names = [h.name for h in publisher.held]
        while not publisher.lost:
            try:
                if publisher.publish(release=True):
                    self.log("released", {"claims": names})
                    if publisher.left_paths and publisher.trace_id:  # waits for sync
                        self._say_not_folded(publisher.trace_id, publisher.left_paths)
                    elif publisher.left_on_ref and publisher.trace_id:
                        self._left.add(publisher.trace_id)
                    return
            except RemoteError as exc:
                if time.monotonic() > deadline or self.stopping.is_set():
                    raise
                self.log("unreachable", {"remote": self.remote, "error": exc.message})
                self.stopping.wait(min(self.lease / 6, 1.0))
        self.log("claim_lost", {"claims": names})

    def _release(self, publisher: Publisher) -> None:
        """After a job that stopped early: release what it still holds."""
        if publisher.lost or not publisher.held:
            return
        for held in publisher.held:
            with contextlib.suppress(RemoteError):  # the lease expires on its own
                self.claims.release(held)
        self.log("released", {"claims": [h.name for h in publisher.held]})

def _tracked(root: Path, folder: str) -> bool:
    return bool(git(root, "ls-files", "--", folder).stdout)
