"""The `bash` tool: off unless `[tools] bash = true` in `agentfs.toml`.

Commands run in the workspace root with a timeout and an output cap, with
only the environment they are given (see `agentfs/tools/subprocesses.py`), in
a sandbox where bubblewrap works (see `agentfs/tools/sandbox.py`). The files a
command changed are found by comparing the work tree before and after
(`agentfs/tools/worktree.py:WorkTreeChanges`), so they go into the step's commit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from agentfs.config import ToolsConfig
from agentfs.store.workspace import FOLDERS
from agentfs.tools.base import Tool, ToolContext, ToolFailure, ToolResult, cut_marker, schema
from agentfs.tools.paths import WritePolicy
from agentfs.tools.sandbox import SANDBOX_TMP, Sandbox, choose_sandbox
from agentfs.tools.subprocesses import MINIMAL, NO_LIMITS, Limits, run_command
from agentfs.tools.worktree import WorkTreeChanges

CUT_HINT = "send the output to a file and read it in parts with read_file offset/limit"


def bash_limits(tools: ToolsConfig) -> Limits:
    """The limits of a bash command that `[tools]` in agentfs.toml sets."""
    return Limits(processes=tools.bash_max_processes, memory=tools.bash_max_memory_mb * 2**20,
                  file_size=tools.bash_max_file_mb * 2**20)


def bash_tool(timeout: float, output_limit: int, env: Mapping[str, str] | None = None, *,
              sandbox: Sandbox | None = None, read_only: Iterable[str] = (),
              limits: Limits = NO_LIMITS) -> Tool:
    """The `bash` tool.

    Args:
      timeout: Seconds before a command, with everything it started, is killed.
      output_limit: Characters of output kept.
      env: The whole environment commands see (default: a PATH).
      sandbox: Where commands run (default: `choose_sandbox("auto")`).
      read_only: Workspace paths a sandboxed command cannot change besides `.git`.
      limits: Processes, memory and file size a command may use (the output read is
        bounded by `output_limit`); they apply with or without a sandbox.
    """
    chosen = sandbox if sandbox is not None else choose_sandbox("auto")
    command_env = dict(env) if env is not None else dict(MINIMAL)
    protected = tuple(read_only)
    policy = WritePolicy(protected)  # what the file tools may not change, the same list
    # a character is at most 4 bytes of UTF-8: enough bytes are kept to cut at output_limit
    bounded = dataclasses.replace(limits, output=4 * output_limit + 4)

    def run(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        command = arguments.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ToolFailure("'command' must be a non-empty string")
        if chosen.refuses:
            raise ToolFailure(chosen.refusal())
        root = context.root.resolve()
        if chosen.bwrap:
            _make_missing_folders(root, policy)
        with WorkTreeChanges(context) as changes, contextlib.ExitStack() as stack:
            prefix, fds = (stack.enter_context(chosen.command(root, command_env, protected))
                           if chosen.bwrap else ([], ()))
            done = run_command(command, cwd=root, timeout=timeout, env=command_env,
                               sandbox=prefix, pass_fds=fds, limits=bounded, user=chosen.user,
                               sandbox_sets_user=chosen.idmapped)
        if done.returncode is None:
            status, failed = f"killed after {timeout:g}s (timeout)", True
        else:
            status, failed = _status(done.returncode, limits), done.returncode != 0
        text = done.output.decode("utf-8", "replace")
        if len(text) > output_limit or done.dropped:
            rest = len(text[output_limit:].encode("utf-8")) + done.dropped
            text = f"{text[:output_limit]}\n{cut_marker(rest, CUT_HINT)}"
        if note := changes.note():  # files left uncommitted, and why
            text = f"{text.rstrip()}\n{note}"
        return ToolResult(f"{text.rstrip()}\n[{status}]".lstrip("\n"), is_error=failed)

    return Tool(
        "bash",
        f"Run a bash command in the workspace root (timeout {timeout:g}s; output over "
        f"{output_limit} characters is cut{_limited(limits)}). Files it changes are "
        "committed with the step. "
        + _where(chosen, protected),
        schema({"command": {"type": "string"}}, ["command"]),
        run,
    )


def _limited(limits: Limits) -> str:
    said = []
    if limits.processes is not None:
        said.append(f"at most {limits.processes} processes")
    if limits.memory is not None:
        said.append(f"{limits.memory // 2**20} MB of memory per process")
    if limits.file_size is not None:
        said.append(f"files of at most {limits.file_size // 2**20} MB")
    return "; " + ", ".join(said) if said else ""


def _make_missing_folders(root: Path, policy: WritePolicy) -> None:
    """Make the workspace's own folders (`inbox/`, `skills/`, ...) that are read-only
    under `policy` and missing (a clone without their `.gitkeep`), empty, as `agentfs
    init` does: the sandbox can only keep read-only what exists, and a command could
    otherwise make them, with what they hold taken as knowledge, skills or new traces."""
    for name in FOLDERS:
        if policy.refusal(PurePosixPath(name)) is not None and not os.path.lexists(root / name):
            with contextlib.suppress(FileExistsError):
                (root / name).mkdir()


def _status(returncode: int, limits: Limits) -> str:
    """`exit status N`, and which limit ended the command when a signal says so."""
    number = -returncode if returncode < 0 else returncode - 128
    said = f"exit status {returncode}"
    if number == signal.SIGXFSZ and limits.file_size is not None:
        return (f"{said}: a process was stopped at the file size limit of "
                f"{limits.file_size // 2**20} MB (tools.bash_max_file_mb)")
    if number == signal.SIGKILL and returncode != 0:
        return f"{said}: a process was killed (SIGKILL; out of memory?)"
    return said


def _where(sandbox: Sandbox, protected: tuple[str, ...]) -> str:
    """What the tool's description says about the sandbox."""
    if sandbox.bwrap is not None:
        kept = ", ".join([".git", *protected])
        network = ("It reaches the network." if sandbox.network == "host" else
                   "It has no network: Unix sockets other than socketpair() are refused."
                   if sandbox.socket_filter else "It has no network.")
        return (f"It runs in a sandbox: only the workspace can be changed, except {kept}; "
                f"{SANDBOX_TMP} and the home directory start empty and are discarded after "
                f"each command. {network}")
    if sandbox.refuses:
        return f"It is unavailable: it must run in a sandbox, and {sandbox.problem}."
    return "It runs without a sandbox."
