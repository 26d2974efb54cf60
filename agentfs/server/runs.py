"""Runs started from the API: one thread per trace, holding the trace's lock like
`agentfs run`, reporting its events to the hub. Stopping one lets it finish the
step it is in (the runner's `stop` check, as the watcher's Ctrl-C does)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from agentfs.core.project import Project
from agentfs.core.runner import RunResult
from agentfs.core.status import record_failure
from agentfs.errors import AgentfsError, TraceLocked
from agentfs.models.base import Model
from agentfs.prices import PriceTable
from agentfs.server.events import EventHub

__all__ = ["BackgroundRuns", "RunRequest"]


@dataclass(frozen=True)
class RunRequest:
    trace_id: str
    model: Model
    messages: tuple[str, ...] = ()
    max_iterations: int | None = None
    inject_skills: tuple[str, ...] = ()
    #: Which calls wait for approval in this run; None: the server's (`serve --approve`).
    approve: Literal["acting", "none"] | None = None


@dataclass
class _Run:
    thread: threading.Thread | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    outcome: dict[str, Any] | None = None  # the `run_finished` or `run_failed` event
    locked: bool = False  # failed because another process holds the trace


class BackgroundRuns:
    """The server's runs, at most one per trace."""

    def __init__(self, project: Project, hub: EventHub,
                 runner_options: Callable[[], dict[str, Any]] = dict) -> None:
        self.project = project
        self.hub = hub
        self.runner_options = runner_options  # the fields of a run starting now
        self._runs: dict[str, _Run] = {}
        self._lock = threading.Lock()

    def running(self, trace_id: str) -> bool:
        with self._lock:
            run = self._runs.get(trace_id)
            return run is not None and not run.done.is_set()

    def start(self, request: RunRequest, wait: float = 1.0) -> dict[str, Any]:
        """Start a run; returns its outcome if it ended within `wait` seconds, else
        `{"status": "running"}`.

        Raises:
          TraceLocked: this server or another process runs the trace already.
        """
        trace_id = request.trace_id
        with self._lock:
            current = self._runs.get(trace_id)
            if current is not None and not current.done.is_set():
                raise TraceLocked(f"trace {trace_id!r} is being run by this server",
                                  hint=f"stop it first: POST /api/traces/{trace_id}/stop")
            if self.project.trace(trace_id).is_running():
                raise TraceLocked(f"trace {trace_id!r} is being run by another process",
                                  hint="wait for that run to finish, or stop it first")
            run = _Run()
            run.thread = threading.Thread(target=self._run, args=(request, run),
                                          name=f"agentfs-run-{trace_id}", daemon=True)
            self._runs[trace_id] = run
        run.thread.start()
        if run.done.wait(wait):
            if run.locked:
                raise TraceLocked(run.outcome["error"] if run.outcome else "trace is busy",
                                  hint="wait for that run to finish, or stop it first")
            return run.outcome or {}
        return {"status": "running", "trace": trace_id}

    def stop(self, trace_id: str) -> bool:
        """Ask the trace's run to stop after its current step; False if none runs."""
        with self._lock:
            run = self._runs.get(trace_id)
        if run is None or run.done.is_set():
            return False
        run.stop.set()
        return True

    def stop_all(self, timeout: float | None = None) -> None:
        """Stop every run after its current step and wait for them."""
        with self._lock:
            runs = list(self._runs.values())
        for run in runs:
            run.stop.set()
        for run in runs:
            if run.thread is not None:
                run.thread.join(timeout)

    def _run(self, request: RunRequest, run: _Run) -> None:
        trace_id = request.trace_id
        publish: Callable[[str, dict[str, Any]], None] = (
            lambda kind, data: self.hub.publish(trace_id, kind, data))
        try:
            publish("run_started", {"trace": trace_id, "model": request.model.name})
            options = {**self.runner_options(), **(
                {"approve": request.approve} if request.approve is not None else {})}
            runner = self.project.runner(
                request.model, stop=run.stop.is_set, on_event=publish,
                on_text=lambda chunk: publish("text", {"trace": trace_id, "text": chunk}),
                **options,
            )
            trace = self.project.trace(trace_id)
            declared = [*request.inject_skills, *(
                s for s in trace.meta.context.inject_skills
                if s not in request.inject_skills)]
            result = runner.run(trace_id, request.messages, max_iterations=request.max_iterations,
                                inject_skills=declared)
            run.outcome = _finished(result, self.project.prices)
            publish("run_finished", run.outcome)
        except AgentfsError as exc:
            run.locked = isinstance(exc, TraceLocked)
            run.outcome = {"status": "failed", "trace": trace_id, "error": exc.message,
                           "hint": exc.api_hint}
            record_failure(self.project, trace_id, exc, unattended=False)  # the answer says it
            publish("run_failed", run.outcome)
        except Exception as exc:  # noqa: BLE001 - a bug or an I/O error: reported, the server goes on
            run.outcome = {"status": "failed", "trace": trace_id,
                           "error": f"{type(exc).__name__}: {exc}", "hint": None}
            publish("run_failed", run.outcome)
        finally:
            run.done.set()


def _finished(result: RunResult, prices: PriceTable) -> dict[str, Any]:
    return {"status": "finished", "trace": result.trace_id, "stop": str(result.stop),
            "iterations": result.iterations, "input_tokens": result.input_tokens,
            "output_tokens": result.output_tokens, "cached_tokens": result.cached_tokens,
            "model_ms": result.model_ms, "wall_ms": result.wall_ms,
            "cost": prices.cost(result.spent).record()}

