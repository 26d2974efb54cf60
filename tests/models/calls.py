"""What the providers' tests share: a tool, a scripted answer that calls it, a
request, and a sink that records what a model call says while it runs."""

from __future__ import annotations

from agentfs.models.base import ModelRequest, RetryNotice, ToolSpec
from agentfs.store.messages import Message

READ = ToolSpec("read", "Read a file", {"type": "object"})
ANSWER = {
    "text": "Let me read the notes before I answer you.",
    "tool_calls": [{"name": "read", "input": {"path": "notes/a.md", "lines": list(range(12))}}],
}


def request(*messages: Message) -> ModelRequest:
    return ModelRequest(system="You read notes.", tools=[READ], messages=list(messages) or [
        Message(id="m2", sequence=2, role="user", content="What do the notes say?")])


class Sink:
    """A `RetrySink` that records what it hears, in order."""

    def __init__(self) -> None:
        self.heard: list[str | RetryNotice] = []

    def __call__(self, text: str) -> None:
        self.heard.append(text)

    def retrying(self, notice: RetryNotice) -> None:
        self.heard.append(notice)

    def notices(self) -> list[RetryNotice]:
        return [h for h in self.heard if isinstance(h, RetryNotice)]
