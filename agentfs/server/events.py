"""Run events as server-sent events: a hub that run threads publish to and each
open `/api/traces/ID/events` stream reads from.

Publishers are threads (a run's `on_event` and `on_text`); readers are
coroutines of the server's event loop, each with its own queue. A reader that
falls too far behind is told so (`overflow`) and closed rather than let the
server's memory grow. Between events a stream looks at the trace's
`trace.json` about once a second, so steps committed by other processes (a
watcher, `agentfs run`) show up as `changed` events too.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EventHub", "sse"]

#: Events a reader may have waiting before it is closed.
QUEUE_LIMIT = 10_000
#: Seconds between looks at trace.json, and between keep-alive comments.
POLL = 1.0
CLOSED = object()


@dataclass
class _Reader:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue = field(default_factory=lambda: asyncio.Queue(QUEUE_LIMIT))


class EventHub:
    """Fans each trace's events out to its readers; thread-safe."""

    def __init__(self) -> None:
        self._readers: dict[str, list[_Reader]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def publish(self, trace_id: str, kind: str, data: dict[str, Any]) -> None:
        """Send an event to every reader of `trace_id` (from any thread)."""
        item = (kind, data)
        with self._lock:
            readers = list(self._readers.get(trace_id, ()))
        for reader in readers:
            reader.loop.call_soon_threadsafe(self._put, trace_id, reader, item)

    def _put(self, trace_id: str, reader: _Reader, item: object) -> None:
        try:
            reader.queue.put_nowait(item)
        except asyncio.QueueFull:
            self._drop(trace_id, reader)
            while not reader.queue.empty():
                reader.queue.get_nowait()
            reader.queue.put_nowait(("overflow", {"error": "events came faster than read"}))
            reader.queue.put_nowait(CLOSED)

    def _drop(self, trace_id: str, reader: _Reader) -> None:
        with self._lock:
            readers = self._readers.get(trace_id, [])
            if reader in readers:
                readers.remove(reader)

    def close(self) -> None:
        """End every stream (the server is stopping)."""
        with self._lock:
            self._closed = True
            everyone = [(r, t) for t, rs in self._readers.items() for r in rs]
            self._readers.clear()
        for reader, _ in everyone:
            reader.loop.call_soon_threadsafe(reader.queue.put_nowait, CLOSED)

    async def stream(self, trace_id: str, hello: dict[str, Any],
                     look: Callable[[], Any]) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """The events of `trace_id` from now on, starting with `ready` (`hello`).
        `look()` returns something that changes when the trace does (polled)."""
        reader = _Reader(asyncio.get_running_loop())
        with self._lock:
            if self._closed:
                return
            self._readers.setdefault(trace_id, []).append(reader)
        try:
            yield "ready", hello
            seen = await asyncio.to_thread(look)
            while True:
                try:
                    item = await asyncio.wait_for(reader.queue.get(), POLL)
                except TimeoutError:
                    now = await asyncio.to_thread(look)
                    if now != seen:
                        seen = now
                        yield "changed", {"trace": trace_id}
                    else:
                        yield "", {}  # keep-alive
                    continue
                if item is CLOSED:
                    return
                yield item
        finally:
            self._drop(trace_id, reader)


def sse(kind: str, data: dict[str, Any]) -> bytes:
    """One event in the `text/event-stream` format (a comment for a keep-alive)."""
    if not kind:
        return b": keep-alive\n\n"
    text = json.dumps(data, ensure_ascii=False, default=str)
    # a lone surrogate (a file name that is not UTF-8) stays a JSON escape
    return f"event: {kind}\ndata: {text}\n\n".encode("utf-8", "backslashreplace")
