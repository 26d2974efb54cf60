"""A fake Anthropic Messages API on 127.0.0.1, so the real `anthropic` SDK runs end to end.

    with FakeAnthropicServer() as server:
        server.enqueue({"text": "Hello"}, {"tool_calls": [{"name": "read", "input": {}}]})
        client = anthropic.Anthropic(api_key="test", base_url=server.base_url)
        client.messages.create(model="claude-test", max_tokens=100, messages=[...])
        server.requests[0].body

It serves `POST /v1/messages` as JSON, or as server-sent events when the body
says `"stream": true` (the event sequence the SDK's `messages.stream()`
accumulates), and `POST /v1/messages/count_tokens`. Every request is recorded.

Answers come from a queue: `enqueue` dicts (text, tool calls, thinking, stop
reason, usage, running out of output tokens) or callables that build one from
the request body. Faults (`fail_next`, `delay_next`, `malformed_next`,
`drop_next`, `error_in_stream_next`, `cut_stream_next`, `prompt_too_long_next`)
are taken one per request, in order, before any scripted answer; a faulted
request uses up no scripted answer, except a delayed one, which is answered
normally after the wait. A cut stream sends the beginning of the answer the
next request will get in full (it peeks at the queue), as a retry would see. A request
that breaks the Messages API rules (`agentfs.testing.api_rules`) gets the 400
the real API would send, unless the server was made with `validate=False`.

Usage is simulated, not measured. Tokens are bytes / 4 of the request's
canonical JSON. The prompt cache remembers a hash of the request's prefix up
to each `cache_control` breakpoint (prefix order: model, tools, system,
message blocks; `cache_control` itself is left out of the bytes). A later
request reads from the cache the longest remembered prefix that ends at one
of its own block boundaries within 20 blocks before one of its breakpoints
(the real API's lookback window); the part after that, up to its last
breakpoint, is reported as cache creation; the rest as `input_tokens`.
There is no minimum cacheable length and no expiry.

Extended thinking: a request with `"thinking": {"type": "enabled", ...}` gets a
thinking block first in its answer, unless the scripted answer brings its
own; a thinking block without a signature is signed with an HMAC of its text
(`sign_thinking`). The server remembers every thinking block it issued and
the request prefix it came after (tools, system, messages, and the blocks of
the answer before it). Each later request is checked, as a model with
preserved thinking checks it: every thinking block sent back must be one it
issued, byte for byte, and the request in front of the last thinking block
must be exactly the prefix that block was issued after. Violations are
recorded in `thinking_violations`; with `strict_thinking=True` the request
also gets a 400, as the real API may answer.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import hmac
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from agentfs.testing.api_rules import THINKING_TYPES, check_request, content_blocks
from agentfs.testing.fake_http import (
    FakeHandler,
    FakeServer,
    RecordedRequest,
    drop,
    read_request,
    request_id,
    send_bytes,
    send_json,
    split_words,
    start_stream,
    write_chunk,
)

ScriptedResponse = dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]]

NO_SCRIPT_TEXT = "(fake server: no scripted response)"
#: The key of the fake's thinking signatures (`sign_thinking`).
THINKING_KEY = b"agentfs fake thinking"
CACHE_LOOKBACK_BLOCKS = 20
#: How long the fake tells clients to wait before retrying (seconds).
DEFAULT_RETRY_AFTER = 0.01

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
ERROR_MESSAGES = {
    401: "invalid x-api-key",
    429: "Number of request tokens has exceeded your per-minute rate limit",
    500: "Internal server error",
    529: "Overloaded",
}

_DEFAULT = object()


#: The context window the fake claims in its "prompt is too long" errors.
CONTEXT_WINDOW_TOKENS = 200_000

#: Where `cut_stream_next` and a scripted `max_tokens_during` cut an answer.
CutPoint = Literal["text", "tool_input"]
_BLOCK_TYPES: dict[str, str] = {"text": "text", "tool_input": "tool_use"}
_DELTA_TYPES: dict[str, str] = {"text": "text_delta", "tool_input": "input_json_delta"}


@dataclass(frozen=True)
class _Fault:
    kind: str  # status | delay | malformed | drop | stream_error | cut | too_long
    status: int = 0
    body: Any = None
    seconds: float = 0.0
    retry_after: float | None = None
    mid_stream: bool = False
    during: CutPoint = "text"
    abort: bool = False


class FakeAnthropicServer(FakeServer[_Fault]):
    """A scripted Messages API server on a free port of 127.0.0.1; it starts at once.

    Args:
        validate: answer requests that break the Messages API rules with a 400.
        api_key: when set, a request with any other key gets a 401.
        strict_thinking: also answer a request that breaks the thinking checks (see
            the module docstring) with a 400; they are recorded either way.
    """

    def __init__(self, *, validate: bool = True, api_key: str | None = None,
                 strict_thinking: bool = False) -> None:
        super().__init__("fake-anthropic")
        self.validate = validate
        self.api_key = api_key
        self.strict_thinking = strict_thinking
        #: canonical thinking block -> (where, canonical block) of the prefix it came after
        self._issued: dict[bytes, list[tuple[str, bytes]]] = {}
        self._thinking_violations: list[str] = []
        self._cache = PromptCache()

    # --- scripting -------------------------------------------------------------------

    def enqueue(self, *responses: ScriptedResponse) -> None:
        """Queue answers, one per request.

        A response is a dict with any of: `text` (a string, or a list of chunks
        to stream as separate deltas), `tool_calls` (`[{"name", "input", "id"?}]`),
        `thinking` (`[{"thinking", "signature"}]` or `[{"data"}]` for redacted),
        `stop_reason`, `usage` (overrides the simulated counts), or `content`
        (raw content blocks, used as they are). A callable gets the request body
        and returns such a dict.

        `max_tokens_during` (`"text"` or `"tool_input"`) makes the answer run out
        of output tokens as the real API does: its last text block, or its last
        tool call's input JSON, stops halfway, the blocks after it are not sent,
        and `stop_reason` is `max_tokens`. Streamed, the cut tool input arrives
        as incomplete JSON; as plain JSON, `input` holds the keys that were
        complete.
        """
        with self._lock:
            self._script.extend(responses)

    def fail_next(
        self,
        status: int,
        count: int = 1,
        body: Any = None,
        *,
        retry_after: float | None | object = _DEFAULT,
    ) -> None:
        """Answer the next `count` requests with an HTTP error in the API's error shape.

        Retryable errors (429, 5xx) carry `retry-after` and `retry-after-ms`
        headers, by default asking for a 10 ms wait so SDK retries are quick;
        `retry_after=None` leaves them out (the SDK then backs off from 0.5 s).
        `body` replaces the error JSON (a dict, or str/bytes sent as they are).
        """
        if retry_after is _DEFAULT:
            retry_after = DEFAULT_RETRY_AFTER if status == 429 or status >= 500 else None
        assert retry_after is None or isinstance(retry_after, (int, float))
        self._add_faults(count, _Fault("status", status=status, body=body, retry_after=retry_after))

    def delay_next(self, seconds: float, count: int = 1) -> None:
        """Wait `seconds` before answering the next `count` requests (close() cuts the wait)."""
        self._add_faults(count, _Fault("delay", seconds=seconds))

    def malformed_next(self, count: int = 1) -> None:
        """Answer with a broken body: truncated JSON, or an SSE stream with a bad event."""
        self._add_faults(count, _Fault("malformed"))

    def drop_next(self, count: int = 1, *, mid_stream: bool = False) -> None:
        """Close the connection without an answer, or (`mid_stream`) halfway through it."""
        self._add_faults(count, _Fault("drop", mid_stream=mid_stream))

    def error_in_stream_next(self, status: int = 529, count: int = 1) -> None:
        """Start a 200 SSE stream, then send an `error` event (as the API does when overloaded).

        A request that does not stream gets the plain HTTP error `status` instead.
        """
        self._add_faults(count, _Fault("stream_error", status=status))

    def cut_stream_next(
        self, during: CutPoint = "text", *, abort: bool = False, count: int = 1
    ) -> None:
        """Send only the beginning of the next answer, never its `message_stop`.

        The stream stops halfway through the first text block (`"text"`) or the
        first tool call's input JSON (`"tool_input"`); an answer without such a
        block stops before its `message_delta`. It then ends cleanly (a proper
        last chunk, as a server closing early would), or with `abort` hangs up in
        the middle of an HTTP chunk. A request that does not stream gets half of
        its JSON body (cleanly ended, or cut off with `abort`). The answer comes
        from the queue without taking it, so the retry gets it in full.
        """
        self._add_faults(count, _Fault("cut", during=during, abort=abort))

    def prompt_too_long_next(self, count: int = 1) -> None:
        """Answer the next `count` requests with the API's 400 "prompt is too long"."""
        self._add_faults(count, _Fault("too_long"))

    @property
    def thinking_violations(self) -> list[str]:
        """Every thinking check a request broke so far (see the module docstring), as
        `request N: where: what`; empty when thinking blocks came back as issued."""
        with self._lock:
            return list(self._thinking_violations)

    # --- serving (handler threads) ---------------------------------------------------

    def serve_request(self, h: FakeHandler) -> None:
        """Answer one request (called by the handler thread)."""
        request, number, fault = self._record(h)
        body = request.body
        if fault is not None and fault.kind == "delay":
            if self._closing.wait(fault.seconds):
                return drop(h)
            fault = None
        if fault is not None and self._fault_instead(h, fault, body):
            return None
        if self._refused(h, request, number):
            return None
        return self._reply(h, body, fault)

    def _record(self, h: FakeHandler) -> tuple[RecordedRequest, int, _Fault | None]:
        """The request, recorded; its number; the fault queued for it."""
        request = read_request(h)
        with self._changed:
            self._requests.append(request)
            number = len(self._requests)
            self._changed.notify_all()
            fault = self._faults.popleft() if self._faults else None
        return request, number, fault

    def _fault_instead(self, h: FakeHandler, fault: _Fault, body: Any) -> bool:
        """Answer with the fault instead of an answer, if it is one of those; True if so."""
        if fault.kind == "status":
            _send_error(h, fault.status, fault.body, retry_after=fault.retry_after)
        elif fault.kind == "drop" and not fault.mid_stream:
            drop(h)
        elif fault.kind == "too_long":
            size = _tokens(self._cache.request_size(body)) if isinstance(body, dict) else 0
            _send_error(h, 400, None, message=f"prompt is too long: "
                        f"{max(size, CONTEXT_WINDOW_TOKENS + 1)} tokens > "
                        f"{CONTEXT_WINDOW_TOKENS} maximum")
        else:
            return False
        return True

    def _refused(self, h: FakeHandler, request: RecordedRequest, number: int) -> bool:
        """Answer what the API refuses (or counts tokens of) as it would; True if so."""
        body = request.body
        path = urlsplit(h.path).path.rstrip("/")
        if h.command != "POST" or path not in ("/v1/messages", "/v1/messages/count_tokens"):
            _send_error(h, 404, None, message=f"{h.command} {h.path} is not served here")
        elif self.api_key is not None and request.api_key != self.api_key:
            _send_error(h, 401, None)
        elif not isinstance(body, dict):
            _send_error(h, 400, None, message="the request body is not a JSON object")
        elif path.endswith("count_tokens"):
            send_json(h, 200, {"input_tokens": _tokens(self._cache.request_size(body))})
        elif problems := self._request_problems(body, number):
            _send_error(h, 400, None, message="; ".join(problems))
        else:
            return False
        return True

    def _request_problems(self, body: dict[str, Any], number: int) -> list[str]:
        """Why the API would refuse the request: its rules (with `validate`), else its
        thinking blocks (those are always checked, refused with `strict_thinking`)."""
        if self.validate and (problems := check_request(body)):
            return problems
        problems = self._check_thinking(body, number)
        return problems if self.strict_thinking else []

    def _reply(self, h: FakeHandler, body: dict[str, Any], fault: _Fault | None) -> None:
        """The answer, whole, streamed, or broken as `fault` says."""
        streaming = body.get("stream") is True
        cut = fault is not None and fault.kind == "cut"
        message, chunks = self._answer(body, broken=fault is not None, peek=cut)
        if streaming:
            _send_sse(h, _sse_events(message, chunks), fault)
        elif fault is not None and fault.kind == "malformed":
            send_bytes(h, 200, json.dumps(message).encode()[:40], "application/json")
        elif fault is not None and (fault.kind == "drop" or (cut and fault.abort)):
            encoded = json.dumps(message).encode()
            send_bytes(h, 200, encoded, "application/json", cut_at=len(encoded) // 2)
        elif cut:
            encoded = json.dumps(message).encode()
            send_bytes(h, 200, encoded[: len(encoded) // 2], "application/json")
        elif fault is not None and fault.kind == "stream_error":
            _send_error(h, fault.status, None)
        else:
            send_json(h, 200, message)

    def _answer(
        self, body: dict[str, Any], *, broken: bool = False, peek: bool = False
    ) -> tuple[dict[str, Any], dict[int, list[str]]]:
        """The message for this request, and the chunks to stream per block index.

        An answer that a fault will break uses no scripted response and caches
        nothing; with `peek` it is built from the next scripted response, which
        stays queued.
        """
        with self._lock:
            if not self._script or (broken and not peek):
                scripted = None
            else:
                scripted = self._script[0] if peek else self._script.popleft()
            number = next(self._ids)
        if callable(scripted):
            scripted = scripted(body)
        spec: dict[str, Any] = scripted if scripted is not None else {"text": NO_SCRIPT_TEXT}
        if _thinking_on(body) and "thinking" not in spec and "content" not in spec:
            spec = {**spec, "thinking": [{"thinking": f"Thinking about request {number}."}]}
        content, chunks = self._content(spec)
        if not broken:
            self._remember_thinking(body, content)
        with self._lock:
            usage = self._cache.usage(body, remember=not broken)
        usage["output_tokens"] = max(1, _tokens(len(json.dumps(content))))
        usage.update(spec.get("usage") or {})
        has_tool_use = any(b.get("type") == "tool_use" for b in content)
        if spec.get("max_tokens_during"):
            has_tool_use = False  # the stop reason is max_tokens
            spec = {"stop_reason": "max_tokens", **spec}
        message = {
            "id": f"msg_fake_{number:06d}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model") or "claude-fake",
            "content": content,
            "stop_reason": spec.get("stop_reason") or ("tool_use" if has_tool_use else "end_turn"),
            "stop_sequence": None,
            "usage": usage,
        }
        return message, chunks

    def _content(self, spec: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[int, list[str]]]:
        content, chunks = self._full_content(spec)
        if spec.get("max_tokens_during"):
            return _run_out(content, chunks, spec["max_tokens_during"])
        return content, chunks

    def _full_content(
        self, spec: dict[str, Any]
    ) -> tuple[list[dict[str, Any]], dict[int, list[str]]]:
        if "content" in spec:
            return copy.deepcopy(spec["content"]), {}
        content: list[dict[str, Any]] = []
        chunks: dict[int, list[str]] = {}
        for item in spec.get("thinking") or []:
            if "data" in item:
                content.append({"type": "redacted_thinking", "data": item["data"]})
            else:
                thought = item.get("thinking", "")
                content.append(
                    {
                        "type": "thinking",
                        "thinking": thought,
                        "signature": item.get("signature") or sign_thinking(thought),
                    }
                )
        text = spec.get("text")
        parts = [text] if isinstance(text, str) else list(text or [])
        if "".join(parts):
            if not isinstance(text, str):
                chunks[len(content)] = parts
            content.append({"type": "text", "text": "".join(parts)})
        for call in spec.get("tool_calls") or []:
            with self._lock:
                use_id = call.get("id") or f"toolu_fake_{next(self._ids):06d}"
            content.append(
                {
                    "type": "tool_use",
                    "id": use_id,
                    "name": call["name"],
                    "input": call.get("input", {}),
                }
            )
        return content, chunks


    # --- thinking ----------------------------------------------------------------------

    def _remember_thinking(self, body: dict[str, Any], content: list[dict[str, Any]]) -> None:
        """Record the thinking blocks of an answer with the prefix each came after."""
        prefix = [(where, data) for where, data, _ in _prefix_blocks(body)]
        with self._lock:
            for index, block in enumerate(content):
                if block.get("type") in THINKING_TYPES:
                    before = [(f"the answer's content[{k}]", _canonical({"role": "assistant", **b}))
                              for k, b in enumerate(content[:index])]
                    self._issued[_canonical(block)] = prefix + before

    def _check_thinking(self, body: dict[str, Any], number: int) -> list[str]:
        """The thinking checks `body` breaks (see the module docstring); recorded."""
        blocks = _prefix_blocks(body)
        thinking = [i for i, (_, _, block) in enumerate(blocks)
                    if block.get("type") in THINKING_TYPES]
        problems: list[str] = []
        with self._lock:
            for i in thinking:
                if _canonical(blocks[i][2]) not in self._issued:
                    problems.append(f"request {number}: {blocks[i][0]}: a thinking block this "
                                    "server never issued (its text or signature changed)")
            if thinking:
                where, _, block = blocks[thinking[-1]]
                issued_after = self._issued.get(_canonical(block))
                sent = [data for _, data, _ in blocks[: thinking[-1]]]
                if issued_after is not None and sent != [data for _, data in issued_after]:
                    problems.append(f"request {number}: {where}: the request in front of this "
                                    "thinking block is not the one it was issued after: "
                                    + _difference(blocks[: thinking[-1]], issued_after))
            self._thinking_violations += problems
        return problems


def sign_thinking(thought: str) -> str:
    """The fake's signature of a thinking text: an HMAC, so a changed text is caught."""
    digest = hmac.new(THINKING_KEY, thought.encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def _thinking_on(body: dict[str, Any]) -> bool:
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") == "enabled"


def _prefix_blocks(body: dict[str, Any]) -> list[tuple[str, bytes, dict[str, Any]]]:
    """(where, canonical JSON, block) of the request's tools, system blocks and message
    blocks (tagged with their role), in the API's order; the model is left out."""
    found = [(f"tools[{i}]", _canonical(tool), tool)
             for i, tool in enumerate(body.get("tools") or []) if isinstance(tool, dict)]
    system = body.get("system")
    system_blocks = [{"type": "text", "text": system}] if isinstance(system, str) else system
    found += [(f"system[{i}]", _canonical(block), block)
              for i, block in enumerate(system_blocks or []) if isinstance(block, dict)]
    for i, message in enumerate(body.get("messages") or []):
        if isinstance(message, dict):
            found += [(f"messages[{i}].content[{j}]",
                       _canonical({"role": message.get("role"), **block}), block)
                      for j, block in enumerate(content_blocks(message))]
    return found


def _difference(blocks: list[tuple[str, bytes, dict[str, Any]]],
                issued_after: list[tuple[str, bytes]]) -> str:
    """Where `blocks` (a request's, in front of a thinking block) first differ from the
    prefix the block was issued after."""
    for (where, data, _), (then, expected) in zip(blocks, issued_after, strict=False):
        if data != expected:
            return f"{where} changed" if where == then else f"{where} is where {then} was"
    if len(blocks) < len(issued_after):
        missing = len(issued_after) - len(blocks)
        return f"{missing} block(s) it came after were left out, from {issued_after[len(blocks)][0]} on"
    return f"{blocks[len(issued_after)][0]} was added in front of it"


class PromptCache:
    """The fake's prompt-cache simulation (see the module docstring)."""

    def __init__(self) -> None:
        self._seen: set[bytes] = set()

    def request_size(self, body: dict[str, Any]) -> int:
        """Bytes of the request's canonical prefix form."""
        return sum(len(segment) for segment, _ in _segments(body))

    def usage(self, body: dict[str, Any], *, remember: bool = True) -> dict[str, int]:
        """Simulated input/cache token counts for `body`; remembers its breakpoints."""
        ends: list[int] = []
        digests: list[bytes] = []
        breakpoints: list[int] = []
        running = hashlib.sha256()
        size = 0
        for index, (segment, is_breakpoint) in enumerate(_segments(body)):
            running.update(segment)
            size += len(segment)
            ends.append(size)
            digests.append(running.digest())
            if is_breakpoint:
                breakpoints.append(index)
        read = 0
        for bp in breakpoints:
            for index in range(bp, max(-1, bp - CACHE_LOOKBACK_BLOCKS), -1):
                if digests[index] in self._seen:
                    read = max(read, ends[index])
                    break
        if remember:
            self._seen.update(digests[bp] for bp in breakpoints)
        written = ends[breakpoints[-1]] if breakpoints else 0
        read_tokens = _tokens(read)
        creation_tokens = max(0, _tokens(written) - read_tokens)
        return {
            "input_tokens": max(0, _tokens(size) - read_tokens - creation_tokens),
            "output_tokens": 0,
            "cache_creation_input_tokens": creation_tokens,
            "cache_read_input_tokens": read_tokens,
        }


def _segments(body: dict[str, Any]) -> Iterator[tuple[bytes, bool]]:
    """The request's cacheable prefix as (canonical bytes, has cache_control) per block."""
    yield _canonical({"model": body.get("model")}), False
    for tool in body.get("tools") or []:
        yield _canonical(tool), bool(tool.get("cache_control"))
    system = body.get("system")
    system_blocks = [{"type": "text", "text": system}] if isinstance(system, str) else system
    for block in system_blocks or []:
        yield _canonical(block), bool(block.get("cache_control"))
    for message in body.get("messages") or []:
        for block in content_blocks(message):
            yield (
                _canonical({"role": message.get("role"), **block}),
                bool(block.get("cache_control")),
            )


def _canonical(block: dict[str, Any]) -> bytes:
    clean = {k: v for k, v in block.items() if k != "cache_control"}
    return json.dumps(clean, sort_keys=True, separators=(",", ":")).encode()


def _run_out(
    content: list[dict[str, Any]], chunks: dict[int, list[str]], during: CutPoint
) -> tuple[list[dict[str, Any]], dict[int, list[str]]]:
    """`content` as it stands when the output tokens run out halfway through its last
    block of the kind `during` names (see `FakeAnthropicServer.enqueue`)."""
    kind = _BLOCK_TYPES[during]
    indexes = [i for i, block in enumerate(content) if block.get("type") == kind]
    if not indexes:
        return content, chunks
    last = indexes[-1]
    content = content[: last + 1]
    chunks = {i: parts for i, parts in chunks.items() if i < last}
    block = content[last]
    if kind == "text":
        block["text"] = block["text"][: max(1, len(block["text"]) // 2)]
    else:
        arguments = block.get("input", {})
        encoded = json.dumps(arguments)
        cut = encoded[: max(1, len(encoded) // 2)]
        chunks[last] = [cut[i : i + 16] for i in range(0, len(cut), 16)]
        block["input"] = _complete_keys(arguments, len(cut))
    return content, chunks


def _complete_keys(arguments: dict[str, Any], limit: int) -> dict[str, Any]:
    """The leading keys of `arguments` whose JSON fits in the first `limit` characters."""
    kept: dict[str, Any] = {}
    for key, value in arguments.items():
        trial = {**kept, key: value}
        if len(json.dumps(trial)) - 1 > limit:  # without the closing brace
            break
        kept = trial
    return kept


def _tokens(size: int) -> int:
    return (size + 3) // 4


def _sse_events(message: dict[str, Any], chunks: dict[int, list[str]]) -> list[tuple[str, Any]]:
    """The SSE events that stream `message`, as the real API sends them."""
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    start["usage"] = {**usage, "output_tokens": 1}
    events: list[tuple[str, Any]] = [
        ("message_start", {"type": "message_start", "message": start}),
        ("ping", {"type": "ping"}),
    ]
    for index, block in enumerate(message["content"]):
        first, deltas = _block_stream(block, chunks.get(index))
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": first},
            )
        )
        for delta in deltas:
            events.append(
                (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
            )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": usage,
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def _block_stream(
    block: dict[str, Any], chunks: list[str] | None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(content_block_start's block, its deltas) for one complete block."""
    kind = block.get("type")
    if kind == "text":
        parts = chunks or split_words(block["text"])
        return {"type": "text", "text": ""}, [{"type": "text_delta", "text": p} for p in parts]
    if kind == "thinking":
        deltas = [
            {"type": "thinking_delta", "thinking": p} for p in split_words(block["thinking"])
        ]
        deltas.append({"type": "signature_delta", "signature": block.get("signature", "")})
        return {"type": "thinking", "thinking": "", "signature": ""}, deltas
    if kind == "tool_use":
        if chunks is not None:  # the input JSON as far as it got (see `_run_out`)
            pieces = chunks
        else:
            encoded = json.dumps(block.get("input", {}))
            pieces = [encoded[i : i + 16] for i in range(0, len(encoded), 16)]
        first = {**block, "input": {}}
        return first, [{"type": "input_json_delta", "partial_json": p} for p in ["", *pieces]]
    return block, []


def _error_payload(status: int, message: str | None) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {
            "type": ERROR_TYPES.get(status, "api_error"),
            "message": message or ERROR_MESSAGES.get(status, f"fake error {status}"),
        },
        "request_id": request_id(),
    }


def _send_error(
    h: FakeHandler,
    status: int,
    body: Any,
    *,
    message: str | None = None,
    retry_after: float | None = None,
) -> None:
    headers: dict[str, str] = {}
    if retry_after is not None:
        headers["retry-after"] = str(max(1, math.ceil(retry_after)))
        headers["retry-after-ms"] = str(round(retry_after * 1000))
    if isinstance(body, (str, bytes)):
        data = body.encode() if isinstance(body, str) else body
        send_bytes(h, status, data, "text/plain", headers=headers)
    else:
        send_json(
            h, status, body if body is not None else _error_payload(status, message), headers
        )


def _send_sse(h: FakeHandler, events: list[tuple[str, Any]], fault: _Fault | None) -> None:
    """Stream `events` in chunked encoding, one flushed chunk per event, applying `fault`."""
    start_stream(h)
    kind = fault.kind if fault is not None else None
    cut = _cut_point(events, fault.during) if fault is not None and kind == "cut" else None
    for number, (name, data) in enumerate(events):
        if number == cut:
            assert fault is not None
            if fault.abort:  # announce the whole event, send half of it, hang up
                encoded = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
                h.wfile.write(f"{len(encoded):x}\r\n".encode() + encoded[: len(encoded) // 2])
                h.wfile.flush()
                return drop(h)
            break  # a clean end of the body, without message_stop
        if number == 3 and kind == "malformed":
            write_chunk(h, f"event: {name}\ndata: {{not json\n\n".encode())
            break
        if number == 3 and kind == "drop":
            return drop(h)  # no terminating chunk: the client sees a cut-off body
        if number == 3 and kind == "stream_error":
            error = _error_payload(fault.status if fault else 529, None)
            write_chunk(h, f"event: error\ndata: {json.dumps(error)}\n\n".encode())
            break
        write_chunk(h, f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
    h.wfile.write(b"0\r\n\r\n")


def _cut_point(events: list[tuple[str, Any]], during: CutPoint) -> int:
    """The first event a stream cut `during` a text or tool-input block does not send:
    halfway through that block's deltas, keeping at least one; before
    `message_delta` when there is no such block."""
    wanted = _DELTA_TYPES[during]
    block: int | None = None
    deltas: list[int] = []
    for number, (name, data) in enumerate(events):
        if name != "content_block_delta" or data["delta"].get("type") != wanted:
            continue
        if block is not None and data["index"] != block:
            break
        if wanted == "input_json_delta" and not data["delta"].get("partial_json"):
            continue
        block = data["index"]
        deltas.append(number)
    if deltas:
        return deltas[max(1, len(deltas) // 2) - 1] + 1
    return next(n for n, (name, _) in enumerate(events) if name == "message_delta")
