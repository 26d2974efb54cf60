"""A fake OpenAI-compatible Chat Completions server on 127.0.0.1, so the real `openai` SDK
runs end to end without the network.

    with FakeOpenAIServer() as server:
        server.enqueue({"text": "Hello"}, {"tool_calls": [{"name": "read", "input": {}}]})
        client = openai.OpenAI(api_key="test", base_url=server.base_url)
        client.chat.completions.create(model="gpt-test", messages=[...])
        server.requests[0].body

It serves `POST /v1/chat/completions` as JSON, or as server-sent events when the
body says `"stream": true` (content and tool-call deltas, the chunk with the
`finish_reason`, a usage chunk when `stream_options.include_usage` asks for it,
then `data: [DONE]`). Every request is recorded, and checked against the Chat
Completions rules (`agentfs/testing/openai_rules.py`): a request that breaks
them gets a 400 and its problems are kept in `violations` (`validate=False`
records them without refusing).

Answers come from a queue: `enqueue` dicts (text, tool calls, finish reason,
usage, running out of output tokens) or callables that build one from the
request body; with the queue empty, the server's `default_text` answers.
Faults (`fail_next`, `malformed_next`, `drop_next`, `error_in_stream_next`,
`cut_stream_next`, `context_too_long_next`) are taken one per request, in
order, before any scripted answer, and use up none: a cut stream sends the
beginning of the answer the next request gets in full, as a retry would see.

Usage is simulated: tokens are bytes / 4 of the request's canonical JSON, and
the longest prefix of messages (with the model and tools before them) that an
earlier request also sent counts as `cached_tokens`, as OpenAI's automatic
prompt caching reports it.

`python -m agentfs.testing.fake_openai [--answer TEXT] [COMMAND ...]` serves
until stopped, printing its base URL, or runs COMMAND with `OPENAI_BASE_URL`
and `OPENAI_API_KEY` pointing at it (`agentfs` in COMMAND is this Python's).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from agentfs.testing.fake_http import (
    FakeHandler,
    FakeServer,
    drop,
    read_request,
    send_bytes,
    send_json,
    split_words,
    start_stream,
    write_chunk,
)
from agentfs.testing.openai_rules import check_chat_request

__all__ = ["FakeOpenAIServer", "main"]

ScriptedResponse = dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]]
NO_SCRIPT_TEXT = "(fake server: no scripted response)"
#: How long the fake tells clients to wait before retrying (seconds).
DEFAULT_RETRY_AFTER = 0.01
#: The context window the fake claims in its "context length exceeded" errors.
CONTEXT_WINDOW_TOKENS = 128_000
ERROR_TYPES = {400: "invalid_request_error", 401: "invalid_request_error",
               429: "rate_limit_exceeded", 500: "server_error", 503: "server_error"}
CutPoint = Literal["text", "tool_input"]
_DEFAULT = object()


@dataclass(frozen=True)
class _Fault:
    kind: str  # status | malformed | drop | stream_error | cut | too_long
    status: int = 0
    body: Any = None
    retry_after: float | None = None
    mid_stream: bool = False
    during: CutPoint = "text"
    abort: bool = False


class FakeOpenAIServer(FakeServer[_Fault]):
    """A scripted Chat Completions server on a free port of 127.0.0.1; it starts at once.

    Args:
        validate: answer requests that break the Chat Completions rules with a 400.
        api_key: when set, a request with any other key gets a 401.
        default_text: the answer when nothing is queued.
    """

    def __init__(self, *, validate: bool = True, api_key: str | None = None,
                 default_text: str = NO_SCRIPT_TEXT, port: int = 0) -> None:
        super().__init__("fake-openai", path="/v1", port=port)
        self.validate = validate
        self.api_key = api_key
        self.default_text = default_text
        self._violations: list[str] = []
        self._prefixes: set[bytes] = set()

    # --- scripting -------------------------------------------------------------------

    def enqueue(self, *responses: ScriptedResponse) -> None:
        """Queue answers, one per request.

        A response is a dict with any of: `text` (a string, or a list of chunks to
        stream as separate deltas), `tool_calls` (`[{"name", "input", "id"?}]`),
        `finish_reason` (else `tool_calls` or `stop`), `usage` (overrides the
        simulated counts). `max_tokens_during` (`"text"` or `"tool_input"`) makes
        it run out of output tokens halfway through its text or its last call's
        arguments: `finish_reason` is `length` (unless given) and those arguments
        are cut-off JSON. A callable gets the request body and returns such a dict.
        """
        with self._lock:
            self._script.extend(responses)

    def fail_next(self, status: int, count: int = 1, body: Any = None, *,
                  retry_after: float | None | object = _DEFAULT) -> None:
        """Answer the next `count` requests with an HTTP error in OpenAI's error shape.

        429 and 5xx carry `retry-after` and `retry-after-ms` (10 ms unless
        `retry_after` says otherwise; None leaves them out). `body` replaces the
        error JSON (a dict, or str/bytes sent as they are).
        """
        if retry_after is _DEFAULT:
            retry_after = DEFAULT_RETRY_AFTER if status == 429 or status >= 500 else None
        assert retry_after is None or isinstance(retry_after, (int, float))
        self._add_faults(count, _Fault("status", status=status, body=body, retry_after=retry_after))

    def malformed_next(self, count: int = 1) -> None:
        """Answer with garbage: a truncated JSON body, or a stream event that is not JSON."""
        self._add_faults(count, _Fault("malformed"))

    def drop_next(self, count: int = 1, *, mid_stream: bool = False) -> None:
        """Close the connection without an answer, or (`mid_stream`) halfway through it."""
        self._add_faults(count, _Fault("drop", mid_stream=mid_stream))

    def error_in_stream_next(self, count: int = 1) -> None:
        """Start a 200 stream, then send an `error` event as servers do when they fail
        mid-answer (a request that does not stream gets a plain 500)."""
        self._add_faults(count, _Fault("stream_error", status=500))

    def cut_stream_next(self, during: CutPoint = "text", *, abort: bool = False,
                        count: int = 1) -> None:
        """Send only the beginning of the next answer, never its `finish_reason`.

        The stream stops halfway through the text (`"text"`) or the first tool
        call's arguments (`"tool_input"`), before the finish chunk when the answer
        has neither. It then ends cleanly, or with `abort` hangs up in the middle
        of an HTTP chunk. The queued answer is not taken: the retry gets it whole.
        """
        self._add_faults(count, _Fault("cut", during=during, abort=abort))

    def context_too_long_next(self, count: int = 1) -> None:
        """Answer with OpenAI's 400 `context_length_exceeded`."""
        self._add_faults(count, _Fault("too_long"))

    @property
    def violations(self) -> list[str]:
        """Every rule a request broke so far, as `request N: problem`."""
        with self._lock:
            return list(self._violations)

    # --- serving (handler threads) ---------------------------------------------------

    def serve_request(self, h: FakeHandler) -> None:
        """Answer one request (called by the handler thread)."""
        request = read_request(h)
        with self._changed:
            self._requests.append(request)
            number = len(self._requests)
            self._changed.notify_all()
            fault = self._faults.popleft() if self._faults else None
        body = request.body
        if fault is not None and fault.kind == "status":
            return _send_error(h, fault.status, fault.body, retry_after=fault.retry_after)
        if fault is not None and fault.kind == "drop" and not fault.mid_stream:
            return drop(h)
        if fault is not None and fault.kind == "too_long":
            return _send_error(h, 400, None, code="context_length_exceeded", message=(
                f"This model's maximum context length is {CONTEXT_WINDOW_TOKENS} tokens. "
                "However, your messages resulted in more tokens."))
        if self.api_key is not None and request.api_key != self.api_key:
            return _send_error(h, 401, None, code="invalid_api_key",
                               message="Incorrect API key provided")
        if request.method != "POST" or request.path.partition("?")[0] != "/v1/chat/completions":
            return _send_error(h, 404, None, message=f"no route {request.method} {request.path}")
        if not isinstance(body, dict):
            return _send_error(h, 400, None, message="the body is not a JSON object")
        problems = check_chat_request(body)
        if problems:
            with self._lock:
                self._violations += [f"request {number}: {p}" for p in problems]
            if self.validate:
                return _send_error(h, 400, None, message="; ".join(problems))
        return self._reply(h, body, fault)

    def _reply(self, h: FakeHandler, body: dict[str, Any], fault: _Fault | None) -> None:
        completion, parts = self._answer(body, peek=fault is not None)
        if body.get("stream"):
            usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return _send_sse(h, _sse_chunks(completion, parts, usage), fault)
        encoded = json.dumps(completion).encode()
        kind = fault.kind if fault is not None else None
        if kind == "stream_error":
            return _send_error(h, 500, None)
        if kind in ("cut", "malformed", "drop"):  # half the body: ended cleanly, or hung up
            hang_up = kind == "drop" or (fault is not None and fault.abort)
            if hang_up:
                return send_bytes(h, 200, encoded, "application/json",
                                  cut_at=len(encoded) // 2)
            return send_bytes(h, 200, encoded[: len(encoded) // 2], "application/json")
        return send_json(h, 200, completion)

    def _answer(self, body: dict[str, Any], *,
                peek: bool) -> tuple[dict[str, Any], list[str] | None]:
        """(the chat.completion object, the text's chunks when the script gave them)."""
        with self._lock:
            if self._script:
                scripted = self._script[0] if peek else self._script.popleft()
            else:
                scripted = {"text": self.default_text}
            number = next(self._ids)
        spec = scripted(body) if callable(scripted) else scripted
        text_parts = spec.get("text", "")
        text = "".join(text_parts) if isinstance(text_parts, list) else text_parts
        calls: list[dict[str, Any]] = [
            {"id": c.get("id") or f"call_fake_{number}_{i}", "type": "function",
             "function": {"name": c["name"], "arguments": json.dumps(c.get("input", {}))}}
            for i, c in enumerate(spec.get("tool_calls") or [])]
        finish = spec.get("finish_reason") or ("tool_calls" if calls else "stop")
        during = spec.get("max_tokens_during")
        if during == "text":
            text, calls = text[: max(1, len(text) // 2)], []
            finish = spec.get("finish_reason") or "length"
        elif during == "tool_input" and calls:
            arguments = calls[-1]["function"]["arguments"]
            calls[-1]["function"]["arguments"] = arguments[: max(1, len(arguments) // 2)]
            finish = spec.get("finish_reason") or "length"
        prompt = self._prompt_usage(body, remember=not peek)
        output = (len(text) + sum(len(c["function"]["arguments"]) for c in calls) + 3) // 4
        usage: dict[str, Any] = {"prompt_tokens": prompt[0], "completion_tokens": max(1, output),
                 "total_tokens": prompt[0] + max(1, output),
                 "prompt_tokens_details": {"cached_tokens": prompt[1]}}
        usage.update(spec.get("usage") or {})
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            message["tool_calls"] = calls
        completion = {"id": f"chatcmpl-fake{number}", "object": "chat.completion",
                      "created": 1_700_000_000, "model": body.get("model", ""),
                      "choices": [{"index": 0, "message": message, "finish_reason": finish,
                                   "logprobs": None}],
                      "usage": usage}
        parts = list(text_parts) if isinstance(text_parts, list) and during is None else None
        return completion, parts

    def _prompt_usage(self, body: dict[str, Any], *, remember: bool) -> tuple[int, int]:
        """(prompt tokens, of which cached) for `body`; remembers its prefixes."""
        running = hashlib.sha256()
        segments = [{"model": body.get("model"), "tools": body.get("tools")},
                    *(body.get("messages") or [])]
        size = cached = 0
        digests = []
        with self._lock:
            for segment in segments:
                data = json.dumps(segment, sort_keys=True, separators=(",", ":")).encode()
                running.update(data)
                size += len(data)
                digest = running.digest()
                digests.append(digest)
                if digest in self._prefixes:
                    cached = size
            if remember:
                self._prefixes.update(digests)
        return (size + 3) // 4, (cached + 3) // 4


def _sse_chunks(completion: dict[str, Any], parts: list[str] | None,
                usage: bool) -> list[dict[str, Any] | str]:
    """The stream of `completion`: chunk objects, then "[DONE]"."""
    choice = completion["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": completion["id"], "object": "chat.completion.chunk",
                "created": completion["created"], "model": completion["model"],
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish,
                             "logprobs": None}]}

    out: list[dict[str, Any] | str] = [chunk({"role": "assistant", "content": ""})]
    text = message.get("content") or ""
    out += [chunk({"content": part}) for part in parts or split_words(text) if part]
    for index, call in enumerate(message.get("tool_calls") or []):
        out.append(chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                          "function": {"name": call["function"]["name"],
                                                       "arguments": ""}}]}))
        arguments = call["function"]["arguments"]
        out += [chunk({"tool_calls": [{"index": index,
                                       "function": {"arguments": arguments[i : i + 16]}}]})
                for i in range(0, len(arguments), 16)]
    out.append(chunk({}, choice["finish_reason"]))
    if usage:
        out.append({**chunk({}), "choices": [], "usage": completion["usage"]})
    out.append("[DONE]")
    return out


def _cut_point(chunks: list[dict[str, Any] | str], during: CutPoint) -> int:
    """The first chunk a stream cut `during` the text or the first call's arguments does
    not send: halfway through them, keeping at least one; else the finish chunk."""
    def is_part(item: dict[str, Any] | str) -> bool:
        if isinstance(item, str) or not item["choices"]:
            return False
        delta = item["choices"][0]["delta"]
        if during == "text":
            return bool(delta.get("content"))
        calls = delta.get("tool_calls") or []
        return bool(calls) and calls[0]["index"] == 0 and "id" not in calls[0]

    parts = [n for n, item in enumerate(chunks) if is_part(item)]
    if parts:
        return parts[max(1, len(parts) // 2) - 1] + 1
    return next(n for n, item in enumerate(chunks)
                if isinstance(item, dict) and item["choices"]
                and item["choices"][0]["finish_reason"])


def _send_sse(h: FakeHandler, chunks: list[dict[str, Any] | str], fault: _Fault | None) -> None:
    """Stream `chunks` as `data:` events, one flushed HTTP chunk each, applying `fault`."""
    start_stream(h)
    kind = fault.kind if fault is not None else None
    cut = _cut_point(chunks, fault.during) if fault is not None and kind == "cut" else None
    for number, item in enumerate(chunks):
        event = f"data: {item if isinstance(item, str) else json.dumps(item)}\n\n".encode()
        if number == cut:
            assert fault is not None
            if fault.abort:  # announce the whole event, send half of it, hang up
                h.wfile.write(f"{len(event):x}\r\n".encode() + event[: len(event) // 2])
                h.wfile.flush()
                return drop(h)
            break  # a clean end of the body, without the finish chunk
        if number == 2 and kind == "malformed":
            write_chunk(h, b"data: {not json\n\n")
            break
        if number == 2 and kind == "drop":
            return drop(h)  # no terminating chunk: the client sees a cut-off body
        if number == 2 and kind == "stream_error":
            error = {"error": {"message": "The server had an error while processing your "
                               "request.", "type": "server_error", "param": None, "code": None}}
            write_chunk(h, f"data: {json.dumps(error)}\n\n".encode())
            break
        write_chunk(h, event)
    h.wfile.write(b"0\r\n\r\n")


def _send_error(h: FakeHandler, status: int, body: Any, *, message: str | None = None,
                code: str | None = None, retry_after: float | None = None) -> None:
    headers: dict[str, str] = {}
    if retry_after is not None:
        headers["retry-after"] = str(max(1, round(retry_after)))
        headers["retry-after-ms"] = str(round(retry_after * 1000))
    if isinstance(body, (str, bytes)):
        data = body.encode() if isinstance(body, str) else body
        return send_bytes(h, status, data, "text/plain", headers=headers)
    payload = body if body is not None else {"error": {
        "message": message or f"fake error {status}",
        "type": ERROR_TYPES.get(status, "server_error" if status >= 500 else
                                "invalid_request_error"),
        "param": None, "code": code}}
    return send_json(h, status, payload, headers)


def main(argv: list[str] | None = None) -> int:
    """`python -m agentfs.testing.fake_openai`: see the module docstring."""
    parser = argparse.ArgumentParser(
        prog="python -m agentfs.testing.fake_openai",
        description="A fake OpenAI-compatible server on 127.0.0.1, for trying agentfs' "
        "openai provider offline.")
    parser.add_argument("--answer", default=NO_SCRIPT_TEXT,
                        help="what the fake answers every request with")
    parser.add_argument("--port", type=int, default=0, help="the port (default: a free one)")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="a command to run against the server, then stop")
    args = parser.parse_args(argv)
    with FakeOpenAIServer(default_text=args.answer, port=args.port) as server:
        if not args.command:
            print(f"serving on {server.base_url}; set OPENAI_BASE_URL to it. Ctrl-C stops.",
                  flush=True)
            try:
                threading.Event().wait()
            except KeyboardInterrupt:
                return 0
        command = list(args.command)
        if command[0] == "agentfs":
            command[:1] = [sys.executable, "-m", "agentfs"]
        env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "fake"}
        return subprocess.run(command, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
