"""The MCP servers' tools a run of one trace offers, kept byte-stable for the prompt cache.

A server's tools are listed once per trace and recorded in trace.json
(`context.mcp_tools`, committed with the run's next step); later runs offer
the recorded list and start the server only when the model calls one of its
tools. A server whose tools were called in a step, or that says its tools
changed (`notifications/tools/list_changed`), is listed again at the next step
boundary (`McpTools.take_changes`, before a request is built), and a new list
is recorded: an announcement may travel apart from the call's result and
arrive late, so a server a step used is asked rather than trusted to have
spoken in time. The tool list changes between steps, never inside
one, and never without trace.json saying so.

A server that cannot start is reported once (a `mcp_failed` event naming the
server, what it runs and why); its calls in that run are answered with the
same error, and the run goes on.
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from agentfs.config import McpServerConfig, WorkspaceConfig
from agentfs.core.options import RunnerOptions
from agentfs.core.trust import judge
from agentfs.errors import ConfigError
from agentfs.store.trace import Trace
from agentfs.tools import ToolRegistry
from agentfs.tools.mcp_client import McpFailure, ServerConnection, hub, server_params
from agentfs.tools.mcp_tools import McpTool, ToolRecord, offered_name, record_of, tool_of

__all__ = ["McpTools", "ServerListing", "list_servers", "mcp_tools"]

Emit = Callable[..., None]

_reported: set[tuple[str, str]] = set()
_reported_lock = threading.Lock()


def mcp_tools(trace: Trace, options: RunnerOptions, emit: Emit, *,
              start: bool = True) -> McpTools | None:
    """The MCP tools of a run of `trace`: those of the servers agentfs.toml declares
    and the person trusted (`agentfs/core/trust.py:judge`); None when there are none.
    `start=False` offers only what the trace recorded and starts no server.

    Raises:
        ConfigError: servers are declared but the `mcp` package is not installed.
    """
    servers = judge(options.config, options.trusted).config.mcp_servers
    if not servers:
        return None
    _require_sdk(trace.workspace.root, servers)
    return McpTools(trace, servers, options.mcp_env or {}, emit, start=start,
                    base_env=options.command_env)


def _is_record(record: dict[str, Any]) -> bool:
    """Has a record of trace.json the shape `ToolRecord` says?"""
    return (isinstance(record.get("name"), str) and isinstance(record.get("description"), str)
            and isinstance(record.get("input_schema"), dict)
            and isinstance(record.get("read_only"), bool) and len(record) == 4)


def _require_sdk(root: Path, servers: Mapping[str, McpServerConfig]) -> None:
    """Refuse to go on without the SDK when servers are declared."""
    if importlib.util.find_spec("mcp") is None:
        raise ConfigError(
            f"{root / 'agentfs.toml'} declares MCP servers ({', '.join(servers)}), but the "
            "mcp package is not installed",
            hint="pip install 'agentfs-workspace[mcp]', or remove the [mcp_servers] tables",
        )


class McpTools:
    """The MCP tools of one run of one trace (see the module docstring)."""

    def __init__(self, trace: Trace, servers: Mapping[str, McpServerConfig],
                 environ: Mapping[str, str], emit: Emit, *, start: bool = True,
                 base_env: Mapping[str, str] | None = None) -> None:
        self.trace = trace
        self.base_env = base_env
        self.servers = dict(servers)
        self.environ = environ
        self.emit = emit
        self.start = start
        #: What this run offers, by server.
        self.offered: dict[str, list[ToolRecord]] = {}
        #: Servers that could not start in this run, and why.
        self.failed: dict[str, McpFailure] = {}
        self._connections: dict[str, ServerConnection] = {}
        #: Servers started or called in this step, whose list is compared at the next boundary.
        self._to_check: set[str] = set()
        self._lock = threading.Lock()

    def tools(self) -> list[McpTool]:
        """The tools to offer now: each server's recorded list; a server with none
        recorded is started and listed, and its list recorded."""
        recorded = self.trace.meta.context.mcp_tools
        for name in self.servers:
            records = recorded.get(name)
            if records is not None and all(map(_is_record, records)):
                self.offered[name] = [ToolRecord(**r) for r in records]  # type: ignore[typeddict-item]
            elif self.start:  # not listed yet, or a record edited out of shape: list again
                listed = self._list(name)
                if listed is not None:
                    self.offered[name] = listed
        self._record()
        return [self._tool(server, record) for server, records in self.offered.items()
                for record in records]

    def take_changes(self, registry: ToolRegistry) -> list[str]:
        """At a step boundary: list again the servers whose tools may have changed,
        replace their tools in `registry` and record the new lists; the names of the
        servers whose tools changed."""
        with self._lock:
            check, self._to_check = self._to_check, set()
            connections = dict(self._connections)
        check |= {name for name, c in connections.items() if c.take_tools_changed()}
        changed: list[str] = []
        for name in sorted(check):
            listed = self._list(name)
            if listed is None or listed == self.offered.get(name):
                continue
            for record in self.offered.get(name, []):
                registry.remove(self._tool(name, record).name)
            self.offered[name] = listed
            for record in listed:
                registry.add(self._tool(name, record))
            changed.append(name)
            self.emit("mcp_tools", trace=self.trace.id, server=name,
                      tools=[r["name"] for r in listed])
        self._record()
        return changed

    def connection(self, name: str) -> ServerConnection:
        """The process's connection to server `name`, started.

        Raises:
            McpFailure: it could not start (in this run: said once, then remembered).
        """
        if name in self.failed:
            raise self.failed[name]
        with self._lock:
            connection = self._connections.get(name)
        try:
            if connection is None:
                connection = hub().connection(server_params(
                    name, self.servers[name], self.environ, self.trace.workspace.root,
                    self.base_env))
            connection.start()
        except McpFailure as failure:
            self.failed[name] = failure
            self._report(name, failure)
            raise
        with self._lock:
            if name not in self._connections:
                self._connections[name] = connection
                self._to_check.add(name)
        return connection

    def _call(self, server: str, tool: str, arguments: dict[str, Any]) -> Any:
        connection = self.connection(server)
        with self._lock:
            self._to_check.add(server)  # a call may change the tools (see the docstring)
        return connection.call_tool(tool, arguments)

    def _tool(self, server: str, record: ToolRecord) -> McpTool:
        return tool_of(server, record, partial(self._call, server),
                       local=self.servers[server].command is not None)

    def _list(self, name: str) -> list[ToolRecord] | None:
        """The server's tools now, or None if it could not be asked (reported)."""
        try:
            listed = [record_of(tool) for tool in self.connection(name).list_tools()]
        except McpFailure as failure:
            self._report(name, failure)
            return None
        with self._lock:
            self._to_check.discard(name)  # listed just now
        return listed

    def _record(self) -> None:
        """trace.json's record, as what is offered (the run's next commit saves it)."""
        offered = {name: [dict(r) for r in records] for name, records in self.offered.items()}
        if self.trace.meta.context.mcp_tools != offered:
            self.trace.meta.context.mcp_tools = offered

    def _report(self, name: str, failure: McpFailure) -> None:
        """Say a server's failure once per process and workspace."""
        key = (f"{self.trace.workspace.root}\0{name}", str(failure))
        with _reported_lock:
            if key in _reported:
                return
            _reported.add(key)
        self.emit("mcp_failed", trace=self.trace.id, server=name, error=str(failure))


@dataclass
class ServerListing:
    """What `agentfs tools` shows of one MCP server of agentfs.toml."""

    name: str
    #: What it runs, or where it is.
    runs: str
    #: Why it was not asked: not trusted, or could not start; None when it was.
    problem: str | None = None
    tools: list[tuple[str, ToolRecord]] = field(default_factory=list)  # (offered name, record)
    resources: list[Any] = field(default_factory=list)
    resource_templates: list[Any] = field(default_factory=list)
    prompts: list[Any] = field(default_factory=list)


def list_servers(config: WorkspaceConfig, trusted: str | None, environ: Mapping[str, str],
                 root: Path, *, base_env: Mapping[str, str] | None = None,
                 everything: bool = False) -> list[ServerListing]:
    """Each MCP server of `config`, started (if trusted) and asked for its tools, and
    with `everything` its resources, resource templates and prompts too. `environ` and
    `base_env` as in `agentfs/tools/mcp_client.py:server_params`."""
    allowed = judge(config, trusted).config.mcp_servers
    if allowed:
        _require_sdk(root, allowed)
    listings: list[ServerListing] = []
    for name, server in config.mcp_servers.items():
        listing = ServerListing(name, server.target)
        listings.append(listing)
        if name not in allowed:
            listing.problem = "skipped: not trusted on this machine (agentfs trust)"
            continue
        try:
            connection = hub().connection(server_params(name, server, environ, root, base_env))
            listing.tools = [(offered_name(name, r["name"]), r)
                             for r in map(record_of, connection.list_tools())]
            if everything:
                listing.resources = connection.list_resources()
                listing.resource_templates = connection.list_resource_templates()
                listing.prompts = connection.list_prompts()
        except McpFailure as failure:
            listing.problem = str(failure)
    return listings
