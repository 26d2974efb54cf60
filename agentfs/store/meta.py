"""`trace.json`: a trace's metadata and runtime context, validated and written here
only (the bytes are read as JSON by `agentfs/store/metafile.py:read_meta_json`)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentfs.errors import AgentfsError, validation_problems
from agentfs.store.atomic import atomic_write
from agentfs.store.messages import Message
from agentfs.store.metafile import FORMAT_VERSION, read_meta_json
from agentfs.store.spent import Spent
from agentfs.store.unicode import load_json

__all__ = [
    "FORMAT_VERSION", "POSTED_KEYS", "Collaborator", "ForkOrigin", "LastError", "QueueStep",
    "SideQueue", "Spending", "TraceContext", "TraceMeta", "dump_meta", "load_meta", "parse_meta",
    "remember_post", "save_meta",
]

class QueueStep(BaseModel):
    """One side branch of a queue: its type, where it is, and its Git branch."""

    model_config = ConfigDict(extra="forbid")

    type: str = Field(description="Branch type: reflection, knowledge_eval or compression")
    state: Literal["waiting", "running", "done", "skipped"] = "waiting"
    branch: str | None = Field(
        default=None, description="agentfs/<trace>/<type>-<base's first 8 hex digits>, once "
        "running (`agentfs/store/branches.py:branch_name`); numbered, <type>-<n>, when an "
        "older agentfs named it")
    first: int | None = Field(
        default=None, description="Sequence of the branch's first message: its messages are "
        "the files at or after it in the branch's tree")
    base: str | None = Field(
        default=None, description="The main commit the step was started from, which its "
        "branch's name abbreviates (None in a queue an older agentfs planned)")
    head: str | None = Field(default=None, description="The branch's head when it was merged")
    items: list[str] | None = Field(
        default=None, description="knowledge_eval: the items to judge (None: every pending one)")


class SideQueue(BaseModel):
    """Side branches run one after the other, each merged into `main` as it ends
    (the agent's steps: `agentfs/core/sidequeue.py`). Committed at every transition,
    so a crash resumes the step that was running and never repeats a finished one."""

    model_config = ConfigDict(extra="forbid")

    reason: str = Field(description="What started it: level2, compress, reflect, evaluate, completion")
    head: int | None = Field(description="The main path's head when it was planned")
    steps: list[QueueStep]

    def current(self) -> QueueStep | None:
        """The step running now (or next), None once every step is done or skipped."""
        return next((s for s in self.steps if s.state in ("running", "waiting")), None)


class Collaborator(BaseModel):
    """A child trace a `delegate` call started, as its parent records it."""

    model_config = ConfigDict(extra="forbid")

    trace: str = Field(description="The child trace's id")
    task: str = Field(default="", description="The task it was given (its first 200 characters)")
    status: str = Field(default="running", description="running, done (...) or failed: ...")


class LastError(BaseModel):
    """The error that ended the last run, until a run succeeds."""

    model_config = ConfigDict(extra="forbid")

    at: str = Field(description="When, as an ISO 8601 UTC time")
    error: str


class ForkOrigin(BaseModel):
    """Where a forked trace came from (`agentfs fork`)."""

    model_config = ConfigDict(extra="forbid")

    trace: str = Field(description="The trace it was forked from")
    sequence: int = Field(description="The message of that trace it starts from: its head")
    commit: str | None = Field(
        default=None, description="The commit on main that added that message, if found")


class TraceContext(BaseModel):
    """The runtime state a trace keeps between runs (`context` in trace.json). Every
    key is declared here and nowhere else; an unknown key is refused."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    inject_skills: list[str] = Field(
        default_factory=list, description="Skills every run of the trace injects")
    side_calls: dict[str, int] = Field(
        default_factory=dict, description="Model calls made on merged side branches, by type")
    collaborators: dict[str, Collaborator] = Field(
        default_factory=dict, description="Child traces started by `delegate`, by id")
    last_error: LastError | None = Field(
        default=None, description="Why the last run failed; cleared when a run succeeds")
    mcp_tools: dict[str, list[dict[str, Any]]] = Field(
        default_factory=dict, description="The tools of each MCP server as the trace's "
        "requests offer them, listed once and kept so the tool list stays the same from "
        "request to request (their shape is the agent's: `agentfs/core/mcp.py:ToolRecord`)")


class Spending(BaseModel):
    """What a trace's model calls used, by model: every assistant message committed on
    `main` (on the path or off it after a rewind) and those of side branches, counted
    when their step is merged. Kept up to date at each commit, so that `status` and the
    trace list read it without reading a message."""

    model_config = ConfigDict(extra="forbid")

    through: int = Field(default=0, description="Messages up to this sequence are counted "
                         "(sequences only grow, so a message committed again is not)")
    models: dict[str, Spent] = Field(default_factory=dict)

    def count(self, messages: Iterable[Message]) -> list[Message]:
        """Add the assistant messages after `through`, then move it past them; returns
        the messages after it (those counted now)."""
        counted: list[Message] = []
        for message in sorted(messages, key=lambda m: m.sequence):
            if message.sequence <= self.through:
                continue  # counted before, or twice in `messages`
            self.through = message.sequence
            counted.append(message)
            if message.role == "assistant" and not message.synthetic:
                spent = self.models.setdefault(message.model or "unknown", Spent())
                spent.add(message.usage, message.timing)
        return counted


class TraceMeta(BaseModel):
    """Contents of `trace.json`: the trace's metadata and runtime context. Every field
    is declared; an unknown one is refused with the file named."""

    model_config = ConfigDict(extra="forbid")

    format_version: int = Field(default=FORMAT_VERSION, description="On-disk format version")
    id: str
    head: int | None = Field(default=None, description="Last message of the main path")
    next_sequence: int = Field(default=1, description="Sequence the next message will get")
    created_at: str = Field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    model: str | None = Field(default=None, description="Model used when none is given")
    preset: str | None = None
    iterations: int = Field(default=0, description="Turns of the model in the message files "
                            "(`agentfs/store/history.py:is_model_turn`), exact at every commit "
                            "since format 4")
    injected_skills: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Records the agent keeps per injected skill "
        "(their shape is the agent's: `agentfs/core/injection.py:InjectedSkill`)",
    )
    context: TraceContext = Field(default_factory=TraceContext,
                                  description="Runtime state kept between runs")
    side_queue: SideQueue | None = Field(
        default=None, description="The side-branch queue in progress; absent when none is",
    )
    forked_from: ForkOrigin | None = Field(
        default=None, description="For a trace made by `agentfs fork`: the trace and message "
        "it was copied from; absent otherwise",
    )
    usage: Spending | None = Field(
        default=None, description="What the trace's model calls used; absent in a trace "
        "no agentfs that counts has committed to yet",
    )
    posted: dict[str, int] | None = Field(
        default=None, description="Idempotency keys of the latest posts that carried one, "
        "each with the sequence its message became (the last `POSTED_KEYS`); absent when "
        "none did",
    )


#: How many posts' idempotency keys `trace.json` keeps (`TraceMeta.posted`).
POSTED_KEYS = 100


def remember_post(meta: TraceMeta, key: str, sequence: int) -> None:
    """Record that the post with idempotency `key` became message `sequence`, in
    `meta.posted`, the oldest key out beyond `POSTED_KEYS`."""
    posted = {k: v for k, v in (meta.posted or {}).items() if k != key}
    posted[key] = sequence
    meta.posted = dict(list(posted.items())[-POSTED_KEYS:])


_EMPTY_CONTEXT = TraceContext().model_dump(mode="json")

#: Keys of `context` an older agentfs wrote and this one no longer keeps: read and
#: dropped (the upgrade commits their removal, `agentfs/store/upgrade.py`).
#: `side_branches` numbered side branches (format 2); names come from commits now.
RETIRED_CONTEXT = ("side_branches",)


def _in_current_shape(data: Any) -> Any:
    """`trace.json`'s JSON value with the keys agentfs itself retired left out; any
    other key stays, for validation to refuse."""
    context = data.get("context") if isinstance(data, dict) else None
    if not isinstance(context, dict) or not any(k in context for k in RETIRED_CONTEXT):
        return data
    kept = {k: v for k, v in context.items() if k not in RETIRED_CONTEXT}
    return {**data, "context": kept}


def parse_meta(data: bytes) -> TraceMeta:
    """`trace.json`'s bytes (as committed, say) read as `TraceMeta`, in any format
    this agentfs reads.

    Raises:
      ValueError: not JSON, or not valid `trace.json` fields.
    """
    return TraceMeta.model_validate(_in_current_shape(load_json(data)))


def load_meta(path: Path, git_path: str) -> TraceMeta:
    """Read `trace.json`; every problem is one error naming the file (`git_path` is
    its path in the repository, for the hint that restores it).

    Raises:
      TraceNotFound: the file does not exist.
      AgentfsError: it is not valid JSON, is from a newer agentfs, or has bad fields.
    """
    data = _in_current_shape(read_meta_json(path, git_path))
    try:
        return TraceMeta.model_validate(data)
    except ValidationError as exc:
        unknown = any(e["type"] == "extra_forbidden" for e in exc.errors())
        fix = ("remove the fields agentfs does not know (docs/trace-format.md lists those it "
               "does)" if unknown else "fix it")
        raise AgentfsError(
            f"{path}: invalid fields: {validation_problems(exc)}",
            hint=f"{fix}, or restore it with `git checkout HEAD -- {git_path}`",
        ) from None


def dump_meta(meta: TraceMeta) -> bytes:
    """The bytes of `trace.json` for `meta`."""
    data = meta.model_dump(mode="json")
    # Keys of `context` at their defaults are left out, as agentfs always wrote them.
    empty = _EMPTY_CONTEXT
    data["context"] = {k: v for k, v in data["context"].items() if v != empty[k]}
    for optional in ("side_queue", "forked_from", "usage", "posted"):  # absent reads as before
        if data.get(optional) is None:
            data.pop(optional, None)
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode()


def save_meta(path: Path, meta: TraceMeta, *, tmp_dir: Path, durable: bool) -> bool:
    """Write `trace.json` atomically, in the current format, if its bytes change;
    True if it was written."""
    meta.format_version = FORMAT_VERSION
    data = dump_meta(meta)
    try:
        if path.read_bytes() == data:
            return False  # an unchanged file: no temp file, no fsync, no rename
    except (FileNotFoundError, IsADirectoryError):
        pass
    atomic_write(path, data, tmp_dir=tmp_dir, sync_dir=durable)
    return True
