"""The `delegate` tool: hand a task to a collaborator, a child trace of its own.

The child has its own directory and commits, runs to completion with the
same model, and its final answer comes back as the tool result. Its status
is listed under "Active collaborators" in context injections.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentfs.tools.base import Tool, ToolContext, ToolFailure, schema

#: Runs a child trace for `task` (named after `name` when given); returns its answer.
RunChild = Callable[[str, str | None], str]


def delegate_tool(run_child: RunChild) -> Tool:
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
