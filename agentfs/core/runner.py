"""The agent loop: call the model, persist its turn, run its tools, persist the results.

Every persisted step is one commit (see `agentfs/store/trace.py:Trace.commit_step`).
A run first brings the trace up to date with the disk: it commits the
user's edits, adopts what an interrupted run left, finishes a tool step that
was cut short, and takes files waiting in the trace's `inbox/`.

Injection (see docs/context.md): declared skills are injected as synthetic
`skill` calls, and every `context_injection_interval` iterations a synthetic
`get_current_context` call is appended to the model's tool calls.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from agentfs.config import WorkspaceConfig
from agentfs.core.compaction import compress_completed_goals
from agentfs.core.context import (
    CONTEXT_TOOL,
    CommandHook,
    ContextHook,
    ContextSources,
    context_tool,
)
from agentfs.core.delegate import delegate_tool
from agentfs.core.goals import GoalTree, goal_tool
from agentfs.core.injection import DEFAULT_SKILL_RECENCY, skills_to_inject, synthetic_calls
from agentfs.core.knowledge import knowledge_search_tool
from agentfs.core.reflection import evaluate_knowledge, pending_items, reflect
from agentfs.core.sidebranch import compress
from agentfs.core.tokens import TokenCounter
from agentfs.errors import AgentfsError, ConfigError
from agentfs.models.base import Model, ModelRequest, ModelResponse, ToolSpec
from agentfs.skills import SkillCatalog, load_skills
from agentfs.store.gitrepo import GitRepo
from agentfs.store.messages import Message, ToolCall, Usage
from agentfs.store.trace import InjectedSkill, Trace
from agentfs.store.workspace import GOALS_FILE, Workspace
from agentfs.tools import FILE_TOOLS, ToolContext, ToolRegistry
from agentfs.tools.base import Tool
from agentfs.tools.bash import bash_tool
from agentfs.tools.plugins import plugin_tools
from agentfs.tools.skill import skill_tool

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
    stop: str = "end_turn"  # end_turn | max_iterations | nothing_to_do | stopped
    final_text: str = ""
    steps: list[str] = field(default_factory=list)
    #: Tokens the provider reported for every call of the run: the main path, side
    #: branches (reflection, knowledge evaluation, compression) and delegated
    #: children (offline models report none).
    input_tokens: int = 0
    output_tokens: int = 0

    def count(self, usage: Usage | None) -> None:
        if usage is not None:
            self.input_tokens += (usage.input_tokens + usage.cache_read_input_tokens
                                  + usage.cache_creation_input_tokens)
            self.output_tokens += usage.output_tokens


@dataclass
class _Metered:
    """The run's model, adding what each call used to the run's result."""

    model: Model
    result: RunResult
    name: str = field(init=False)

    def __post_init__(self) -> None:
        self.name = self.model.name

    def complete(self, request: ModelRequest, on_text: Callable[[str], None] | None = None,
                 ) -> ModelResponse:
        response = self.model.complete(request, on_text)
        self.result.count(response.usage)
        return response


@dataclass
class _Session:
    """What one run of one trace needs besides the trace itself."""

    trace: Trace
    tools: ToolRegistry
    declared_skills: list[str]
    skill_recency: int
    depth: int
    started_with_skills: bool = False
    compressed_at: int | None = None  # head right after the last Level 2 compression


class Runner:
    """Runs traces of one workspace with one model."""

    def __init__(
        self,
        workspace: Workspace,
        repo: GitRepo,
        model: Model,
        *,
        config: WorkspaceConfig | None = None,
        tools: Sequence[Tool] = (),
        skills: SkillCatalog | None = None,
        context_hooks: Sequence[tuple[str, ContextHook]] = (),
        on_text: Callable[[str], None] | None = None,
        on_event: EventSink | None = None,
        command_env: Mapping[str, str] | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> None:
        """`command_env` is what bash commands and hook commands see (default: only a
        PATH); the CLI passes the safe part of its environment."""
        self.workspace = workspace
        self.command_env = command_env
        self.stop = stop or (lambda: False)
        self.repo = repo
        self.model = model
        self.config = config or WorkspaceConfig()
        self.extra_tools = list(tools)
        self.skills = skills if skills is not None else load_skills(workspace.skills_dir)
        self.python_hooks = list(context_hooks)
        self.command_hooks = [
            (h.name, CommandHook(h.name, h.command, h.timeout, workspace.root, command_env))
            for h in self.config.context_hooks
        ]
        self.on_text = on_text
        self.on_event = on_event
        self.tokens = TokenCounter()
        self._depth = 0

    def register_context_hook(self, name: str, hook: ContextHook) -> None:
        """Add a callable (given the trace id) whose text appears in every context injection."""
        self.python_hooks.append((name, hook))

    def run(
        self,
        trace_id: str,
        messages: Sequence[str | dict[str, str]] = (),
        *,
        max_iterations: int | None = None,
        inject_skills: Sequence[str] = (),
        skill_recency_threshold: int = DEFAULT_SKILL_RECENCY,
        system_prompt: str | None = None,
        preset: str | None = None,
    ) -> RunResult:
        """Append `messages` as user messages, then run until the model stops.

        Args:
          trace_id: the trace; created (with its system prompt) if it does not exist.
          messages: user messages to append first: text, or `{"role", "content"}`
            dicts; a `system` one sets a new trace's system prompt.
          system_prompt, preset: for a new trace's system prompt (see
            `agentfs/core/system_prompt.py:build_system_prompt`).
          max_iterations: model calls before stopping (default from `agentfs.toml`);
            running again continues where it stopped.
          inject_skills: skills this call needs in context; injected at the start and
            re-injected when no longer among the last `skill_recency_threshold`
            messages sent.
        """
        for name in inject_skills:
            self.skills.get(name)  # unknown skills fail before anything is written
        if skill_recency_threshold < 1:
            raise AgentfsError("skill_recency_threshold must be at least 1")
        system, texts = _split_messages(messages)
        trace = Trace(self.workspace, self.repo, trace_id)
        if not trace.meta_path.exists():
            if not texts:
                raise AgentfsError(
                    f"trace {trace.id!r} does not exist and no first message was given",
                    hint=f"agentfs run {trace.id} -m '...' (or agentfs new)",
                )
            self._create(trace.id, texts.pop(0), system, system_prompt, preset)
        elif system is not None:
            raise AgentfsError(
                f"trace {trace.id!r} already has its system prompt",
                hint=f"edit {trace.messages_dir / '000001-system.md'} instead",
            )
        result = RunResult(trace.id)
        model, self.model = self.model, _Metered(self.model, result)  # counts every call
        try:
            with trace.lock():
                trace.reload()
                session = _Session(
                    trace, self._tools_for(trace), list(inject_skills), skill_recency_threshold,
                    self._depth,
                )
                result.steps.extend(trace.recover())
                self._sync_skill_records(trace)
                self._finish_interrupted_step(session, result)
                self._ingest_inbox(session, result)
                for text in texts:
                    trace.commit_step("user", [self._new(trace, "user", text)])
                    result.steps.append("user")
                self._loop(session, max_iterations or self.config.max_iterations, result)
        finally:
            self.model = model
        return result

    # --- the loop ------------------------------------------------------------

    def _loop(self, session: _Session, max_iterations: int, result: RunResult) -> None:
        trace = session.trace
        while True:
            path = trace.main_path()
            if not path or path[-1].role == "system":
                raise AgentfsError(
                    f"trace {trace.id!r} has no user message yet",
                    hint=f"give one: agentfs run {trace.id} -m '...'",
                )
            last = path[-1]
            if last.role == "assistant" and not last.tool_calls and trace.pending_inbox():
                self._ingest_inbox(session, result)  # arrived during the final answer
                continue
            if last.role == "assistant" and not last.tool_calls:
                result.stop = "end_turn" if result.iterations else "nothing_to_do"
                result.final_text = result.final_text or last.text
                return
            if result.iterations >= max_iterations:
                result.stop = "max_iterations"
                return
            if self.stop():  # asked to stop: every step so far is committed
                result.stop = "stopped"
                return
            request = self._request(session, path)
            if self._over_budget(request) and session.compressed_at != trace.meta.head:
                self._compress(session, request)  # Level 2, then build the request anew
                session.compressed_at = trace.meta.head
                result.steps.append("summary")
                continue
            stale = skills_to_inject(
                session.declared_skills, trace.meta.injected_skills, request.messages,
                session.skill_recency,
            )
            if stale and result.iterations == 0 and not session.started_with_skills:
                # nothing to append to yet: a synthetic assistant turn carries the calls
                self._inject_skills_now(session, stale)
                session.started_with_skills = True
                result.steps += ["assistant", "tool"]
                continue
            response = self.model.complete(request, self.on_text)
            self._note_estimate(response, request)
            result.iterations += 1
            result.final_text = response.text
            assistant = self._persist_response(session, response, stale, request.call_index + 1)
            result.steps.append("assistant")
            if assistant.tool_calls:
                self._run_tools(session, assistant)
                result.steps.append("tool")
                self._ingest_inbox(session, result)
            elif self.config.knowledge.enable_completion_extraction and not trace.pending_inbox():
                reflect(trace, self.model, [*request.messages, assistant],
                        system=request.system, max_tokens=self.config.max_tokens)
                result.steps.append("outcome")

    def _request(self, session: _Session, path: list[Message]) -> ModelRequest:
        trace = session.trace
        system = path[0].text if path[0].role == "system" else ""
        calls_made = sum(
            1
            for m in trace.messages().values()
            if m.role == "assistant" and m.synthetic is None and m.branch_type is None
        )
        tools = session.tools.specs()
        messages = self._to_send(trace, system, [m for m in path if m.role != "system"], tools)
        return ModelRequest(
            system=system,
            messages=messages,
            tools=tools,
            call_index=calls_made,
            max_tokens=self.config.max_tokens,
        )

    def _to_send(
        self, trace: Trace, system: str, messages: list[Message], tools: list[ToolSpec]
    ) -> list[Message]:
        """The history to send after Level 1 compression (`goal_compression`)."""
        mode = self.config.goal_compression
        if mode == "none":
            return messages
        tree = GoalTree.load(trace.dir / GOALS_FILE)
        if mode == "on_complete":
            return compress_completed_goals(messages, tree)
        limit = self.config.token_limit(self.model.name)
        ratio = self.tokens.ratio(messages)

        def fits(candidate: list[Message]) -> bool:
            if self.tokens.upper_bound(system, candidate, tools) * ratio <= limit:
                return True  # clearly small: no need to tokenize
            return self.tokens.request(system, candidate, tools) * ratio <= limit

        if fits(messages):
            return messages
        compressed = compress_completed_goals(messages, tree, enough=fits)
        if not fits(compressed):
            self._emit("over_budget", trace=trace.id, limit=limit)
        return compressed

    def _note_estimate(self, response: ModelResponse, request: ModelRequest) -> None:
        """Store our estimate beside the input size the provider reported, to calibrate
        later estimates (only when it reported one: offline models do not)."""
        usage = response.usage
        if usage is None or not (usage.input_tokens or usage.cache_read_input_tokens):
            return
        response.usage = Usage(
            **usage.model_dump(),
            estimated_input_tokens=self.tokens.request(
                request.system, request.messages, request.tools
            ),
        )

    def _over_budget(self, request: ModelRequest) -> bool:
        """Still over `context_window × compression_threshold` after Level 1?"""
        limit = self.config.token_limit(self.model.name)
        ratio = self.tokens.ratio(request.messages)
        if self.tokens.upper_bound(request.system, request.messages, request.tools) * ratio <= limit:
            return False
        return self.tokens.request(request.system, request.messages, request.tools) * ratio > limit

    def _compress(self, session: _Session, request: ModelRequest) -> None:
        """The side-branch queue: reflection (if extraction is on) or knowledge
        evaluation (if items are pending), then compression."""
        trace = session.trace
        if self.config.knowledge.enable_extraction:
            reflect(trace, self.model, request.messages, system=request.system,
                    max_tokens=self.config.max_tokens)
        elif pending_items(trace):
            evaluate_knowledge(trace, self.model, request.messages, system=request.system,
                               max_tokens=self.config.max_tokens)
        outcome = compress(
            session.trace, self.model, request.messages, system=request.system,
            tools=request.tools, max_tokens=self.config.max_tokens,
        )
        self._emit("compressed", trace=session.trace.id, branch=outcome.branch,
                   sequence=outcome.summary.sequence)

    def compress(self, trace_id: str) -> Message:
        """Run Level 2 compression now (`agentfs compress`); returns the summary message."""
        trace = Trace(self.workspace, self.repo, trace_id)
        with trace.lock():
            trace.reload()
            trace.recover()
            session = _Session(trace, self._tools_for(trace), [], DEFAULT_SKILL_RECENCY, self._depth)
            request = self._request(session, trace.main_path())
            outcome = compress(
                trace, self.model, request.messages, system=request.system,
                tools=request.tools, max_tokens=self.config.max_tokens,
            )
        return outcome.summary

    def preview(self, trace: str | Trace) -> ModelRequest:
        """The request the next model call of a trace (an id, or an open `Trace` whose
        parsed messages are reused) would send; nothing is written."""
        if isinstance(trace, str):
            trace = Trace(self.workspace, self.repo, trace)
        session = _Session(trace, self._tools_for(trace), [], DEFAULT_SKILL_RECENCY, self._depth)
        return self._request(session, trace.main_path())

    def _persist_response(
        self, session: _Session, response: ModelResponse, stale_skills: list[str], iteration: int
    ) -> Message:
        """Commit the model's turn, with the synthetic calls this iteration adds.

        `iteration` counts the model's turns in the message files, so it stays
        right after a crash (a counter in trace.json could lag behind them).
        """
        trace = session.trace
        trace.meta.iterations = iteration
        calls = list(response.tool_calls)
        if calls:
            calls += synthetic_calls(
                f"toolu_agentfs_{trace.next_sequence()}",
                stale_skills,
                context=self._context_due(session, calls, iteration),
            )
        message = self._new(
            trace,
            "assistant",
            response.text,
            tool_calls=calls or None,
            model=response.model or self.model.name,
            stop_reason=response.stop_reason,
            usage=response.usage,
            thinking=response.thinking,
        )
        trace.commit_step("assistant", [message])
        self._emit("assistant", trace=trace.id, sequence=message.sequence,
                   tool_calls=[c.name for c in calls])
        return message

    def _context_due(self, session: _Session, calls: list[ToolCall], iteration: int) -> bool:
        """Inject context every N iterations, or at once when user messages are waiting;
        never twice in one iteration."""
        if any(c.name == CONTEXT_TOOL for c in calls):
            return False
        interval = self.config.context_injection_interval
        return iteration % interval == 0 or bool(session.trace.pending_inbox())

    def _inject_skills_now(self, session: _Session, skills: list[str]) -> None:
        """A synthetic assistant turn holding only `skill` calls, then their results."""
        trace = session.trace
        calls = synthetic_calls(f"toolu_agentfs_{trace.next_sequence()}", skills, context=False)
        assistant = self._new(trace, "assistant", "", tool_calls=calls, synthetic="skill")
        trace.commit_step("assistant", [assistant], summary="inject skills " + ", ".join(skills))
        self._run_tools(session, assistant)

    # --- tools ---------------------------------------------------------------

    def _tools_for(self, trace: Trace) -> ToolRegistry:
        sources = ContextSources(
            trace_id=trace.id,
            goals_path=trace.dir / GOALS_FILE,
            collaborators=lambda: list(trace.meta.context.get("collaborators", {}).values()),
            notifications=lambda: [p.name for p in trace.pending_inbox()],
            hooks=[*self.python_hooks, *self.command_hooks],
        )
        registry = ToolRegistry(FILE_TOOLS)
        registry.add(goal_tool(trace.dir / GOALS_FILE))
        registry.add(skill_tool(self.skills))
        registry.add(context_tool(sources))
        registry.add(knowledge_search_tool(self.workspace.knowledge_dir))
        if self.config.tools.bash:
            registry.add(bash_tool(
                self.config.tools.bash_timeout, self.config.tools.bash_output_limit,
                self.command_env,
            ))
        if self._depth < self.config.max_delegation_depth:
            registry.add(delegate_tool(partial(self._run_child, trace)))
        for tool in plugin_tools(self.workspace.root):
            if registry.get(tool.name) is not None:
                raise ConfigError(
                    f"a tool plugin defines {tool.name!r}, which is a built-in tool",
                    hint="rename the plugin's tool",
                )
            registry.add(tool)
        for tool in self.extra_tools:  # the caller's own tools may replace built-ins
            registry.add(tool)
        return registry

    def _run_tools(self, session: _Session, assistant: Message, after: Message | None = None) -> None:
        """Run the assistant's tool calls that have no result yet; commit all results and
        the files they changed together.

        A call that had started when an earlier run died gets an "interrupted"
        result instead: it may have had effects, and agentfs never re-runs a tool.
        """
        trace = session.trace
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
                message = self._new(
                    trace, "tool", INTERRUPTED, tool_call_id=call.id, is_error=True,
                    synthetic="recovery", files_changed=touched or None,
                )
                interrupted.append(call.name)
            else:
                message = self._call_tool(session, call, context)
            message.parent_sequence = parent
            parent = message.sequence
            trace.write_message(message)  # on disk at once: a crash later keeps it
            results.append(message)
        if results:
            self._record_skill_injections(trace, assistant, results)
            summary = f"{len(interrupted)} interrupted tool call(s)" if interrupted else None
            trace.commit_step("tool", results, extra_paths=sorted(context.changed),
                              summary=summary, written=True)
        trace.clear_in_flight()
        if interrupted:
            self._emit("recovered", trace=trace.id, interrupted=interrupted)

    def _call_tool(self, session: _Session, call: ToolCall, context: ToolContext) -> Message:
        trace = session.trace
        if not call.synthetic:
            self._emit("tool_call", trace=trace.id, name=call.name, input=call.input)
        trace.mark_started(call.id)
        context.before_change = partial(trace.record_change, call.id)
        before = set(context.changed)
        outcome = session.tools.call(call.name, call.input, context)
        message = self._new(
            trace,
            "tool",
            outcome.content,
            tool_call_id=call.id,
            is_error=True if outcome.is_error else None,
            files_changed=sorted(context.changed - before) or None,
            synthetic=call.synthetic,
        )
        self._emit("tool_result", trace=trace.id, name=call.name, is_error=outcome.is_error,
                   text=message.text, synthetic=call.synthetic)
        return message

    @staticmethod
    def _sync_skill_records(trace: Trace) -> None:
        """Bring `injected_skills` in line with the files: a crash can leave injection
        results adopted from disk while the record in trace.json lagged behind."""
        path = trace.main_path()
        calls = {c.id: c for m in path for c in m.tool_calls or [] if c.synthetic == "skill"}
        for message in path:
            call = calls.get(message.tool_call_id or "")
            if call is None or message.is_error:
                continue
            record = trace.meta.injected_skills.get(call.input.get("name", ""))
            if record is None or record.sequence < message.sequence:
                trace.meta.injected_skills[call.input["name"]] = InjectedSkill(
                    message_id=message.id, sequence=message.sequence
                )  # saved with the next commit

    @staticmethod
    def _record_skill_injections(trace: Trace, assistant: Message, results: list[Message]) -> None:
        """Note in `trace.json` (committed with the results) where each skill now is."""
        by_id = {c.id: c for c in assistant.tool_calls or []}
        for message in results:
            call = by_id.get(message.tool_call_id or "")
            if call is not None and call.synthetic == "skill" and not message.is_error:
                trace.meta.injected_skills[call.input["name"]] = InjectedSkill(
                    message_id=message.id, sequence=message.sequence
                )

    @staticmethod
    def _answered(trace: Trace, assistant: Message) -> set[str]:
        path = trace.main_path()
        at = next(i for i, m in enumerate(path) if m.sequence == assistant.sequence)
        return {m.tool_call_id for m in path[at + 1 :] if m.role == "tool" and m.tool_call_id}

    def _finish_interrupted_step(self, session: _Session, result: RunResult) -> None:
        """If the head is an assistant turn (or some of its results) whose tool calls
        are not all answered, finish that tool step before anything else."""
        trace = session.trace
        path = trace.main_path()
        at = max((i for i, m in enumerate(path) if m.role == "assistant"), default=None)
        if at is None or not path[at].tool_calls:
            return
        if any(m.role != "tool" for m in path[at + 1 :]):
            return
        assistant = path[at]
        if {c.id for c in assistant.tool_calls or []} <= self._answered(trace, assistant):
            return
        self._run_tools(session, assistant, after=path[-1])
        result.steps.append("tool")

    def _ingest_inbox(self, session: _Session, result: RunResult) -> None:
        """Files dropped into the trace's inbox become user messages, in name order."""
        for path in session.trace.pending_inbox():
            focus = GoalTree.load(session.trace.dir / GOALS_FILE).focus
            message = session.trace.ingest(path, goal_id=focus)
            self._emit("ingested", trace=session.trace.id, sequence=message.sequence,
                       file=path.name)
            result.steps.append("user")

    def _create(
        self, trace_id: str, first: str, system: str | None, run_prompt: str | None,
        preset: str | None,
    ) -> Trace:
        from agentfs.core.workspace import Project
        from agentfs.store.messages import parse_dropped

        project = Project(self.workspace, self.repo, self.config)
        return project.new_trace(
            trace_id, parse_dropped(Path("<message>"), first.encode()),
            system_prompt=run_prompt, explicit_system=system, preset=preset,
            skills=self.skills,
        )

    # --- collaborators ---------------------------------------------------------

    def _run_child(self, parent: Trace, task: str, name: str | None) -> str:
        """Run a child trace for `task` to completion; its final answer is returned."""
        collaborators: dict[str, Any] = parent.meta.context.setdefault("collaborators", {})
        slug = re.sub(r"[^a-z0-9]+", "-", (name or "helper").lower()).strip("-")[:20] or "helper"
        existing = set(self.workspace.trace_ids())
        number = 1
        while f"{parent.id}--{slug}-{number}" in existing:
            number += 1
        child_id = f"{parent.id}--{slug}-{number}"
        child = self._create(child_id, task, None, None, None)
        collaborators[child_id] = {"trace": child_id, "task": task[:200], "status": "running"}
        self._emit("delegate", trace=parent.id, child=child_id)
        runner = Runner(
            self.workspace, self.repo, self.model, config=self.config, tools=self.extra_tools,
            skills=self.skills, context_hooks=self.python_hooks, on_event=self.on_event,
            command_env=self.command_env,
        )
        runner._depth = self._depth + 1
        try:
            outcome = runner.run(child.id)
        except BaseException as exc:
            collaborators[child_id]["status"] = f"failed: {type(exc).__name__}: {exc}"
            raise
        collaborators[child_id]["status"] = f"done ({outcome.iterations} model calls)"
        return outcome.final_text or "(the collaborator gave no answer)"

    # --- helpers ---------------------------------------------------------------

    @staticmethod
    def _new(trace: Trace, role: str, content: Any, **fields: Any) -> Message:
        """A new message recording the goal in focus."""
        fields.setdefault("goal_id", GoalTree.load(trace.dir / GOALS_FILE).focus)
        return trace.new_message(role, content, **fields)

    def _emit(self, kind: str, **data: Any) -> None:
        if self.on_event is not None:
            self.on_event(kind, data)


def _split_messages(messages: Sequence[str | dict[str, str]]) -> tuple[str | None, list[str]]:
    """(system prompt, user texts) from `run`'s messages."""
    system: str | None = None
    texts: list[str] = []
    for item in messages:
        if isinstance(item, str):
            texts.append(item)
            continue
        role, content = item.get("role", "user"), item.get("content", "")
        if role == "system":
            system = content
        elif role == "user":
            texts.append(content)
        else:
            raise AgentfsError(f"run() takes system and user messages, not {role!r}")
    return system, texts
