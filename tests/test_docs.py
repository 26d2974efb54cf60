"""Docs stay true to the code: code links resolve, the CLI reference matches --help."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import click
import pytest

import agentfs
from agentfs.cli.commands import cli

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
LINK = re.compile(r"`(agentfs/[\w/.-]*?)(?::([\w.]+))?`")


def _links() -> list[tuple[str, str, str | None]]:
    found = []
    for doc in DOCS:
        for match in LINK.finditer(doc.read_text()):
            found.append((doc.name, match[1], match[2]))
    return found


def _defined(source: Path) -> set[str]:
    """Top-level functions and classes, and `Class.member` for class members."""
    names: set[str] = set()
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            for member in node.body:
                if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(f"{node.name}.{member.name}")
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def test_docs_have_code_links():
    assert len(_links()) > 20


@pytest.mark.parametrize(("doc", "path", "name"), _links())
def test_code_link_resolves(doc, path, name):
    target = ROOT / path
    assert target.exists(), f"{doc}: {path} does not exist"
    if name:
        assert target.suffix == ".py", f"{doc}: {path}:{name} links into a non-Python file"
        assert name in _defined(target), f"{doc}: {path} defines no {name}"


def _sections() -> dict[str, str]:
    text = (ROOT / "docs" / "cli.md").read_text()
    parts = re.split(r"^## agentfs (\S+)\s*$", text, flags=re.MULTILINE)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


@pytest.mark.parametrize("name", sorted(cli.commands))
def test_cli_reference_matches_help(name):
    section = _sections().get(name)
    assert section is not None, f"docs/cli.md has no '## agentfs {name}' section"
    command = cli.commands[name]
    for param in command.params:
        if isinstance(param, click.Option):
            for opt in param.opts:
                assert f"`{opt}" in section or f" {opt}" in section, (
                    f"docs/cli.md: agentfs {name} does not mention {opt}"
                )


def test_cli_reference_has_no_stale_commands():
    assert set(_sections()) == set(cli.commands)


def test_public_api_is_complete():
    assert agentfs.__all__ == sorted(set(agentfs.__all__), key=agentfs.__all__.index)
    for name in agentfs.__all__:
        assert hasattr(agentfs, name), name
    public = {n for n in vars(agentfs) if not n.startswith("_") and n[0].isupper()}
    assert public <= set(agentfs.__all__), f"exported but not in __all__: {public - set(agentfs.__all__)}"


TEST_REFERENCE = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")


@pytest.mark.parametrize(("doc", "path", "name"), [
    (doc.name, m[1], m[2]) for doc in DOCS for m in TEST_REFERENCE.finditer(doc.read_text())])
def test_a_test_named_by_the_docs_exists(doc, path, name):
    target = ROOT / path
    assert target.exists(), f"{doc}: {path} does not exist"
    assert name in _defined(target), f"{doc}: {path} defines no test {name}"
