"""`trace.json`: a trace's metadata and runtime context, validated and written here
only (the bytes are read as JSON by `agentfs/store/metafile.py:read_meta_json`)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentfs.errors import AgentfsError, validation_problems
from agentfs.store.atomic import atomic_write
from agentfs.store.metafile import FORMAT_VERSION, read_meta_json

__all__ = ["FORMAT_VERSION", "TraceMeta", "load_meta", "save_meta"]

class TraceMeta(BaseModel):
    """Contents of `trace.json`: the trace's metadata and runtime context."""

    model_config = ConfigDict(extra="allow")

    format_version: int = Field(default=FORMAT_VERSION, description="On-disk format version")
    id: str
    head: int | None = Field(default=None, description="Last message of the main path")
    next_sequence: int = Field(default=1, description="Sequence the next message will get")
    created_at: str = Field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    model: str | None = Field(default=None, description="Model used when none is given")
    preset: str | None = None
    iterations: int = Field(default=0, description="Model calls made on the main path")
    injected_skills: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Records the agent keeps per injected skill "
        "(their shape is the agent's: `agentfs/core/injection.py:InjectedSkill`)",
    )
    context: dict[str, Any] = Field(default_factory=dict, description="Free-form runtime state")


def load_meta(path: Path, git_path: str) -> TraceMeta:
    """Read `trace.json`; every problem is one error naming the file (`git_path` is
    its path in the repository, for the hint that restores it).

    Raises:
      TraceNotFound: the file does not exist.
      AgentfsError: it is not valid JSON, is from a newer agentfs, or has bad fields.
    """
    data = read_meta_json(path, git_path)
    try:
        return TraceMeta.model_validate(data)
    except ValidationError as exc:
        raise AgentfsError(
            f"{path}: invalid fields: {validation_problems(exc)}",
            hint=f"fix it, or restore it with `git checkout -- {git_path}`",
        ) from None


def save_meta(path: Path, meta: TraceMeta, *, tmp_dir: Path, durable: bool) -> None:
    """Write `trace.json` atomically."""
    data = meta.model_dump(mode="json")
    atomic_write(
        path, (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode(),
        tmp_dir=tmp_dir, sync_dir=durable,
    )
