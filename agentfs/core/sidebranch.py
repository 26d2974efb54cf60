"""Level 2 compression on a Git side branch, ending in a summary commit on `main`.

The branch `agentfs/<trace>/compression-<n>` starts at main's head. The
request for a summary and the model's answer are committed there only, never
in main's work tree. The outcome is one commit on `main`: a summary message
whose `parent_sequence` is the first user message, so the main path becomes
system + first user message + summary, and whose second parent is the side
branch's head, so `git log --graph` shows where the summary came from.

A branch left without its outcome (a crash) is never merged: the next
compression starts a new branch, and the old one stays as a record.

Every side branch continues the main path's request as it was sent: the
same system prompt, the same messages, the same tool list and thinking
budget, and its own instructions in a user message at the end. So what was
already sent stays byte-identical (the prompt cache is read, and thinking
blocks are sent back with the prefix they were made with). A branch that may
not run some tools still offers them; calls to them get an error result.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace

from agentfs.core.goals import GoalTree
from agentfs.errors import AgentfsError
from agentfs.models.base import Model, ModelRequest
from agentfs.store.branches import branch_prefix
from agentfs.store.messages import Message
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
class Compression:
    """The outcome: the summary on main and the side branch it came from."""

    summary: Message
    branch: str
    branch_head: bytes


def side_calls(trace: Trace, branch_type: str) -> int:
    """Model calls completed on side branches of this type (replay's position)."""
    return int(trace.meta.context.get("side_calls", {}).get(branch_type, 0))


def next_branch(trace: Trace, branch_type: str) -> str:
    prefix = f"{branch_prefix(trace.id)}{branch_type}-"
    taken = {name[len(prefix) :] for name in trace.repo.branches(prefix)}
    number = 1
    while str(number) in taken:
        number += 1
    return f"{prefix}{number}"


def run_branch(
    trace: Trace,
    model: Model,
    branch_type: str,
    request: ModelRequest,
    prompt: str,
    *,
    tools: ToolRegistry | None = None,
    runnable: Collection[str] = (),
    max_turns: int = 8,
) -> tuple[str, bytes, str]:
    """Run a side branch: `prompt` after the messages of `request` (the main path's
    request, as sent), then model turns until the model stops calling tools. Each
    request is `request` with the branch's messages appended: system prompt, tool
    list and thinking budget unchanged. With `tools`, calls to the tools named in
    `runnable` run; other calls get an error result. Without `tools`, the first
    answer ends the branch and its calls are not kept. Everything is committed on
    the branch only. Returns (branch, its head, the model's last text)."""
    history = request.messages
    branch = next_branch(trace, branch_type)
    start = trace.repo.head()
    assert start is not None
    trace.repo.create_branch(branch, start)
    fields = {"branch_type": branch_type, "branch_id": branch}
    ask = trace.new_message("user", prompt, **fields)
    ask.parent_sequence = history[-1].sequence if history else None
    head = trace.commit_to_branch(branch, [ask])
    sent = [*history, ask]
    calls = side_calls(trace, branch_type)
    text = ""
    context = ToolContext(trace.workspace.root, trace.id, tmp_dir=trace.tmp_dir)
    for _ in range(max_turns):
        response = model.complete(replace(
            request, messages=list(sent), branch_type=branch_type, call_index=calls,
        ))
        calls += 1
        text = response.text
        wanted = response.tool_calls if tools is not None else []
        kept_blocks = response.blocks if wanted or not response.tool_calls else None
        answer = trace.new_message(
            "assistant", response.text, tool_calls=wanted or None,
            model=response.model or model.name, usage=response.usage,
            stop_reason=response.stop_reason, thinking=response.thinking,
            **({"blocks": kept_blocks} if kept_blocks else {}), **fields,
        )
        answer.parent_sequence = sent[-1].sequence
        head = trace.commit_to_branch(branch, [answer])
        sent.append(answer)
        if not wanted or tools is None:
            break
        results = []
        for call in wanted:
            if call.name in runnable:
                outcome = tools.call(call.name, call.input, context)
                content, is_error = outcome.content, outcome.is_error
            else:
                content, is_error = _not_run(call.name, branch_type, runnable), True
            result = trace.new_message(
                "tool", content, tool_call_id=call.id,
                is_error=True if is_error else None, **fields,
            )
            result.parent_sequence = sent[-1].sequence
            sent.append(result)
            results.append(result)
        head = trace.commit_to_branch(branch, results)
    trace.meta.context.setdefault("side_calls", {})[branch_type] = calls
    return branch, head, text


def _not_run(name: str, branch_type: str, runnable: Collection[str]) -> str:
    allowed = ", ".join(sorted(runnable)) or "no tools"
    return (f"not run: {name} does not run on a {branch_type} side branch (only {allowed} "
            "do); answer with text as asked")


def compress(trace: Trace, model: Model, request: ModelRequest) -> Compression:
    """Run a compression side branch after `request` (what main would send) and commit
    the summary on main. The caller holds the trace's lock."""
    path = trace.main_path()
    first_user = next((m for m in path if m.role == "user"), None)
    if first_user is None or not request.messages:
        raise AgentfsError(f"trace {trace.id!r} has nothing to compress yet")
    tree = GoalTree.load(trace.dir / GOALS_FILE)
    branch, head, text = run_branch(
        trace, model, COMPRESSION, request,
        SUMMARY_REQUEST.format(goals=tree.to_prompt(include_summary=True)), max_turns=1,
    )
    text = text.strip() or "(the model gave no summary)"
    summary = trace.new_message(
        "user",
        f"{SUMMARY_HEADER}\n\n{text}\n\n## Goals\n{tree.to_prompt(include_summary=True)}",
        synthetic="summary",
        goal_id=tree.focus,
        source_branch=branch,
    )
    summary.parent_sequence = first_user.sequence
    trace.commit_step("summary", [summary], extra_parents=[head], summary=f"from {branch}")
    return Compression(summary, branch, head)
