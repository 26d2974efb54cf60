"""The request the next model call of a trace sends, and the one check of its token budget.

A request is built from the message files: the system message, the rest of
the main path after Level 1 compression (`goal_compression`, see
docs/context.md), the tool schemas, the number of model turns so far, and the
thinking budget (`[thinking]`). With thinking on, nothing in front of a
thinking block that is sent ever changes (`agentfs/core/compaction.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agentfs.config import WorkspaceConfig
from agentfs.core.compaction import compress_completed_goals, loop_start, without_thinking
from agentfs.core.goals import GoalTree
from agentfs.core.mcp import mcp_tools
from agentfs.core.options import EventSink, RunnerOptions
from agentfs.core.prefix import PrefixMap, PrefixSums
from agentfs.core.tokens import TokenCounter
from agentfs.core.toolset import build_tools
from agentfs.errors import AgentfsError, ConfigError
from agentfs.models.base import ModelRequest, ModelResponse, ToolSpec
from agentfs.skills import load_skills
from agentfs.store.history import is_model_turn
from agentfs.store.messages import Message
from agentfs.store.trace import Trace
from agentfs.store.workspace import GOALS_FILE

if TYPE_CHECKING:
    from agentfs.core.project import Project

__all__ = ["Budget", "RequestBuilder", "is_model_turn", "preview_request"]


def _is_system(message: Message) -> int:
    return message.role == "system"


@dataclass(frozen=True)
class Budget:
    """The input tokens a request may have before it must be compressed."""

    #: `context_window × compression_threshold` of the model.
    limit: int
    #: Reported ÷ estimated tokens of the latest request, to scale estimates by.
    ratio: float
    tokens: TokenCounter

    def fits(self, system: str, messages: list[Message], tools: list[ToolSpec]) -> bool:
        """True if the estimated size of such a request is within `limit`."""
        if self.tokens.upper_bound(system, messages, tools) * self.ratio <= self.limit:
            return True  # clearly small: no need to tokenize
        return self.tokens.request(system, messages, tools) * self.ratio <= self.limit


@dataclass
class RequestBuilder:
    """Builds the requests of one model, known by name: only its token limit matters."""

    config: WorkspaceConfig
    model_name: str
    #: Counts tokens; it caches per message, so keep one builder for many requests.
    tokens: TokenCounter = field(default_factory=TokenCounter)
    #: Told `over_budget` when even Level 1 compression leaves a request too large.
    on_event: EventSink | None = None
    _systems: PrefixSums = field(default_factory=lambda: PrefixSums(_is_system), init=False,
                                 repr=False)
    _without_thinking: PrefixMap = field(default_factory=lambda: PrefixMap(without_thinking),
                                         init=False, repr=False)

    def build(self, trace: Trace, path: list[Message], tools: list[ToolSpec]) -> ModelRequest:
        """The request that continues `path` (a main path, system message first).

        Its `call_index` counts the model's turns in the message files, so it stays
        right after a crash (a counter in `trace.json` could lag behind them); the
        count is kept with the trace's summary (`agentfs/store/trace.py:Trace.model_turns`).
        """
        system = path[0].text if path[0].role == "system" else ""
        messages = self._to_send(trace, system, self._conversation(path), tools)
        return ModelRequest(
            system=system,
            messages=messages,
            tools=tools,
            call_index=trace.model_turns(),
            max_tokens=self.config.max_tokens,
            thinking_budget=self.config.thinking_budget,
        )

    def _conversation(self, path: list[Message]) -> list[Message]:
        """`path` without its system messages (the first one, unless a person put
        another one on the path); found without looking at each message again."""
        systems = self._systems.total(path)
        if systems == (path[0].role == "system"):
            return path[systems:]
        return [m for m in path if m.role != "system"]

    def budget(self, messages: list[Message]) -> Budget:
        """The budget of a request holding `messages`, scaled by their latest calibration."""
        return Budget(self.config.token_limit(self.model_name), self.tokens.ratio(messages),
                      self.tokens)

    def over_budget(self, request: ModelRequest) -> bool:
        """Is `request` over `context_window × compression_threshold` (after Level 1)?"""
        budget = self.budget(request.messages)
        return not budget.fits(request.system, request.messages, request.tools)

    def check_room(self, request: ModelRequest) -> None:
        """Refuse a budget that the system prompt and the tools alone fill: every step
        would be compressed, and no summary could make the request fit.

        Raises:
            ConfigError: says the sizes and which settings to change.
        """
        budget = self.budget(request.messages)
        if budget.fits(request.system, [], request.tools):
            return
        fixed = round(self.tokens.request(request.system, [], request.tools) * budget.ratio)
        raise ConfigError(
            f"the system prompt and the tools alone take about {fixed:,} tokens, more "
            f"than the {budget.limit:,} at which requests to {self.model_name} are "
            "compressed (context_window × compression_threshold in agentfs.toml)",
            hint=f"raise context_window (or context_windows[\"{self.model_name}\"]) or "
            "compression_threshold in agentfs.toml, or shorten the system prompt",
        )

    def note_estimate(self, response: ModelResponse, request: ModelRequest) -> None:
        """Store our estimate of `request` beside the input size the provider reported,
        to calibrate later estimates (only when it reported one: offline models do not)."""
        usage = response.usage
        if usage is None or not (usage.input_tokens or usage.cache_read_input_tokens):
            return
        response.usage = usage.model_copy(update={
            "estimated_input_tokens": self.tokens.request(
                request.system, request.messages, request.tools
            ),
        })

    def _to_send(
        self, trace: Trace, system: str, messages: list[Message], tools: list[ToolSpec]
    ) -> list[Message]:
        """The history to send after Level 1 compression (`goal_compression`).

        With thinking on, the current tool-use loop is sent as it is, and the turns
        before it are compressed from themselves alone and sent without their
        thinking blocks, so every request of the loop sends the same bytes in
        front of the loop's thinking blocks (docs/context.md).
        """
        if self.config.thinking_budget is None:
            sent = self._compressed(trace, system, messages, tools)
        else:
            start = loop_start(messages)
            before = self._without_thinking(messages[:start])
            sent = self._compressed(trace, system, before, tools,
                                    finished_within=True) + messages[start:]
        compressing = self.config.goal_compression == "on_overflow" and sent is not messages
        if compressing and self.on_event is not None:  # `messages` itself: it fits
            budget = self.budget(messages)
            if not budget.fits(system, sent, tools):
                self.on_event("over_budget", {"trace": trace.id, "limit": budget.limit})
        return sent

    def _compressed(
        self, trace: Trace, system: str, messages: list[Message], tools: list[ToolSpec],
        *, finished_within: bool = False,
    ) -> list[Message]:
        """`messages` after Level 1 compression, decided from them alone;
        `finished_within` as in `agentfs/core/compaction.py:compress_completed_goals`."""
        mode = self.config.goal_compression
        if mode == "none" or not messages:
            return messages
        tree = GoalTree.load(trace.dir / GOALS_FILE)
        if mode == "on_complete":
            return compress_completed_goals(messages, tree, finished_within=finished_within)
        budget = self.budget(messages)

        def fits(candidate: list[Message]) -> bool:
            return budget.fits(system, candidate, tools)

        if fits(messages):
            return messages
        return compress_completed_goals(messages, tree, enough=fits,
                                        finished_within=finished_within)


def preview_request(project: Project, trace: Trace, model_name: str) -> ModelRequest:
    """The request the next call of `trace` to `model_name` would send, as a run with
    default options would build it; nothing is written and no model is needed.

    Args:
      project: the workspace of `trace`.
      trace: the trace; its parsed messages are reused.
      model_name: sets the token limit (`context_windows` in `agentfs.toml`).
    """
    options = RunnerOptions(config=project.config)
    tools = build_tools(trace, options, load_skills(project.workspace.skills_dir), _no_runs,
                        mcp_tools(trace, options, _no_events, start=False))
    builder = RequestBuilder(project.config, model_name)
    return builder.build(trace, trace.main_path(), tools.specs())


def _no_events(kind: str, **data: object) -> None:
    """A preview's events: none is shown."""


def _no_runs(task: str, name: str | None) -> str:
    """The `delegate` tool's child runner in a preview, which calls no tool."""
    raise AgentfsError("a preview runs no tools")

