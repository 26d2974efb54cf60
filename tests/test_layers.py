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
    "prices": {"store"},
    "config": {"errors", "prices", "store"},
    "store": {"errors"},
    "skills": {"errors", "resources", "store"},
    "models": {"errors", "store", "config", "prices"},
    "tools": {"errors", "store", "models", "skills", "config", "prices"},
    "core": {"errors", "store", "models", "skills", "tools", "config", "prices"},
    "testing": {"errors", "store", "models"},
    "remote": {"errors", "store"},
    "watch": {"errors", "store", "models", "core", "config", "prices", "remote"},
    "server": {"errors", "store", "models", "core", "config", "prices"},
    "cli": {"errors", "store", "models", "core", "tools", "watch", "skills", "config", "prices",
            "resources", "server", "remote"},
    "__init__": {"errors", "store", "models", "core", "tools", "config", "prices", "skills", "testing"},
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


@pytest.mark.parametrize("path", [p for p in _modules()
                                  if p.name not in {"__init__.py", "__main__.py"}],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_architecture_names_every_module(path: Path) -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    rel = path.relative_to(ROOT).as_posix()
    assert f"`{rel}" in text, f"docs/architecture.md does not name {rel}"


CLI = PACKAGE / "cli"
#: The one module that registers the commands of the others on the `agentfs` group.
REGISTRY = "commands"


def _defines_commands(path: Path) -> bool:
    """Whether `path` defines a click command or group (a function decorated with
    `@<something>.command(...)` or `.group(...)`)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                call = decorator.func if isinstance(decorator, ast.Call) else decorator
                if isinstance(call, ast.Attribute) and call.attr in ("command", "group"):
                    return True
    return False


def _cli_modules_imported(path: Path) -> set[str]:
    """The modules of agentfs/cli/ that `path` imports, by name (`commands`, ...)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module == "agentfs.cli":
            names = [f"agentfs.cli.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        else:
            continue
        found.update(n.split(".")[2] for n in names
                     if n.startswith("agentfs.cli.") and len(n.split(".")) > 2)
    return found


@pytest.mark.parametrize("path", sorted(CLI.glob("*.py")), ids=lambda p: p.name)
def test_cli_modules_import_no_private_names(path: Path) -> None:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            private = [a.name for a in node.names if a.name.startswith("_")]
            assert not private, (
                f"agentfs/cli/{path.name} imports {private} from {node.module}: a helper "
                "more than one module uses belongs, public, in agentfs/cli/context.py (or "
                "the module that owns its idea)")


@pytest.mark.parametrize("path", sorted(CLI.glob("*.py")), ids=lambda p: p.name)
def test_command_modules_are_imported_only_where_commands_are_registered(path: Path) -> None:
    command_modules = {p.stem for p in CLI.glob("*.py") if _defines_commands(p)}
    assert {REGISTRY, "chat", "serve"} <= command_modules  # the probe finds commands
    if path.stem == REGISTRY:
        return
    allowed = {REGISTRY} if path.stem == "__init__" else set()  # the entry point: the group
    imported = (_cli_modules_imported(path) & command_modules) - {path.stem}
    assert imported <= allowed, (
        f"agentfs/cli/{path.name} imports the command module(s) {sorted(imported - allowed)}: "
        f"commands are registered in agentfs/cli/{REGISTRY}.py only; shared helpers belong "
        "in agentfs/cli/context.py")
