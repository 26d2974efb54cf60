"""The system prompt: built once when a trace is created, stored as its first message."""

from __future__ import annotations

from agentfs.config import WorkspaceConfig
from agentfs.skills import SkillCatalog

SKILLS_HEADING = "## Skills\nLoad a skill with the `skill` tool when a task matches its description:"

DEFAULT_SYSTEM_PREFIX = """\
You are an agent working in a workspace: a directory of files under Git. \
Use the tools to read, search and change files; paths are relative to the \
workspace root. Every step you take is committed, so work in small, \
deliberate steps and say plainly what you did and what you found.\
"""


def build_system_prompt(
    config: WorkspaceConfig,
    *,
    explicit: str | None = None,
    run_prompt: str | None = None,
    preset: str | None = None,
    skills: SkillCatalog | None = None,
) -> str:
    """The role prompt, then the skills the preset selects (all when it names none).

    The role prompt is the first non-empty of: `explicit` (a system message
    passed to the run), the run's `system_prompt`, the preset's, the
    workspace's (`agentfs.toml`), and `DEFAULT_SYSTEM_PREFIX`.
    """
    chosen = config.presets.get(preset) if preset else None
    role = next(
        (
            c.strip()
            for c in (explicit, run_prompt, chosen.system_prompt if chosen else None,
                      config.system_prompt)
            if c and c.strip()
        ),
        DEFAULT_SYSTEM_PREFIX,
    )
    if skills is None:
        return role
    if chosen is not None and chosen.skills is not None:
        skills = skills.select(chosen.skills)
    listing = skills.to_prompt_list()
    if not listing:
        return role
    return f"{role}\n\n{SKILLS_HEADING}\n{listing}"
