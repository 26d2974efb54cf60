"""The agent loop: call the model, persist its turn, run its tools, persist the results.

Every persisted step is one commit (see `agentfs/store/trace.py:Trace.commit_step`).
A run first brings the trace up to date with the disk: it commits the
user's edits, adopts what an interrupted run left, answers tool calls that
never got results, and takes files waiting in the trace's `inbox/`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
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
            self._answer_interrupted(trace, result)
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

    def _run_tools(self, trace: Trace, assistant: Message) -> None:
        """Run each tool call; commit all results and the files they changed together."""
        context = ToolContext(self.workspace.root, trace.id)
        results: list[Message] = []
        parent = assistant.sequence
        for call in assistant.tool_calls or []:
            self._emit("tool_call", trace=trace.id, name=call.name, input=call.input)
            before = set(context.changed)
            outcome = self.tools.call(call.name, call.input, context)
            message = trace.new_message(
                "tool",
                outcome.content,
                tool_call_id=call.id,
                is_error=True if outcome.is_error else None,
                files_changed=sorted(context.changed - before) or None,
            )
            message.parent_sequence = parent
            parent = message.sequence
            results.append(message)
            self._emit("tool_result", trace=trace.id, name=call.name, is_error=outcome.is_error,
                       text=message.text)
        trace.commit_step("tool", results, extra_paths=sorted(context.changed))

    def _answer_interrupted(self, trace: Trace, result: RunResult) -> None:
        """Give tool calls left without results an explicit 'interrupted' result."""
        path = trace.main_path()
        calls_at = max((i for i, m in enumerate(path) if m.role == "assistant"), default=None)
        if calls_at is None or not path[calls_at].tool_calls:
            return
        answered = {m.tool_call_id for m in path[calls_at + 1 :] if m.role == "tool"}
        missing = [c for c in path[calls_at].tool_calls or [] if c.id not in answered]
        if not missing or any(m.role != "tool" for m in path[calls_at + 1 :]):
            return
        results = []
        parent = path[-1].sequence
        for call in missing:
            message = trace.new_message(
                "tool", INTERRUPTED, tool_call_id=call.id, is_error=True, synthetic="recovery"
            )
            message.parent_sequence = parent
            parent = message.sequence
            results.append(message)
        trace.commit_step("tool", results, summary=f"{len(results)} interrupted tool call(s)")
        result.steps.append("tool")
        self._emit("recovered", trace=trace.id, interrupted=[c.name for c in missing])

    def _emit(self, kind: str, **data: Any) -> None:
        if self.on_event is not None:
            self.on_event(kind, data)
