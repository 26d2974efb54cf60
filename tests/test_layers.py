"""The layers hold: imports point downward, dulwich stays in the store, and
docs/architecture.md names every module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "agentfs"

#: What each part of the package may import from agentfs (besides itself).
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "resources": set(),
    "config": {"errors"},
    "store": {"errors"},
    "skills": {"errors", "resources", "store"},
    "models": {"errors", "store", "config"},
    "tools": {"errors", "store", "models", "skills", "config"},
    "core": {"errors", "store", "models", "skills", "tools", "config"},
    "testing": {"errors", "store", "models"},
    "remote": {"errors", "store"},
    "watch": {"errors", "store", "models", "core", "config", "remote"},
    "server": {"errors", "store", "models", "core", "config"},
    "cli": {"errors", "store", "models", "core", "tools", "watch", "skills", "config",
            "resources", "server", "remote"},
    "__init__": {"errors", "store", "models", "core", "tools", "config", "skills", "testing"},
    "__main__": {"cli"},
}


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "_bundled" not in p.parts)


def _part(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0].removesuffix(".py")


def _imports(path: Path) -> set[str]:
    """Top-level names of everything `path` imports, at any depth of the file."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_downward(path: Path) -> None:
    part = _part(path)
    allowed = ALLOWED[part] | {part}
    for name in _imports(path):
        if name == "agentfs":
            continue
        if name.startswith("agentfs."):
            target = name.split(".")[1]
            assert target in allowed, f"{path.relative_to(ROOT)} imports {name}"
        if name.startswith("dulwich"):
            assert part == "store", f"{path.relative_to(ROOT)} imports {name}: only store/ may"


@pytest.mark.parametrize("path", [p for p in _modules() if p.name != "__init__.py"
                                  and p.name != "__main__.py"],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_architecture_names_every_module(path: Path) -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    rel = path.relative_to(ROOT).as_posix()
    assert f"`{rel}" in text, f"docs/architecture.md does not name {rel}"
