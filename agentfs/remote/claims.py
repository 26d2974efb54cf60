"""Claims: which worker may run which trace, held as refs on the shared remote.

A claim is the ref `refs/agentfs/claims/<name>` pointing at a parentless commit
whose message is the lease, a line of JSON: who holds it, how long it lives
without renewal, and a renewal counter (`{"worker": ..., "seconds": 30,
"serial": 4}`). It is created only if absent, renewed and released only if it
still holds what its holder set (compare and swap on the server,
`agentfs/store/git/remote.py:GitRemote.push`), so two workers never both hold
one.

A lease is judged on one clock, the judge's own: a claim is expired once this
clone has seen the same claim commit for longer than its `seconds` (and up to
half as long again, a point of this worker's own). Each
renewal is a new commit (the counter moves), so a live holder's claim never
stays the same that long; the holder's clock is never read. What this clone saw
and when is kept in `.git/agentfs/claims-seen.json`, so a worker started anew
(`--once` included) goes on judging from earlier looks. See docs/remote.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agentfs.store.git.remote import GitRemote, RefUpdate

__all__ = ["CLAIMS", "SEEN_CLAIMS", "SEEN_MAIN", "Claims", "Held", "Lease", "Looks", "new_trace_claim",
           "rank", "spread"]

CLAIMS = "refs/agentfs/claims/"
#: What the last fetch saw on the remote, kept in the clone.
SEEN_CLAIMS = "refs/agentfs/seen/claims/"
SEEN_MAIN = "refs/agentfs/seen/main"


def new_trace_claim(inbox_path: str) -> str:
    """The claim name for a file of the workspace `inbox/` (a trace still to create):
    its path hashed, since any file name must give a valid ref."""
    return "new-" + hashlib.sha1(inbox_path.encode(), usedforsecurity=False).hexdigest()[:20]


def rank(worker: str, key: str) -> bytes:
    """A hash of a worker's name and `key`: an order of jobs, or a point in time, that
    differs from worker to worker without any of them talking to another, so that
    workers acting on the same look of the remote seldom race for the same ref."""
    return hashlib.sha1(f"{worker} {key}".encode(), usedforsecurity=False).digest()


def spread(worker: str, key: str) -> float:
    """`rank` as a fraction in [0, 1): where, in a wait, this worker acts."""
    return int.from_bytes(rank(worker, key)[:4], "big") / 2**32


@dataclass(frozen=True)
class Lease:
    """Who holds a claim, how many seconds it lives without renewal, and which renewal
    this is (each renewal a new commit, so that an unchanged claim means no renewal)."""

    worker: str
    seconds: float
    serial: int = 0

    def text(self) -> str:
        return json.dumps({"worker": self.worker, "seconds": round(self.seconds, 3),
                           "serial": self.serial}) + "\n"

    @classmethod
    def parse(cls, text: str) -> Lease | None:
        """The lease in a claim commit's message; None if it is not one (treated as
        expired: a broken claim blocks no one forever)."""
        try:
            data = json.loads(text)
            seconds = float(data["seconds"])
            if not seconds > 0:
                return None
            return cls(str(data["worker"]), seconds, int(data.get("serial", 0)))
        except (ValueError, TypeError, KeyError, AttributeError):
            return None


@dataclass
class Held:
    """A claim this worker holds: its name and the value it set on the remote."""

    name: str
    sha: str
    lease: Lease

    @property
    def ref(self) -> str:
        return CLAIMS + self.name


class Claims:
    """Taking, renewing and releasing claims for worker `worker` on `remote`."""

    def __init__(self, remote: GitRemote, worker: str, lease_seconds: float,
                 clock: Callable[[], float] = time.time) -> None:
        self.remote = remote
        self.worker = worker
        self.lease_seconds = lease_seconds
        self.clock = clock
        self._serial = 0
        self._looks = Looks(remote.root / ".git" / "agentfs" / "claims-seen.json", clock)

    def seen(self) -> dict[str, tuple[str, Lease | None]]:
        """Claims as of the last fetch: name → (sha, lease). Also notes, on this clone's
        clock, since when each claim has held its value."""
        found = {ref[len(SEEN_CLAIMS):]: (sha, Lease.parse(text))
                 for ref, (sha, text) in self.remote.local_refs(SEEN_CLAIMS).items()}
        self._looks.note({name: sha for name, (sha, _) in found.items()})
        return found

    def free(self, name: str, seen: dict[str, tuple[str, Lease | None]],
             ) -> str | None | Literal[False]:
        """False if a live lease holds `name`; else the value a take must expect
        (None: no claim; a sha: an expired or broken one, taken over).

        A lease is expired for this worker once this clone has seen the claim
        unchanged for its `seconds` and up to half as long again, at a point that
        differs by worker (`spread`): the idle workers of a fleet all see a dead
        worker's claim, and all but the first to take it over would lose the race."""
        if name not in seen:
            return None
        sha, lease = seen[name]
        if lease is not None and self._looks.unchanged_for(name, sha) < lease.seconds * (
                1 + spread(self.worker, sha) / 2):
            return False
        return sha

    def lease(self) -> Lease:
        self._serial += 1
        return Lease(self.worker, self.lease_seconds, self._serial)

    def take(self, name: str, expect: str | None) -> Held | None:
        """Claim `name` if it still holds `expect`; None if another worker was first."""
        lease = self.lease()
        sha = self.remote.note_commit(lease.text())
        if not self.remote.push([RefUpdate(CLAIMS + name, sha, expect)]):
            return None
        return Held(name, sha, lease)

    def renewal(self, held: Held) -> tuple[RefUpdate, Held]:
        """The update that renews `held` (to push alone or with steps) and the result."""
        lease = self.lease()
        sha = self.remote.note_commit(lease.text())
        return RefUpdate(held.ref, sha, held.sha), Held(held.name, sha, lease)

    def release(self, held: Held) -> bool:
        """Delete the claim if it is still ours; False if it was taken over."""
        return self.remote.push([RefUpdate(held.ref, None, held.sha)])

    def reap(self, seen: dict[str, tuple[str, Lease | None]], wanted: set[str],
             limit: int = 20) -> list[str]:
        """Delete expired claims on nothing there is still work for (a killed worker's,
        whose job was finished or whose inbox file is gone), at most `limit` per call,
        each only if it still holds the expired value. Returns the names deleted.

        A claim is reaped once this clone has seen it unchanged for between one and
        two of this worker's leases, at a point that differs by worker (`spread`):
        the idle workers of a fleet all look at the same claims, and all but the
        first to reap one would lose the race."""
        stale = [RefUpdate(CLAIMS + name, None, sha) for name in sorted(seen)
                 if name not in wanted
                 and (sha := self.free(name, seen)) is not False and sha is not None
                 and self._looks.unchanged_for(name, sha)
                 >= self.lease_seconds * (1 + spread(self.worker, sha))]
        reaped = []
        for update in stale[:limit]:
            if self.remote.push([update]):
                reaped.append(update.ref[len(CLAIMS):])
        return reaped


class Looks:
    """Since when (this clone's clock) each claim has held the value last seen, kept
    in a small JSON file so that a new process of the same clone judges from earlier
    looks. A claim not seen before counts from now."""

    def __init__(self, path: Path, clock: Callable[[], float]) -> None:
        self.path = path
        self.clock = clock
        self._since: dict[str, tuple[str, float]] | None = None

    def _load(self) -> dict[str, tuple[str, float]]:
        if self._since is None:
            try:
                data = json.loads(self.path.read_text())
                self._since = {str(k): (str(v[0]), float(v[1])) for k, v in data.items()}
            except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError):
                self._since = {}
        return self._since

    def note(self, current: dict[str, str]) -> None:
        since = self._load()
        now = self.clock()
        updated = {name: (sha, since[name][1]) if name in since and since[name][0] == sha
                   and since[name][1] <= now else (sha, now)
                   for name, sha in current.items()}
        if updated != since:
            self._since = updated
            self._save(updated)

    def unchanged_for(self, name: str, sha: str) -> float:
        since = self._load().get(name)
        if since is None or since[0] != sha:
            return 0.0
        return max(0.0, self.clock() - since[1])

    def _save(self, since: dict[str, tuple[str, float]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({k: [v[0], round(v[1], 3)] for k, v in since.items()}))
        os.replace(tmp, self.path)
