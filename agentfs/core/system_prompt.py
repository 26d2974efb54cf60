"""The system prompt: built once when a trace is created, stored as its first message."""

from __future__ import annotations

from agentfs.config import WorkspaceConfig

DEFAULT_SYSTEM_PREFIX = """\
You are an agent working in a workspace: a directory of files under Git. \
Use the tools to read, search and change files; paths are relative to the \
workspace root. Every step you take is committed, so work in small, \
deliberate steps and say plainly what you did and what you found.\
"""


def build_system_prompt(
    config: WorkspaceConfig,
    *,
    explicit: str | None = None,
    run_prompt: str | None = None,
    preset: str | None = None,
) -> str:
    """The first non-empty of: `explicit` (a system message passed to the run), the
    run's `system_prompt`, the preset's, the workspace's (`agentfs.toml`), and
    `DEFAULT_SYSTEM_PREFIX`."""
    preset_prompt = config.presets[preset].system_prompt if preset in config.presets else None
    for candidate in (explicit, run_prompt, preset_prompt, config.system_prompt):
        if candidate and candidate.strip():
            return candidate.strip()
    return DEFAULT_SYSTEM_PREFIX
