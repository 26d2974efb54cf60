"""Workspace trust: what a workspace's own files make run, and whether the person allowed it.

A workspace cloned from someone else brings its `agentfs.toml`. Some of its
keys make commands run on this machine outside the bash sandbox (context
hooks, MCP stdio servers), send secrets from the environment to an address the
file chose (MCP HTTP servers and their headers), or let the model's commands
leave the sandbox (`tools.bash_sandbox = "none"`).
Like git, which never runs the hooks of a clone, and direnv, which waits for
`direnv allow`, agentfs runs them only once the person trusted that exact
configuration with `agentfs trust`. `workspace_commands` is the one list of
such keys; the trust is a fingerprint of its entries, so an edit elsewhere in
the file keeps it and an edit of a command revokes it.

The trust file lives outside every workspace (its path is chosen by the CLI,
the only layer that reads the environment), keyed by the workspace's real
path: trusting `sh hooks/ctx.sh` here says nothing about another clone whose
`hooks/ctx.sh` differs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agentfs.config import McpServerConfig, WorkspaceConfig
from agentfs.errors import ConfigError
from agentfs.store.atomic import atomic_write
from agentfs.store.locking import FileLock

__all__ = [
    "TRUST_FILE",
    "TrustStore",
    "Verdict",
    "WorkspaceCommand",
    "config_fingerprint",
    "judge",
    "skipped_hook",
    "untrusted_notice",
    "workspace_commands",
]

#: The trust file's name in the agentfs configuration directory.
TRUST_FILE = "trust.json"
_FORMAT = 1
#: What a skipped context hook shows the model in place of its output.
SKIPPED_HOOK_TEXT = ("(not run: the commands in this workspace's agentfs.toml are not trusted "
                     "on this machine; the user has been told)")


def skipped_hook(trace_id: str) -> str:
    """The context hook that stands in for one that was not trusted."""
    return SKIPPED_HOOK_TEXT


@dataclass(frozen=True)
class WorkspaceCommand:
    """One entry of `agentfs.toml` that runs something outside the sandbox."""

    #: The config key it comes from, e.g. `context_hooks` or `tools.bash_sandbox`.
    key: str
    #: What a person reads: `context hook "Branch"`.
    title: str
    #: What runs: the command line, or what the setting lets run.
    runs: str
    #: The entry's canonical content, which the fingerprint covers.
    entry: dict[str, Any] = field(compare=False)
    #: The hook's name, for context hooks; the server's, for MCP servers.
    name: str | None = None

    @property
    def is_hook(self) -> bool:
        return self.key == "context_hooks"

    def line(self) -> str:
        return f"{self.title}: {self.runs}"


def workspace_commands(config: WorkspaceConfig) -> list[WorkspaceCommand]:
    """What `config` makes run outside the bash sandbox, in the order it is declared.

    The one list of such keys: a new kind of command (MCP stdio servers) or a
    setting that lowers the sandbox (a network switch) is added here, and is
    then shown, fingerprinted and skipped like the rest.
    """
    commands = [
        WorkspaceCommand("context_hooks", f"context hook {hook.name!r}", hook.command,
                         hook.model_dump(mode="json"), name=hook.name)
        for hook in config.context_hooks
    ]
    commands += [
        WorkspaceCommand("mcp_servers", f"MCP server {name!r}", _server_runs(server),
                         {name: server.model_dump(mode="json")}, name=name)
        for name, server in config.mcp_servers.items()
    ]
    tools = config.tools
    if tools.bash and tools.bash_sandbox == "none":
        commands.append(WorkspaceCommand(
            "tools.bash_sandbox", "bash without a sandbox",
            'the model\'s bash commands run unsandboxed (tools.bash_sandbox = "none")',
            {"bash": True, "bash_sandbox": "none"},
        ))
    if tools.bash and tools.bash_network == "host":
        commands.append(WorkspaceCommand(
            "tools.bash_network", "bash with the network",
            'the model\'s bash commands reach the network and this machine\'s loopback '
            'services (tools.bash_network = "host")',
            {"bash": True, "bash_network": "host"},
        ))
    return commands


def _server_runs(server: McpServerConfig) -> str:
    """What an MCP server entry makes happen, as a person reads it."""
    if server.command is not None:
        passed = f" (with ${', $'.join(server.env)})" if server.env else ""
        return server.target + passed
    sent = f" (sending ${', $'.join(server.headers.values())})" if server.headers else ""
    return f"connects to {server.target}{sent}"


def fingerprint(commands: Sequence[WorkspaceCommand]) -> str:
    """A hash of the canonical form of `commands` (keys sorted, compact JSON, in order)."""
    canonical = json.dumps([[c.key, c.entry] for c in commands], sort_keys=True,
                           separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def config_fingerprint(config: WorkspaceConfig) -> str:
    """The fingerprint `agentfs trust` records for `config`; a program that builds its
    own runner passes it as `RunnerOptions.trusted` to trust that configuration."""
    return fingerprint(workspace_commands(config))


@dataclass(frozen=True)
class Verdict:
    """What a run may use of a configuration, given what the person trusted."""

    #: The configuration runs use: with untrusted commands left out.
    config: WorkspaceConfig
    #: The commands left out (empty when trusted or when there is nothing to trust).
    skipped: tuple[WorkspaceCommand, ...] = ()


def judge(config: WorkspaceConfig, trusted: str | None) -> Verdict:
    """`config` as runs use it when the person trusted the fingerprint `trusted`
    (None: nothing): unchanged if it runs nothing or its fingerprint is `trusted`;
    else without context hooks and MCP servers and with the bash sandbox and its
    network at their defaults (`auto`, `none`), as if the file did not declare them."""
    commands = workspace_commands(config)
    if not commands or fingerprint(commands) == trusted:
        return Verdict(config)
    tools = config.tools.model_copy(update={"bash_sandbox": "auto"} if config.tools.bash_sandbox
                                    == "none" else {})
    if tools.bash_network == "host":
        tools = tools.model_copy(update={"bash_network": "none"})
    return Verdict(config.model_copy(update={"context_hooks": [], "mcp_servers": {},
                                             "tools": tools}),
                   tuple(commands))


def untrusted_notice(verdict: Verdict, root: Path, *, changed: bool) -> str | None:
    """What a command that runs the agent says once at start when it skips commands;
    None when nothing is skipped. `changed`: the person trusted an earlier version."""
    if not verdict.skipped:
        return None
    why = ("changed since you trusted it" if changed
           else "comes with commands you have not trusted on this machine")
    lines = [f"agentfs: {root / 'agentfs.toml'} {why}; they are skipped:",
             *(f"  {c.line()}" for c in verdict.skipped),
             f"to let them run, check them and then: agentfs trust {root}"]
    return "\n".join(lines)


class TrustStore:
    """The trust file: per workspace (its real path), the fingerprint the person trusted.

    ```json
    {"format": 1, "workspaces": {"/home/me/ws": {"fingerprint": "sha256:...",
      "trusted_at": "2026-12-04T15:00:00+00:00", "commands": ["context hook 'x': ..."]}}}
    ```
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def trusted(self, root: Path) -> str | None:
        """The fingerprint trusted for the workspace at `root`, or None.

        Raises:
          ConfigError: the trust file is inside the workspace or cannot be read.
        """
        key = self._key(root)
        entry = self._read().get(key)
        return entry.get("fingerprint") if isinstance(entry, dict) else None

    def trust(self, root: Path, config: WorkspaceConfig) -> list[WorkspaceCommand]:
        """Record `config`'s commands as trusted for `root`; returns them. A
        configuration that runs nothing needs no trust: nothing is recorded."""
        commands = workspace_commands(config)
        if not commands:
            return commands
        key = self._key(root)
        with self._locked():
            workspaces = self._read()
            workspaces[key] = {
                "fingerprint": fingerprint(commands),
                "trusted_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "commands": [c.line() for c in commands],
            }
            self._write(workspaces)
        return commands

    def revoke(self, root: Path) -> bool:
        """Forget the trust of `root`; False if there was none."""
        key = self._key(root)
        with self._locked():
            workspaces = self._read()
            if workspaces.pop(key, None) is None:
                return False
            self._write(workspaces)
        return True

    def _key(self, root: Path) -> str:
        """The workspace's real path; refuses a trust file the workspace's tools could reach."""
        real = root.resolve()
        if self.path.resolve().is_relative_to(real):
            raise ConfigError(
                f"the trust file {self.path} is inside the workspace {real}, where the "
                "agent's tools could change it",
                hint="set AGENTFS_CONFIG_DIR to a directory outside every workspace",
            )
        return str(real)

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (ValueError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{self.path}: not a trust file ({exc})",
                              hint="delete it; `agentfs trust` writes a new one") from None
        workspaces = data.get("workspaces") if isinstance(data, dict) else None
        if not isinstance(workspaces, dict) or data.get("format") != _FORMAT:
            raise ConfigError(f"{self.path}: not a trust file of format {_FORMAT}",
                              hint="delete it; `agentfs trust` writes a new one")
        return workspaces

    def _write(self, workspaces: dict[str, Any]) -> None:
        body = {"format": _FORMAT, "workspaces": dict(sorted(workspaces.items()))}
        text = json.dumps(body, indent=2, ensure_ascii=False) + "\n"
        # a workspace's path that is not UTF-8 stays a JSON escape, read back as it was
        atomic_write(self.path, text.encode("utf-8", "backslashreplace"))

    def _locked(self) -> FileLock:
        """Two `agentfs trust` at once: each reads what the other wrote."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        return FileLock(self.path.with_name(self.path.name + ".lock"), wait=None)
