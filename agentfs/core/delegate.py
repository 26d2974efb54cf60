"""Delegation: the `delegate` tool, and running the child trace it hands a task to.

The child has its own directory and commits, runs to completion with the
same model, and its final answer comes back as the tool result. Its status
is listed under "Active collaborators" in context injections.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from agentfs.core.options import RunnerOptions
from agentfs.errors import AgentfsError
from agentfs.models.base import Model
from agentfs.store.ingest import parse_dropped_text
from agentfs.store.meta import Collaborator
from agentfs.store.trace import Trace
from agentfs.tools.base import Tool, ToolContext, ToolFailure, schema

if TYPE_CHECKING:
    from agentfs.core.project import Project
    from agentfs.core.session import Emit

__all__ = ["RunChild", "delegate_tool", "run_child"]

#: Runs a child trace for `task` (named after `name` when given); returns its answer.
RunChild = Callable[[str, str | None], str]


def delegate_tool(run_child: RunChild) -> Tool:
    """The `delegate` tool; `run_child` does the work."""

    def run(arguments: dict[str, Any], context: ToolContext) -> str:
        task = arguments.get("task")
        if not isinstance(task, str) or not task.strip():
            raise ToolFailure("'task' must describe the work to hand over")
        name = arguments.get("name")
        if name is not None and not isinstance(name, str):
            raise ToolFailure("'name' must be a string")
        return run_child(task, name)

    return Tool(
        "delegate",
        "Hand a self-contained task to a collaborator agent, which works in its own trace "
        "with the same tools and returns its final answer. Give all the context it needs.",
        schema(
            {
                "task": {"type": "string", "description": "The task, with all needed context"},
                "name": {"type": "string", "description": "Short name for the collaborator"},
            },
            ["task"],
        ),
        run,
    )


def run_child(parent: Trace, task: str, name: str | None, *, project: Project, model: Model,
              options: RunnerOptions, emit: Emit) -> str:
    """Run a child trace of `parent` for `task` to completion.

    The child `<parent>--<name>-<n>` is created with `task` as its first
    message and run by a runner with the parent's `options`, one level deeper
    and without the parent's text stream and stop request. Its status is kept
    under `collaborators` in the parent's `trace.meta`, in memory: the
    parent's `tool` commit that follows saves it in `trace.json`.

    Args:
      parent: the trace whose tool call delegates.
      task: the child's first message.
      name: names the child (default `helper`).
      project: the workspace.
      model: the parent's model (so the parent's run counts the child's calls too).
      options: the parent runner's options.
      emit: reports a `delegate` event.

    Returns:
      The child's final answer.
    """
    collaborators = parent.meta.context.collaborators
    slug = re.sub(r"[^a-z0-9]+", "-", (name or "helper").lower()).strip("-")[:20] or "helper"
    existing = set(project.workspace.trace_ids())
    number = 1
    while f"{parent.id}--{slug}-{number}" in existing:
        number += 1
    child_id = f"{parent.id}--{slug}-{number}"
    child = project.new_trace(child_id, parse_dropped_text("<message>", task),
                              skills=options.skills)
    collaborators[child_id] = Collaborator(trace=child_id, task=task[:200])
    emit("delegate", trace=parent.id, child=child_id)
    runner = project.runner(
        model, replace(options, on_text=None, stop=None, depth=options.depth + 1)
    )
    try:
        outcome = runner.run(child.id)
    except BaseException as exc:
        collaborators[child_id].status = f"failed: {type(exc).__name__}: {exc}"
        raise
    if project.trace(child_id).awaits_approval():  # its call waits in approval.json
        collaborators[child_id].status = "waits for approval"
        raise ToolFailure(
            f"collaborator {child_id} stopped: a tool call of it waits for the person's "
            f"approval (`agentfs approve {child_id}` answers it and finishes its work)")
    collaborators[child_id].status = f"done ({outcome.iterations} model calls)"
    return outcome.final_text or "(the collaborator gave no answer)"


def collaborator_states(parent: Trace) -> list[dict[str, Any]]:
    """The parent's collaborators with their state now: a child whose run holds its
    lock is running; one recorded as running whose run is gone was cut short."""
    states = []
    for record in parent.meta.context.collaborators.values():
        state = record.model_dump()
        try:
            running = Trace(parent.workspace, parent.repo, record.trace).is_running()
        except AgentfsError:
            running = False
        if running:
            state["status"] = "running"
        elif state.get("status") == "running":
            state["status"] = (f"stopped before it answered (`agentfs run {record.trace}` "
                               "continues it)")
        states.append(state)
    return states

