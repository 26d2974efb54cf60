"""agentfs: LLM agents whose whole state is plain files in a Git repository.

    from agentfs import Project, Runner, ReplayModel
    project = Project.open("path/to/workspace")
    Runner(project.workspace, project.repo, ReplayModel(script)).run("my-trace")

The names below are imported when first used (PEP 562), so `import agentfs`
and the `agentfs` command stay fast: `agentfs --help` never loads pydantic,
dulwich or the runner.
"""

from __future__ import annotations

import importlib
import typing

__version__ = "0.1.0"

#: Each public name and the module that defines it.
_HOMES: dict[str, str] = {
    "DEFAULT_SYSTEM_PREFIX": "agentfs.core.system_prompt",
    "AgentfsError": "agentfs.errors",
    "GitRepo": "agentfs.store.git.repo",
    "Message": "agentfs.store.messages",
    "Model": "agentfs.models.base",
    "ModelRequest": "agentfs.models.base",
    "ModelResponse": "agentfs.models.base",
    "Project": "agentfs.core.project",
    "ReplayModel": "agentfs.models.replay",
    "RunResult": "agentfs.core.runner",
    "Runner": "agentfs.core.runner",
    "Tool": "agentfs.tools.base",
    "ToolCall": "agentfs.store.messages",
    "ToolContext": "agentfs.tools.base",
    "ToolFailure": "agentfs.tools.base",
    "ToolRegistry": "agentfs.tools.base",
    "ToolResult": "agentfs.tools.base",
    "ToolSpec": "agentfs.models.base",
    "Trace": "agentfs.store.trace",
    "TraceMeta": "agentfs.store.trace",
    "Usage": "agentfs.store.messages",
    "Workspace": "agentfs.store.workspace",
    "WorkspaceConfig": "agentfs.config",
    "build_system_prompt": "agentfs.core.system_prompt",
    "find_workspace": "agentfs.store.workspace",
    "init_workspace": "agentfs.core.project",
    "load_config": "agentfs.config",
}

__all__ = [
    "DEFAULT_SYSTEM_PREFIX",
    "AgentfsError",
    "GitRepo",
    "Message",
    "Model",
    "ModelRequest",
    "ModelResponse",
    "Project",
    "ReplayModel",
    "RunResult",
    "Runner",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolFailure",
    "ToolRegistry",
    "ToolResult",
    "ToolSpec",
    "Trace",
    "TraceMeta",
    "Usage",
    "Workspace",
    "WorkspaceConfig",
    "__version__",
    "build_system_prompt",
    "find_workspace",
    "init_workspace",
    "load_config",
]


def __getattr__(name: str) -> typing.Any:
    """Import a public name from its module the first time it is asked for."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'agentfs' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if typing.TYPE_CHECKING:  # what type checkers and editors see
    from agentfs.config import WorkspaceConfig, load_config
    from agentfs.core.project import Project, init_workspace
    from agentfs.core.runner import Runner, RunResult
    from agentfs.core.system_prompt import DEFAULT_SYSTEM_PREFIX, build_system_prompt
    from agentfs.errors import AgentfsError
    from agentfs.models.base import Model, ModelRequest, ModelResponse, ToolSpec
    from agentfs.models.replay import ReplayModel
    from agentfs.store.git.repo import GitRepo
    from agentfs.store.messages import Message, ToolCall, Usage
    from agentfs.store.trace import Trace, TraceMeta
    from agentfs.store.workspace import Workspace, find_workspace
    from agentfs.tools.base import Tool, ToolContext, ToolFailure, ToolRegistry, ToolResult
