"""The server's door: a body size limit, the bearer token, and on a loopback
address, requests only from the loopback names (so another web site cannot reach
the API through the browser: DNS rebinding, cross-site forms).

A pure ASGI middleware, so it also guards streamed bodies and the event stream.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

__all__ = ["Guard", "GuardSettings", "error_body", "is_loopback"]


def is_loopback(host: str) -> bool:
    """True for an address only this machine can reach: an IP address in 127.0.0.0/8
    or ::1, or the name localhost. Any other name is not, even one that starts with
    `127.` (`127.0.0.1.evil.example` is a DNS name anyone can point anywhere)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.removeprefix("[").removesuffix("]")).is_loopback
    except ValueError:
        return False


def error_body(error: str, hint: str | None = None, **extra: Any) -> bytes:
    """The JSON of every error response: `{"error": ..., "hint": ...}`."""
    return json.dumps({"error": error, "hint": hint, **extra}, ensure_ascii=False).encode()


@dataclass(frozen=True)
class GuardSettings:
    max_body: int  # bytes
    token: str | None  # required as `Authorization: Bearer TOKEN` on /api/ when set
    loopback: bool  # bound to a loopback address: only loopback Host names are served


class Guard:
    """ASGI middleware: checks every HTTP request before the app sees it."""

    def __init__(self, app: ASGIApp, settings: GuardSettings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope)
        if refusal is not None:
            await _respond(send, *refusal)
            return
        if scope.get("method") in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        body = await _read_body(receive, self.settings.max_body)
        if body is None:
            await _respond(send, 413, *_too_large(self.settings.max_body))
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _refusal(self, scope: Scope) -> tuple[int, str, str | None, dict] | None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        path: str = scope.get("path", "")
        if self.settings.loopback:
            host = _host_name(headers.get("host", ""))
            if not is_loopback(host):
                return (421, f"this server answers only to 127.0.0.1 or localhost, not {host!r}",
                        "open it as http://127.0.0.1:PORT/", {})
            origin = headers.get("origin")
            if origin is not None and not is_loopback(_host_name(origin.split("://", 1)[-1])):
                return (403, f"requests from {origin} are not accepted",
                        "use the page this server serves", {})
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) > self.settings.max_body:
            return (413, *_too_large(self.settings.max_body), {})
        token = self.settings.token
        if token is not None and path.startswith("/api/"):
            given = headers.get("authorization", "")
            scheme, _, value = given.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                    value.strip().encode(), token.encode()):
                what = "no token given" if not given else "wrong token"
                return (401, f"{what}: this server requires `Authorization: Bearer TOKEN`",
                        "use the token `agentfs serve` printed (or gave with --token)",
                        {"www-authenticate": "Bearer"})
        if scope.get("method") in ("POST", "PUT", "PATCH", "DELETE") and path.startswith("/api/"):
            kind = headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if kind and kind != "application/json":
                return (415, f"request bodies are JSON, not {kind}",
                        "send Content-Type: application/json", {})
        return None


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole request body, or None once it goes over `limit` bytes (the rest is
    not read: the response says 413 and the connection is closed)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks)  # disconnected: the app sees an empty body
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _too_large(limit: int) -> tuple[str, str]:
    return (f"the request body is over the limit of {limit:,} bytes",
            "send less, or start the server with a larger --max-body")


def _host_name(host: str) -> str:
    """The name of a Host header or an origin's authority, without the port."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[: host.find("]") + 1]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


async def _respond(send: Send, status: int, error: str, hint: str | None,
                   headers: dict | None = None) -> None:
    body = error_body(error, hint)
    extra = [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()), *extra]})
    await send({"type": "http.response.body", "body": body})
