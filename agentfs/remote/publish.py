"""Pushing one job's steps to the remote, fenced by the job's claims.

Steps go to the trace's own ref, `refs/agentfs/traces/<trace-id>`
(`agentfs/remote/tracerefs.py`), each push moving it and renewing every claim
the job holds in one atomic push: if another worker took a claim over (the
lease expired), the push fails as a whole and no step of the job reaches the
remote. No other worker moves a trace's ref, so steps of different traces never
race. The job's last push folds its steps into `main`, with the backlog of
unclaimed trace refs, deletes those refs and releases the claims, together; when
that fold loses the race for `main`, it leaves the steps on the ref for the next
fold.
"""

from __future__ import annotations

import time

from agentfs.errors import RemoteError
from agentfs.remote.claims import CLAIMS, SEEN_CLAIMS, SEEN_MAIN, Claims, Held
from agentfs.remote.tracerefs import (
    MAIN_REF,
    SEEN_TRACES,
    TRACES,
    backlog,
    fold,
    seen_traces,
    trace_ref,
)
from agentfs.store.git.carry import carry, new_commits
from agentfs.store.git.remote import GitRemote, RefUpdate
from agentfs.store.git.repo import GitRepo

__all__ = ["FETCH", "MAIN_REF", "Publisher", "fetch"]

#: What a worker fetches: the remote's main, every trace ref and every claim.
FETCH = (f"+{MAIN_REF}:{SEEN_MAIN}", f"+{TRACES}*:{SEEN_TRACES}*", f"+{CLAIMS}*:{SEEN_CLAIMS}*")

#: Pushes lost in a row before giving up for now (a trace ref races only with folds).
RACES = 50
#: Tries to fold a job's steps into main at its end before leaving them on the trace ref:
#: one, since a fold lost is lost to another fold, which the next one (any job's
#: release takes the backlog along) makes up for without another race.
FOLDS = 1
#: Unclaimed trace refs a job's release folds along at most (a push's refs stay few).
BACKLOG = 16


def fetch(remote: GitRemote) -> str | None:
    """Fetch main, the trace refs and the claims; returns the remote's main (None if it
    has none)."""
    remote.fetch(FETCH)
    return remote.local_ref(SEEN_MAIN)


class Publisher:
    """Pushes the commits made on local `main` since `base` to the trace's ref, renewing
    `held` with each push.

    `base` is the commit the job started from: the remote's `main` (`main`) with the
    trace ref's steps (`ref`, its value on the remote, None if absent) on top."""

    def __init__(self, remote: GitRemote, claims: Claims, held: list[Held], base: str, *,
                 main: str, ref: str | None = None, trace_id: str | None = None) -> None:
        self.repo = GitRepo(remote.root)  # its own: the runner's thread has another
        self.remote = remote
        self.claims = claims
        self.held = held
        self.trace_id = trace_id  # None until a new trace's job made its trace
        self.main = main  # the remote's main as last fetched
        self.ref = ref  # the trace ref's value on the remote
        self.done = base.encode()  # the last local commit whose steps are on the remote
        self.remote_tip = base.encode()  # what the next steps are carried onto
        self.lost = False
        self.left_on_ref = False  # the release left the steps on the ref, not on main
        self.left_paths: list[str] = []  # why: paths of its steps main changed too
        self.backlog: dict[str, str] = {}  # other traces' unclaimed refs, as last fetched
        self.renewed_at = time.monotonic()

    def close(self) -> None:
        self.repo.close()

    def due(self) -> bool:
        """True if there are local steps to push, or the leases want renewing."""
        return (self.repo.head() != self.done
                or time.monotonic() - self.renewed_at > self.claims.lease_seconds / 3)

    def publish(self, *, release: bool = False) -> bool:
        """Push what is new to the trace ref and renew the claims; with `release`, fold
        the trace's steps into main and delete the ref and the claims instead (the
        job's last push). False if a claim was lost (taken over by another worker):
        nothing was pushed, and the job must stop.

        Raises:
          RemoteError: the remote cannot be reached (try again later).
          MergeConflict: a path of the job was changed on the remote meanwhile.
        """
        if self.lost:
            return False
        local = self.repo.head()
        assert local is not None
        commits = new_commits(self.repo, self.done, local)
        if release and not self._refresh():  # fold onto the newest main
            return False
        for attempt in range(RACES):
            tip = carry(self.repo, commits, self.remote_tip) if commits else self.remote_tip
            ref_tip = tip.decode() if commits else self.ref
            if release:
                updates = [RefUpdate(held.ref, None, held.sha) for held in self.held]
                renewed: list[Held] = []
                updates[:0] = self._steps(ref_tip, fold_them=attempt < FOLDS)
            else:
                renewals = [self.claims.renewal(held) for held in self.held]
                updates = [update for update, _ in renewals]
                renewed = [held for _, held in renewals]
                if commits:
                    updates.insert(0, self._move(tip.decode()))
            if not updates or self.remote.push(updates):
                self.held = renewed
                self.done, self.remote_tip = local, tip
                if not release:
                    self.ref = ref_tip
                self.renewed_at = time.monotonic()
                return True
            if not self._refresh():
                return False
        raise RemoteError(f"{self.remote.remote} kept refusing the steps of {self.trace_id} "
                          f"during {RACES} pushes", hint="agentfs retries")

    def _move(self, tip: str) -> RefUpdate:
        assert self.trace_id is not None  # commits are made on a trace
        return RefUpdate(trace_ref(self.trace_id), tip, self.ref)

    def _steps(self, ref_tip: str | None, *, fold_them: bool) -> list[RefUpdate]:
        """The updates that put the trace's steps (`ref_tip`) where they go at release:
        folded into main with the ref deleted, or (`fold_them` False, or a path changed
        on main too) left on the trace ref. The fold takes the backlog of unclaimed
        trace refs along (each deleted on the value folded), so that leftovers reach
        main with the next job's end, and idle workers seldom have any to fold."""
        self.left_on_ref, self.left_paths = False, []
        if ref_tip is None:
            return []
        if fold_them or self.trace_id is None:  # no trace (a rejected file): main only
            own = self.trace_id or ""
            folded = fold(self.repo, self.main, {**self.backlog, own: ref_tip})
            if own in folded.taken:
                others = [u for u in folded.updates() if u.ref != trace_ref(own)]
                return others + ([RefUpdate(trace_ref(own), None, self.ref)]
                                 if self.ref is not None and self.trace_id else [])
            if self.trace_id is None:
                raise folded.left[own]
            self.left_paths = folded.left[own].paths
        self.left_on_ref = True
        return [self._move(ref_tip)] if ref_tip != self.ref else []

    def _refresh(self) -> bool:
        """After a refused push: fetch, and say whether the job still holds its claims.
        If a fold took the trace ref's steps into main (and deleted the ref), the steps
        not pushed yet go on top of the new main."""
        main = fetch(self.remote)
        if main is None:
            raise RemoteError(f"{self.remote.remote} has no branch main any more")
        seen = self.claims.seen()
        if any(seen.get(held.name, ("",))[0] != held.sha for held in self.held):
            self.lost = True
            return False
        self.main = main
        refs = seen_traces(self.remote)
        left = sorted(backlog(refs, seen).items())
        self.backlog = dict([(t, sha) for t, sha in left if t != self.trace_id][:BACKLOG])
        ref = refs.get(self.trace_id or "")
        if ref is None and self.ref is not None:  # folded by someone else
            self.ref, self.remote_tip = None, main.encode()
        elif ref != self.ref:  # only the holder moves a trace ref: ours was lost
            self.lost = True
            return False
        return True
