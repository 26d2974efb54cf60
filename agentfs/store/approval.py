"""`traces/<id>/approval.json`: a tool call that waits for the person's yes or no.

When a run may not ask anyone (`agentfs run` or `agentfs watch` without a
terminal, a run started through the API), a call that needs approval is
written here, committed with the step, and the run stops. The person answers
by setting `answer` in the file, with `agentfs approve`, or on the page; the
next run reads the answer, removes the file (the step's commit records the
removal) and goes on. This module is the one reader and writer of the file;
what "needs approval" means is `agentfs/core/approval.py`'s.

Plain JSON and the standard library only: `agentfs status` reads it for every
trace and imports neither pydantic nor YAML.
"""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentfs.errors import AgentfsError
from agentfs.store.atomic import atomic_write
from agentfs.store.regularfile import read_trace_file
from agentfs.store.unicode import load_json

__all__ = [
    "APPROVAL_FILE", "Answer", "PendingApproval", "how_to_answer", "read_pending",
    "write_pending",
]

#: The file's name in the trace folder.
APPROVAL_FILE = "approval.json"


class Answer(enum.StrEnum):
    """The person's answer to a call that waits: run it, refuse it, or run it and every
    later call of the same tool for the rest of the run."""

    YES = "yes"
    NO = "no"
    ALWAYS = "always"


@dataclass
class PendingApproval:
    """One waiting call: which one, what it would do, and the answer once given."""

    call_id: str
    tool: str
    input: dict[str, Any]
    sequence: int  #: the assistant message that holds the call
    answer: Answer | None = None
    how_to_answer: str = field(default="")

    def render(self) -> bytes:
        data = asdict(self)
        data["answer"] = None if self.answer is None else str(self.answer)
        return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode()


def how_to_answer(trace_id: str) -> str:
    """The note written into the file: the ways to answer."""
    return (f'set "answer" to "yes", "no" or "always" (this tool for the rest of the run), '
            f"or run `agentfs approve {trace_id}` (--no, --always), or use the page of "
            "`agentfs serve`")


def write_pending(path: Path, trace_id: str, pending: PendingApproval, *,
                  tmp_dir: Path | None = None, durable: bool = False) -> None:
    """Write the file atomically (its `how_to_answer` filled in for `trace_id`)."""
    pending.how_to_answer = how_to_answer(trace_id)
    atomic_write(path, pending.render(), tmp_dir=tmp_dir, sync_dir=durable)


def read_pending(path: Path, git_path: str = "") -> PendingApproval | None:
    """The waiting call in `path`, or None if there is no such file.

    Raises:
      AgentfsError: the file is not JSON of this shape, or its answer is not one of
        yes, no, always (an edit gone wrong); the message names the file and the fix.
    """
    try:
        raw = read_trace_file(path)
    except FileNotFoundError:
        return None
    name = git_path or str(path)
    fix = (f'set "answer" to "yes", "no" or "always" (or null), or restore it with '
           f"`git checkout -- {name}`")
    try:
        data = load_json(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise AgentfsError(f"{name}: not valid JSON ({exc})", hint=fix) from None
    if not isinstance(data, dict):
        raise AgentfsError(f"{name}: not a JSON object", hint=fix)
    answer = data.get("answer")
    if isinstance(answer, bool):  # `true`/`false` typed by hand mean yes/no
        answer = "yes" if answer else "no"
    if isinstance(answer, str):
        answer = answer.strip().lower() or None
    if answer is not None and answer not in Answer.__members__.values():
        raise AgentfsError(f"{name}: answer {data.get('answer')!r} is not yes, no or always",
                           hint=fix)
    call_id, tool, sequence = data.get("call_id"), data.get("tool"), data.get("sequence")
    arguments = data.get("input", {})
    if not (isinstance(call_id, str) and isinstance(tool, str) and type(sequence) is int
            and isinstance(arguments, dict)):
        raise AgentfsError(f"{name}: call_id, tool, sequence or input is missing or wrong",
                           hint=f"restore it with `git checkout -- {name}`")
    return PendingApproval(call_id, tool, arguments, sequence,
                           None if answer is None else Answer(answer),
                           str(data.get("how_to_answer", "")))
