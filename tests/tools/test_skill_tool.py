"""The `skill` tool's description never lists the catalogue: adding a skill file changes
nothing already sent, and the tool still loads any skill by name."""

from __future__ import annotations

from pathlib import Path

from agentfs.skills import SkillCatalog, load_skills
from agentfs.tools.base import ToolContext, ToolRegistry
from agentfs.tools.skill import SKILL_TOOL_DESCRIPTION, skill_tool


def write_skill(folder: Path, name: str, description: str, body: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.md").write_text(
        f"---\nname: {name}\ndescription: {description}\n---\n{body}\n")


def test_the_description_is_the_same_whatever_the_skills(tmp_path):
    folder = tmp_path / "skills"
    write_skill(folder, "deploy", "How to deploy.", "Run make deploy.")
    before = skill_tool(load_skills(folder)).spec
    write_skill(folder, "review", "How to review.", "Read the diff first.")
    after = skill_tool(load_skills(folder)).spec
    assert before == after == skill_tool(SkillCatalog()).spec
    assert before.description == SKILL_TOOL_DESCRIPTION
    assert "deploy" not in before.description


def test_a_skill_added_later_loads_by_name_and_unknown_names_list_the_skills(tmp_path):
    folder = tmp_path / "skills"
    write_skill(folder, "deploy", "How to deploy.", "Run make deploy.")
    write_skill(folder, "review", "How to review.", "Read the diff first.")
    tools = ToolRegistry([skill_tool(load_skills(folder, tmp_path / "no-builtins"))])
    context = ToolContext(root=tmp_path, trace_id="t")
    loaded = tools.call("skill", {"name": "review"}, context)
    assert not loaded.is_error and loaded.content == "# Skill: review\n\nRead the diff first."
    unknown = tools.call("skill", {"name": "nope"}, context)
    assert unknown.is_error and "available: deploy, review" in unknown.content
