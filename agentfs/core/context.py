"""Periodic context injection: the `get_current_context` tool and what it reports.

Every `CONTEXT_INJECTION_INTERVAL` iterations the runner appends a synthetic
`get_current_context` call to the model's tool calls (unless the model made
it itself), so the model regularly sees the time, its plan, its
collaborators, messages that arrived while it worked, and what registered
hooks add. The call and its result are stored like any other message.

Each hook's section is cut to `HOOK_MAX_BYTES`, so one noisy hook cannot
crowd out the others, and the whole text to `CONTEXT_MAX_BYTES`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agentfs.core.goals import GoalTree
from agentfs.tools.base import TOOL_RESULT_MAX_BYTES, Tool, ToolContext, cut_text, schema
from agentfs.tools.subprocesses import UNSANDBOXED, Limits, run_command

CONTEXT_TOOL = "get_current_context"
#: The whole injected context, in UTF-8 bytes: it comes back every few iterations.
CONTEXT_MAX_BYTES = TOOL_RESULT_MAX_BYTES // 4
#: One hook's share of it.
HOOK_MAX_BYTES = CONTEXT_MAX_BYTES // 8
HOOK_HINT = f"a context hook's output is limited to {HOOK_MAX_BYTES:,} bytes"

#: A Python hook: given the trace id, returns text to add (or "" for nothing).
ContextHook = Callable[[str], str]


@dataclass(frozen=True)
class CommandHook:
    """A hook declared in `agentfs.toml`: a shell command whose stdout is injected."""

    name: str
    command: str
    timeout: float = 10.0
    cwd: Path | None = None
    env: Mapping[str, str] | None = None

    def __call__(self, trace_id: str) -> str:
        env = {**(self.env or {"PATH": os.defpath}), **UNSANDBOXED, "AGENTFS_TRACE": trace_id}
        # read no further than its section holds: a hook reading a file the model made a
        # link to /dev/zero, or to a huge file, would otherwise fill the memory
        done = run_command(self.command, cwd=self.cwd or Path.cwd(), timeout=self.timeout,
                           env=env, limits=Limits(output=HOOK_MAX_BYTES))
        text = done.output.decode("utf-8", "replace").strip()
        if done.dropped:
            text = cut_text(text, HOOK_MAX_BYTES, hint=HOOK_HINT, dropped=done.dropped)
        if done.returncode is None:
            raise RuntimeError(f"timed out after {self.timeout:g}s")
        if done.returncode != 0:
            raise RuntimeError(f"exit status {done.returncode}: {text[-300:]}")
        return text


@dataclass
class ContextSources:
    """Where the injected context comes from, for one trace."""

    trace_id: str
    goals_path: Path
    collaborators: Callable[[], list[dict[str, Any]]] = list
    notifications: Callable[[], list[str]] = list
    hooks: Sequence[tuple[str, ContextHook]] = field(default_factory=list)
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)


def build_context(sources: ContextSources) -> str:
    """The text `get_current_context` returns; a failing hook is reported, not raised."""
    tree = GoalTree.load(sources.goals_path)
    parts = [
        f"## Current time\n{sources.clock().isoformat(timespec='seconds')}",
        f"## Goals\n{tree.to_prompt()}\n\n{tree.focus_reminder()}",
    ]
    collaborators = sources.collaborators()
    for title, group in (
        ("Active collaborators", [c for c in collaborators if c.get("status") == "running"]),
        ("Finished collaborators", [c for c in collaborators if c.get("status") != "running"]),
    ):
        if group:
            lines = [
                f"- {c['trace']}: {c['status']}" + (f" — {c['task']}" if c.get("task") else "")
                for c in group
            ]
            parts.append(f"## {title}\n" + "\n".join(lines))
    notes = sources.notifications()
    if notes:
        parts.append(
            "## New messages\nThe user sent messages while you were working; they follow "
            "these tool results:\n" + "\n".join(f"- {n}" for n in notes)
        )
    for name, hook in sources.hooks:
        try:
            text = hook(sources.trace_id)
        except Exception as exc:  # noqa: BLE001 — a hook must never break the run
            text = f"(hook failed: {type(exc).__name__}: {exc})"
        if text:
            parts.append(f"## {name}\n{cut_text(str(text), HOOK_MAX_BYTES, hint=HOOK_HINT)}")
    hint = f"the context is limited to {CONTEXT_MAX_BYTES:,} bytes"
    return cut_text("\n\n".join(parts), CONTEXT_MAX_BYTES, hint=hint)


def context_tool(sources: ContextSources) -> Tool:
    """The `get_current_context` tool for one trace."""

    def run(arguments: dict[str, Any], context: ToolContext) -> str:
        return build_context(sources)

    return Tool(
        CONTEXT_TOOL,
        "Show the current time, your goal tree and focus, collaborators, new user "
        "messages and other live context.",
        schema({}),
        run,
        read_only=True,
    )
