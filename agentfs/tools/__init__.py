"""Tools the agent can call."""

from agentfs.tools.base import Tool, ToolContext, ToolFailure, ToolRegistry, ToolResult
from agentfs.tools.files import FILE_TOOLS

__all__ = ["FILE_TOOLS", "Tool", "ToolContext", "ToolFailure", "ToolRegistry", "ToolResult"]

