"""Commit messages of agentfs steps: a readable first line plus Git trailers.

    demo: assistant #5 I read the notes and wrote a summary.

    Agentfs-Trace: demo
    Agentfs-Sequence: 5
    Agentfs-Kind: assistant

`git log --grep 'Agentfs-Trace: demo'` and `git interpret-trailers --parse`
both work on these messages.
"""

from __future__ import annotations

from dataclasses import dataclass

SUMMARY_WIDTH = 72

#: Kinds of step, each one commit.
KINDS = (
    "init",  # workspace created
    "create",  # trace created (trace.json + system message)
    "user",  # user message ingested
    "assistant",  # model response
    "tool",  # tool results of one iteration, with the files the tools changed
    "edit",  # changes the user made under the trace, committed before a run
    "recover",  # work of an interrupted run adopted on resume
    "rewind",  # head moved
    "summary",  # compression summary
    "branch",  # a step on a side branch
    "outcome",  # a side branch's result recorded on main
    "error",  # a run failed; trace.json's context.last_error says why
)


@dataclass(frozen=True)
class Step:
    """What one commit records."""

    trace_id: str  # empty for workspace-level steps such as `init`
    kind: str
    sequence: int | None = None
    summary: str = ""
    goal_id: str | None = None
    body: str = ""

    def message(self) -> bytes:
        """The full commit message."""
        head = f"{self.trace_id or 'agentfs'}: {self.kind}"
        if self.sequence is not None:
            head += f" #{self.sequence}"
        short = one_line(self.summary, SUMMARY_WIDTH - len(head) - 1)
        if short:
            head += f" {short}"
        trailers = [f"Agentfs-Trace: {self.trace_id}"] if self.trace_id else []
        if self.sequence is not None:
            trailers.append(f"Agentfs-Sequence: {self.sequence}")
        trailers.append(f"Agentfs-Kind: {self.kind}")
        if self.goal_id:
            trailers.append(f"Agentfs-Goal: {self.goal_id}")
        parts = [head]
        if self.body.strip():
            parts.append(self.body.strip())
        parts.append("\n".join(trailers))
        return ("\n\n".join(parts) + "\n").encode("utf-8")


def one_line(text: str, width: int) -> str:
    """First non-empty line of `text`, cut to `width` characters with an ellipsis."""
    for line in text.splitlines():
        line = " ".join(line.split())
        if line:
            if len(line) > width:
                return line[: max(width - 1, 0)] + "…"
            return line
    return ""


def parse_trailers(message: bytes | str) -> dict[str, str]:
    """The `Key: value` trailers of a commit message's last paragraph."""
    text = message.decode("utf-8", "replace") if isinstance(message, bytes) else message
    paragraphs = [p for p in text.strip().split("\n\n") if p.strip()]
    if len(paragraphs) < 2:
        return {}
    trailers: dict[str, str] = {}
    for line in paragraphs[-1].splitlines():
        key, sep, value = line.partition(": ")
        if not sep or " " in key:
            return {}
        trailers[key] = value.strip()
    return trailers


def subject(message: bytes | str) -> str:
    """The first line of a commit message."""
    text = message.decode("utf-8", "replace") if isinstance(message, bytes) else message
    return text.split("\n", 1)[0]
