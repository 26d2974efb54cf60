"""Tools: what they are, how they are registered, what they return."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentfs.errors import AgentfsError
from agentfs.models.base import ToolSpec
from agentfs.store.atomic import atomic_write


class ToolFailure(Exception):
    """A tool could not do what was asked; becomes an `is_error` result, never a crash."""


@dataclass
class ToolContext:
    """What a tool may use: the workspace root, and a record of the files it changed.

    Tools change files through `write`, which announces the path first
    (`before_change`), so even a run killed mid-write knows what to commit.
    """

    root: Path
    trace_id: str
    changed: set[str] = field(default_factory=set)
    tmp_dir: Path | None = None
    before_change: Callable[[str], None] | None = None

    def write(self, path: Path, data: bytes) -> None:
        """Atomically replace a workspace file, recording it as changed."""
        rel = path.relative_to(self.root.resolve()).as_posix()
        if self.before_change is not None:
            self.before_change(rel)
        atomic_write(path, data, tmp_dir=self.tmp_dir)
        self.changed.add(rel)


@dataclass
class ToolResult:
    """A tool's answer: text or JSON data, and whether it is an error."""

    content: Any
    is_error: bool = False


@dataclass(frozen=True)
class Tool:
    """A named function the model can call with JSON input."""

    name: str
    description: str
    input_schema: dict[str, Any]
    run: Callable[[dict[str, Any], ToolContext], Any]

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, self.input_schema)


class ToolRegistry:
    """The tools a run offers, by name."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.add(tool)

    def add(self, tool: Tool) -> None:
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def specs(self) -> list[ToolSpec]:
        return [self._tools[name].spec for name in sorted(self._tools)]

    def call(self, name: str, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        """Run a tool; every failure comes back as an error result."""
        tool = self._tools.get(name)
        if tool is None:
            return ToolResult(
                f"unknown tool {name!r}; available: {', '.join(self.names())}", is_error=True
            )
        try:
            value = tool.run(arguments, context)
        except (ToolFailure, AgentfsError) as exc:
            return ToolResult(str(exc), is_error=True)
        except Exception as exc:  # noqa: BLE001 — a tool bug must not crash the run
            return ToolResult(f"{name} failed: {type(exc).__name__}: {exc}", is_error=True)
        return value if isinstance(value, ToolResult) else ToolResult(value)


def schema(properties: dict[str, Any], required: Iterable[str] = ()) -> dict[str, Any]:
    """A JSON schema for an object with these properties."""
    return {"type": "object", "properties": properties, "required": list(required)}
