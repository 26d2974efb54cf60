"""What a runner is built with besides its workspace and model: `RunnerOptions`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from agentfs.config import WorkspaceConfig

if TYPE_CHECKING:  # types only: opening a project (`show`, `log`) loads no tool
    from agentfs.core.approval import Asker
    from agentfs.core.context import ContextHook
    from agentfs.skills import SkillCatalog
    from agentfs.tools.base import Tool

__all__ = ["EventSink", "RunnerOptions"]

#: Receives a run's events: a kind (`assistant`, `tool_call`, `ingested`, ...) and its data.
EventSink = Callable[[str, dict[str, Any]], None]


@dataclass(frozen=True)
class RunnerOptions:
    """How a `Runner` runs. Frozen: a runner and the runners of its children share it."""

    #: The workspace configuration (`agentfs.toml`); by default every setting's default.
    config: WorkspaceConfig = field(default_factory=WorkspaceConfig)
    #: Tools added after the built-in and plugin ones; one may replace a built-in tool.
    tools: Sequence[Tool] = ()
    #: The skills runs may use; None loads the workspace's `skills/` and the built-in ones.
    skills: SkillCatalog | None = None
    #: Python hooks `(name, hook)` whose text appears in every context injection.
    context_hooks: Sequence[tuple[str, ContextHook]] = ()
    #: Receives the model's text as it streams.
    on_text: Callable[[str], None] | None = None
    #: Receives the run's events.
    on_event: EventSink | None = None
    #: The environment bash and hook commands see (default: only a PATH); the CLI passes
    #: the safe part of its own.
    command_env: Mapping[str, str] | None = None
    #: The values of the environment variables MCP servers take (`env`, `headers` of
    #: `[mcp_servers.NAME]`); the CLI passes those of its own environment.
    mcp_env: Mapping[str, str] | None = None
    #: The fingerprint of agentfs.toml's commands the person trusted (`agentfs trust`;
    #: `agentfs/core/trust.py:config_fingerprint`). Context hooks, MCP servers, and
    #: settings that lower the bash sandbox, apply only when it is the configuration's;
    #: None: none do.
    trusted: str | None = None
    #: Asked before every model call; True ends the run there, every step committed.
    stop: Callable[[], bool] | None = None
    #: How deep in delegation the traces run: 0 for a run a person or the watcher starts.
    depth: int = 0
    #: Which tool calls wait for the person (`--approve`); None: `[tools] approve`.
    approve: Literal["acting", "none"] | None = None
    #: Asks the person about a call now (the chat's terminal); None, or an answer of
    #: None: the call waits in `approval.json` and the run stops.
    ask: Asker | None = None

    def __post_init__(self) -> None:
        # tuples, so the options stay as they were built even if the caller's lists change
        object.__setattr__(self, "tools", tuple(self.tools))
        object.__setattr__(self, "context_hooks", tuple(self.context_hooks))
