"""Claims: which worker may run which trace, held as refs on the shared remote.

A claim is the ref `refs/agentfs/claims/<name>` pointing at a parentless commit
whose message is the lease, a line of JSON: who holds it and until when
(`{"worker": ..., "expires": <unix time>}`). It is created only if absent,
renewed and released only if it still holds what its holder set (compare and
swap on the server, `agentfs/store/git/remote.py:GitRemote.push`), so two
workers never both hold one. A lease past its expiry may be taken over with
the same compare and swap, from the expired value. See docs/remote.md.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from typing import Literal

from agentfs.store.git.remote import GitRemote, RefUpdate

__all__ = ["CLAIMS", "SEEN_CLAIMS", "SEEN_MAIN", "Claims", "Held", "Lease", "new_trace_claim"]

CLAIMS = "refs/agentfs/claims/"
#: What the last fetch saw on the remote, kept in the clone.
SEEN_CLAIMS = "refs/agentfs/seen/claims/"
SEEN_MAIN = "refs/agentfs/seen/main"


def new_trace_claim(inbox_path: str) -> str:
    """The claim name for a file of the workspace `inbox/` (a trace still to create):
    its path hashed, since any file name must give a valid ref."""
    return "new-" + hashlib.sha1(inbox_path.encode()).hexdigest()[:20]


@dataclass(frozen=True)
class Lease:
    """Who holds a claim, and until when (seconds since the epoch, holder's clock)."""

    worker: str
    expires: float

    def text(self) -> str:
        return json.dumps({"worker": self.worker, "expires": round(self.expires, 3)}) + "\n"

    @classmethod
    def parse(cls, text: str) -> Lease | None:
        """The lease in a claim commit's message; None if it is not one (treated as
        expired: a broken claim blocks no one forever)."""
        try:
            data = json.loads(text)
            return cls(str(data["worker"]), float(data["expires"]))
        except (ValueError, TypeError, KeyError):
            return None

    def expired(self, now: float | None = None) -> bool:
        return (time.time() if now is None else now) >= self.expires


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

    def __init__(self, remote: GitRemote, worker: str, lease_seconds: float) -> None:
        self.remote = remote
        self.worker = worker
        self.lease_seconds = lease_seconds

    def seen(self) -> dict[str, tuple[str, Lease | None]]:
        """Claims as of the last fetch: name → (sha, lease)."""
        return {ref[len(SEEN_CLAIMS):]: (sha, Lease.parse(text))
                for ref, (sha, text) in self.remote.local_refs(SEEN_CLAIMS).items()}

    def free(self, name: str, seen: dict[str, tuple[str, Lease | None]],
             ) -> str | None | Literal[False]:
        """False if a live lease holds `name`; else the value a take must expect
        (None: no claim; a sha: an expired or broken one, taken over)."""
        if name not in seen:
            return None
        sha, lease = seen[name]
        if lease is not None and not lease.expired():
            return False
        return sha

    def lease(self) -> Lease:
        return Lease(self.worker, time.time() + self.lease_seconds)

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
