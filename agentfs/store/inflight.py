"""The durable record of a tool step in progress, kept outside the work tree.

Before a model turn with tool calls is committed, the calls are recorded as
*received*; before each call runs it is recorded as *started*, with the files
it announces. After a crash this says which calls may run now (received, not
started), which must be answered "interrupted" (started), and which agentfs
never received at all (the head was moved by hand): those are not run.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from agentfs.store.atomic import atomic_write

__all__ = ["InFlight", "InFlightRecord"]


class InFlight(BaseModel):
    """Tool calls of the current step: received, started, and the files they announced."""

    received: list[str] = Field(
        default_factory=list, description="Calls of the turn just received from the model"
    )
    started: list[str] = Field(default_factory=list)
    files: dict[str, list[str]] = Field(default_factory=dict)


class InFlightRecord:
    """`.git/agentfs/in-flight/<trace>.json`, written atomically at each change."""

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

    def mark_received(self, call_ids: list[str]) -> None:
        self._save(InFlight(received=list(call_ids)))

    def mark_started(self, call_id: str) -> None:
        record = self.load()
        record.started.append(call_id)
        self._save(record)

    def record_change(self, call_id: str, path: str) -> None:
        record = self.load()
        files = record.files.setdefault(call_id, [])
        if path not in files:
            files.append(path)
            self._save(record)

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)

    def _save(self, record: InFlight) -> None:
        atomic_write(self.path, record.model_dump_json().encode(), tmp_dir=self.tmp_dir,
                     sync_dir=self.durable)
