"""A real MCP server written with the `mcp` SDK, for tests and the README's offline example.

    python -m agentfs.testing.mcp_server                  # over stdio
    python -m agentfs.testing.mcp_server --banner         # the same, after a line of garbage
    python -m agentfs.testing.mcp_server --port 8765      # streamable HTTP on 127.0.0.1

Its tools cover what a client must handle: `echo` (read-only), `add`, `image`
(a PNG), `note` (writes `note-from-mcp.txt` in the folder it runs in),
`authorization` (the request's Authorization header), `fail` (an error
result), `crash` (the process exits), `hang` (never answers) and `grow` (adds
a tool, `extra`, and tells the client the list changed, unless called with
`announce` false). It has one resource (`notes://readme`), one resource
template (`notes://{name}`) and one prompt (`review`). `McpHttpServer` runs it over
HTTP on a free port for the length of a `with` block.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import os
import socket
import subprocess
import sys
import time
from typing import Self

import anyio
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

__all__ = ["BANNER", "NOTE_FILE", "PNG_BYTES", "McpHttpServer", "build_server", "main"]

#: The image the `image` tool returns: a 1×1 PNG.
PNG_BYTES = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg=="
)
#: What `--banner` writes to stdout before serving.
BANNER = b"Welcome to the test server! \xff (this line is not JSON-RPC)\n"
#: The file the `note` tool writes, in the folder the server runs in.
NOTE_FILE = "note-from-mcp.txt"
#: The text of the `notes://readme` resource.
README_TEXT = "The test server's notes."


def build_server() -> MCPServer:
    """The server, with its tools, resource and prompt (see the module docstring)."""
    server = MCPServer("agentfs-test")
    _add_tools(server)
    _add_failing_tools(server)

    @server.resource("notes://readme", description="The notes' readme.")
    def readme() -> str:
        return README_TEXT

    @server.resource("notes://{name}", description="A note by name.")
    def note(name: str) -> str:
        return f"note {name}"

    @server.prompt(description="Ask for a review of a subject.")
    def review(subject: str) -> str:
        return f"Please review {subject}."

    return server


def _add_tools(server: MCPServer) -> None:
    """The tools that work."""

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    @server.tool()
    def add(a: int, b: int) -> str:
        """Add two integers."""
        return str(a + b)

    @server.tool()
    def image() -> Image:
        """Return a 1x1 PNG image."""
        return Image(data=PNG_BYTES, format="png")

    @server.tool()
    def note(text: str) -> str:
        """Write the text to note-from-mcp.txt in the server's folder."""
        with open(NOTE_FILE, "w", encoding="utf-8") as file:
            file.write(text)
        return f"wrote {NOTE_FILE}"

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def authorization(ctx: Context) -> str:
        """The Authorization header the request came with (over HTTP)."""
        return (ctx.headers or {}).get("authorization", "(none)")

    @server.tool()
    async def grow(ctx: Context, announce: bool = True) -> str:
        """Add the tool `extra`, and tell the client the tool list changed unless
        `announce` is false."""
        if "extra" not in {tool.name for tool in await server.list_tools()}:
            server.add_tool(_extra, name="extra", description="A tool added by grow.")
            if announce:
                await ctx.notify_tools_changed()
        return "added the tool extra"


def _add_failing_tools(server: MCPServer) -> None:
    """The tools that fail, each in its own way."""

    @server.tool()
    def fail(reason: str) -> str:
        """Fail with the reason given (an error result)."""
        raise ToolError(f"failed as asked: {reason}")

    @server.tool()
    def crash() -> str:
        """End the server's process at once."""
        os._exit(3)

    @server.tool()
    async def hang() -> str:
        """Never answer."""
        await anyio.sleep_forever()
        return ""



def _extra() -> str:
    return "extra ran"


def main(argv: list[str] | None = None) -> None:
    """Serve over stdio, or over streamable HTTP with --port."""
    parser = argparse.ArgumentParser(prog="python -m agentfs.testing.mcp_server")
    parser.add_argument("--port", type=int, help="serve streamable HTTP on 127.0.0.1:PORT/mcp")
    parser.add_argument("--banner", action="store_true",
                        help="first write a line that is not JSON-RPC to stdout, as servers "
                        "that greet on stdout do")
    args = parser.parse_args(argv)
    server = build_server()
    if args.banner:
        os.write(1, BANNER)
    if args.port is None:
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.port)


class McpHttpServer:
    """The test server over streamable HTTP, in a child process, on a free port.

    Args:
        startup: seconds to wait for it to accept connections.
    """

    def __init__(self, startup: float = 30.0) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self._process = subprocess.Popen(
            [sys.executable, "-m", "agentfs.testing.mcp_server", "--port", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + startup
        while not self._accepts():
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"the test MCP server did not start on port {self.port}")
            time.sleep(0.05)

    def _accepts(self) -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 1):
            return True
        return False

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the server and wait for its process. uvicorn waits on SIGTERM for the
        open streams of its clients to end, which a client that went away without
        closing them never does: after a second, the server is killed."""
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(1)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()


if __name__ == "__main__":
    main()
