"""The `skill` tool: the model loads a skill's instructions by name.

Skills the caller declares (`inject_skills`) reach the model through the same
tool, as a synthetic call, so both ways of loading look alike in the trace.
"""

from __future__ import annotations

from typing import Any

from agentfs.skills import SkillCatalog, SkillError
from agentfs.tools.base import Tool, ToolContext, ToolFailure, schema


def skill_tool(catalog: SkillCatalog) -> Tool:
    """The `skill` tool over `catalog`; its description lists what can be loaded."""

    def run(arguments: dict[str, Any], context: ToolContext) -> str:
        name = arguments.get("name")
        if not isinstance(name, str) or not name.strip():
            raise ToolFailure(f"'name' must be a skill name; available: {_names(catalog)}")
        try:
            skill = catalog.get(name.strip())
        except SkillError as exc:
            raise ToolFailure(str(exc)) from None
        header = f"# Skill: {skill.name}"
        return f"{header}\n\n{skill.body}" if skill.body else header

    listing = catalog.to_prompt_list() or "(no skills are available)"
    description = (
        "Load a skill: instructions for a kind of task. Load the matching skill "
        "before starting such a task and follow it.\n\nAvailable skills:\n" + listing
    )
    return Tool(
        name="skill",
        description=description,
        input_schema=schema(
            {"name": {"type": "string", "description": "The skill's name, as listed."}},
            required=["name"],
        ),
        run=run,
    )


def _names(catalog: SkillCatalog) -> str:
    return ", ".join(catalog.names()) or "(none)"
