"""The agent loop: call the model, persist its turn, run its tools, persist the results.

Every persisted step is one commit (see `agentfs/store/trace.py:Trace.commit_step`).
A run first brings the trace up to date with the disk: it commits the
user's edits, adopts what an interrupted run left, finishes a tool step that
was cut short, and takes files waiting in the trace's `inbox/`. Then it loops
through the steps of docs/architecture.md ("How a run proceeds"). Requests are
built by `agentfs/core/request.py`, tool steps run by `agentfs/core/toolstep.py`
and delegated child traces by `agentfs/core/delegate.py`.

Injection (see docs/context.md): declared skills are injected as synthetic
`skill` calls, and every `context_injection_interval` iterations a synthetic
`get_current_context` call is appended to the model's tool calls.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from agentfs.core.context import CONTEXT_TOOL, ContextHook
from agentfs.core.delegate import run_child
from agentfs.core.fit import REFUSED_INPUT_KEY, fit_turn
from agentfs.core.injection import (
    DEFAULT_SKILL_RECENCY,
    loaded_by,
    skill_records,
    skills_to_inject,
    synthetic_calls,
)
from agentfs.core.knowledge import knowledge_problem, load_items
from agentfs.core.mcp import McpTools, mcp_tools
from agentfs.core.options import RunnerOptions
from agentfs.core.project import Project, settings_check
from agentfs.core.reflection import KNOWLEDGE_EVAL, REFLECTION
from agentfs.core.request import RequestBuilder
from agentfs.core.session import Session
from agentfs.core.sidebranch import COMPRESSION, SideWork
from agentfs.core.sidequeue import QueueReport, compression_queue, plan, run_queue
from agentfs.core.toolset import build_tools
from agentfs.core.toolstep import (
    INTERRUPTED,
    PendingTools,
    finish_interrupted_step,
    run_tools,
    sync_skill_records,
)
from agentfs.core.usage import turn_timing
from agentfs.errors import AgentfsError
from agentfs.models.base import (
    FinishReason,
    Model,
    ModelRequest,
    ModelResponse,
    PromptTooLong,
    RetryNotice,
    TextSink,
    report_retry,
)
from agentfs.skills import load_skills
from agentfs.store.git.repo import GitRepo
from agentfs.store.history import is_final_answer
from agentfs.store.inbox import SettleClock, save_in_inbox
from agentfs.store.ingest import (
    Dropped,
    IngestReport,
    finish_staged,
    parse_dropped_text,
    take_waiting,
)
from agentfs.store.messages import Message, ToolCall
from agentfs.store.spent import Spent
from agentfs.store.trace import Trace
from agentfs.store.unicode import valid_unicode
from agentfs.store.workspace import Workspace
from agentfs.tools import ToolRegistry

#: `agentfs compress` refuses a trace with fewer messages than this after the
#: system prompt and the first user message (a summary would be as long).
MIN_COMPRESSIBLE = 4

__all__ = ["INTERRUPTED", "PendingTools", "RunResult", "Runner", "RunnerOptions", "StopReason"]


class StopReason(enum.StrEnum):
    """Why a run returned."""

    END_TURN = "end_turn"  # the model answered without tool calls
    NOTHING_TO_DO = "nothing_to_do"  # the trace already ended in an answer; no model call
    MAX_ITERATIONS = "max_iterations"  # the run's limit of model calls was reached
    STOPPED = "stopped"  # asked to stop (a signal to the watcher); everything is committed
    MAX_TOKENS = "max_tokens"  # the final answer was cut off at max_tokens (it is kept)
    APPROVAL = "approval"  # a tool call waits for the person's answer (approval.json)


@dataclass
class RunResult:
    """How a run ended."""

    trace_id: str
    iterations: int = 0
    stop: StopReason = StopReason.END_TURN
    final_text: str = ""
    steps: list[str] = field(default_factory=list)
    #: Milliseconds from the start of the run to its end.
    wall_ms: int = 0
    #: What every call of the run used, by model, as a trace's `usage` keeps it: the
    #: main path, side branches (reflection, knowledge evaluation, compression) and
    #: delegated children (offline models report no tokens).
    spent: dict[str, Spent] = field(default_factory=dict)
    #: User messages given to the run kept in the inbox, behind a call that waits for
    #: approval (`StopReason.APPROVAL` at the start): taken once it is answered.
    queued: int = 0

    def count(self, response: ModelResponse, model: str) -> None:
        """Add one model call."""
        spent = self.spent.setdefault(response.model or model, Spent())
        spent.add(response.usage)
        spent.model_ms += response.elapsed_ms or 0

    @property
    def input_tokens(self) -> int:
        """All input: not cached, read from the prompt cache and written to it."""
        return sum(s.input_tokens + s.cache_read_input_tokens + s.cache_creation_input_tokens
                   for s in self.spent.values())

    @property
    def cached_tokens(self) -> int:
        """Of the input tokens, those read from the prompt cache."""
        return sum(s.cache_read_input_tokens for s in self.spent.values())

    @property
    def output_tokens(self) -> int:
        return sum(s.output_tokens for s in self.spent.values())

    @property
    def model_ms(self) -> int:
        """Milliseconds in model calls."""
        return sum(s.model_ms for s in self.spent.values())


@dataclass
class _Metered:
    """The run's model, adding what each call used to the run's result and reporting
    its retries as `retry` events."""

    model: Model
    result: RunResult
    emit: Callable[..., None]
    name: str = field(init=False)

    def __post_init__(self) -> None:
        self.name = self.model.name

    def complete(self, request: ModelRequest, on_text: TextSink | None = None,
                 ) -> ModelResponse:
        started = time.monotonic()
        response = self.model.complete(request, _CallSink(on_text, self.emit,
                                                          self.result.trace_id))
        response.elapsed_ms = round((time.monotonic() - started) * 1000)
        self.result.count(response, self.name)
        return response


@dataclass
class _CallSink:
    """A model call's text, to the run's `on_text`; its retries, to the run's events
    (`agentfs/models/base.py:RetrySink`)."""

    on_text: TextSink | None
    emit: Callable[..., None]
    trace_id: str

    def __call__(self, text: str) -> None:
        if self.on_text is not None:
            self.on_text(valid_unicode(text))  # printable: a lone surrogate is U+FFFD

    def retrying(self, notice: RetryNotice) -> None:
        if callable(getattr(self.on_text, "retrying", None)):  # a delegated child's sink
            report_retry(self.on_text, notice)
            return
        self.emit("retry", trace=self.trace_id, attempt=notice.attempt,
                  attempts=notice.attempts, wait=notice.wait, reason=notice.reason)


class Runner:
    """Runs traces of one workspace with one model."""

    def __init__(self, workspace: Workspace, repo: GitRepo, model: Model,
                 options: RunnerOptions | None = None, **keywords: Any) -> None:
        """Build runners with `agentfs/core/project.py:Project.runner`, which passes the
        workspace's configuration. `keywords` are `RunnerOptions` fields that replace
        those of `options` (e.g. `Runner(workspace, repo, model, config=config)`)."""
        options = replace(options or RunnerOptions(), **keywords)
        self.workspace = workspace
        self.repo = repo
        self.model = model
        self.config = options.config
        self.skills = (options.skills if options.skills is not None
                       else load_skills(workspace.skills_dir))
        self.options = replace(options, skills=self.skills)  # children share the catalog
        self._drop_check = settings_check(self.config, self.skills, workspace.root)
        self.project = Project(workspace, repo, self.config)
        self.requests = RequestBuilder(self.config, model.name, on_event=options.on_event)

    @property
    def on_text(self) -> Callable[[str], None] | None:
        """Receives the model's text as it streams; may be set after building."""
        return self.options.on_text

    @on_text.setter
    def on_text(self, sink: Callable[[str], None] | None) -> None:
        self.options = replace(self.options, on_text=sink)

    def register_context_hook(self, name: str, hook: ContextHook) -> None:
        """Add a callable (given the trace id) whose text appears in every context injection."""
        self.options = replace(self.options,
                               context_hooks=(*self.options.context_hooks, (name, hook)))

    def run(  # noqa: PLR0913 -- keyword-only options, each with its default
        self,
        trace_id: str,
        messages: Sequence[str | dict[str, str]] = (),
        *,
        max_iterations: int | None = None,
        inject_skills: Sequence[str] = (),
        skill_recency_threshold: int = DEFAULT_SKILL_RECENCY,
        system_prompt: str | None = None,
        preset: str | None = None,
        pending_tools: PendingTools = "refuse",
        clock: SettleClock | None = None,
        model_name: str | None = None,
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
          pending_tools: tool calls at the head that agentfs did not itself just
            receive from the model (the head was moved by hand or by git): `refuse`
            stops with an error, `run` runs them, `skip` answers them as not run.
          clock: decides when files dropped into the inbox are ready (a watcher
            passes its own, so a file it saw settle is not waited for again).
          model_name: recorded as the model of a trace this run creates (the name
            the runner's model was chosen by, e.g. `--model`), so that later
            commands on the trace use it too.
        """
        for name in inject_skills:
            self.skills.get(name)  # unknown skills fail before anything is written
        if skill_recency_threshold < 1:
            raise AgentfsError("skill_recency_threshold must be at least 1")
        system, texts = _split_messages(messages)
        given = [parse_dropped_text("<message>", t) for t in texts]
        for text in given:  # as the inbox's door would, before anything is written
            self._drop_check(text)
        trace = Trace(self.workspace, self.repo, trace_id)
        if not trace.meta_path.exists():
            if not given:
                raise AgentfsError(
                    f"trace {trace.id!r} does not exist and no first message was given",
                    hint=f"agentfs run {trace.id} -m '...' (or agentfs new)",
                )
            texts.pop(0)
            self._create(trace.id, given.pop(0), system=system, run_prompt=system_prompt,
                         preset=preset, model_name=model_name)
        elif system is not None:
            raise AgentfsError(
                f"trace {trace.id!r} already has its system prompt",
                hint=f"edit its message #1 in {trace.messages_dir} instead",
            )
        result = RunResult(trace.id)
        model, self.model = self.model, _Metered(self.model, result, self._emit)  # counts calls
        started = time.monotonic()
        try:
            with trace.lock():
                trace.reload()
                session = self._session(trace, inject_skills, skill_recency_threshold, clock)
                if not self._bring_up_to_date(session, result, pending_tools):
                    _keep_for_later(trace, texts)  # behind the call that waits
                    result.queued = len(texts)
                    result.stop = StopReason.APPROVAL
                    return result
                for number, text in enumerate(given):
                    message = session.new_message("user", text.content, **text.fields)
                    try:
                        trace.commit_step("user", [message])
                    except (OSError, AgentfsError) as exc:  # a full disk: texts must not be lost
                        raise _texts_kept(trace, message, texts[number + 1:], exc) from exc
                    result.steps.append("user")
                self._loop(session, max_iterations or self.config.max_iterations, result)
        finally:
            self.model = model
            result.wall_ms = round((time.monotonic() - started) * 1000)
        return result

    def compress(self, trace_id: str) -> QueueReport:
        """Run Level 2 compression now (`agentfs compress`): the queue a run would run
        (reflection if extraction is on, knowledge evaluation, compression); its
        `summary` is the new summary message. Cut short, running it again (or
        `agentfs run`) finishes it."""
        trace = Trace(self.workspace, self.repo, trace_id)
        return self.side_work(trace_id, "compress", compression_queue(
            self.config.knowledge.enable_extraction, knowledge=self.knowledge_usable(trace)),
            before=_check_compressible)

    def reflect(self, trace_id: str) -> QueueReport:
        """Reflect on a trace now (`agentfs reflect`): its lessons become pending items.
        The items are read first: a broken `knowledge/` is refused before anything is
        queued."""
        return self.side_work(trace_id, "reflect", [REFLECTION], before=_check_knowledge)

    def evaluate_knowledge(self, trace_id: str, items: list[str] | None = None) -> QueueReport:
        """Judge pending knowledge items (those in `items`, or all) on a branch of the trace
        (`agentfs knowledge evaluate`); an empty report if none is pending."""
        return self.side_work(trace_id, "evaluate", [KNOWLEDGE_EVAL], items=items,
                              before=_check_knowledge)

    def knowledge_usable(self, trace: Trace) -> bool:
        """Whether the knowledge steps a run adds of its own (Level 2's, the reflection
        after an answer) can read and write `knowledge/`; if not, they are left out and
        a `knowledge_skipped` event says why (the commands that only do knowledge work
        refuse instead: `_check_knowledge`)."""
        problem = knowledge_problem(trace.workspace.knowledge_dir)
        if problem is not None:
            self._emit("knowledge_skipped", trace=trace.id, error=problem)
        return problem is None

    def side_work(self, trace_id: str, reason: str, types: Sequence[str], *,
                  items: list[str] | None = None,
                  before: Callable[[Trace], None] | None = None) -> QueueReport:
        """Run a queue of side branches on a trace now (`agentfs/core/sidequeue.py`).
        An unfinished queue is finished first; if it was one for the same `reason`
        (the same command, killed), its outcome is the answer and nothing new runs.
        `before` may refuse (raise) before a new queue is planned."""
        trace = Trace(self.workspace, self.repo, trace_id)
        with trace.lock():
            trace.reload()
            trace.recover()
            session = self._session(trace)
            report = self._resume_queue(session)
            if report.merged and report.reason == reason:
                return report
            if before is not None:
                before(trace)
            if plan(trace, reason, types, items) is not None:
                report = run_queue(self._side_work(session, trace.main_path()))
        return report

    def preview(self, trace: str | Trace) -> ModelRequest:
        """The request the next model call of a trace (an id, or an open `Trace` whose
        parsed messages are reused) would send; nothing is written. Without a runner:
        `agentfs/core/request.py:preview_request`."""
        if isinstance(trace, str):
            trace = Trace(self.workspace, self.repo, trace)
        return self._request(self._session(trace), trace.main_path())

    # --- before the loop ------------------------------------------------------

    def _session(self, trace: Trace, declared_skills: Sequence[str] = (),
                 skill_recency: int = DEFAULT_SKILL_RECENCY,
                 clock: SettleClock | None = None) -> Session:
        """A run of `trace` with this runner's tools."""
        mcp = mcp_tools(trace, self.options, self._emit)
        clock = clock or SettleClock(self.config.settle)
        return Session(trace, self._tools_for(trace, mcp, clock), clock, self._emit,
                       list(declared_skills), skill_recency, mcp=mcp,
                       approve=self.options.approve or self.config.tools.approve,
                       ask=self.options.ask)

    def _tools_for(self, trace: Trace, mcp: McpTools | None,
                   clock: SettleClock) -> ToolRegistry:
        """The tools of a run of `trace` (`agentfs/core/toolset.py:build_tools`)."""
        delegate = partial(run_child, trace, project=self.project, model=self.model,
                           options=self.options, emit=self._emit)
        return build_tools(trace, self.options, self.skills, delegate, mcp, settled=clock.ready)

    def _bring_up_to_date(self, session: Session, result: RunResult,
                          pending_tools: PendingTools) -> bool:
        """Recover, finish an interrupted tool step, ingest the inbox (the steps before
        the loop in docs/architecture.md). False if a tool call of the step waits for
        the person's approval: the run stops there."""
        trace = session.trace
        result.steps.extend(trace.recover())
        self._record_queue(session, self._resume_queue(session), result)  # before anything else
        # an earlier failure is history once this run goes on: the next commit saves it
        trace.meta.context.last_error = None
        self._report_ingest(trace, result, finish_staged(trace, self._drop_check))
        sync_skill_records(trace)  # changes trace.meta only: the run's next commit saves it
        finished = finish_interrupted_step(session, pending_tools)
        if finished is None:
            return False
        if finished:
            result.steps.append("tool")
        self._ingest_inbox(session, result, wait=True)
        return True

    def _create(
        self, trace_id: str, first: Dropped, *, system: str | None, run_prompt: str | None,
        preset: str | None, model_name: str | None,
    ) -> Trace:
        return self.project.new_trace(
            trace_id, first,
            system_prompt=run_prompt, explicit_system=system, preset=preset,
            model=model_name, skills=self.skills,
        )

    # --- the loop ------------------------------------------------------------

    def _loop(self, session: Session, max_iterations: int, result: RunResult) -> None:
        """Repeat the loop's steps (docs/architecture.md) until the run is over."""
        compressed_for_length = False  # Level 2 ran because the model said "too long"
        while True:
            started = time.monotonic()  # the turn's wall time counts from here
            path = self._main_path(session)  # 1. read the main path; is the run over?
            if self._ingest_late_messages(session, path, result):
                continue
            if self._finished(path, max_iterations, result):
                return
            if session.mcp is not None:  # a changed MCP tool list, taken between steps
                session.mcp.take_changes(session.tools)
            request = self._request(session, path)  # 2. build the request
            if self._over_budget(session, request):
                self._compress(session, request, result)  # Level 2, then build it anew
                continue
            stale = self._stale_skills(session, request)  # 3. skills to inject
            if stale and result.iterations == 0 and not session.started_with_skills:
                self._inject_skills_now(session, stale, result)
                continue
            try:
                assistant = self._call_model(session, request, stale, result,  # 4. call, commit
                                             started)
            except PromptTooLong as exc:
                self._compress_too_long(session, request, result, exc, compressed_for_length)
                compressed_for_length = True
                continue
            compressed_for_length = False
            if assistant.tool_calls:
                if not run_tools(session, assistant):  # 5. run the tool calls
                    result.stop = StopReason.APPROVAL  # one waits for the person
                    return
                result.steps.append("tool")
                self._ingest_inbox(session, result)  # 6. take what was dropped meanwhile
            else:
                self._reflect_on_answer(session, request, assistant, result)

    @staticmethod
    def _main_path(session: Session) -> list[Message]:
        """The main path, which must hold a user message."""
        trace = session.trace
        path = trace.main_path()
        if not path or path[-1].role == "system":
            raise AgentfsError(
                f"trace {trace.id!r} has no user message yet",
                hint=f"give one: agentfs run {trace.id} -m '...'",
                api_hint=f"give one: POST /api/traces/{trace.id}/messages",
            )
        return path

    def _ingest_late_messages(self, session: Session, path: list[Message],
                              result: RunResult) -> bool:
        """Take files dropped into the inbox during the final answer; True if any was."""
        return (is_final_answer(path[-1]) and bool(session.trace.pending_inbox())
                and self._ingest_inbox(session, result, wait=True))

    def _finished(self, path: list[Message], max_iterations: int, result: RunResult) -> bool:
        """Is the run over (a final answer, `max_iterations` model calls, or asked to
        stop)? If so, `result` says why."""
        last = path[-1]
        if is_final_answer(last):
            result.stop = StopReason.END_TURN if result.iterations else StopReason.NOTHING_TO_DO
            if result.iterations and last.stop_reason == FinishReason.MAX_TOKENS:
                result.stop = StopReason.MAX_TOKENS  # the `max_tokens` event said so
            result.final_text = result.final_text or last.text
            return True
        if result.iterations >= max_iterations:
            result.stop = StopReason.MAX_ITERATIONS
            return True
        if self.options.stop is not None and self.options.stop():
            result.stop = StopReason.STOPPED  # every step so far is committed
            return True
        return False

    def _request(self, session: Session, path: list[Message]) -> ModelRequest:
        """The request that continues `path` (`agentfs/core/request.py:RequestBuilder.build`)."""
        return self.requests.build(session.trace, path, session.tools.specs())

    def _over_budget(self, session: Session, request: ModelRequest) -> bool:
        """Is the request still over the budget after Level 1, with no Level 2 compression
        at this head yet?"""
        if not self.requests.over_budget(request):
            return False
        self.requests.check_room(request)  # compressing would not help
        return session.compressed_at != session.trace.meta.head

    def _compress(self, session: Session, request: ModelRequest, result: RunResult) -> None:
        """The side-branch queue, in order: reflection (if extraction is on), knowledge
        evaluation (if items are pending, those reflection just saved included), then
        compression (`agentfs/core/sidequeue.py`)."""
        trace = session.trace
        plan(trace, "level2", compression_queue(self.config.knowledge.enable_extraction,
                                                knowledge=self.knowledge_usable(trace)))
        self._record_queue(session, run_queue(SideWork(trace, self.model, request, session.tools,
                                                       self._emit)), result)

    def _resume_queue(self, session: Session) -> QueueReport:
        """Finish the side-branch queue a crash cut short, if any, from the step it was in."""
        if session.trace.meta.side_queue is None:
            return QueueReport()
        return run_queue(self._side_work(session, session.trace.main_path()))

    def _side_work(self, session: Session, path: list[Message]) -> SideWork:
        """What side branches continue: the request `path` sends, and the run's tools."""
        return SideWork(session.trace, self.model, self._request(session, path), session.tools,
                        self._emit)

    def _record_queue(self, session: Session, report: QueueReport, result: RunResult) -> None:
        for merged in report.merged:
            result.steps.append(merged.kind)
            if merged.step.type == COMPRESSION:
                session.compressed_at = session.trace.meta.head
                self._emit("compressed", trace=session.trace.id, branch=merged.step.branch,
                           sequence=session.trace.meta.head)

    def _compress_too_long(self, session: Session, request: ModelRequest, result: RunResult,
                           error: PromptTooLong, again: bool) -> None:
        """The model refused the request as too long: compress (Level 2) once, so the
        loop retries with the shorter path; if that was already done, stop."""
        trace = session.trace
        refusal = PromptTooLong(
            f"trace {trace.id!r} is too long for {self.model.name} even after compressing "
            f"it: {error.message}",
            hint=f"compress it with a model that has a larger context window: agentfs "
            f"compress {trace.id} --model MODEL, or go back with agentfs rewind {trace.id} N",
            api_hint=f"compress it with a model that has a larger context window: POST "
            f"/api/traces/{trace.id}/compress with {{\"model\": MODEL}}, or go back: POST "
            f"/api/traces/{trace.id}/rewind",
        )
        if again:
            raise refusal from None
        self._emit("prompt_too_long", trace=trace.id, detail=error.message)
        try:
            self._compress(session, request, result)
        except PromptTooLong as failed:  # nothing was compressed: say so
            raise PromptTooLong(
                f"trace {trace.id!r} is too long for {self.model.name}, and so is the "
                f"request that would compress it, so nothing was compressed: {failed.message}",
                hint=refusal.hint, api_hint=refusal.api_hint,
            ) from None

    @staticmethod
    def _stale_skills(session: Session, request: ModelRequest) -> list[str]:
        """Declared skills missing from the last messages of `request`."""
        return skills_to_inject(
            session.declared_skills, skill_records(session.trace.meta), request.messages,
            session.skill_recency,
        )

    def _inject_skills_now(self, session: Session, skills: list[str], result: RunResult) -> None:
        """Before the first model call there is no turn to add the calls to: commit a
        synthetic assistant turn holding only `skill` calls, then their results."""
        trace = session.trace
        calls = synthetic_calls(f"toolu_agentfs_{trace.next_sequence()}", skills, context=False)
        assistant = session.new_message("assistant", "", tool_calls=calls, synthetic="skill")
        trace.mark_received(calls)
        trace.commit_step("assistant", [assistant], summary="inject skills " + ", ".join(skills))
        run_tools(session, assistant)
        session.started_with_skills = True
        result.steps += ["assistant", "tool"]

    def _call_model(self, session: Session, request: ModelRequest, stale_skills: list[str],
                    result: RunResult, started: float) -> Message:
        """Call the model, streaming its text, and commit its turn (`started`: when the
        turn began, on the monotonic clock)."""
        response = self.model.complete(request, self.on_text)
        self.requests.note_estimate(response, request)
        result.iterations += 1
        assistant = self._persist_response(session, response, stale_skills,
                                           request.call_index + 1, started)
        result.final_text = assistant.text  # as stored (`fit_turn`)
        result.steps.append("assistant")
        return assistant

    def _persist_response(
        self, session: Session, response: ModelResponse, stale_skills: list[str], iteration: int,
        started: float,
    ) -> Message:
        """Commit the model's turn, with the synthetic calls this iteration adds.

        `iteration` counts the model's turns in the message files, this one
        included (its commit adds it to `trace.json`'s `iterations`:
        `agentfs/store/trace.py:Trace.count_usage`). A call cut off at max_tokens
        is stored with a note for its input, so it is answered as an error instead
        of run (docs/models.md).
        """
        trace = session.trace
        calls = _refuse_cut_call(response)
        if calls:
            loaded = loaded_by(calls)  # the model loads these itself this turn
            calls += synthetic_calls(
                f"toolu_agentfs_{trace.next_sequence()}",
                [s for s in stale_skills if s not in loaded],
                context=self._context_due(session, calls, iteration),
            )
        message = session.new_message(
            "assistant",
            response.text,
            tool_calls=calls or None,
            model=response.model or self.model.name,
            stop_reason=response.stop_reason,
            usage=response.usage,
            timing=turn_timing(response, started),
            thinking=response.thinking,
            **({"blocks": response.blocks} if response.blocks else {}),
        )
        message = fit_turn(message)  # oversized tool input is replaced and answered as an error
        if message.tool_calls:
            trace.mark_received(message.tool_calls)
        trace.commit_step("assistant", [message])
        self._emit("assistant", trace=trace.id, sequence=message.sequence,
                   tool_calls=[c.name for c in calls])
        if response.stop_reason == FinishReason.MAX_TOKENS:
            cut = response.cut_call()
            self._emit("max_tokens", trace=trace.id, sequence=message.sequence,
                       max_tokens=self.config.max_tokens, cut_call=cut.name if cut else None,
                       final=not message.tool_calls)
        return message

    def _context_due(self, session: Session, calls: list[ToolCall], iteration: int) -> bool:
        """Inject context every N iterations, or at once when a user message waits
        written whole (taken right after this step); never twice in one iteration."""
        if any(c.name == CONTEXT_TOOL for c in calls):
            return False
        interval = self.config.context_injection_interval
        return iteration % interval == 0 or any(
            session.clock.ready(path) for path in session.trace.pending_inbox())

    def _reflect_on_answer(self, session: Session, request: ModelRequest, assistant: Message,
                           result: RunResult) -> None:
        """After a final answer, reflect on the outcome if `enable_completion_extraction`
        is on and no user message waits."""
        trace = session.trace
        if (self.config.knowledge.enable_completion_extraction and not trace.pending_inbox()
                and self.knowledge_usable(trace)):
            plan(trace, "completion", [REFLECTION])
            work = SideWork(trace, self.model, replace(request, messages=[*request.messages,
                                                                          assistant]),
                            session.tools, self._emit)
            self._record_queue(session, run_queue(work), result)

    # --- the inbox -------------------------------------------------------------

    def _ingest_inbox(self, session: Session, result: RunResult, *, wait: bool = False) -> bool:
        """Files dropped into the trace's inbox become user messages, in name order
        (see `agentfs/store/ingest.py:take_waiting`). With `wait`, files still being
        written are waited for (a settle window or two); else they stay for later.
        True if a message was taken."""
        trace = session.trace
        focus = session.focus()
        report = take_waiting(trace, session.clock, goal_id=focus, check=self._drop_check)
        taken = bool(report.taken)
        self._report_ingest(trace, result, report)
        deadline = time.monotonic() + 2 * session.clock.window + 1
        while wait and report.unsettled and time.monotonic() < deadline:
            time.sleep(min(0.05, session.clock.window / 4 or 0.01))
            report = take_waiting(trace, session.clock, goal_id=focus, check=self._drop_check)
            taken = taken or bool(report.taken)
            self._report_ingest(trace, result, report)
        return taken

    def _report_ingest(self, trace: Trace, result: RunResult, report: IngestReport) -> None:
        for name, message in report.taken:
            self._emit("ingested", trace=trace.id, sequence=message.sequence, file=name)
            result.steps.append("user")
        for rejected in report.rejected:
            self._emit("rejected", trace=trace.id, file=str(rejected.origin),
                       moved_to=str(rejected.moved_to), reason=rejected.reason)

    def _emit(self, kind: str, **data: Any) -> None:
        if self.options.on_event is not None:
            self.options.on_event(kind, data)


def _refuse_cut_call(response: ModelResponse) -> list[ToolCall]:
    """The turn's tool calls, the one cut off at max_tokens with its input replaced by
    a note, so it is answered as an error and never run (`agentfs/core/fit.py`)."""
    cut = response.cut_call()
    if cut is None:
        return list(response.tool_calls)
    note = (f"not run: your turn reached its output limit (max_tokens) while writing this "
            f"call to {cut.name}, so its input is incomplete. Call the tool again; split a "
            "long input into several calls (e.g. write a file in parts).")
    return [c.model_copy(update={"input": {REFUSED_INPUT_KEY: note}}) if c is cut else c
            for c in response.tool_calls]


def _keep_for_later(trace: Trace, texts: Sequence[str]) -> None:
    """User messages given to a run that stops at a call waiting for approval: into
    the trace's inbox, taken once the call is answered (a message cannot come
    between a tool call and its result).

    Raises:
        AgentfsError: a text could not be kept; the error holds it, to copy.
    """
    _, unsaved, error = _keep(trace, texts)
    if error is not None:
        raise AgentfsError(f"could not keep your message for later: {error}{_to_copy(unsaved)}",
                           hint="fix that, then send the message again") from None


def _keep(trace: Trace, texts: Sequence[str]
          ) -> tuple[list[str], list[str], AgentfsError | OSError | None]:
    """Save each text as a file of the trace's inbox: the Git paths written, the texts
    that could not be, and the error of the first of those."""
    places: list[str] = []
    unsaved: list[str] = []
    error: AgentfsError | OSError | None = None
    for text in texts:
        try:
            kept = save_in_inbox(trace.inbox_dir, text, tmp_dir=trace.tmp_dir)
        except (OSError, AgentfsError) as exc:  # a full disk, an inbox that is a link
            unsaved.append(text)
            error = error or exc
        else:
            places.append(trace.rel(kept))
    return places, unsaved, error


def _to_copy(texts: Sequence[str]) -> str:
    return "".join(f"\n--- not saved, copy it: ---\n{text}" for text in texts)


def _check_knowledge(trace: Trace) -> None:
    """Refuse side work on knowledge items while `knowledge/` cannot be read or
    written (`agentfs/core/knowledge.py:load_items` says why)."""
    load_items(trace.workspace.knowledge_dir)


def _check_compressible(trace: Trace) -> None:
    """Refuse to compress a trace a summary would not make shorter."""
    path = trace.main_path()
    kept = [m for m in path if m.role == "system"][:1] + [m for m in path if m.role == "user"][:1]
    if len(path) - len(kept) < MIN_COMPRESSIBLE:
        raise AgentfsError(
            f"trace {trace.id!r} has {len(path) - len(kept)} message(s) after its first "
            "user message: a summary would not make it shorter",
            hint="compress once the trace has grown; `agentfs show` lists its path",
        )


def _texts_kept(trace: Trace, failed: Message, rest: Sequence[str],
                exc: OSError | AgentfsError) -> AgentfsError:
    """The error for user texts a failed write could not commit, saying where each is
    kept: the message file written before the failure (the next run adopts it), a
    file in the trace's inbox, or, if nothing could be written, the error itself."""
    written = trace.message_path(failed)
    places: list[str] = []
    if written.is_file():
        places.append(trace.rel(written))
        texts = list(rest)
    else:
        texts = [str(failed.content), *rest]
    kept, unsaved, _ = _keep(trace, texts)
    places += kept
    kept_in = f"; your message is kept in {', '.join(places)}" if places else ""
    fix = "free disk space (or fix the file's permissions)"
    if isinstance(exc, AgentfsError):
        problem, fix = exc.message, exc.hint or "fix that"
    else:
        problem = f"{exc.strerror or exc}" + (f" ({exc.filename})" if exc.filename else "")
    return AgentfsError(
        f"could not commit the user message to trace {trace.id}: "
        f"{problem}{kept_in}{_to_copy(unsaved)}",
        hint=f"{fix}, then `agentfs run {trace.id}` commits it; nothing committed before "
        "was changed",
    )


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
    for text in [*texts, system or ""]:
        try:
            text.encode()
        except UnicodeEncodeError as exc:  # bytes a terminal or argv could not decode
            raise AgentfsError(
                f"a message to append is not valid UTF-8 text (at character {exc.start}); "
                "nothing was written",
                hint="check the terminal's or the file's encoding",
            ) from None
    return system, texts
