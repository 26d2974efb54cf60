"""agentfs: LLM agents whose whole state is plain files in a Git repository.

    from agentfs import Project, Runner, ReplayModel
    project = Project.open("path/to/workspace")
    Runner(project.workspace, project.repo, ReplayModel(script)).run("my-trace")
"""

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

__version__ = "0.1.0"

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
