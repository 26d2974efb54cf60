"""Commit messages of agentfs steps: a readable first line plus Git trailers.

    demo: assistant #5 I read the notes and wrote a summary.

    Agentfs-Trace: demo
    Agentfs-Sequence: 5
    Agentfs-Kind: assistant
    Agentfs-Usage: claude-sonnet-4-5 in=1200 cache_read=9800 cache_write=0 out=310 model_ms=4210 wall_ms=4388

`git log --grep 'Agentfs-Trace: demo'` and `git interpret-trailers --parse`
both work on these messages.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from agentfs.store.messages import CONTROL_CHARACTERS, Message
from agentfs.store.spent import Spent

SUMMARY_WIDTH = 72

class StepKind(enum.StrEnum):
    """Kinds of step, each one commit (the `Agentfs-Kind` trailer)."""

    INIT = "init"  # workspace created
    CREATE = "create"  # trace created (trace.json + system message)
    USER = "user"  # user message ingested
    ASSISTANT = "assistant"  # model response
    TOOL = "tool"  # tool results of one iteration, with the files the tools changed
    APPROVAL = "approval"  # a tool call waits for the person (approval.json), or was answered
    EDIT = "edit"  # changes the user made under the trace, committed before a run
    RECOVER = "recover"  # work of an interrupted run adopted on resume
    REWIND = "rewind"  # head moved
    SUMMARY = "summary"  # compression summary
    BRANCH = "branch"  # a step on a side branch
    OUTCOME = "outcome"  # a side branch's result: its last commit, then merged on main
    QUEUE = "queue"  # a side-branch queue planned or abandoned (trace.json only)
    ERROR = "error"  # a run failed; trace.json's context.last_error says why
    UPGRADE = "upgrade"  # files moved to the current trace format (agentfs/store/upgrade.py)
    SYNC = "sync"  # `agentfs sync`: a clone's dropped files, or its merge with the remote


@dataclass(frozen=True)
class Step:
    """What one commit records."""

    trace_id: str  # empty for workspace-level steps such as `init`
    kind: StepKind | str  # a StepKind; text is checked against them
    sequence: int | None = None
    summary: str = ""
    goal_id: str | None = None
    body: str = ""
    usage: str = ""  # an assistant step's `Agentfs-Usage` (`usage_trailer`)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", StepKind(self.kind))  # ValueError on an unknown kind

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
        if self.goal_id:  # a message file may hold any; a trailer never spans two lines
            trailers.append(f"Agentfs-Goal: {one_line(self.goal_id, SUMMARY_WIDTH)}")
        if self.usage:
            trailers.append(f"Agentfs-Usage: {self.usage}")
        parts = [head]
        if self.body.strip():
            parts.append(self.body.strip())
        parts.append("\n".join(trailers))
        return ("\n\n".join(parts) + "\n").encode("utf-8")


#: The fields of an `Agentfs-Usage` trailer after the model, as `Spent` names them.
_USAGE_FIELDS = {"in": "input_tokens", "cache_read": "cache_read_input_tokens",
                 "cache_write": "cache_creation_input_tokens", "out": "output_tokens",
                 "model_ms": "model_ms", "wall_ms": "wall_ms"}


def usage_trailer(message: Message) -> str:
    """What an assistant message's call used, as one trailer value (empty when
    nothing was recorded): the model, then `key=number` pairs."""
    if message.usage is None and message.timing is None:
        return ""
    spent = Spent()
    spent.add(message.usage, message.timing)
    model = "".join((message.model or "unknown").split())
    return " ".join([model, *(f"{key}={getattr(spent, name)}"
                              for key, name in _USAGE_FIELDS.items())])


def parse_usage(value: str) -> tuple[str, Spent] | None:
    """The model and sums of an `Agentfs-Usage` trailer; None if it is not one."""
    model, *pairs = value.split()
    fields = {}
    for pair in pairs:
        key, _, number = pair.partition("=")
        if key not in _USAGE_FIELDS or not number.isdigit():
            return None
        fields[_USAGE_FIELDS[key]] = int(number)
    return model, Spent(calls=1, **fields)


def one_line(text: str, width: int) -> str:
    """First non-empty line of `text`, cut to `width` characters with an ellipsis.
    Control characters become spaces: a NUL in a commit message fails `git fsck`."""
    for raw in text.splitlines():
        line = " ".join(CONTROL_CHARACTERS.sub(" ", raw).split())
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
