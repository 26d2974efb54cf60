"""The tools a run of one trace has: built-in, plugin, MCP and the caller's own, in that order."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from agentfs.core.context import CommandHook, ContextSources, context_tool
from agentfs.core.delegate import RunChild, collaborator_states, delegate_tool
from agentfs.core.goals import goal_tool
from agentfs.core.knowledge import knowledge_search_tool
from agentfs.core.mcp import McpTools
from agentfs.core.options import RunnerOptions
from agentfs.core.trust import judge, skipped_hook
from agentfs.errors import ConfigError
from agentfs.skills import SkillCatalog
from agentfs.store.trace import Trace
from agentfs.store.workspace import GOALS_FILE
from agentfs.tools import ToolRegistry
from agentfs.tools.bash import bash_limits, bash_tool
from agentfs.tools.files import file_tools
from agentfs.tools.plugins import plugin_tools
from agentfs.tools.sandbox import choose_sandbox
from agentfs.tools.skill import skill_tool

__all__ = ["build_tools"]


def build_tools(trace: Trace, options: RunnerOptions, skills: SkillCatalog,
                run_child: RunChild, mcp: McpTools | None = None, *,
                settled: Callable[[Path], bool] = lambda path: True) -> ToolRegistry:
    """The tool registry of a run of `trace`.

    Args:
      trace: the trace the run is of; the tools work in its workspace.
      options: the runner's options (`config`, `trusted`, `tools`, `context_hooks`,
        `command_env`, `depth`). Commands from agentfs.toml run only when `trusted`
        says so (`agentfs/core/trust.py:judge`); a skipped hook's section says it was
        not run.
      skills: what the `skill` tool loads.
      run_child: what the `delegate` tool calls; it is offered only while
        `options.depth` is below `max_delegation_depth`.
      mcp: the MCP servers' tools (`agentfs/core/mcp.py:mcp_tools`), offered after
        the plugins' and before the caller's own.
      settled: whether a file waiting in the trace's inbox is written whole (the run's
        `SettleClock.ready`): the context names only those, which the run takes right
        after the step.

    Raises:
      ConfigError: a tool plugin takes the name of a built-in tool, or an entry of
        `[tools] read_only` is not a path inside the workspace.
    """
    verdict = judge(options.config, options.trusted)
    config, workspace = verdict.config, trace.workspace
    command_hooks = [
        (h.name, CommandHook(h.name, h.command, h.timeout, workspace.root, options.command_env))
        for h in config.context_hooks
    ] + [(c.name or c.title, skipped_hook) for c in verdict.skipped if c.is_hook]
    sources = ContextSources(
        trace_id=trace.id,
        goals_path=trace.dir / GOALS_FILE,
        collaborators=lambda: collaborator_states(trace),
        notifications=lambda: [p.name for p in trace.pending_inbox() if settled(p)],
        hooks=[*options.context_hooks, *command_hooks],
    )
    registry = ToolRegistry(file_tools(config.tools.read_only))  # one set per run
    registry.add(goal_tool(trace.dir / GOALS_FILE))
    registry.add(skill_tool(skills))
    registry.add(context_tool(sources))
    registry.add(knowledge_search_tool(workspace.knowledge_dir))
    if config.tools.bash:
        registry.add(bash_tool(
            config.tools.bash_timeout, config.tools.bash_output_limit, options.command_env,
            sandbox=choose_sandbox(config.tools.bash_sandbox, config.tools.bash_network,
                                   workspace.root),
            read_only=config.tools.read_only, limits=bash_limits(config.tools),
        ))
    if options.depth < config.max_delegation_depth:
        registry.add(delegate_tool(run_child))
    for tool in plugin_tools(workspace.root):
        if registry.get(tool.name) is not None:
            raise ConfigError(
                f"a tool plugin defines {tool.name!r}, which is a built-in tool",
                hint="rename the plugin's tool",
            )
        registry.add(tool)
    for tool in mcp.tools() if mcp is not None else ():
        registry.add(tool)
    for tool in options.tools:  # the caller's own tools may replace built-ins
        registry.add(tool)
    return registry
