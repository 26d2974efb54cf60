"""The durable record of a tool step in progress, kept outside the work tree.

One record per step: before a model turn with tool calls is committed, its
calls are recorded as *received*, and the step then runs them in order, each
result written to its file before the next call starts. After a crash, the
results on disk and this record say everything: calls with a result are done,
the first received call without one may have started (it is answered
"interrupted"), the ones after it never started (they run now), and calls
agentfs never received (the head was moved by hand, or a call's tool or input
edited since: each call is recorded with its digest) are not run. The files a
running call is about to change are added as it announces them. A call that
waits for the person's approval is marked `waiting` before anyone is asked: it
has not started, and is asked about again (`agentfs/core/approval.py`).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from agentfs.store.atomic import atomic_write
from agentfs.store.messages import ToolCall

__all__ = ["InFlight", "InFlightRecord"]


class InFlight(BaseModel):
    """Tool calls of the current step: received, started, and the files they announced."""

    received: list[str] = Field(
        default_factory=list, description="Calls of the turn just received from the model"
    )
    #: Calls that may have run though they have no result: marked one by one by
    #: agentfs before one record per step, and all of a step taken over from a
    #: worker that is gone (`agentfs/watch/worker.py`).
    started: list[str] = Field(default_factory=list)
    files: dict[str, list[str]] = Field(default_factory=dict)
    #: The call that waits for the person's approval: it has not started.
    waiting: str | None = None
    #: Each received call's `ToolCall.digest`: a call whose tool or input was edited
    #: since is not the call received. A record without them (written by an agentfs
    #: before 2026-12-07) is taken by ids alone.
    digests: dict[str, str] = Field(default_factory=dict)

    def received_as(self, call: ToolCall) -> bool:
        """Was `call` received from the model, with this tool and this input?"""
        if call.id not in self.received:
            return False
        return not self.digests or self.digests.get(call.id) == call.digest()

    def may_have_started(self, unanswered: list[str]) -> set[str]:
        """Of a step's calls without a result (in call order), those that may have run:
        the first one, if it was received and does not wait for approval (the calls
        before it finished, the ones after it cannot have started), and any an older
        record marked started."""
        first = (unanswered[:1] if unanswered and unanswered[0] in self.received
                 and unanswered[0] != self.waiting else [])
        return {*first, *(c for c in unanswered if c in self.started)}


class InFlightRecord:
    """`.git/agentfs/in-flight/<trace>.json`, written atomically: once per step, and
    again when a running call announces a file."""

    def __init__(self, path: Path, tmp_dir: Path, *, durable: bool) -> None:
        self.path = path
        self.tmp_dir = tmp_dir
        self.durable = durable

    def exists(self) -> bool:
        return self.path.exists()

    def load(self) -> InFlight:
        try:
            return InFlight.model_validate_json(self.path.read_bytes())
        except (FileNotFoundError, ValidationError):
            return InFlight()

    def mark_received(self, calls: list[ToolCall]) -> None:
        self._save(InFlight(received=[c.id for c in calls],
                            digests={c.id: c.digest() for c in calls}))

    def mark_all_started(self, call_ids: list[str]) -> None:
        """Calls another process received and may have run, every one of them."""
        self._save(InFlight(received=list(call_ids), started=list(call_ids)))

    def record_change(self, call_id: str, path: str) -> None:
        record = self.load()
        files = record.files.setdefault(call_id, [])
        if path not in files:
            files.append(path)
            self._save(record)

    def mark_waiting(self, call_id: str | None) -> None:
        """Record that `call_id` waits for approval (not started), or, with None, that
        the call that waited is about to run or be refused."""
        record = self.load()
        if record.waiting != call_id:
            record.waiting = call_id
            self._save(record)

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)

    def _save(self, record: InFlight) -> None:
        atomic_write(self.path, record.model_dump_json().encode(), tmp_dir=self.tmp_dir,
                     sync_dir=self.durable)
