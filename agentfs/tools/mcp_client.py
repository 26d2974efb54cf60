"""Sessions with MCP servers, on the official `mcp` SDK (the `mcp` extra).

The SDK is asynchronous and the agent loop is not: every session of the
process lives on one event loop in a thread of its own (`McpHub`), and the
loop's callers wait for each answer with a deadline. One session per server
per process: traces that run in parallel in one watcher share it. A server
is started on first use, started again on the use after it ended (it
crashed, or closed its connection), and shut down with the process
(`shutdown_mcp`, also registered with `atexit`).

Every failure becomes an `McpFailure` whose text says which server, what it
runs and what happened; a tool call turns it into an error result.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import logging
import tempfile
import threading
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, TypeVar

from agentfs.config import McpServerConfig
from agentfs.tools.base import ToolFailure
from agentfs.tools.subprocesses import UNSANDBOXED

__all__ = ["McpFailure", "McpHub", "ServerConnection", "ServerParams", "hub", "server_params",
           "shutdown_mcp"]

_T = TypeVar("_T")
#: Seconds a session may take to close before the process moves on without it.
CLOSE_TIMEOUT = 10.0
#: The most of a server's stderr quoted when it fails to start.
STDERR_TAIL = 2000
#: A request the server did not answer in time (the SDK's code for it).
_REQUEST_TIMEOUT_CODE = -32001


class McpFailure(ToolFailure):
    """An MCP server could not be reached or did not answer well; the text says why."""


@dataclass(frozen=True)
class ServerParams:
    """How to reach one MCP server: a command over stdio, or a URL over streamable HTTP."""

    name: str
    #: What messages show of it: the command line, or the URL.
    shown: str
    command: tuple[str, ...] = ()
    #: stdio: variables added to the SDK's safe default environment.
    env: tuple[tuple[str, str], ...] = ()
    #: stdio: the folder the command runs in.
    cwd: str | None = None
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    timeout: float = 60.0
    startup_timeout: float = 30.0


class ServerConnection:
    """The session with one server; its methods block, each within its deadline."""

    def __init__(self, hub: McpHub, params: ServerParams) -> None:
        self.hub = hub
        self.params = params
        self._client: Any = None
        self._task: asyncio.Task[None] | None = None
        self._closing: asyncio.Event | None = None
        self._ready: asyncio.Future[None] | None = None
        self._start_lock = threading.Lock()
        self._garbage: str | None = None
        #: Set when the server said its tool list changed; cleared by `take_tools_changed`.
        self._tools_changed = threading.Event()

    # --- from the agent's threads ------------------------------------------------------

    def list_tools(self) -> list[Any]:
        """Every tool the server offers (all pages), starting it if needed."""
        return self._ask(self._all_pages("list_tools", "tools"), "listing its tools")

    def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        """The server's `CallToolResult` for one call."""
        client_timeout = self.params.timeout

        async def call(client: Any) -> Any:
            return await client.call_tool(name, arguments, read_timeout_seconds=client_timeout)

        return self._ask(call, f"running {name}")

    def list_resources(self) -> list[Any]:
        return self._ask(self._all_pages("list_resources", "resources"), "listing resources")

    def list_resource_templates(self) -> list[Any]:
        return self._ask(self._all_pages("list_resource_templates", "resource_templates"),
                         "listing resource templates")

    def list_prompts(self) -> list[Any]:
        return self._ask(self._all_pages("list_prompts", "prompts"), "listing prompts")

    def take_tools_changed(self) -> bool:
        """Did the server say its tools changed since the last time this was asked?"""
        changed = self._tools_changed.is_set()
        self._tools_changed.clear()
        return changed

    def start(self) -> None:
        """Start the server unless it runs.

        Raises:
            McpFailure: it could not start, or did not start within `startup_timeout`.
        """
        with self._start_lock:
            if self._task is not None and not self._task.done() and self._client is not None:
                return
            self.hub.run(self._stop(), CLOSE_TIMEOUT)  # what is left of an ended session
            ready: concurrent.futures.Future[None] = self.hub.run_soon(self._begin())
            try:
                ready.result(self.params.startup_timeout)
            except TimeoutError:
                self.hub.run(self._stop(), CLOSE_TIMEOUT)
                raise self._failure(f"did not start within {self.params.startup_timeout:g} s "
                                    "(startup_timeout)" + self._garbage_note()) from None
            except McpFailure:
                raise
            except Exception as exc:  # noqa: BLE001 — whatever the SDK raised, say it
                raise self._failure(f"could not start: {_reason(exc)}") from None

    # --- on the hub's loop -------------------------------------------------------------

    def _ask(self, request: Callable[[Any], Awaitable[_T]], doing: str) -> _T:
        self.start()
        limit = self.params.timeout
        try:
            return self.hub.run(self._request(request), limit + 5)
        except McpFailure:
            raise
        except TimeoutError:
            raise self._failure(self._late(doing)) from None
        except Exception as exc:  # noqa: BLE001 — whatever the SDK raised, say it
            if getattr(exc, "code", None) == _REQUEST_TIMEOUT_CODE:
                raise self._failure(self._late(doing)) from None
            self.hub.run(self._stop(), CLOSE_TIMEOUT)  # started afresh on the next use
            raise self._failure(f"failed while {doing} ({_reason(exc)}); it is started "
                                "again on its next use" + self._garbage_note()) from None

    async def _request(self, request: Callable[[Any], Awaitable[_T]]) -> _T:
        client = self._client
        if client is None:
            raise self._failure("is not running (its session ended)")
        return await asyncio.wait_for(request(client), self.params.timeout)

    def _all_pages(self, method: str, key: str) -> Callable[[Any], Awaitable[list[Any]]]:
        async def pages(client: Any) -> list[Any]:
            items: list[Any] = []
            cursor = None
            for _ in range(1000):
                page = await getattr(client, method)(cursor=cursor)
                items += getattr(page, key)
                cursor = page.next_cursor
                if not cursor:
                    break
            return items

        return pages

    async def _begin(self) -> None:
        """Start the session's task and return once it is ready (or failed)."""
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        self._ready = ready
        self._closing = asyncio.Event()
        self._garbage = None
        self._task = asyncio.create_task(self._serve(ready, self._closing),
                                         name=f"mcp-{self.params.name}")
        await ready

    async def _serve(self, ready: asyncio.Future[None], closing: asyncio.Event) -> None:
        """Hold the session open until `closing` is set: the SDK's client must be
        entered and left by the same task."""
        from mcp import Client

        errlog = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115
        try:
            async with contextlib.AsyncExitStack() as stack:
                transport = await self._transport(stack, errlog)
                client = await stack.enter_async_context(Client(
                    transport, read_timeout_seconds=self.params.timeout,
                    message_handler=self._on_message, cache=None))
                self._client = client
                ready.set_result(None)
                watching = asyncio.create_task(self._watch_tools(client))
                try:
                    await closing.wait()
                finally:
                    watching.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await watching
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(self._failure(f"could not start: {_reason(exc)}"
                                                  + _stderr_tail(errlog)))
            if not isinstance(exc, Exception):
                raise
        finally:
            self._client = None
            errlog.close()

    async def _transport(self, stack: contextlib.AsyncExitStack, errlog: TextIO) -> Any:
        """The SDK transport to the server; what it opens is closed with `stack`."""
        params = self.params
        if params.url is not None:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            http = await stack.enter_async_context(httpx2.AsyncClient(
                headers=dict(params.headers), timeout=httpx2.Timeout(30, read=300)))
            return streamable_http_client(params.url, http_client=http)
        from mcp.client.stdio import StdioServerParameters, stdio_client

        command, *args = params.command
        # bytes that are not UTF-8 are replaced: a line of them is garbage, not the end
        return stdio_client(StdioServerParameters(
            command=command, args=args, env=dict(params.env), cwd=params.cwd,
            encoding_error_handler="replace"), errlog=errlog)

    async def _watch_tools(self, client: Any) -> None:
        """Note the server's tool list changes it announces on a subscription (protocol
        2026-07-28 on); older servers send notifications instead (`_on_message`)."""
        try:
            async with client.listen(tools_list_changed=True) as events:
                async for _event in events:
                    self._tools_changed.set()
        except Exception:  # noqa: BLE001, S110 — no subscriptions: notifications will do
            pass

    async def _on_message(self, message: Any) -> None:
        """Notes what the session hears besides answers: tool list changes, and lines
        that are not MCP messages (the SDK hands those over as exceptions)."""
        if isinstance(message, Exception):
            self._garbage = _reason(message)[:200]
            return
        method = getattr(getattr(message, "root", message), "method", None)
        if method == "notifications/tools/list_changed":
            self._tools_changed.set()

    async def _stop(self) -> None:
        task, closing, ready = self._task, self._closing, self._ready
        self._task = None
        if task is None or closing is None:
            return
        closing.set()
        if ready is None or not ready.done() or ready.cancelled() or ready.exception():
            task.cancel()  # still starting: nothing to close politely
        try:
            await asyncio.wait_for(asyncio.shield(task), CLOSE_TIMEOUT)
        except (TimeoutError, asyncio.CancelledError):
            task.cancel()
        except Exception:  # noqa: BLE001, S110 — an ended session has nothing more to say
            pass

    def _late(self, doing: str) -> str:
        return (f"did not answer within {self.params.timeout:g} s while {doing} (timeout)"
                + self._garbage_note())

    def _garbage_note(self) -> str:
        return (f"; it wrote something that is not an MCP message: {self._garbage}"
                if self._garbage else "")

    def _failure(self, what: str) -> McpFailure:
        return McpFailure(f"MCP server {self.params.name!r} ({self.params.shown}) {what}")


class McpHub:
    """The process's MCP sessions, on one event loop in a daemon thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._connections: dict[ServerParams, ServerConnection] = {}

    def connection(self, params: ServerParams) -> ServerConnection:
        """The one connection of the process to the server `params` describes."""
        with self._lock:
            found = self._connections.get(params)
            if found is None:
                found = self._connections[params] = ServerConnection(self, params)
            return found

    def run(self, coroutine: Coroutine[Any, Any, _T], timeout: float) -> _T:
        """Run `coroutine` on the hub's loop and wait for it.

        Raises:
            TimeoutError: it took longer than `timeout` seconds (it is cancelled).
        """
        future = self.run_soon(coroutine)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise

    def run_soon(self, coroutine: Coroutine[Any, Any, _T]) -> concurrent.futures.Future[_T]:
        """Start `coroutine` on the hub's loop; returns its `concurrent.futures.Future`."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._running_loop())

    def close(self) -> None:
        """Shut every session down and stop the loop."""
        with self._lock:
            connections = list(self._connections.values())
            self._connections.clear()
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        for connection in connections:
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(connection._stop(), loop).result(
                    CLOSE_TIMEOUT + 1)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(CLOSE_TIMEOUT)
        if not thread.is_alive():
            loop.close()

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="agentfs-mcp",
                                          daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop


_hub: McpHub | None = None
_hub_lock = threading.Lock()


def hub() -> McpHub:
    """The process's hub (made on first use)."""
    global _hub  # noqa: PLW0603 — one hub per process, as there is one set of servers
    with _hub_lock:
        if _hub is None:
            # The SDK logs what it skips (a line that is not JSON-RPC) with tracebacks;
            # agentfs says it in the failure's text instead, once, without them.
            logging.getLogger("mcp").addHandler(logging.NullHandler())
            _hub = McpHub()
            atexit.register(shutdown_mcp)
        return _hub


def shutdown_mcp() -> None:
    """Shut down every MCP session of the process (their servers' processes end)."""
    global _hub
    with _hub_lock:
        current, _hub = _hub, None
    if current is not None:
        current.close()


def server_params(name: str, config: McpServerConfig, environ: Mapping[str, str], root: Path,
                  base_env: Mapping[str, str] | None = None) -> ServerParams:
    """The `ServerParams` of `[mcp_servers.NAME]` (`agentfs/config.py:McpServerConfig`),
    with the values of the variables it names taken from `environ`. A stdio server's
    environment is `base_env` (the allowlisted one bash and hooks get) and those.

    Raises:
        McpFailure: a variable it names is not set.
    """
    missing = [v for v in config.variables() if not environ.get(v)]
    if missing:
        raise McpFailure(
            f"MCP server {name!r} ({config.target}) could not start: the environment variable(s) "
            f"${', $'.join(missing)} it takes are not set")
    return ServerParams(
        name=name,
        shown=config.target,
        command=tuple(config.command or ()),
        env=tuple({**(base_env or {}), **UNSANDBOXED,
                   **{v: environ[v] for v in config.env}}.items())
        if config.command else (),
        cwd=str(root) if config.command else None,
        url=config.url,
        headers=tuple((header, environ[v]) for header, v in config.headers.items()),
        timeout=config.timeout,
        startup_timeout=config.startup_timeout,
    )


def _reason(exc: BaseException) -> str:
    """The innermost useful text of an exception (the SDK wraps errors in groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0] if text.strip() else type(exc).__name__


def _stderr_tail(errlog: TextIO) -> str:
    """What the server wrote to stderr, its end, as the rest of a failure's text."""
    try:
        errlog.seek(0)
        text = errlog.read().strip()
    except (OSError, ValueError):
        return ""
    return f"; its stderr ends: {text[-STDERR_TAIL:]}" if text else ""
