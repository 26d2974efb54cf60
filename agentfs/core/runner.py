"""The agent loop: call the model, persist its turn, run its tools, persist the results.

Every persisted step is one commit (see `agentfs/store/trace.py:Trace.commit_step`).
A run first brings the trace up to date with the disk: it commits the
user's edits, adopts what an interrupted run left, finishes a tool step that
was cut short, and takes files waiting in the trace's `inbox/`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from agentfs.config import WorkspaceConfig
from agentfs.errors import AgentfsError
from agentfs.models.base import Model, ModelRequest, ModelResponse
from agentfs.store.gitrepo import GitRepo
from agentfs.store.messages import Message
from agentfs.store.trace import Trace
from agentfs.store.workspace import Workspace
from agentfs.tools import ToolContext, ToolRegistry, default_tools

INTERRUPTED = (
    "interrupted: the run stopped before this tool call finished, and agentfs does not "
    "run a tool twice on its own. Check the workspace and call it again if still needed."
)

EventSink = Callable[[str, dict[str, Any]], None]


@dataclass
class RunResult:
    """How a run ended."""

    trace_id: str
    iterations: int = 0
    stop: str = "end_turn"  # end_turn | max_iterations | nothing_to_do
    final_text: str = ""
    steps: list[str] = field(default_factory=list)


class Runner:
    """Runs traces of one workspace with one model."""

    def __init__(
        self,
        workspace: Workspace,
        repo: GitRepo,
        model: Model,
        *,
        config: WorkspaceConfig | None = None,
        tools: ToolRegistry | None = None,
        on_text: Callable[[str], None] | None = None,
        on_event: EventSink | None = None,
    ) -> None:
        self.workspace = workspace
        self.repo = repo
        self.model = model
        self.config = config or WorkspaceConfig()
        self.tools = tools or default_tools()
        self.on_text = on_text
        self.on_event = on_event

    def run(
        self,
        trace_id: str,
        messages: Sequence[str] = (),
        *,
        max_iterations: int | None = None,
    ) -> RunResult:
        """Append `messages` as user messages, then run until the model stops.

        Stops after `max_iterations` model calls (default from `agentfs.toml`);
        running again continues where it stopped.
        """
        trace = Trace(self.workspace, self.repo, trace_id)
        result = RunResult(trace.id)
        with trace.lock():
            trace.reload()
            result.steps.extend(trace.recover())
            self._finish_interrupted_step(trace, result)
            for path in trace.pending_inbox():
                message = trace.ingest(path)
                self._emit("ingested", trace=trace.id, sequence=message.sequence, file=path.name)
                result.steps.append("user")
            for text in messages:
                trace.commit_step("user", [trace.new_message("user", text)])
                result.steps.append("user")
            self._loop(trace, max_iterations or self.config.max_iterations, result)
        return result

    def _loop(self, trace: Trace, max_iterations: int, result: RunResult) -> None:
        while True:
            path = trace.main_path()
            if not path or path[-1].role == "system":
                raise AgentfsError(
                    f"trace {trace.id!r} has no user message yet",
                    hint=f"give one: agentfs run {trace.id} -m '...'",
                )
            last = path[-1]
            if last.role == "assistant" and not last.tool_calls:
                result.stop = "end_turn" if result.iterations else "nothing_to_do"
                result.final_text = result.final_text or last.text
                return
            if result.iterations >= max_iterations:
                result.stop = "max_iterations"
                return
            response = self.model.complete(self._request(trace, path), self.on_text)
            result.iterations += 1
            assistant = self._persist_response(trace, response)
            result.steps.append("assistant")
            result.final_text = response.text
            if response.tool_calls:
                self._run_tools(trace, assistant)
                result.steps.append("tool")

    def _request(self, trace: Trace, path: list[Message]) -> ModelRequest:
        system = path[0].text if path[0].role == "system" else ""
        sent = [m for m in path if m.role != "system"]
        calls_made = sum(
            1
            for m in trace.messages().values()
            if m.role == "assistant" and m.synthetic is None and m.branch_type is None
        )
        return ModelRequest(
            system=system,
            messages=sent,
            tools=self.tools.specs(),
            call_index=calls_made,
            max_tokens=self.config.max_tokens,
        )

    def _persist_response(self, trace: Trace, response: ModelResponse) -> Message:
        message = trace.new_message(
            "assistant",
            response.text,
            tool_calls=response.tool_calls or None,
            model=response.model or self.model.name,
            stop_reason=response.stop_reason,
            usage=response.usage,
            thinking=response.thinking,
        )
        trace.meta.iterations += 1
        trace.commit_step("assistant", [message])
        self._emit("assistant", trace=trace.id, sequence=message.sequence,
                   tool_calls=[c.name for c in response.tool_calls])
        return message

    def _run_tools(self, trace: Trace, assistant: Message, after: Message | None = None) -> None:
        """Run the assistant's tool calls that have no result yet; commit all results and
        the files they changed together.

        A call that had started when an earlier run died gets an "interrupted"
        result instead: it may have had effects, and agentfs never re-runs a tool.
        """
        context = ToolContext(self.workspace.root, trace.id, tmp_dir=trace.tmp_dir)
        parent = (after or assistant).sequence
        answered = self._answered(trace, assistant)
        in_flight = trace.in_flight()
        started = set(in_flight.started)
        results: list[Message] = []
        interrupted: list[str] = []
        for call in assistant.tool_calls or []:
            if call.id in answered:
                continue
            if call.id in started:
                touched = in_flight.files.get(call.id, [])
                context.changed.update(touched)
                message = trace.new_message(
                    "tool", INTERRUPTED, tool_call_id=call.id, is_error=True,
                    synthetic="recovery", files_changed=touched or None,
                )
                interrupted.append(call.name)
            else:
                self._emit("tool_call", trace=trace.id, name=call.name, input=call.input)
                trace.mark_started(call.id)
                context.before_change = partial(trace.record_change, call.id)
                before = set(context.changed)
                outcome = self.tools.call(call.name, call.input, context)
                message = trace.new_message(
                    "tool",
                    outcome.content,
                    tool_call_id=call.id,
                    is_error=True if outcome.is_error else None,
                    files_changed=sorted(context.changed - before) or None,
                )
                self._emit("tool_result", trace=trace.id, name=call.name,
                           is_error=outcome.is_error, text=message.text)
            message.parent_sequence = parent
            parent = message.sequence
            results.append(message)
        if results:
            summary = f"{len(interrupted)} interrupted tool call(s)" if interrupted else None
            trace.commit_step("tool", results, extra_paths=sorted(context.changed), summary=summary)
        trace.clear_in_flight()
        if interrupted:
            self._emit("recovered", trace=trace.id, interrupted=interrupted)

    @staticmethod
    def _answered(trace: Trace, assistant: Message) -> set[str]:
        path = trace.main_path()
        at = next(i for i, m in enumerate(path) if m.sequence == assistant.sequence)
        return {m.tool_call_id for m in path[at + 1 :] if m.role == "tool" and m.tool_call_id}

    def _finish_interrupted_step(self, trace: Trace, result: RunResult) -> None:
        """If the head is an assistant turn (or some of its results) whose tool calls
        are not all answered, finish that tool step before anything else."""
        path = trace.main_path()
        at = max((i for i, m in enumerate(path) if m.role == "assistant"), default=None)
        if at is None or not path[at].tool_calls:
            return
        if any(m.role != "tool" for m in path[at + 1 :]):
            return
        assistant = path[at]
        if {c.id for c in assistant.tool_calls or []} <= self._answered(trace, assistant):
            return
        self._run_tools(trace, assistant, after=path[-1])
        result.steps.append("tool")

    def _emit(self, kind: str, **data: Any) -> None:
        if self.on_event is not None:
            self.on_event(kind, data)
