"""The trace API: each route parses its body, calls the core function the
matching command calls (under the same trace lock), and returns JSON.

Errors are `{"error": ..., "hint": ...}` with the status that says what went
wrong (see `agentfs/server/app.py:create_app`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator

from agentfs.core.actions import edit_message, fork, post_message, rewind
from agentfs.core.approval import answer_waiting
from agentfs.core.goals import GoalTree
from agentfs.core.knowledge import load_items
from agentfs.core.listcache import ListCache
from agentfs.core.project import Project
from agentfs.core.records import message_record, step_record
from agentfs.core.runner import Runner
from agentfs.core.search import search_messages
from agentfs.core.sidequeue import QueueReport
from agentfs.core.sidework import item_record, pending_by_trace, report_record
from agentfs.core.tracetree import folded_records, trace_tree, versions_record
from agentfs.core.usage import trace_totals
from agentfs.errors import (
    AgentfsError,
    ConfigError,
    ModelError,
    NoSuchMessage,
    TraceLocked,
    TraceNotFound,
)
from agentfs.models.base import Model
from agentfs.models.resolve import check_untrusted_model
from agentfs.prices import PriceTable
from agentfs.server.events import EventHub, sse
from agentfs.server.runs import BackgroundRuns, RunRequest
from agentfs.store.approval import Answer, PendingApproval
from agentfs.store.inbox import POST_KEY
from agentfs.store.ingest import parse_dropped_text
from agentfs.store.messages import Message
from agentfs.store.stepdiff import message_diff
from agentfs.store.steplog import trace_log
from agentfs.store.trace import Trace, TraceView
from agentfs.store.unicode import LONE_SURROGATE
from agentfs.store.workspace import GOALS_FILE, TRACE_FILE, TRACE_ID, check_trace_id

__all__ = ["ApiError", "ChooseModel", "ErrorBody", "Server", "build_router"]

#: (trace's model, its preset, the model the request names) → the model to call.
ChooseModel = Callable[[str | None, str | None, str | None], Model]


class ApiError(Exception):
    """A refusal with its HTTP status."""

    def __init__(self, status: int, error: str, hint: str | None = None) -> None:
        super().__init__(error)
        self.status, self.error, self.hint = status, error, hint


@dataclass
class Server:
    """What the routes share: the workspace, how to choose models, the runs."""

    project: Project
    choose_model: ChooseModel
    hub: EventHub
    runs: BackgroundRuns
    runner_options: Callable[[], dict[str, Any]]  # the fields of a run starting now
    #: The trace list, its rows kept while their files do not change.
    listing: ListCache = field(init=False)

    def __post_init__(self) -> None:
        self.listing = ListCache(self.project.workspace, self.project.prices,
                                 saved=self.project.workspace.trace_list)

    def trace(self, trace_id: str) -> Trace:
        """An existing trace by id (never a path), or 404."""
        try:
            check_trace_id(trace_id)
        except AgentfsError as exc:
            raise TraceNotFound(exc.message, hint=exc.api_hint) from None
        if not (self.project.workspace.trace_dir(trace_id) / TRACE_FILE).is_file():
            raise TraceNotFound(f"no trace {trace_id!r}", hint="GET /api/traces lists the traces")
        return self.project.trace(trace_id)

    def model(self, trace: Trace | None, requested: str | None) -> Model:
        """The model as `agentfs run` chooses it; a bad `model` in the body is a 422.
        agentfs.toml is read again first if it changed (`runner_options`): the model
        may be the one it names."""
        self.runner_options()
        meta = trace.meta if trace is not None else None
        if requested:  # a replay script is a file of the workspace, found from its root
            try:
                script = check_untrusted_model(requested, root=self.project.workspace.root)
            except ConfigError as exc:
                raise ApiError(422, exc.message, exc.api_hint) from None
            requested = f"replay:{script}" if script is not None else requested
        try:
            return self.choose_model(meta.model if meta else None, meta.preset if meta else None,
                                     requested)
        except (ConfigError, ModelError) as exc:
            if requested:
                raise ApiError(422, f"model {requested!r}: {exc.message}",
                               exc.api_hint) from None
            raise


# --- bodies -----------------------------------------------------------------------

#: A model name's form (`agentfs/models/resolve.py:resolve_model` checks the rest).
MODEL_NAME = r"^[A-Za-z0-9_-]+:.+$"


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    @field_validator("*", mode="before")
    @classmethod
    def _unicode(cls, value: object) -> object:
        """Text a file can hold: JSON may escape a lone surrogate ("\\ud800"); UTF-8 cannot."""
        if any(isinstance(text, str) and LONE_SURROGATE.search(text)
               for text in (value if isinstance(value, list) else [value])):
            raise ValueError("is not valid Unicode: it holds a lone surrogate "
                             "(an escape from \\ud800 to \\udfff)")
        return value


class ErrorBody(BaseModel):
    """Every error response."""

    error: str = Field(description="What went wrong, naming the trace, file or field")
    hint: str | None = Field(description="How to fix it")
    problems: list[dict[str, str]] | None = Field(
        default=None, description="For a bad body (422): each field and its problem")


#: The statuses any route may answer besides its own (see docs/api.md#errors).
ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": text} for status, text in {
        401: "A token is required and missing or wrong",
        403: "A request from another web site's page",
        404: "No such trace or message",
        409: "The trace is busy, or its state refuses the request",
        413: "The body is over the server's --max-body",
        415: "The body is not JSON",
        421: "A Host other than a loopback name, on a loopback address",
        422: "A bad body or parameter",
        500: "agentfs.toml or a script it names is broken, or the disk failed",
        502: "The model failed after its retries",
    }.items()
}


class NewTrace(_Body):
    id: str = Field(pattern=f"^{TRACE_ID.pattern}$",
                    description="The new trace's id: 1-64 letters, digits, '-' or '_'")
    text: str = Field(min_length=1, description="The first user message (Markdown; "
                      "frontmatter optional, as in a dropped file)")
    preset: str | None = Field(default=None, min_length=1, description="Preset from agentfs.toml")
    model: str | None = Field(default=None, pattern=MODEL_NAME, description="The trace's default model")


class PostMessage(_Body):
    text: str = Field(min_length=1, description="The user message (Markdown; frontmatter "
                      "optional, read as a file dropped into the trace's inbox)")
    run: bool = Field(default=False, description="Start a run once it is posted")
    model: str | None = Field(default=None, pattern=MODEL_NAME, description="Model for that run")


class RunBody(_Body):
    max_iterations: int | None = Field(default=None, ge=1, description="Model calls at most")
    model: str | None = Field(default=None, pattern=MODEL_NAME,
                              description="replay:PATH or anthropic:MODEL-ID "
                              "(default: the trace's, its preset's, agentfs.toml's)")
    inject_skills: list[str] = Field(default_factory=list,
                                     description="Skills to keep in the model's context")
    approve: bool | None = Field(
        default=None, description="Calls of tools that may change something wait for an "
        "answer (POST .../approval); default: the server's --approve, else agentfs.toml's")


class ApprovalBody(_Body):
    answer: Literal["yes", "no", "always"] = Field(description="yes runs the waiting call, no refuses it, always "
                           "runs it and every later call of that tool in the run that follows")
    run: bool = Field(default=True, description="Continue the trace once answered "
                      "(under approval: later calls wait again)")
    model: str | None = Field(default=None, pattern=MODEL_NAME, description="Model for that run")


class EditBody(_Body):
    text: str = Field(description="The message's new text (its body: the frontmatter stays)")


class RewindBody(_Body):
    sequence: int = Field(ge=0, description="The message to make the head")
    files: bool = Field(default=False, description="Also put back the workspace files the "
                        "trace's steps changed after it (`agentfs rewind --files`)")


class ForkBody(_Body):
    at: int | None = Field(default=None, ge=0,
                           description="The message to fork from (default: the head)")
    id: str | None = Field(default=None, pattern=f"^{TRACE_ID.pattern}$",
                           description="The new trace's id (default: ID-fork-N)")


class ModelBody(_Body):
    model: str | None = Field(default=None, pattern=MODEL_NAME,
                              description="Model to use (default as for runs)")


# --- routes -----------------------------------------------------------------------

def build_router(server: Server) -> APIRouter:
    """The `/api` routes over `server`, one group per resource."""
    api = APIRouter(prefix="/api", responses=ERRORS)
    for add_routes in (_trace_routes, _message_routes, _edit_routes, _view_routes, _run_routes,
                       _event_routes, _knowledge_routes, _file_routes):
        add_routes(api, server)
    return api


#: The most messages one page of `/messages` or `/tree` holds (`limit`).
PAGE_LIMIT = 1000


def trace_view(trace: Trace, limit: int | None, before: int | None) -> TraceView:
    """The messages a paged route shows (`agentfs/store/trace.py:Trace.view`): the whole
    trace without `limit`; bad `limit` and `before` values are a 422 saying what to send."""
    if limit is None:
        if before is not None:
            raise ApiError(422, "before needs limit",
                           "ask for a page: ?limit=100&before=<older of the page after it>")
        return trace.view()
    if not 1 <= limit <= PAGE_LIMIT:
        raise ApiError(422, f"limit must be from 1 to {PAGE_LIMIT}, not {limit}",
                       "e.g. ?limit=100; page back with before=<older>")
    if before is not None and before < 0:
        raise ApiError(422, f"before must be a message's sequence, not {before}",
                       "send the `older` of the page after it, or no before for the latest")
    try:
        return trace.view(limit, before=before)
    except NoSuchMessage as exc:
        raise ApiError(422, exc.message, exc.api_hint) from None


def folded_page(trace: Trace, prices: PriceTable, *, limit: int | None, first: int | None,
                end: int | None, before: int | None) -> dict[str, Any]:
    """`/tree?first=&end=&limit=`: the messages of a page's fold (`agentfs/store/trace.py:Fold`),
    `limit` at a time from `first`, and `next` (the `first` of the next page, or None)."""
    if first is None or limit is None or before is not None:
        raise ApiError(422, "a fold is read with first and limit (and end), without before",
                       "send a fold's first and its last + 1 as end: ?first=3&end=9962&limit=100")
    if not 1 <= limit <= PAGE_LIMIT or first < 0 or (end is not None and end <= first):
        raise ApiError(422, f"limit must be from 1 to {PAGE_LIMIT}, first a sequence and end "
                       f"above it, not limit={limit}, first={first}, end={end}",
                       "e.g. ?first=3&end=9962&limit=100; go on with first=<next>")
    messages, following = trace.files_from(first, end, limit)
    return {"trace": trace.id, "head": trace.meta.head, "first": first, "end": end,
            "next": following, "messages": folded_records(trace, messages, prices)}


def _trace_routes(api: APIRouter, server: Server) -> None:
    """The traces: list them, create one, one trace's state."""
    project = server.project

    @api.get("/traces", summary="Traces with their status (`agentfs status --json`)")
    def list_traces() -> Response:
        listing = server.listing.listed()
        server.listing.save()  # for the next `agentfs status` (or server), if rows changed
        # The rows' JSON texts joined: FastAPI's encoder would walk 1,000 rows (docs/api.md)
        return Response(listing.document(str(project.workspace.root), lambda trace: {
            "server_run": server.runs.running(trace)}), media_type="application/json")

    @api.post("/traces", status_code=201, summary="Create a trace (`agentfs new`)")
    def create_trace(body: NewTrace) -> dict[str, Any]:
        try:
            check_trace_id(body.id)
        except AgentfsError as exc:
            raise ApiError(422, exc.message, exc.api_hint) from None
        if body.id in project.workspace.trace_ids():
            raise ApiError(409, f"trace {body.id!r} exists",
                           f"post to it: POST /api/traces/{body.id}/messages")
        if body.model is not None:
            server.model(None, body.model)  # a name this server cannot use is a 422 now
        first = parse_dropped_text("<api>", body.text)
        trace = project.new_trace(body.id, first, preset=body.preset, model=body.model)
        server.hub.publish(trace.id, "committed", {"trace": trace.id, "kind": "user",
                                                   "head": trace.meta.head})
        return {"trace": trace.id, "head": trace.meta.head}

    @api.get("/traces/{trace_id}", summary="One trace: head, model, whether it runs")
    def get_trace(trace_id: str) -> dict[str, Any]:
        trace = server.trace(trace_id)
        meta = trace.meta
        return {"trace": trace.id, "head": meta.head, "model": meta.model,
                "preset": meta.preset, "created_at": meta.created_at,
                "forked_from": meta.forked_from.model_dump() if meta.forked_from else None,
                "running": trace.is_running(), "server_run": server.runs.running(trace.id),
                "pending_inbox": [trace.rel(p) for p in trace.pending_inbox()],
                "last_error": meta.context.last_error.model_dump() if meta.context.last_error
                else None, "approval": _approval_record(trace),
                "usage": trace_totals(meta, project.prices).record()}


def _message_routes(api: APIRouter, server: Server) -> None:
    """A trace's messages: read them, post one, move the head back."""

    @api.get("/traces/{trace_id}/messages",
             summary="The main path, or with all=true every message (`agentfs show --json`); "
             "with limit=N, its last N messages before message `before`, and `older` "
             "(`agentfs show --tail`)")
    def get_messages(trace_id: str, all: bool = False, limit: int | None = None,
                     before: int | None = None) -> JSONResponse:
        trace = server.trace(trace_id)
        view = trace_view(trace, limit, before)
        on_path = {m.sequence for m in view.path}
        prices = server.project.prices
        paged = ({"older": view.older, "folds": [f.record() for f in view.folds]}
                 if limit is not None else {})
        return JSONResponse({
            "trace": trace.id, "head": trace.meta.head,
            "usage": trace_totals(trace.meta, prices).record(), **paged,
            "messages": [message_record(m, m.sequence in on_path, prices)
                         for m in view.messages.values() if all or m.sequence in on_path]})

    @api.post("/traces/{trace_id}/messages", status_code=201,
              summary="Post a user message (through the trace's inbox)",
              responses={202: {"description": "Queued for the run that holds the trace"}})
    def post(trace_id: str, body: PostMessage,
             idempotency_key: str | None = Header(
                 default=None, alias="Idempotency-Key",
                 description="Makes a retry safe: a post with a key used before on this "
                 "trace is answered with what became of that one (1 to 64 letters, digits, "
                 "- or _)")) -> JSONResponse:
        trace = server.trace(trace_id)
        if idempotency_key is not None and not POST_KEY.fullmatch(idempotency_key):
            raise ApiError(422, f"Idempotency-Key must be 1 to 64 letters, digits, - or _, "
                           f"not {idempotency_key!r:.80}", "send a UUID, e.g. from uuidgen")
        # A model that cannot be used is refused before the message is committed: once
        # it is, the answer is a success (a client retrying an error would post twice).
        model = server.model(trace, body.model) if body.run else None
        posted = post_message(trace, body.text, check=server.project.drop_check(),
                              run_holds_it=lambda: server.runs.running(trace.id), origin="<api>",
                              key=idempotency_key)
        record: dict[str, Any] = {"trace": trace.id, "status": posted.status,
                                  "file": posted.file, "sequence": posted.sequence}
        if posted.repeated:
            record["repeated"] = True
        if posted.status == "committed":  # again for a retry: listeners only read again
            server.hub.publish(trace.id, "committed", {"trace": trace.id, "kind": "user",
                                                       "head": posted.sequence})
        if model is not None and posted.status == "committed":
            record["run"] = _start_after_commit(server, RunRequest(trace.id, model))
        return JSONResponse(record, status_code=201 if posted.status == "committed" else 202)

    @api.post("/traces/{trace_id}/rewind", summary="Move the head back (`agentfs rewind`)")
    def rewind_trace(trace_id: str, body: RewindBody) -> dict[str, Any]:
        trace = server.trace(trace_id)
        if body.sequence not in trace.messages():
            raise ApiError(404, f"trace {trace.id!r} has no message #{body.sequence}",
                           f"GET /api/traces/{trace.id}/messages?all=true lists them")
        done = rewind(trace, body.sequence, files=body.files)
        if done.moved or done.files:
            server.hub.publish(trace.id, "committed", {"trace": trace.id, "kind": "rewind",
                                                       "head": done.sequence})
        return {"trace": trace.id, "previous": done.previous, "head": done.sequence,
                "moved": done.moved, "files": done.files}


def _file_routes(api: APIRouter, server: Server) -> None:
    """What a step did to the workspace's files, and forks."""

    @api.get("/traces/{trace_id}/messages/{sequence}/diff",
             summary="The workspace files a tool result changed, as a diff (`agentfs log -p`)")
    def get_diff(trace_id: str, sequence: int) -> dict[str, Any]:
        trace = server.trace(trace_id)
        message = _message_of(trace, sequence)
        diff = message_diff(trace.repo, trace.rel(trace.workspace.traces_dir), trace.id, message)
        return {"trace": trace.id, "sequence": sequence, **diff.record()}

    @api.post("/traces/{trace_id}/fork", status_code=201,
              summary="A new trace from this one's main path up to a message (`agentfs fork`)")
    def fork_trace(trace_id: str, body: ForkBody | None = None) -> dict[str, Any]:
        body = body or ForkBody()
        trace = server.trace(trace_id)
        if body.id is not None and body.id in server.project.workspace.trace_ids():
            raise ApiError(409, f"trace {body.id!r} exists", "choose another id")
        if body.at is not None and body.at not in trace.messages():
            raise ApiError(404, f"trace {trace.id!r} has no message #{body.at}",
                           f"GET /api/traces/{trace.id}/messages?all=true lists them")
        made = fork(trace, body.at, body.id)
        origin = made.meta.forked_from
        server.hub.publish(made.id, "committed", {"trace": made.id, "kind": "create",
                                                  "head": made.meta.head})
        return {"trace": made.id, "head": made.meta.head,
                "forked_from": origin.model_dump() if origin is not None else None}


def _edit_routes(api: APIRouter, server: Server) -> None:
    """Editing a message in place, its versions, and finding messages by their text."""

    @api.put("/traces/{trace_id}/messages/{sequence}",
             summary="Replace a message's text, committed as an `edit` (as a hand edit is)")
    def edit(trace_id: str, sequence: int, body: EditBody) -> dict[str, Any]:
        trace = server.trace(trace_id)
        _message_of(trace, sequence)
        edited = edit_message(trace, sequence, body.text)
        if edited.committed:
            server.hub.publish(trace.id, "committed", {"trace": trace.id, "kind": "edit",
                                                       "head": trace.meta.head})
        return {"trace": trace.id, "sequence": sequence, "file": edited.file,
                "committed": edited.committed}

    @api.get("/traces/{trace_id}/messages/{sequence}/versions",
             summary="A message's texts in the trace's commits, newest first, with diffs")
    def versions(trace_id: str, sequence: int) -> dict[str, Any]:
        trace = server.trace(trace_id)
        return versions_record(trace, _message_of(trace, sequence))

    @api.get("/search", summary="Messages of every trace holding each word (`agentfs search`)")
    def search(q: str = Query(pattern=r"\S", max_length=1000,
                             description="Words to find, each in the message's text"),
               limit: int = Query(50, ge=1, le=500)) -> dict[str, Any]:
        return {"query": q, **search_messages(server.project, q, limit).record()}


def _view_routes(api: APIRouter, server: Server) -> None:
    """What the viewer and the read-only commands show: the tree, the log, the goals."""
    project = server.project

    @api.get("/traces/{trace_id}/tree",
             summary="Every message with its place, side branches, goals (the viewer's "
             "data); with limit=N, the last N main-path messages before message `before` "
             "with what hangs from them (long runs off the path as `folds`), and `older`; "
             "with first=SEQ&end=SEQ&limit=N, a fold's messages a page at a time, and `next`")
    def get_tree(trace_id: str, limit: int | None = None, before: int | None = None,
                 first: int | None = None, end: int | None = None) -> JSONResponse:
        trace = server.trace(trace_id)
        if first is not None or end is not None:
            return JSONResponse(folded_page(trace, project.prices, limit=limit, first=first,
                                            end=end, before=before))
        view = trace_view(trace, limit, before) if limit is not None or before is not None \
            else None
        return JSONResponse({**trace_tree(trace, project.prices, view),
                             "running": trace.is_running(),
                             "server_run": server.runs.running(trace.id),
                             "approval": _approval_record(trace),
                             "waits_for_user": trace.waits_for_user()})

    @api.get("/traces/{trace_id}/log", summary="The trace's commits, newest first (`agentfs log`)")
    def get_log(trace_id: str, limit: int = Query(100, ge=1, le=10_000)) -> dict[str, Any]:
        trace = server.trace(trace_id)
        return {"trace": trace.id, "steps": [step_record(s, project.prices)
                                             for s in trace_log(project.repo, trace.id, limit)]}

    @api.get("/traces/{trace_id}/goals", summary="The goal tree (`agentfs goals --json`)")
    def goals(trace_id: str) -> dict[str, Any]:
        trace = server.trace(trace_id)
        tree = GoalTree.load(trace.dir / GOALS_FILE)
        return {**tree.model_dump(mode="json"), "text": tree.to_prompt(include_summary=True)}


def _run_routes(api: APIRouter, server: Server) -> None:
    """Runs on threads of the server, and side work (compress, reflect, evaluate)."""

    @api.post("/traces/{trace_id}/run", summary="Start a run on a thread of the server",
              responses={202: {"description": "Running; follow GET .../events"}})
    def start_run(trace_id: str, body: RunBody | None = None) -> JSONResponse:
        body = body or RunBody()
        trace = server.trace(trace_id)
        if body.inject_skills:  # a skill that is not found is a bad body, before the run
            server.project.check_settings(None, body.inject_skills)
        outcome = server.runs.start(RunRequest(
            trace.id, server.model(trace, body.model), max_iterations=body.max_iterations,
            inject_skills=tuple(body.inject_skills),
            approve=None if body.approve is None else "acting" if body.approve else "none"))
        return JSONResponse(outcome, status_code=202 if outcome.get("status") == "running"
                            else 200)

    @api.post("/traces/{trace_id}/approval",
              summary="Answer the tool call the trace waits for (`agentfs approve`)",
              responses={202: {"description": "Answered; the run goes on: follow GET "
                                              ".../events"}})
    def approval(trace_id: str, body: ApprovalBody) -> JSONResponse:
        trace = server.trace(trace_id)
        model = server.model(trace, body.model) if body.run else None  # a bad name: 422 first
        answered = answer_waiting(trace, Answer(body.answer))
        server.hub.publish(trace.id, "committed", {"trace": trace.id, "kind": "approval",
                                                   "head": trace.meta.head})
        record = {"trace": trace.id, "approval": _pending_record(answered)}
        if model is None:
            return JSONResponse(record)
        outcome = _start_after_commit(server, RunRequest(trace.id, model, approve="acting"))
        return JSONResponse({**record, "run": outcome},
                            status_code=202 if outcome.get("status") == "running" else 200)

    @api.post("/traces/{trace_id}/stop", status_code=202,
              summary="Stop the server's run of the trace after its current step")
    def stop_run(trace_id: str) -> dict[str, Any]:
        trace = server.trace(trace_id)
        if not server.runs.stop(trace.id):
            raise ApiError(409, f"this server is not running trace {trace.id!r}",
                           "a run another process started stops with Ctrl-C there")
        return {"trace": trace.id, "status": "stopping"}

    @api.post("/traces/{trace_id}/compress", status_code=201,
              summary="Compress now on a side branch (`agentfs compress --json`)")
    def compress(trace_id: str, body: ModelBody | None = None) -> dict[str, Any]:
        return _side_work(server, trace_id, body, "compress", Runner.compress)

    @api.post("/traces/{trace_id}/reflect", status_code=201,
              summary="Reflect now on a side branch (`agentfs reflect --json`)")
    def reflect(trace_id: str, body: ModelBody | None = None) -> dict[str, Any]:
        return _side_work(server, trace_id, body, "reflect", Runner.reflect)

    @api.post("/traces/{trace_id}/evaluate-knowledge", status_code=201,
              summary="Judge the pending knowledge items on a side branch of the trace "
                      "(`agentfs knowledge evaluate TRACE --json`)")
    def evaluate(trace_id: str, body: ModelBody | None = None) -> dict[str, Any]:
        server.trace(trace_id)
        if not pending_by_trace(server.project, trace_id):
            raise ApiError(409, "no pending knowledge items: nothing to evaluate",
                           "reflection (POST .../reflect) writes pending items")
        return _side_work(server, trace_id, body, "evaluate_knowledge", Runner.evaluate_knowledge)


def _start_after_commit(server: Server, request: RunRequest) -> dict[str, Any]:
    """Start a run once the request's change is committed: a trace another process
    took meanwhile is a run not started, not an error (a client retrying the error
    would be refused, or repeat the change)."""
    try:
        return server.runs.start(request)
    except TraceLocked as exc:
        return {"status": "not started", "error": exc.message, "hint": exc.api_hint}


def _event_routes(api: APIRouter, server: Server) -> None:
    """Run events as server-sent events."""

    @api.get("/traces/{trace_id}/events", summary="Run events as server-sent events",
             response_class=StreamingResponse)
    async def events(trace_id: str, request: Request) -> StreamingResponse:
        trace = server.trace(trace_id)  # cheap: a stat and a regex
        hello = {"trace": trace.id, "server_run": server.runs.running(trace.id)}

        def look() -> tuple[int, int] | None:
            try:
                st = trace.meta_path.stat()
            except OSError:
                return None
            return st.st_mtime_ns, st.st_size

        async def body():
            async for kind, data in server.hub.stream(trace.id, hello, look):
                if await request.is_disconnected():
                    return
                yield sse(kind, data)

        return StreamingResponse(body(), media_type="text/event-stream",
                                 headers={"cache-control": "no-store"})


def _knowledge_routes(api: APIRouter, server: Server) -> None:
    """The workspace's knowledge items."""
    project = server.project

    @api.get("/knowledge", summary="Knowledge items (`agentfs knowledge --json`)")
    def knowledge(status: Literal["pending", "accepted", "rejected"] | None = None,
                  ) -> dict[str, Any]:
        items = [i for i in load_items(project.workspace.knowledge_dir)
                 if status is None or i.status == status]
        return {"items": [item_record(i) for i in items]}


def _side_work(server: Server, trace_id: str, body: ModelBody | None, kind: str,
           work: Callable[[Runner, str], QueueReport]) -> dict[str, Any]:
    """Run `work` (a Runner method: compress, reflect, evaluate_knowledge) through
    the trace's queue; what it merged, as `agentfs/core/sidework.py:report_record`."""
    trace = server.trace(trace_id)
    runner = server.project.runner(server.model(trace, (body or ModelBody()).model),
                            **server.runner_options())
    report = work(runner, trace.id)
    record = report_record(server.project, trace.id, report)
    if report.merged:
        server.hub.publish(trace.id, "committed", {
            "trace": trace.id, "kind": kind, "head": server.trace(trace_id).meta.head})
    return record


def _message_of(trace: Trace, sequence: int) -> Message:
    """Message `sequence` of the trace's files, or 404."""
    message = trace.messages().get(sequence)
    if message is None:
        raise ApiError(404, f"trace {trace.id!r} has no message #{sequence}",
                       f"GET /api/traces/{trace.id}/messages?all=true lists them")
    return message


def _approval_record(trace: Trace) -> dict[str, Any] | None:
    """The call `approval.json` holds, or None (a broken file: its error)."""
    try:
        pending = trace.pending_approval()
    except AgentfsError as exc:
        return {"error": exc.message, "hint": exc.api_hint}
    return None if pending is None else _pending_record(pending)


def _pending_record(pending: PendingApproval) -> dict[str, Any]:
    return {"call_id": pending.call_id, "tool": pending.tool, "input": pending.input,
            "sequence": pending.sequence,
            "answer": None if pending.answer is None else str(pending.answer)}
