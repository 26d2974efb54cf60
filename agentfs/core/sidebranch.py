"""Side branches: a conversation on its own Git branch, ending in an outcome merged into `main`.

A branch `agentfs/<trace>/<type>-<base>` (named by
`agentfs/store/branches.py:branch_name`) starts at main's head. Its messages
(the request, the model's turns, their tool results) are committed there only,
never in main's work tree. When the model is done, the branch's last commit
(kind `outcome`) writes what it produced: a summary message, knowledge
item files. Merging copies exactly those files onto `main` in one commit whose
second parent is the branch's head, so `git log --graph` shows where they came
from. Everything is read back from the branch, so a branch cut short by a crash
is continued from its last commit, and a merge cut short is redone with the
same bytes (`agentfs/core/sidequeue.py` runs branches as a queue).

Every side branch continues the main path's request as it was sent: the
same system prompt, the same messages, the same tool list and thinking
budget, and its own instructions in a user message at the end. So what was
already sent stays byte-identical (the prompt cache is read, and thinking
blocks are sent back with the prefix they were made with). A branch that may
not run some tools still offers them; calls to them get an error result.

This module also holds the compression branch: a summary that replaces the
main path after the first user message.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace

from agentfs.core.fit import fit_turn, refused_reason
from agentfs.core.goals import GoalTree
from agentfs.core.usage import turn_timing
from agentfs.errors import AgentfsError
from agentfs.models.base import Model, ModelRequest
from agentfs.store.branches import queue_step_files
from agentfs.store.commits import StepKind, parse_trailers
from agentfs.store.history import is_final_answer
from agentfs.store.messages import Message, ToolCall, parse_message
from agentfs.store.meta import QueueStep
from agentfs.store.trace import Trace
from agentfs.store.workspace import GOALS_FILE
from agentfs.tools.base import ToolContext, ToolRegistry

COMPRESSION = "compression"

SUMMARY_REQUEST = """\
[agentfs: compression] The conversation is getting too long for the context window. \
Write a summary that lets you continue the work from it alone: the task and its \
constraints, what has been done and found (with file names), decisions and their \
reasons, and what remains to do. Do not call tools; answer with the summary only.

Current goals, with the summaries of finished ones:
{goals}"""

SUMMARY_HEADER = "[agentfs: summary of the conversation so far, replacing the messages it covers]"


@dataclass
class SideWork:
    """What the branches of one queue share: the trace, the model, the main path's
    request as sent (`request.messages` is the path after Level 1) and its tools."""

    trace: Trace
    model: Model
    request: ModelRequest
    tools: ToolRegistry
    emit: Callable[..., None] = lambda kind, **data: None


@dataclass
class Merged:
    """A branch's outcome, now on `main`: the messages and other files it added."""

    step: QueueStep
    messages: list[Message]
    files: list[str]
    kind: str = "outcome"  # of the merge commit: `outcome`, or `summary` for compression


def side_calls(trace: Trace, branch_type: str) -> int:
    """Model calls made on merged side branches of this type (replay's position)."""
    return trace.meta.context.side_calls.get(branch_type, 0)


def branch_head(trace: Trace, step: QueueStep) -> bytes | None:
    assert step.branch is not None
    return trace.repo.head(b"refs/heads/" + step.branch.encode())


def has_outcome(trace: Trace, step: QueueStep) -> bool:
    """Has the step's branch committed its outcome (its head is an `outcome` commit)?"""
    head = branch_head(trace, step)
    if head is None:
        return False
    commit = trace.repo.commit(head)
    kind = parse_trailers(commit.message).get("Agentfs-Kind")
    # a branch not yet written to points at main's commit, where merges have two parents
    return kind == StepKind.OUTCOME and len(commit.parents) == 1


def branch_files(trace: Trace, step: QueueStep) -> list[Message]:
    """The message files on the step's branch (from `step.first` on), in order: its
    conversation, then the messages of its outcome."""
    head = branch_head(trace, step)
    if head is None:
        return []
    assert step.first is not None
    found = []
    for path in queue_step_files(trace.repo, head, trace.rel(trace.messages_dir), step.first):
        data = trace.repo.read_file(head, path)
        assert data is not None
        found.append(parse_message(trace.workspace.root / path, data))
    return found  # in sequence order already


def run_branch(
    work: SideWork,
    step: QueueStep,
    prompt: str,
    *,
    runnable: Collection[str] | None = None,
    max_turns: int = 8,
) -> str:
    """Run the step's branch, or continue it from its last commit: `prompt` after
    the messages of the main path's request, then model turns until the model stops
    calling tools. Each request is `work.request` with the branch's messages
    appended: system prompt, tool list and thinking budget unchanged. With
    `runnable`, calls to those tools run (calls to others get an error result);
    without, the first answer ends the branch and its calls are not kept.
    Everything is committed on the branch only. Returns the model's last text."""
    trace, history = work.trace, work.request.messages
    assert step.branch is not None
    if branch_head(trace, step) is None:
        start = trace.repo.head()
        assert start is not None
        trace.repo.create_branch(step.branch, start)
    fields = {"branch_type": step.type, "branch_id": step.branch}
    sent = [m for m in branch_files(trace, step) if m.branch_id == step.branch]
    if sent:  # continued after a crash: later messages go after these
        trace.meta.next_sequence = max(trace.meta.next_sequence, sent[-1].sequence + 1)
    else:
        ask = trace.new_message("user", prompt, **fields)
        ask.parent_sequence = history[-1].sequence if history else None
        trace.commit_to_branch(step.branch, [ask])
        sent = [ask]
    context = ToolContext(trace.workspace.root, trace.id, tmp_dir=trace.tmp_dir)
    while True:
        turns = [m for m in sent if m.role == "assistant"]
        last = sent[-1]
        if last.role == "assistant" and last.tool_calls and runnable is not None:
            results = [_run_call(work, step, call, context, runnable=runnable,
                                 fields=fields)
                       for call in last.tool_calls]  # read-only tools: safe to run on resume
            for result in results:
                result.parent_sequence = sent[-1].sequence
                sent.append(result)
            trace.commit_to_branch(step.branch, results)
            continue
        if last.role == "assistant" or len(turns) >= max_turns:
            return turns[-1].text if turns else ""
        started = time.monotonic()
        response = work.model.complete(replace(
            work.request, messages=[*history, *sent], branch_type=step.type,
            call_index=side_calls(trace, step.type) + len(turns),
        ))
        wanted = response.tool_calls if runnable is not None else []
        kept_blocks = response.blocks if wanted or not response.tool_calls else None
        answer = trace.new_message(
            "assistant", response.text, tool_calls=wanted or None,
            model=response.model or work.model.name, usage=response.usage,
            timing=turn_timing(response, started), stop_reason=response.stop_reason, thinking=response.thinking,
            **({"blocks": kept_blocks} if kept_blocks else {}), **fields,
        )
        answer = fit_turn(answer)  # an oversized input, or one no file can hold, is not run
        answer.parent_sequence = sent[-1].sequence
        trace.commit_to_branch(step.branch, [answer])
        sent.append(answer)


def _run_call(work: SideWork, step: QueueStep, call: ToolCall, context: ToolContext, *,
              runnable: Collection[str], fields: dict[str, str]) -> Message:
    refused = refused_reason(call.input)
    if refused is not None:
        content, is_error = refused, True
    elif call.name in runnable:
        outcome = work.tools.call(call.name, call.input, context)
        content, is_error = outcome.content, outcome.is_error
    else:
        allowed = ", ".join(sorted(runnable)) or "no tools"
        content, is_error = (f"not run: {call.name} does not run on a {step.type} side branch "
                             f"(only {allowed} do); answer with text as asked"), True
    return work.trace.new_message("tool", content, tool_call_id=call.id,
                                  is_error=True if is_error else None, **fields)


def commit_outcome(work: SideWork, step: QueueStep, messages: Sequence[Message],
                   files: dict[str, bytes], summary: str) -> bytes:
    """Commit the branch's outcome on the branch: the messages and files merging copies."""
    assert step.branch is not None
    return work.trace.commit_to_branch(step.branch, messages, StepKind.OUTCOME, files=files,
                                       summary=summary)


def take_outcome(trace: Trace, step: QueueStep) -> Merged:
    """Write the files the branch's `outcome` commit added into the work tree (the
    caller commits them on main): its messages are returned to commit as a step."""
    head = branch_head(trace, step)
    assert head is not None
    parent = trace.repo.commit(head).parents[0]
    messages_dir = trace.rel(trace.messages_dir)
    messages, files = [], []
    for prefix in (messages_dir, trace.rel(trace.workspace.knowledge_dir)):
        before = trace.repo.walk(parent, prefix)
        for path, entry in sorted(trace.repo.walk(head, prefix).items()):
            if before.get(path) == entry:
                continue
            data = trace.repo.read_file(head, path)
            assert data is not None
            if prefix == messages_dir:
                messages.append(parse_message(trace.workspace.root / path, data))
            else:
                trace.write_file(path, data)
                files.append(path)
    return Merged(step, messages, files)


# --- compression -------------------------------------------------------------


def compression_branch(work: SideWork, step: QueueStep) -> None:
    """Ask for a summary on the branch; its outcome is the summary message, whose
    `parent_sequence` is the first user message (the path skips what it covers)."""
    trace = work.trace
    path = trace.main_path()
    first_user = next((m for m in path if m.role == "user"), None)
    if first_user is None or not work.request.messages:
        raise AgentfsError(f"trace {trace.id!r} has nothing to compress yet")
    tree = GoalTree.load(trace.dir / GOALS_FILE)
    goals = tree.to_prompt(include_summary=True)
    text = run_branch(work, step, SUMMARY_REQUEST.format(goals=goals), max_turns=1)
    text = text.strip() or "(the model gave no summary)"
    summary = trace.new_message(
        "user", f"{SUMMARY_HEADER}\n\n{text}\n\n## Goals\n{goals}",
        synthetic="summary", goal_id=tree.focus, source_branch=step.branch,
        # compressed after an answer (`agentfs compress`): still waiting for the user
        answered=True if is_final_answer(path[-1]) else None,
    )
    summary.parent_sequence = first_user.sequence
    commit_outcome(work, step, [summary], {}, f"summary #{summary.sequence}")

