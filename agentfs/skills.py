"""Skills: Markdown instructions with YAML frontmatter that an agent loads by name.

Built-in skills ship with agentfs; a workspace's `skills/` adds to them or
replaces them by name. A skill is either `<name>.md` or a folder in the
Anthropic Agent Skills layout, `<name>/SKILL.md`. Names and descriptions follow
the Agent Skills rules, so skills move between agentfs and other tools as they are.
"""

from __future__ import annotations

import datetime
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from agentfs.errors import AgentfsError
from agentfs.resources import builtin_skills_dir
from agentfs.store.frontmatter import FrontmatterError, Problem, split
from agentfs.store.messages import MAX_MESSAGE_BYTES
from agentfs.store.regularfile import FileRefused, read_regular

MAX_NAME_CHARS = 64
MAX_DESCRIPTION_CHARS = 1024
SKILL_FILE = "SKILL.md"
NAME_PATTERN = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")

Origin = Literal["builtin", "workspace"]


class SkillError(AgentfsError):
    """A skill file is invalid, or a skill was asked for that does not exist."""

    def __init__(self, problem: str, *, path: Path | None = None, hint: str | None = None) -> None:
        super().__init__(f"{path}: {problem}" if path is not None else problem, hint=hint)
        self.path = path


@dataclass(frozen=True)
class Skill:
    """One skill, as read from its file."""

    name: str
    """The name the model and `--inject-skill` use to ask for it."""
    description: str
    """When to use the skill; shown in the system prompt and the `skill` tool."""
    body: str
    """The instructions: the Markdown after the frontmatter."""
    path: Path
    """The `<name>.md` or `<name>/SKILL.md` file it was read from."""
    origin: Origin
    """`builtin` (ships with agentfs) or `workspace` (the workspace's `skills/`)."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Every other frontmatter field (license, allowed-tools, ...), as YAML read it."""
    overrides: Origin | None = None
    """Set when this skill replaces one of the same name from that origin."""


class SkillCatalog:
    """The skills a run can use, by name, plus the files that could not be loaded."""

    def __init__(self, skills: Iterable[Skill] = (), errors: Iterable[SkillError] = ()) -> None:
        self._skills = {skill.name: skill for skill in skills}
        self.errors: list[SkillError] = list(errors)

    def get(self, name: str) -> Skill:
        """The skill called `name`; an unknown name raises `SkillError` listing the known ones."""
        try:
            return self._skills[name]
        except KeyError:
            raise SkillError(f"unknown skill {name!r}; available: {self._available()}") from None

    def names(self) -> list[str]:
        return sorted(self._skills)

    def select(self, names: Iterable[str]) -> SkillCatalog:
        """A catalog of only these skills (for presets); unknown names raise `SkillError`."""
        return SkillCatalog([self.get(name) for name in names], self.errors)

    def to_prompt_list(self) -> str:
        """One `- name: description` line per skill, sorted, for system prompts and tool docs."""
        return "\n".join(f"- {s.name}: {' '.join(s.description.split())}" for s in self)

    def __iter__(self) -> Iterator[Skill]:
        return (self._skills[name] for name in self.names())

    def __len__(self) -> int:
        return len(self._skills)

    def __contains__(self, name: object) -> bool:
        return name in self._skills

    def _available(self) -> str:
        return ", ".join(self.names()) or "(none)"


def load_skills(
    workspace_skills_dir: Path | None,
    builtin_dir: Path | None = None,
    *,
    strict: bool = False,
) -> SkillCatalog:
    """Load the built-in skills, then the workspace's, which add to or replace them by name.

    Args:
        workspace_skills_dir: the workspace's `skills/`; `None` or a missing folder means none.
        builtin_dir: the skills that ship with agentfs (default: the bundled ones).
        strict: raise the first `SkillError` instead of collecting it.

    Returns:
        A catalog of every valid skill. An invalid file does not stop the others
        from loading: its error is kept in `catalog.errors` for the CLI to show,
        and a built-in it meant to replace stays in use.
    """
    skills: dict[str, Skill] = {}
    errors: list[SkillError] = []
    sources: list[tuple[Path | None, Origin]] = [
        (builtin_dir if builtin_dir is not None else builtin_skills_dir(), "builtin"),
        (workspace_skills_dir, "workspace"),
    ]
    for directory, origin in sources:
        if directory is None:
            continue
        for skill in _load_dir(directory, origin, errors):
            replaced = skills.get(skill.name)
            skills[skill.name] = (skill if replaced is None
                                  else replace(skill, overrides=replaced.origin))
    if strict and errors:
        raise errors[0]
    return SkillCatalog(skills.values(), errors)


def _load_dir(directory: Path, origin: Origin, errors: list[SkillError]) -> list[Skill]:
    """The valid skills of one folder; problems go to `errors`."""
    if not directory.exists():
        return []
    if origin == "workspace" and directory.is_symlink():
        errors.append(SkillError("is a symlink, not a folder", path=directory,
                                 hint=_LINK_HINT))
        return []
    if not directory.is_dir():
        errors.append(SkillError("is not a folder", path=directory, hint="skills/ holds skills"))
        return []
    found: dict[str, Skill] = {}
    for entry in sorted(directory.iterdir()):
        if _ignored(entry):
            continue
        try:
            skill = _load_entry(entry, origin)
            if skill is None:
                continue
            if skill.name in found:
                raise SkillError(
                    f"duplicates skill {skill.name!r} already loaded from {found[skill.name].path}",
                    path=entry,
                    hint="keep either <name>.md or <name>/SKILL.md, not both",
                )
            found[skill.name] = skill
        except SkillError as exc:
            errors.append(exc)
    return list(found.values())


def _ignored(entry: Path) -> bool:
    """Dotfiles, editor leftovers (`#x#`, `x~`, `.x.swp`, vim's `4913`) and READMEs."""
    name = entry.name
    if name.startswith((".", "#")) or name.endswith(("~", "#")):
        return True
    return entry.is_file() and (not name.endswith(".md") or name.lower() == "readme.md")


#: A workspace's skills are hand-written, untrusted input: never read through a link,
#: which could send a file from outside the workspace to the model.
_LINK_HINT = "replace the link with a copy of what it points to"


def _load_entry(entry: Path, origin: Origin) -> Skill | None:
    if origin == "workspace" and entry.is_symlink():
        raise SkillError("is a symlink; skills must be regular files and folders",
                         path=entry, hint=_LINK_HINT)
    if entry.is_dir():
        skill_file = entry / SKILL_FILE
        if not os.path.lexists(skill_file):  # one that is no file is refused when read
            raise SkillError(
                f"folder has no {SKILL_FILE}",
                path=entry,
                hint=f"add {entry.name}/{SKILL_FILE}, or move the folder out of skills/",
            )
        skill = parse_skill_file(skill_file, origin)
        expected, kind = entry.name, "folder"
    elif entry.is_file():
        skill = parse_skill_file(entry, origin)
        expected, kind = entry.stem, "file"
    else:
        return None
    if skill.name != expected:
        raise SkillError(
            f"name {skill.name!r} does not match the {kind} name {entry.name!r}",
            path=skill.path,
            hint=f"rename the {kind} or set name: {expected}",
        )
    return skill


def parse_skill_file(path: Path, origin: Origin) -> Skill:
    """Read and validate one skill file; any problem raises `SkillError` naming the file."""
    try:
        # at most a message file's size: its text becomes a message
        text = read_regular(path, MAX_MESSAGE_BYTES, what="skill files",
                            follow=origin == "builtin").decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SkillError(f"not valid UTF-8 (byte {exc.start})", path=path) from None
    except FileRefused as exc:
        raise SkillError(exc.problem, path=path, hint=exc.hint) from None
    except OSError as exc:
        raise SkillError(f"cannot be read: {exc.strerror}", path=path) from None
    data, body = _split_frontmatter(path, text.lstrip("\ufeff"))
    name = _field(path, data, "name")
    description = _field(path, data, "description").strip()
    _check_name(path, name)
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise SkillError(
            f"description has {len(description)} characters; at most {MAX_DESCRIPTION_CHARS}",
            path=path,
            hint="keep it to what the skill does and when to use it; the body holds the rest",
        )
    metadata = {k: v for k, v in data.items() if k not in ("name", "description")}
    return Skill(name, description, body, path, origin, metadata)


def _split_frontmatter(path: Path, text: str) -> tuple[dict[str, Any], str]:
    """The frontmatter mapping and the stripped body, read with agentfs' YAML limits."""
    fix = "start the file with ---, then name: and description: lines, then ---"
    try:
        data, body = split(text)
    except FrontmatterError as exc:
        raise _skill_error(path, exc, fix) from None
    if data is None:
        raise SkillError("has no YAML frontmatter", path=path, hint=fix)
    bad_keys = [k for k in data if not isinstance(k, str)]
    if bad_keys:
        raise SkillError(
            f"frontmatter key {bad_keys[0]!r} is not text (YAML 1.1 reads yes/no/on/off as "
            "booleans and bare numbers as numbers)",
            path=path,
            hint="put the key in quotes",
        )
    return data, body.strip()


def _skill_error(path: Path, exc: FrontmatterError, fix: str) -> SkillError:
    """The frontmatter problem in the words skill authors know, with a fix."""
    if exc.kind is Problem.UNCLOSED:
        return SkillError("frontmatter is not closed by a --- line", path=path, hint=fix)
    if exc.kind is Problem.NOT_MAPPING:
        return SkillError("frontmatter must be a YAML mapping of fields", path=path, hint=fix)
    if exc.kind is Problem.SYNTAX:
        line = f" (line {exc.line})" if exc.line is not None else ""
        return SkillError(
            f"frontmatter is not valid YAML{line}: {exc.problem}",
            path=path,
            hint='put values that contain ": " or start with a quote or bracket in "quotes"',
        )
    return SkillError(exc.message, path=path, hint=exc.hint)


def _field(path: Path, data: dict[str, Any], key: str) -> str:
    """A required text field, explaining YAML 1.1's surprises when it is not text."""
    value = data.get(key)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise SkillError(f"frontmatter has no {key}", path=path, hint=f"add a {key}: line")
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        why = "YAML 1.1 reads unquoted yes/no/on/off/true/false as a boolean"
    elif isinstance(value, datetime.date):
        why = "YAML reads an unquoted date as a date"
    elif isinstance(value, (int, float)):
        why = "YAML reads an unquoted number as a number"
    else:
        why = f"YAML read it as a {type(value).__name__}"
    raise SkillError(
        f"{key} must be text, but {why}", path=path, hint=f'put it in quotes: {key}: "..."'
    )


def _check_name(path: Path, name: str) -> None:
    """The Agent Skills name rule: lowercase letters, digits, single inner hyphens, ≤ 64."""
    if len(name) > MAX_NAME_CHARS:
        raise SkillError(
            f"name has {len(name)} characters; at most {MAX_NAME_CHARS}",
            path=path,
            hint="shorten the name (and the file or folder with it)",
        )
    if not NAME_PATTERN.fullmatch(name):
        suggestion = "-".join(re.findall(r"[a-z0-9]+", name.lower()))
        hint = "use lowercase letters, digits and single hyphens, not at the start or end"
        raise SkillError(
            f"invalid name {name!r}",
            path=path,
            hint=f"{hint}, e.g. {suggestion!r}" if suggestion else hint,
        )
