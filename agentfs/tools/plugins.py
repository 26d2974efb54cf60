"""Extra tools from installed packages, through the `agentfs.tools` entry-point group.

An entry point may name a `Tool`, a list of tools, or a callable taking the
workspace root and returning either.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path

from agentfs.errors import ConfigError
from agentfs.tools.base import Tool

GROUP = "agentfs.tools"


def plugin_tools(root: Path) -> list[Tool]:
    """Every tool the installed `agentfs.tools` entry points provide (a plugin may not
    reuse a built-in tool's name: the runner refuses that)."""
    tools: list[Tool] = []
    for entry in entry_points(group=GROUP):
        try:
            value = entry.load()
            if callable(value) and not isinstance(value, Tool):
                value = value(root)
        except Exception as exc:  # noqa: BLE001 — report any failure of a plugin
            raise ConfigError(
                f"tool plugin {entry.name!r} ({entry.value}) failed to load: {exc}",
                hint="fix or uninstall the package that provides it",
            ) from None
        items = value if isinstance(value, (list, tuple)) else [value]
        for item in items:
            if not isinstance(item, Tool):
                raise ConfigError(f"tool plugin {entry.name!r} gave {type(item).__name__}, not a Tool")
            tools.append(item)
    return tools
