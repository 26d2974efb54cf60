"""Test doubles for users' own tests: models that need no network.

    model = ScriptedModel()
    model.enqueue(ModelResponse(text="hi"), ModelResponse(tool_calls=[...]))
    Runner(ws, repo, model).run("t")
    assert model.requests[0].messages[-1].text == "hello"

    model = FunctionModel(lambda request: ModelResponse(text=f"{len(request.messages)} messages"))
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from agentfs.models.base import ModelRequest, ModelResponse, TextSink
from agentfs.store.messages import Usage

Respond = Callable[[ModelRequest], ModelResponse]


class FunctionModel:
    """A model whose answers come from a function of the request."""

    def __init__(self, respond: Respond, *, name: str = "function") -> None:
        self.respond = respond
        self.name = name
        self.requests: list[ModelRequest] = []

    def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelResponse:
        self.requests.append(request)
        response = self.respond(request)
        if response.text and on_text is not None:
            on_text(response.text)
        response.model = response.model or self.name
        if response.usage is None:
            response.usage = Usage()
        if response.tool_calls and response.stop_reason == "end_turn":
            response.stop_reason = "tool_use"
        return response


class ScriptedModel(FunctionModel):
    """A model answering with queued responses in order; records every request.

    When the queue is empty it answers with a plain text saying so, without
    tool calls, so a run ends instead of hanging.
    """

    def __init__(self, *responses: ModelResponse | str, name: str = "scripted") -> None:
        super().__init__(self._next, name=name)
        self._queue: deque[ModelResponse] = deque()
        self.enqueue(*responses)

    def enqueue(self, *responses: ModelResponse | str) -> None:
        """Queue responses; a string is a text-only answer."""
        self._queue.extend(
            ModelResponse(text=r) if isinstance(r, str) else r for r in responses
        )

    def _next(self, request: ModelRequest) -> ModelResponse:
        if not self._queue:
            return ModelResponse(text="(scripted model: no more responses)")
        return self._queue.popleft()
