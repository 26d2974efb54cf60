"""The HTTP plumbing agentfs' fake API servers share (`fake_anthropic`, `fake_openai`):
a threaded server on 127.0.0.1 whose open connections `close()` can cut, what every
fake keeps (its queue of faults and answers, the requests it received:
`FakeServer`), the recorded request, and writers for whole bodies, chunked streams
and hang-ups."""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import socket
import threading
import uuid
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Generic, Protocol, Self, TypeVar

__all__ = ["FakeHTTPServer", "FakeHandler", "FakeServer", "RecordedRequest", "drop",
           "read_request", "request_id", "send_bytes", "send_json", "split_words",
           "start_stream", "write_chunk"]

Fault = TypeVar("Fault")


class ServesRequests(Protocol):
    def serve_request(self, h: FakeHandler) -> None: ...


@dataclass(frozen=True)
class RecordedRequest:
    """One request the fake server received (faulted ones included)."""

    method: str
    path: str
    headers: dict[str, str]
    """Header names lower-cased."""
    raw: bytes
    body: Any
    """The parsed JSON body, or None when it was not JSON."""

    @property
    def api_key(self) -> str | None:
        """The key sent as `x-api-key` or as `Authorization: Bearer` (newer SDKs use the latter)."""
        if "x-api-key" in self.headers:
            return self.headers["x-api-key"]
        scheme, _, token = self.headers.get("authorization", "").partition(" ")
        return token if scheme.lower() == "bearer" and token else None


def read_request(h: FakeHandler) -> RecordedRequest:
    """The request `h` is handling, its body read and parsed."""
    length = int(h.headers.get("content-length") or 0)
    raw = h.rfile.read(length) if length else b""
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        body = None
    headers = {k.lower(): v for k, v in h.headers.items()}
    return RecordedRequest(h.command, h.path, headers, raw, body)


class FakeHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    fake: ServesRequests

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()

    def cut_connections(self) -> None:
        with self.connections_lock:
            for connection in self.connections:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients that hang up (timeouts, closed streams) are expected here; stay quiet."""


class FakeHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "AgentfsFake/1.0"
    server: FakeHTTPServer

    def setup(self) -> None:
        super().setup()
        with self.server.connections_lock:
            self.server.connections.add(self.connection)

    def finish(self) -> None:
        with self.server.connections_lock:
            self.server.connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def do_POST(self) -> None:
        self.close_connection = True  # one request per connection: nothing lingers
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.server.fake.serve_request(self)

    do_GET = do_PUT = do_DELETE = do_POST

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests read `server.requests` instead."""


class FakeServer(Generic[Fault]):
    """A fake API server on a free port of 127.0.0.1, serving at once: its queues of
    faults and scripted answers, the requests it received, and a clean `close()`.
    A subclass answers each request in `serve_request` (handler threads).

    Args:
        name: the serving thread's name, before its port.
        path: what `base_url` ends with after the port (e.g. `/v1`).
        port: 0 for a free one.
    """

    def __init__(self, name: str, *, path: str = "", port: int = 0) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._faults: deque[Fault] = deque()
        self._script: deque[Any] = deque()
        self._requests: list[RecordedRequest] = []
        self._ids = itertools.count(1)
        self._closing = threading.Event()  # set by close(): delays end early
        self._closed = False
        self._httpd = FakeHTTPServer(("127.0.0.1", port), FakeHandler)
        self._httpd.fake = self
        host, bound = self._httpd.socket.getsockname()[:2]
        self.base_url = f"http://{host}:{bound}{path}"
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05},
                                        name=f"{name}-{bound}", daemon=True)
        self._thread.start()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop serving, cut open connections and wait for the handler threads."""
        if self._closed:
            return
        self._closed = True
        self._closing.set()
        self._httpd.shutdown()
        self._httpd.cut_connections()
        self._httpd.server_close()  # joins the handler threads
        self._thread.join()

    def serve_request(self, h: FakeHandler) -> None:
        raise NotImplementedError

    def _add_faults(self, count: int, fault: Fault) -> None:
        with self._lock:
            self._faults.extend([fault] * count)

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every request received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> list[RecordedRequest]:
        """Block until at least `count` requests arrived; AssertionError after `timeout`."""
        with self._changed:
            if not self._changed.wait_for(lambda: len(self._requests) >= count, timeout):
                raise AssertionError(f"{len(self._requests)} requests arrived, expected {count}")
            return list(self._requests)


def split_words(text: str) -> list[str]:
    """`text` in the pieces a streamed answer sends: each word with its spaces."""
    return re.findall(r"\s*\S+\s*", text) or [text]


def request_id() -> str:
    return f"req_fake_{uuid.uuid4().hex[:24]}"


def send_bytes(
    h: FakeHandler,
    status: int,
    data: bytes,
    content_type: str,
    *,
    headers: dict[str, str] | None = None,
    cut_at: int | None = None,
) -> None:
    """A whole body, or (`cut_at`) its first bytes and a hang-up."""
    h.send_response(status)
    h.send_header("content-type", content_type)
    h.send_header("content-length", str(len(data)))
    h.send_header("request-id", request_id())
    h.send_header("connection", "close")
    for name, value in (headers or {}).items():
        h.send_header(name, value)
    h.end_headers()
    if cut_at is None:
        h.wfile.write(data)
    else:
        h.wfile.write(data[:cut_at])
        drop(h)


def send_json(
    h: FakeHandler, status: int, payload: Any, headers: dict[str, str] | None = None
) -> None:
    send_bytes(h, status, json.dumps(payload).encode(), "application/json", headers=headers)


def start_stream(h: FakeHandler) -> None:
    """The headers of a 200 server-sent-events answer in chunked encoding."""
    h.send_response(200)
    h.send_header("content-type", "text/event-stream; charset=utf-8")
    h.send_header("cache-control", "no-cache")
    h.send_header("transfer-encoding", "chunked")
    h.send_header("request-id", request_id())
    h.send_header("connection", "close")
    h.end_headers()


def write_chunk(h: FakeHandler, data: bytes) -> None:
    h.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    h.wfile.flush()


def drop(h: FakeHandler) -> None:
    """Hang up without (finishing) an answer."""
    h.close_connection = True
    with contextlib.suppress(OSError):
        h.connection.shutdown(socket.SHUT_RDWR)
