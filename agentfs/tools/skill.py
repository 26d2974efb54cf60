"""The `skill` tool: the model loads a skill's instructions by name.

Skills the caller declares (`inject_skills`) reach the model through the same
tool, as a synthetic call, so both ways of loading look alike in the trace.
Skills are files people write, so what the tool returns is cut to
`SKILL_MAX_BYTES`.
"""

from __future__ import annotations

from typing import Any

from agentfs.skills import Skill, SkillCatalog, SkillError
from agentfs.tools.base import (
    TOOL_RESULT_MAX_BYTES,
    Tool,
    ToolContext,
    ToolFailure,
    cut_text,
    schema,
)

#: The most a loaded skill may hold, in UTF-8 bytes; declared skills are injected
#: again and again, so this is well below what any tool result may hold.
SKILL_MAX_BYTES = TOOL_RESULT_MAX_BYTES // 4


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
        text = f"{header}\n\n{skill.body}" if skill.body else header
        return cut_text(text, SKILL_MAX_BYTES, hint=_where(skill, context))

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


def _where(skill: Skill, context: ToolContext) -> str:
    """How the model can read the rest of a skill that was cut."""
    try:
        rel = skill.path.resolve().relative_to(context.root.resolve()).as_posix()
    except ValueError:
        return f"the whole skill is in {skill.path}"
    return f"read the rest of {rel} in parts with read_file offset/limit"


def _names(catalog: SkillCatalog) -> str:
    return ", ".join(catalog.names()) or "(none)"
