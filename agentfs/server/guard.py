"""The server's door: the token on every request (`agentfs/server/auth.py`), a
body size limit, requests from a browser only from the server's own page (the
`Origin` check: cross-site forms and fetches), and on a loopback address only
the loopback names in `Host` (DNS rebinding).

A pure ASGI middleware, so it also guards streamed bodies and the event stream.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode

from agentfs.server.auth import Access

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
    access: Access | None  # the token every request must show; None: --no-token
    loopback: bool  # bound to a loopback address: only loopback Host names are served


@dataclass(frozen=True)
class _Answer:
    """What the guard answers instead of the app."""

    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"


#: On every answer, the app's and the guard's own: the page loads only its own
#: files, so a message that slipped through unescaped still could not run a
#: script or load anything.
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}
_SECURITY = [(name.encode(), value.encode()) for name, value in SECURITY_HEADERS.items()]
_SECURITY_NAMES = frozenset(name for name, _ in _SECURITY)

#: Methods that change something: a browser always sends `Origin` with them.
CHANGING = ("POST", "PUT", "PATCH", "DELETE")
#: Where a refusal is JSON; elsewhere (the page, its files) it is a plain page.
API_PATHS = ("/api/", "/openapi.json")
OPEN_THE_PRINTED_ADDRESS = (
    "This agentfs server needs its token.\n\n"
    "Open the address `agentfs serve` printed when it started "
    "(http://HOST:PORT/?token=...): the server then remembers this browser until it "
    "stops.\nIf you opened that address from a link on another web site, reload this "
    "page: the browser does not send this server's cookie along with another site's "
    "link.\n")


def _error(status: int, error: str, hint: str | None,
           headers: dict[str, str] | None = None) -> _Answer:
    return _Answer(status, error_body(error, hint), headers or {})


class Guard:
    """ASGI middleware: checks every HTTP request before the app sees it, and puts
    `SECURITY_HEADERS` on every answer."""

    def __init__(self, app: ASGIApp, settings: GuardSettings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self._guarded(scope, receive, _with_security_headers(send))

    async def _guarded(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = self._refusal(scope)
        if refusal is not None:
            await _respond(send, refusal)
            return
        if scope.get("method") in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        body = await _read_body(receive, self.settings.max_body)
        if body is None:
            await _respond(send, _error(413, *_too_large(self.settings.max_body)))
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _refusal(self, scope: Scope) -> _Answer | None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        path: str = scope.get("path", "")
        method: str = scope.get("method", "")
        if self.settings.loopback:
            host = _host_name(headers.get("host", ""))
            if not is_loopback(host):
                return _error(421, f"this server answers only to 127.0.0.1 or localhost, "
                              f"not {host!r}", "open it as http://127.0.0.1:PORT/")
        origin = headers.get("origin")
        if origin is not None and not _same_origin(origin, headers.get("host", "")):
            return _error(403, f"requests from {origin} are not accepted",
                          "use the page this server serves")
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) > self.settings.max_body:
            return _error(413, *_too_large(self.settings.max_body))
        if self.settings.access is not None:
            refused = _authenticate(self.settings.access, scope, headers)
            if refused is not None:
                return refused
        if method in CHANGING and path.startswith("/api/"):
            kind = headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if kind and kind != "application/json":
                return _error(415, f"request bodies are JSON, not {kind}",
                              "send Content-Type: application/json")
        return None


def _with_security_headers(send: Send) -> Send:
    """`send` with `SECURITY_HEADERS` in place of any the answer set itself."""
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [(k, v) for k, v in message.get("headers", ())
                       if k.lower() not in _SECURITY_NAMES]
            message = {**message, "headers": headers + _SECURITY}
        await send(message)
    return sending


def _authenticate(access: Access, scope: Scope, headers: dict[str, str]) -> _Answer | None:
    """None when the request shows the token (as a bearer token, or the session
    cookie of a browser that showed it); else the answer: 401, or the first
    visit's redirect that sets the cookie."""
    path: str = scope.get("path", "")
    method: str = scope.get("method", "")
    if method == "GET" and path == "/":
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"),
                          keep_blank_values=True)
        given = [value for name, value in query if name == "token"]
        if given:
            if not access.is_token(given[-1]):
                return _unauthorized(path, "wrong token")
            rest = urlencode([(name, value) for name, value in query if name != "token"])
            return _Answer(303, b"", {"location": "/" + (f"?{rest}" if rest else ""),
                                      "set-cookie": access.set_cookie(),
                                      "cache-control": "no-store"}, "text/plain")
    authorization = headers.get("authorization")
    if authorization is not None:
        return None if access.bearer(authorization) else _unauthorized(path, "wrong token")
    if access.cookie(headers.get("cookie", "")):
        if method in CHANGING and "origin" not in headers:
            return _error(403, "a request that changes something, authenticated by the "
                          "page's cookie, must come from the page (it has no Origin)",
                          "API clients send `Authorization: Bearer TOKEN`")
        return None
    return _unauthorized(path, "no token given")


def _unauthorized(path: str, what: str) -> _Answer:
    challenge = {"www-authenticate": "Bearer"}
    if path.startswith(API_PATHS):
        return _error(401, f"{what}: this server requires `Authorization: Bearer TOKEN`",
                      "use the token `agentfs serve` printed (or was given with --token "
                      "or AGENTFS_SERVE_TOKEN)", challenge)
    return _Answer(401, OPEN_THE_PRINTED_ADDRESS.encode(), challenge, "text/plain; charset=utf-8")


def _same_origin(origin: str, host: str) -> bool:
    """`origin` (a browser's `Origin` header) names the server the request went to
    (`host`, its `Host` header): same name and port; http or https, so a TLS proxy
    in front that keeps the Host header works."""
    scheme, sep, authority = origin.strip().lower().partition("://")
    if not sep or scheme not in ("http", "https") or not host:
        return False
    default = ":80" if scheme == "http" else ":443"
    return authority.removesuffix(default) == host.strip().lower().removesuffix(default)


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


async def _respond(send: Send, answer: _Answer) -> None:
    extra = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in answer.headers.items()]
    await send({"type": "http.response.start", "status": answer.status,
                "headers": [(b"content-type", answer.content_type.encode()),
                            (b"content-length", str(len(answer.body)).encode()), *extra]})
    await send({"type": "http.response.body", "body": answer.body})
