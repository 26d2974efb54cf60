"""Asking before acting: which tool calls wait for the person, and how they are answered.

Under `approve = "acting"` (`[tools]` in agentfs.toml, `--approve`), a call of
an acting tool (`agentfs/tools/base.py:Tool.acting`) runs only after the
person's yes. The run asks whoever can answer now (`Asker`: the chat's
terminal); when no one can, the call is written to `approval.json`
(`agentfs/store/approval.py`), committed, and the run stops until an answer
is written there. "always" approves the tool for the rest of the run (a chat
session keeps it for the session). A refused call gets an error result saying
so and the model goes on.

Crash safety rests on the in-flight record (`agentfs/store/inflight.py`): the
call is marked waiting (not started) before anyone is asked, and unmarked
just before it runs or is refused, so a kill at any point either asks again
or answers the call "interrupted"; it never runs twice nor after a no.
"""

from __future__ import annotations

from typing import Literal, Protocol

from agentfs.core.fit import refused_reason
from agentfs.core.session import Session
from agentfs.errors import AgentfsError
from agentfs.store.approval import Answer, PendingApproval
from agentfs.store.history import unanswered_calls
from agentfs.store.messages import ToolCall
from agentfs.store.trace import Trace

__all__ = [
    "REFUSED", "Answer", "ApprovalPolicy", "Asker", "answer_waiting", "decide", "needs_approval",
]

#: `[tools] approve`: which calls wait for the person.
ApprovalPolicy = Literal["acting", "none"]

#: The result of a call the person refused.
REFUSED = ("refused by the user: the person did not allow this call to run, so it was not "
           "run. Go on without it, or ask them how to proceed.")


class Asker(Protocol):
    """Asks the person about one call now; None when no answer can be had now (the
    call then waits in `approval.json`)."""

    def __call__(self, trace_id: str, call: ToolCall) -> Answer | None: ...


def needs_approval(session: Session, call: ToolCall) -> bool:
    """Does this call wait for the person: an acting tool under `approve = "acting"`,
    not approved "always" in this run? Calls the framework makes itself, calls that
    will not run anyway (unknown tool, input refused) and read-only tools never do."""
    if session.approve != "acting" or call.synthetic or call.name in session.always:
        return False
    tool = session.tools.get(call.name)
    return tool is not None and tool.acting and refused_reason(call.input) is None


def decide(session: Session, call: ToolCall, sequence: int, *, asked: bool = False,
           ) -> Answer | None:
    """The person's answer to `call` (of assistant message `sequence`), YES when it
    needs none; None when it waits: then it is in `approval.json` (not yet committed:
    the caller's step commits it).

    A call already asked about (`asked`: the in-flight record marks it waiting) or
    waiting in `approval.json` needs its answer whatever the run's policy: a run
    without `--approve` (a watcher woken by an inbox file) never runs it unanswered.
    """
    trace = session.trace
    pending = trace.pending_approval() if trace.approval_path.exists() else None
    if pending is not None and not _shows(pending, call):
        pending = None  # left from a call no longer at the head, or edited: replaced below
    if pending is None and not asked and not needs_approval(session, call):
        return Answer.YES
    answer = pending.answer if pending is not None else None
    if answer is None:
        trace.mark_waiting(call.id)  # before anyone is asked: a kill now leaves it unstarted
        if session.ask is not None:
            answer = session.ask(trace.id, call)
    if answer is None:
        if pending is None:
            trace.write_approval(PendingApproval(call.id, call.name, call.input, sequence))
        session.emit("approval_waiting", trace=trace.id, call_id=call.id, name=call.name,
                     input=call.input, sequence=sequence)
        return None
    trace.mark_waiting(None)  # from here a kill answers it "interrupted": never run twice
    if answer is Answer.ALWAYS:
        session.always.add(call.name)
    session.emit("approval", trace=trace.id, call_id=call.id, name=call.name,
                 answer=str(answer))
    return answer


def _shows(pending: PendingApproval, call: ToolCall) -> bool:
    """Does `approval.json` show this very call: its id, tool and input? An answer is
    only ever taken for the call the person was shown."""
    return (pending.call_id, pending.tool, pending.input) == (call.id, call.name, call.input)


def answer_waiting(trace: Trace, answer: Answer) -> PendingApproval:
    """Record the person's answer in `approval.json` and commit it (kind `approval`), so
    `git log` shows who allowed what; the next run acts on it (`agentfs approve`, the
    API, the page).

    Raises:
      AgentfsError: no call of the trace waits for an answer, or `approval.json` does
        not show the call that waits (edited, or left from an earlier head).
      TraceLocked: a run holds the trace.
    """
    with trace.lock():
        pending = trace.pending_approval()
        if pending is None or pending.answer is not None:
            raise AgentfsError(
                f"trace {trace.id!r} has no tool call waiting for approval"
                + (f" (the call to {pending.tool} is answered {pending.answer} already)"
                   if pending is not None else ""),
                hint=f"`agentfs status` shows the traces that wait; `agentfs run {trace.id}` "
                "continues this one",
            )
        if not any(_shows(pending, c) for c in unanswered_calls(trace.main_path())):
            name = trace.rel(trace.approval_path)
            raise AgentfsError(
                f"{name} shows a call to {pending.tool} that no message at the head of "
                f"trace {trace.id!r} waits on as shown (the file, or the message, was "
                "changed since it was written); nothing was answered",
                hint=f"restore it with `git checkout -- {name}`, or run "
                f"`agentfs run {trace.id}`: a call that waits is shown again as it stands",
            )
        pending.answer = answer
        trace.write_approval(pending)
        trace.commit_step("approval", [], extra_paths=[trace.rel(trace.approval_path)],
                          summary=f"{pending.tool} answered {answer}")
    return pending
