"""The `bash` tool: off unless `[tools] bash = true` in `agentfs.toml`.

Commands run in the workspace root with a timeout and an output cap. The
files a command changed are found by comparing the work tree before and
after (outside `.git` and `traces/`), so they go into the step's commit.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from agentfs.tools.base import Tool, ToolContext, ToolFailure, ToolResult, schema

SKIPPED_DIRS = {".git", "traces"}


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    files: dict[str, tuple[int, int]] = {}
    for directory, dirnames, filenames in os.walk(root):
        if Path(directory) == root:
            dirnames[:] = [d for d in dirnames if d not in SKIPPED_DIRS]
        for name in filenames:
            full = os.path.join(directory, name)
            try:
                st = os.lstat(full)
            except FileNotFoundError:
                continue
            files[os.path.relpath(full, root)] = (st.st_mtime_ns, st.st_size)
    return files


def bash_tool(timeout: float, output_limit: int) -> Tool:
    """The `bash` tool with these limits."""

    def run(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        command = arguments.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ToolFailure("'command' must be a non-empty string")
        root = context.root.resolve()
        before = _snapshot(root)
        try:
            done = subprocess.run(
                ["bash", "-c", command],
                cwd=root,
                capture_output=True,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
                check=False,
            )
            output = done.stdout + done.stderr
            status = f"exit status {done.returncode}"
            failed = done.returncode != 0
        except subprocess.TimeoutExpired as exc:
            output = (exc.stdout or b"") + (exc.stderr or b"")
            status, failed = f"killed after {timeout:g}s (timeout)", True
        after = _snapshot(root)
        context.changed.update(p for p in set(before) | set(after) if before.get(p) != after.get(p))
        text = output.decode("utf-8", "replace")
        if len(text) > output_limit:
            text = text[:output_limit] + f"\n[... cut: {len(text) - output_limit} more characters]"
        return ToolResult(f"{text.rstrip()}\n[{status}]".lstrip("\n"), is_error=failed)

    return Tool(
        "bash",
        f"Run a bash command in the workspace root (timeout {timeout:g}s; output over "
        f"{output_limit} characters is cut). Files it changes are committed with the step.",
        schema({"command": {"type": "string"}}, ["command"]),
        run,
    )
