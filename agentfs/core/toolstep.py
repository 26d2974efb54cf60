"""A tool step: the tool calls of one assistant turn, run, and their results committed.

Each result is written to its message file as soon as its call returns, so a
crash later in the step keeps it. One `tool` commit then takes all the
results, the workspace files the tools changed and the `injected_skills`
records. agentfs never runs a tool call twice: a call that had started when an
earlier run died is answered as interrupted (see docs/git-model.md). A call
that waits for the person's approval ends the step early: the results so far
and `approval.json` are committed as an `approval` step, and the next run
finishes the step once the call is answered (`agentfs/core/approval.py`).
"""

from __future__ import annotations

from functools import partial
from typing import Literal

from agentfs.core.approval import REFUSED, Answer, decide
from agentfs.core.fit import refused_reason
from agentfs.core.injection import record_injection, skill_records
from agentfs.core.session import Session
from agentfs.errors import AgentfsError
from agentfs.store.history import answered_ids, last_assistant, unanswered_calls
from agentfs.store.inflight import InFlight
from agentfs.store.messages import Message, ToolCall
from agentfs.store.trace import Trace
from agentfs.tools import ToolContext
from agentfs.tools.base import ToolResult

__all__ = [
    "INTERRUPTED",
    "NOT_RUN",
    "PendingTools",
    "finish_interrupted_step",
    "foreign_calls_problem",
    "record_skill_injections",
    "run_tools",
    "sync_skill_records",
]

#: The result of a call that had started when an earlier run died.
INTERRUPTED = (
    "interrupted: the run stopped before this tool call finished, and agentfs does not "
    "run a tool twice on its own. Check the workspace and call it again if still needed."
)

#: The result of a call answered under `--pending-tools skip`.
NOT_RUN = (
    "not run: agentfs did not receive this call from the model in this run (the trace's "
    "head was moved by an edit or a checkout), and it was asked to answer it as not run."
)

#: What to do with tool calls at the head that agentfs did not just receive.
PendingTools = Literal["refuse", "run", "skip"]


def run_tools(session: Session, assistant: Message, after: Message | None = None,
              *, not_run: bool = False, resumed: bool = False) -> bool:
    """Run the assistant's tool calls that have no result yet and commit the results.

    The calls run in order, each result written before the next call starts: that
    is what lets one in-flight record per step tell, after a crash, which call may
    have been running (`agentfs/store/inflight.py:InFlight.may_have_started`).

    Args:
      session: the run.
      assistant: the assistant message whose calls are run.
      after: the message the first new result follows (default: `assistant`).
      not_run: answer the calls "not run" instead of running them.
      resumed: the step was cut short by a crash: a call that may have started is
        answered "interrupted" instead of run.

    Returns:
      True if every call has its result; False if one waits for the person's
      approval (the results before it are committed with `approval.json`).
    """
    trace = session.trace
    context = ToolContext(trace.workspace.root, trace.id, tmp_dir=trace.tmp_dir)
    parent = (after or assistant).sequence
    answered = _answered(trace, assistant)
    in_flight = trace.in_flight() if resumed else InFlight()
    started = in_flight.may_have_started(
        [c.id for c in assistant.tool_calls or [] if c.id not in answered])
    results: list[Message] = []
    interrupted: list[str] = []
    waiting: ToolCall | None = None
    for call in assistant.tool_calls or []:
        if call.id in answered:
            continue
        if call.id in started:
            touched = in_flight.files.get(call.id, [])
            context.changed.update(touched)
            message = session.new_message(
                "tool", INTERRUPTED, tool_call_id=call.id, is_error=True,
                synthetic="recovery", files_changed=touched or None,
            )
            interrupted.append(call.name)
        elif not_run:
            message = session.new_message("tool", NOT_RUN, tool_call_id=call.id, is_error=True,
                                          synthetic="recovery")
        else:
            answer = decide(session, call, assistant.sequence,
                            asked=call.id == in_flight.waiting)
            if answer is None:
                waiting = call
                break
            message = (_refused(session, call) if answer is Answer.NO
                       else _call_tool(session, call, context))
        message.parent_sequence = parent
        parent = message.sequence
        trace.write_message(message)  # on disk at once: a crash later keeps it
        results.append(message)
    if interrupted:
        session.emit("recovered", trace=trace.id, interrupted=interrupted)
    if waiting is not None:  # results so far and the waiting call: one commit
        record_skill_injections(trace, assistant, results)
        if results or not trace.approval_committed():
            trace.commit_step("approval", results, written=True,
                              extra_paths=[*sorted(context.changed),
                                           trace.rel(trace.approval_path)],
                              summary=f"{waiting.name} waits for approval")
        return False
    dropped = trace.drop_approval() if trace.approval_path.exists() else []
    if results:
        record_skill_injections(trace, assistant, results)  # saved by the commit below
        summary = f"{len(interrupted)} interrupted tool call(s)" if interrupted else None
        trace.commit_step("tool", results, extra_paths=[*sorted(context.changed), *dropped],
                          summary=summary, written=True)
    elif dropped:
        trace.commit_step("approval", [], extra_paths=dropped, summary="approval.json removed")
    trace.clear_in_flight()
    return True


def _refused(session: Session, call: ToolCall) -> Message:
    """The result of a call the person refused: an error the model reads and goes on."""
    message = session.new_message("tool", REFUSED, tool_call_id=call.id, is_error=True)
    session.emit("tool_result", trace=session.trace.id, name=call.name, is_error=True,
                 text=REFUSED, synthetic=None)
    return message


def _call_tool(session: Session, call: ToolCall, context: ToolContext) -> Message:
    """Run one call; its result as a message (a failing tool gives an error result)."""
    trace = session.trace
    if not call.synthetic:
        session.emit("tool_call", trace=trace.id, name=call.name, input=call.input)
    context.before_change = partial(trace.record_change, call.id)
    before = set(context.changed)
    refused = refused_reason(call.input)
    outcome = (ToolResult(refused, is_error=True) if refused is not None
               else session.tools.call(call.name, call.input, context))
    message = session.new_message(
        "tool",
        outcome.content,
        tool_call_id=call.id,
        is_error=True if outcome.is_error else None,
        files_changed=sorted(context.changed - before) or None,
        synthetic=call.synthetic,
    )
    session.emit("tool_result", trace=trace.id, name=call.name, is_error=outcome.is_error,
                 text=message.text, synthetic=call.synthetic)
    return message


def finish_interrupted_step(session: Session, pending_tools: PendingTools) -> bool | None:
    """Finish the tool step at the head if its tool calls are not all answered.

    Only calls agentfs recorded as just received from the model are run (or
    answered as interrupted if they had started); the others follow
    `pending_tools`. A call that waits for approval is asked about again, or,
    if still unanswered, keeps waiting.

    Returns:
      True if the step was finished and committed; None if a call (still) waits
      for approval; False if there was nothing to finish.

    Raises:
      AgentfsError: calls agentfs did not receive wait, and `pending_tools` is `refuse`.
    """
    trace = session.trace
    path = trace.main_path()
    pending = unanswered_calls(path)
    if not pending:
        return False
    assistant = path[last_assistant(path)]
    foreign = _not_received(trace, pending)
    if foreign and pending_tools == "refuse":
        raise _foreign_calls_error(trace, assistant, foreign)
    done = run_tools(session, assistant, after=path[-1],
                     not_run=bool(foreign) and pending_tools == "skip", resumed=True)
    return True if done else None


def foreign_calls_problem(trace: Trace) -> AgentfsError | None:
    """The refusal the next run gives if the head's tool calls wait for results that
    agentfs did not just receive from the model (`finish_interrupted_step` with
    `--pending-tools refuse`, the default), or None: `agentfs doctor`'s check."""
    path = trace.main_path()
    pending = unanswered_calls(path)
    foreign = _not_received(trace, pending) if pending else []
    return _foreign_calls_error(trace, path[last_assistant(path)], foreign) if foreign else None


def _not_received(trace: Trace, pending: list[ToolCall]) -> list[ToolCall]:
    in_flight = trace.in_flight()
    return [c for c in pending if not in_flight.received_as(c)]


def _foreign_calls_error(trace: Trace, assistant: Message, foreign: list[ToolCall]
                         ) -> AgentfsError:
    names = ", ".join(c.name for c in foreign)
    return AgentfsError(
        f"trace {trace.id!r}: message #{assistant.sequence} asks for tool call(s) {names} "
        "that agentfs did not just receive from the model as they stand (the head was "
        "moved, or a call's tool or input changed, by an edit, a git checkout or a "
        "pull); they were not run",
        hint=f"`agentfs run {trace.id} --pending-tools run` runs them, "
        f"`--pending-tools skip` answers them as not run, or "
        f"`agentfs rewind {trace.id} {assistant.parent_sequence}` goes back before them",
        api_hint=f"POST /api/traces/{trace.id}/rewind with {{\"sequence\": "
        f"{assistant.parent_sequence}}} goes back before them (running or skipping them "
        f"is `agentfs run {trace.id} --pending-tools run|skip`, on the command line)",
    )


def record_skill_injections(trace: Trace, assistant: Message, results: list[Message]) -> None:
    """Note in `trace.meta` where each skill injected by `assistant`'s calls now is.

    Only in memory: the caller's `tool` commit saves it in `trace.json`.
    """
    by_id = {c.id: c for c in assistant.tool_calls or []}
    for message in results:
        call = by_id.get(message.tool_call_id or "")
        if call is not None and call.name == "skill" and not message.is_error:
            record_injection(trace.meta, str(call.input.get("name")), message)  # own loads count


def sync_skill_records(trace: Trace) -> None:
    """Bring `injected_skills` in line with the skill injections on the main path.

    A crash can leave injection results adopted from disk while the record in
    `trace.json` lagged behind. Only in memory: the run's next commit saves it
    (and without one, the next run derives the same records again).
    """
    path = trace.main_path()
    calls = {c.id: c for m in path for c in m.tool_calls or [] if c.name == "skill"}
    records = skill_records(trace.meta)
    for message in path:
        call = calls.get(message.tool_call_id or "")
        if call is None or message.is_error:
            continue
        record = records.get(call.input.get("name", ""))
        if record is None or record.sequence < message.sequence:
            record_injection(trace.meta, call.input["name"], message)


def _answered(trace: Trace, assistant: Message) -> set[str]:
    """Ids of `assistant`'s calls that have a result on the main path."""
    path = trace.main_path()
    at = next(i for i in range(len(path) - 1, -1, -1)  # near the end: look from there
              if path[i].sequence == assistant.sequence)
    return answered_ids(path, at)
