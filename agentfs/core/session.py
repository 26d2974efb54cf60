"""One run of one trace: what the run loop and its tool steps share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from agentfs.core.goals import GoalTree
from agentfs.core.injection import DEFAULT_SKILL_RECENCY
from agentfs.store.inbox import SettleClock
from agentfs.store.messages import Message
from agentfs.store.trace import Trace
from agentfs.store.workspace import GOALS_FILE
from agentfs.tools import ToolRegistry

if TYPE_CHECKING:
    from agentfs.core.approval import Asker
    from agentfs.core.mcp import McpTools

__all__ = ["Emit", "Session"]

#: Reports one event of a run: `emit(kind, **data)`.
Emit = Callable[..., None]


@dataclass
class Session:
    """One run of one trace: the trace, its tools, and what the run has decided so far."""

    trace: Trace
    tools: ToolRegistry
    #: Decides when files dropped into the inbox are ready.
    clock: SettleClock
    emit: Emit
    #: Skills the run keeps in the model's context (`--inject-skill`).
    declared_skills: list[str] = field(default_factory=list)
    #: A declared skill is injected again once it is not among this many latest messages.
    skill_recency: int = DEFAULT_SKILL_RECENCY
    started_with_skills: bool = False
    compressed_at: int | None = None  # head right after the last Level 2 compression
    #: The MCP servers' tools of the run (None: no server); their changes are taken
    #: at step boundaries (`agentfs/core/mcp.py:McpTools.take_changes`).
    mcp: McpTools | None = None
    #: Which tool calls wait for the person's approval (`agentfs/core/approval.py`).
    approve: Literal["acting", "none"] = "none"
    #: Asks the person now (a terminal); None: waiting calls go to `approval.json`.
    ask: Asker | None = None
    #: Tools the person answered "always" for: the rest of this run asks no more.
    always: set[str] = field(default_factory=set)

    def focus(self) -> str | None:
        """The goal in focus now (`goals.json`)."""
        return GoalTree.load(self.trace.dir / GOALS_FILE).focus

    def new_message(self, role: str, content: Any, **fields: Any) -> Message:
        """A new message of the trace that records the goal in focus."""
        fields.setdefault("goal_id", self.focus())
        return self.trace.new_message(role, content, **fields)
