"""Skills: both layouts, overrides, validation with clear errors, and the `skill` tool."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentfs.resources import builtin_skills_dir
from agentfs.skills import NAME_PATTERN, SkillCatalog, SkillError, load_skills, parse_skill_file
from agentfs.store.messages import MAX_MESSAGE_BYTES
from agentfs.tools.base import ToolContext, ToolRegistry
from agentfs.tools.skill import skill_tool


def skill_text(name: str, description: str = "Does a thing.", body: str = "Step one.\n") -> str:
    return f"---\nname: {name}\ndescription: {description}\n---\n{body}"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def ws_skills(tmp_path: Path) -> Path:
    return tmp_path / "ws" / "skills"


@pytest.fixture
def no_builtins(tmp_path: Path) -> Path:
    return tmp_path / "no-builtins"


def only_error(directory: Path, no_builtins: Path) -> SkillError:
    catalog = load_skills(directory, no_builtins)
    assert len(catalog) == 0
    assert len(catalog.errors) == 1, catalog.errors
    return catalog.errors[0]


# --- layouts -------------------------------------------------------------------------------


def test_both_layouts_load(ws_skills, no_builtins):
    write(ws_skills / "single.md", skill_text("single", body="Single body.\n"))
    write(ws_skills / "folder" / "SKILL.md", skill_text("folder", body="Folder body.\n"))
    write(ws_skills / "folder" / "reference.md", "not a skill, ignored\n")
    write(ws_skills / "folder" / "scripts" / "run.sh", "echo hi\n")

    catalog = load_skills(ws_skills, no_builtins, strict=True)

    assert catalog.names() == ["folder", "single"]
    assert catalog.get("single").body == "Single body."
    assert catalog.get("folder").body == "Folder body."
    assert catalog.get("folder").path == ws_skills / "folder" / "SKILL.md"
    assert {s.origin for s in catalog} == {"workspace"}


def test_other_frontmatter_is_kept_as_metadata(ws_skills, no_builtins):
    write(ws_skills / "meta.md", "---\nname: meta\ndescription: d\nlicense: MIT\n"
          "allowed-tools: [read_file]\n---\nbody\n")
    skill = load_skills(ws_skills, no_builtins, strict=True).get("meta")
    assert skill.metadata == {"license": "MIT", "allowed-tools": ["read_file"]}


def test_missing_workspace_dir_means_only_builtins(tmp_path):
    catalog = load_skills(tmp_path / "absent")
    assert catalog.names() == ["agentfs-workspace"] and catalog.errors == []
    assert load_skills(None).names() == ["agentfs-workspace"]


def test_temp_files_dotfiles_and_readme_are_ignored(ws_skills, no_builtins):
    write(ws_skills / "real.md", skill_text("real"))
    for junk in [".gitkeep", ".real.md.swp", "real.md~", "#real.md#", ".#real.md", "4913",
                 "notes.txt", "README.md", ".hidden.md"]:
        write(ws_skills / junk, "not: [a skill\n")
    write(ws_skills / ".git-like" / "SKILL.md", "junk")
    catalog = load_skills(ws_skills, no_builtins)
    assert catalog.names() == ["real"]
    assert catalog.errors == []


# --- built-ins and overrides ---------------------------------------------------------------


def test_shipped_builtin_skill_is_valid():
    path = builtin_skills_dir() / "agentfs-workspace" / "SKILL.md"
    assert path.is_file()
    catalog = load_skills(None, strict=True)
    skill = catalog.get("agentfs-workspace")
    assert skill.origin == "builtin" and skill.overrides is None
    assert skill.path == path
    assert skill.description and skill.body.startswith("# Working in an agentfs workspace")


def test_workspace_skill_overrides_builtin(tmp_path, ws_skills):
    builtins = tmp_path / "builtins"
    write(builtins / "shared.md", skill_text("shared", body="builtin version"))
    write(builtins / "kept" / "SKILL.md", skill_text("kept", body="kept"))
    write(ws_skills / "shared" / "SKILL.md", skill_text("shared", body="workspace version"))
    write(ws_skills / "extra.md", skill_text("extra"))

    catalog = load_skills(ws_skills, builtins, strict=True)

    assert catalog.names() == ["extra", "kept", "shared"]
    shared = catalog.get("shared")
    assert (shared.body, shared.origin, shared.overrides) == ("workspace version", "workspace",
                                                              "builtin")
    assert catalog.get("kept").origin == "builtin"
    assert catalog.get("extra").overrides is None


def test_broken_override_keeps_builtin_and_reports(tmp_path, ws_skills):
    builtins = tmp_path / "builtins"
    write(builtins / "shared.md", skill_text("shared", body="builtin version"))
    write(ws_skills / "shared.md", "---\nname: shared\n---\nno description\n")
    catalog = load_skills(ws_skills, builtins)
    assert catalog.get("shared").body == "builtin version"
    assert len(catalog.errors) == 1 and "shared.md" in str(catalog.errors[0])


def test_one_bad_file_does_not_stop_the_others_unless_strict(ws_skills, no_builtins):
    write(ws_skills / "good.md", skill_text("good"))
    write(ws_skills / "bad.md", skill_text("Bad"))
    catalog = load_skills(ws_skills, no_builtins)
    assert catalog.names() == ["good"]
    assert [e.path for e in catalog.errors] == [ws_skills / "bad.md"]
    with pytest.raises(SkillError, match="bad.md"):
        load_skills(ws_skills, no_builtins, strict=True)


@pytest.mark.parametrize("linked", ["leak.md", "leak", "leak/SKILL.md", "."])
def test_a_workspace_skill_is_never_read_through_a_link(tmp_path, ws_skills, no_builtins, linked):
    """A clone can bring a link to a file of the person's: its text would reach the
    model as a skill."""
    outside = tmp_path / "outside"
    write(outside / "leak.md", skill_text("leak", body="SECRET\n"))
    write(outside / "leak" / "SKILL.md", skill_text("leak", body="SECRET\n"))
    link = ws_skills / linked
    target = outside / linked if linked != "." else outside
    if linked == "leak/SKILL.md":
        (ws_skills / "leak").mkdir(parents=True)
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    error = only_error(ws_skills, no_builtins)
    assert "symlink" in str(error) and "SECRET" not in str(error)


def test_a_skill_md_that_is_no_file_is_named_as_such(ws_skills, no_builtins):
    (ws_skills / "odd" / "SKILL.md").mkdir(parents=True)
    assert "is not a regular file" in str(only_error(ws_skills, no_builtins))


def test_a_skill_file_over_the_size_limit_is_refused(ws_skills, no_builtins):
    path = write(ws_skills / "big.md", skill_text("big"))
    with path.open("ab") as f:
        f.truncate(MAX_MESSAGE_BYTES + 1)
    assert "over the" in str(only_error(ws_skills, no_builtins))


def test_both_layouts_for_one_name_is_an_error(ws_skills, no_builtins):
    write(ws_skills / "twice.md", skill_text("twice", body="file"))
    write(ws_skills / "twice" / "SKILL.md", skill_text("twice", body="folder"))
    catalog = load_skills(ws_skills, no_builtins)
    assert catalog.get("twice").body == "folder"
    assert len(catalog.errors) == 1 and "twice.md" in str(catalog.errors[0])
    assert "not both" in str(catalog.errors[0])


# --- validation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("file", "text", "expected"),
    [
        ("a.md", "just markdown\n", "has no YAML frontmatter"),
        ("a.md", "---\nname: a\ndescription: d\n", "not closed"),
        ("a.md", "---\ndescription: d\n---\nbody\n", "no name"),
        ("a.md", "---\nname: a\n---\nbody\n", "no description"),
        ("a.md", "---\nname: a\ndescription: '   '\n---\nbody\n", "no description"),
        ("a.md", "---\n---\nbody\n", "no name"),
        ("a.md", "---\n- name\n- a\n---\nbody\n", "mapping"),
        ("a.md", skill_text("a", "Use when: things break"), "not valid YAML"),
        ("Bad.md", skill_text("Bad"), "invalid name 'Bad'"),
        ("ask_strategy.md", skill_text("ask_strategy"), "'ask-strategy'"),
        ("-a.md", skill_text("-a"), "invalid name"),
        ("a-.md", skill_text("a-"), "invalid name"),
        ("a--b.md", skill_text("a--b"), "invalid name"),
        ("a b.md", skill_text("'a b'"), "invalid name"),
        ("x" * 65 + ".md", skill_text("x" * 65), "65 characters; at most 64"),
        ("a.md", skill_text("a", "d" * 1025), "1025 characters; at most 1024"),
        ("a.md", skill_text("b"), "does not match the file name 'a.md'"),
    ],
)
def test_invalid_skill_files_name_the_file_and_the_fix(ws_skills, no_builtins, file, text,
                                                       expected):
    path = write(ws_skills / file, text)
    error = only_error(ws_skills, no_builtins)
    assert error.path == path
    assert str(error).startswith(f"{path}: ")
    assert expected in str(error)
    assert error.hint


def test_yaml_errors_give_the_line_counted_from_the_top_of_the_file(ws_skills, no_builtins):
    write(ws_skills / "a.md", skill_text("a", "Use when: things break"))
    assert "frontmatter is not valid YAML (line 3)" in str(only_error(ws_skills, no_builtins))


def test_yaml_anchors_are_refused_with_a_fix(ws_skills, no_builtins):
    write(ws_skills / "a.md", "---\nname: &n a\ndescription: *n\n---\nbody\n")
    error = only_error(ws_skills, no_builtins)
    assert "YAML anchor &n at line 2" in str(error)
    assert "write the value out in full" in (error.hint or "")


def test_folder_name_must_match(ws_skills, no_builtins):
    path = write(ws_skills / "folder" / "SKILL.md", skill_text("other"))
    error = only_error(ws_skills, no_builtins)
    assert error.path == path and "folder name 'folder'" in str(error)


def test_folder_without_skill_md_is_reported(ws_skills, no_builtins):
    write(ws_skills / "assets" / "skill.txt", "x")
    error = only_error(ws_skills, no_builtins)
    assert error.path == ws_skills / "assets" and "no SKILL.md" in str(error)


def test_non_utf8_is_reported(ws_skills, no_builtins):
    (ws_skills).mkdir(parents=True)
    (ws_skills / "a.md").write_bytes(b"---\nname: a\ndescription: caf\xe9\n---\n")
    assert "not valid UTF-8" in str(only_error(ws_skills, no_builtins))


def test_limits_are_inclusive(ws_skills, no_builtins):
    name = "x" * 64
    write(ws_skills / f"{name}.md", skill_text(name, "d" * 1024))
    assert load_skills(ws_skills, no_builtins, strict=True).names() == [name]


@pytest.mark.parametrize(
    ("frontmatter", "expected"),
    [
        ("name: yes\ndescription: d", "name must be text, but YAML 1.1 reads unquoted yes/no"),
        ("name: on\ndescription: d", "boolean"),
        ("name: 2024\ndescription: d", "number"),
        ("name: a\ndescription: 2024-01-01", ("description must be text, but YAML reads an "
                                              "unquoted date")),
        ("name: a\ndescription: no", "boolean"),
        ("name: a\ndescription: [x, y]", "list"),
        ("name: a\ndescription: d\non: push", "key True is not text"),
    ],
)
def test_yaml_11_quirks_get_a_clear_message(ws_skills, no_builtins, frontmatter, expected):
    write(ws_skills / "a.md", f"---\n{frontmatter}\n---\nbody\n")
    error = only_error(ws_skills, no_builtins)
    assert expected in str(error)
    assert "quotes" in str(error)


def test_quoted_yaml_11_words_are_fine(ws_skills, no_builtins):
    write(ws_skills / "yes.md", '---\nname: "yes"\ndescription: "2024-01-01"\n---\nbody\n')
    skill = load_skills(ws_skills, no_builtins, strict=True).get("yes")
    assert skill.description == "2024-01-01"


def test_body_may_contain_horizontal_rules(tmp_path):
    path = write(tmp_path / "a.md", skill_text("a", body="one\n\n---\n\ntwo\n"))
    assert parse_skill_file(path, "workspace").body == "one\n\n---\n\ntwo"


@given(st.text(alphabet="abz09-_A ", max_size=70))
def test_name_pattern_matches_the_agent_skills_spec(name):
    """The character rules; the 64-character limit is checked separately (above)."""
    valid = (
        name != ""
        and all(c in "abcdefghijklmnopqrstuvwxyz0123456789-" for c in name)
        and not name.startswith("-") and not name.endswith("-") and "--" not in name
    )
    assert bool(NAME_PATTERN.fullmatch(name)) == valid


# --- catalog -------------------------------------------------------------------------------


def test_catalog_lookup_and_prompt_list(ws_skills, no_builtins):
    write(ws_skills / "b.md", skill_text("b", "Second\n  skill."))
    write(ws_skills / "a.md", skill_text("a", "First skill."))
    catalog = load_skills(ws_skills, no_builtins, strict=True)
    assert [s.name for s in catalog] == ["a", "b"] and "a" in catalog
    assert catalog.to_prompt_list() == "- a: First skill.\n- b: Second skill."
    with pytest.raises(SkillError, match="unknown skill 'c'; available: a, b"):
        catalog.get("c")
    assert catalog.select(["b"]).names() == ["b"]
    with pytest.raises(SkillError, match="unknown skill"):
        catalog.select(["nope"])
    assert SkillCatalog().to_prompt_list() == ""


# --- the skill tool ------------------------------------------------------------------------


@pytest.fixture
def registry(tmp_path, ws_skills, no_builtins) -> ToolRegistry:
    write(ws_skills / "deploy.md", skill_text("deploy", "How to deploy.", "Run make deploy.\n"))
    write(ws_skills / "empty.md", skill_text("empty", "Nothing inside.", ""))
    return ToolRegistry([skill_tool(load_skills(ws_skills, no_builtins, strict=True))])


def call(registry: ToolRegistry, tmp_path: Path, arguments: dict):
    return registry.call("skill", arguments, ToolContext(root=tmp_path, trace_id="t"))


def test_skill_tool_returns_the_body(registry, tmp_path):
    result = call(registry, tmp_path, {"name": "deploy"})
    assert not result.is_error
    assert result.content == "# Skill: deploy\n\nRun make deploy."
    assert call(registry, tmp_path, {"name": "empty"}).content == "# Skill: empty"


@pytest.mark.parametrize("arguments", [{"name": "nope"}, {}, {"name": 3}, {"name": ""}])
def test_skill_tool_errors_list_the_available_skills(registry, tmp_path, arguments):
    result = call(registry, tmp_path, arguments)
    assert result.is_error
    assert "deploy, empty" in result.content


def test_skill_tool_description_is_fixed_whatever_the_skills(registry, tmp_path):
    tool = registry.get("skill")
    assert tool is not None
    assert "deploy" not in tool.description  # the system prompt lists the skills
    assert tool.description == skill_tool(SkillCatalog()).description
    assert tool.input_schema["required"] == ["name"]
    assert tool.spec.name == "skill"


def test_skill_tool_serves_the_builtin(tmp_path):
    result = ToolRegistry([skill_tool(load_skills(None))]).call(
        "skill", {"name": "agentfs-workspace"}, ToolContext(root=tmp_path, trace_id="t"))
    assert not result.is_error
    assert result.content.startswith("# Skill: agentfs-workspace\n\n# Working in")


def test_skill_tool_with_no_skills(tmp_path):
    tool = skill_tool(SkillCatalog())
    result = ToolRegistry([tool]).call("skill", {"name": "x"},
                                       ToolContext(root=tmp_path, trace_id="t"))
    assert result.is_error and "(none)" in result.content
