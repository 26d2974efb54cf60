"""The `skill` tool: the model loads a skill's instructions by name.

Skills the caller declares (`inject_skills`) reach the model through the same
tool, as a synthetic call, so both ways of loading look alike in the trace.
Skills are files people write, so what the tool returns is cut to
`SKILL_MAX_BYTES`.

The tool's description is the same whatever skills exist: the tool list comes
first in every request, so a description that listed the catalogue would
change what was already sent each time a skill file is added (and with it
the prompt cache and, with thinking on, every thinking block sent back). The
system prompt lists the skills when a trace is created; a name that is not
known gets an error listing the skills there are now.
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


#: The `skill` tool's description; it never depends on the catalogue (see above).
SKILL_TOOL_DESCRIPTION = (
    "Load a skill by name: instructions for a kind of task. The skills you can load are "
    "listed in the system prompt; load the matching skill before starting such a task and "
    "follow it. A name that is not known gets the list of the skills available now."
)


def skill_tool(catalog: SkillCatalog) -> Tool:
    """The `skill` tool over `catalog`, with a description that does not list it."""

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

    return Tool(
        name="skill",
        description=SKILL_TOOL_DESCRIPTION,
        input_schema=schema(
            {"name": {"type": "string", "description": "The skill's name."}},
            required=["name"],
        ),
        run=run,
        read_only=True,
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
