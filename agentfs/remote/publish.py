"""Pushing one job's steps to the remote's `main`, fenced by the job's claims.

Every push moves `main` and renews each claim the job holds in one atomic
push: if another worker took a claim over (the lease expired), the push
fails as a whole and no step of the job reaches the remote. If `main` moved
(another trace's steps), the job's local commits are carried onto the new tip
(`agentfs/store/git/carry.py:carry`) and the push is tried again.
"""

from __future__ import annotations

import time
from pathlib import Path

from agentfs.errors import RemoteError
from agentfs.remote.claims import CLAIMS, SEEN_CLAIMS, SEEN_MAIN, Claims, Held
from agentfs.store.git.carry import carry, new_commits
from agentfs.store.git.remote import GitRemote, RefUpdate
from agentfs.store.git.repo import GitRepo

__all__ = ["FETCH", "MAIN_REF", "Publisher", "fetch"]

MAIN_REF = "refs/heads/main"
#: What a worker fetches: the remote's main and every claim, into the `seen` refs.
FETCH = (f"+{MAIN_REF}:{SEEN_MAIN}", f"+{CLAIMS}*:{SEEN_CLAIMS}*")

#: Pushes lost to other traces' pushes in a row before giving up for now.
RACES = 50


def fetch(remote: GitRemote) -> str | None:
    """Fetch main and the claims; returns the remote's main (None if it has none)."""
    remote.fetch(FETCH)
    return remote.local_ref(SEEN_MAIN)


class Publisher:
    """Pushes the commits made on local `main` since `base` (the remote's main when the
    job began), renewing `held` with each push."""

    def __init__(self, root: Path, remote: GitRemote, claims: Claims, held: list[Held],
                 base: str) -> None:
        self.repo = GitRepo(root)  # its own: the runner's thread has another
        self.remote = remote
        self.claims = claims
        self.held = held
        self.done = base.encode()  # the last local commit on the remote
        self.remote_tip = base.encode()
        self.lost = False
        self.renewed_at = time.monotonic()

    def close(self) -> None:
        self.repo.close()

    def due(self) -> bool:
        """True if there are local steps to push, or the leases want renewing."""
        return (self.repo.head() != self.done
                or time.monotonic() - self.renewed_at > self.claims.lease_seconds / 3)

    def publish(self, *, release: bool = False) -> bool:
        """Push what is new and renew the claims (with `release`, delete them: the
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
        for _ in range(RACES):
            tip = carry(self.repo, commits, self.remote_tip) if commits else self.remote_tip
            if release:
                renewals = [(RefUpdate(held.ref, None, held.sha), held) for held in self.held]
            else:
                renewals = [self.claims.renewal(held) for held in self.held]
            updates = [update for update, _ in renewals]
            if commits:
                updates.insert(0, RefUpdate(MAIN_REF, tip.decode(), self.remote_tip.decode()))
            if not updates or self.remote.push(updates):
                self.held = [] if release else [held for _, held in renewals]
                self.done, self.remote_tip = local, tip
                self.renewed_at = time.monotonic()
                return True
            main = fetch(self.remote)
            seen = self.claims.seen()
            if any(seen.get(held.name, ("",))[0] != held.sha for held in self.held):
                self.lost = True
                return False
            if main is None:
                raise RemoteError(f"{self.remote.remote} has no branch main any more")
            self.remote_tip = main.encode()
        raise RemoteError(f"main on {self.remote.remote} kept moving during {RACES} pushes",
                          hint="too many workers for one remote; agentfs retries")
