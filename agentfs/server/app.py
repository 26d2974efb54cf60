"""The ASGI application: the trace API (`agentfs/server/routes.py`), the viewer
page (`agentfs/server/static/`), the guard in front of both, and errors as
JSON."""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from importlib.resources import files
from typing import Any

from fastapi import FastAPI, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.security import APIKeyCookie, HTTPBearer
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

from agentfs.core.project import Project
from agentfs.errors import (
    AgentfsError,
    ConfigError,
    MessageFileError,
    ModelError,
    NotDefined,
    TraceLocked,
    TraceNotFound,
)
from agentfs.server.auth import Access
from agentfs.server.events import EventHub
from agentfs.server.guard import ASGIApp, Guard, GuardSettings
from agentfs.server.routes import ApiError, ChooseModel, Server, build_router
from agentfs.server.runs import BackgroundRuns
from agentfs.store.message_dir import folders
from agentfs.store.workspace import MESSAGES_DIR

__all__ = ["REMEMBER_FROM", "create_app", "get_in_process", "remember_names", "status_of",
           "warm_up"]

STATIC = files("agentfs.server") / "static"
#: A trace whose `messages/` has more folders than this has their names listed and
#: saved at the server's start (`remember_names`); fewer are listed by a first view
#: in a few milliseconds.
REMEMBER_FROM = 10


def status_of(exc: AgentfsError) -> int:
    """The HTTP status of an agentfs error."""
    if isinstance(exc, TraceNotFound):
        return 404
    if isinstance(exc, TraceLocked):
        return 409
    if isinstance(exc, MessageFileError | NotDefined):
        return 422
    if isinstance(exc, ModelError):
        return 502  # the model failed after its retries, or cannot be set up
    if isinstance(exc, ConfigError):
        return 500  # agentfs.toml or a script it names is broken: the server's side
    return 409  # a valid request the trace's state refuses (e.g. nothing to compress)


def create_app(project: Project, choose_model: ChooseModel, *, access: Access | None,
               loopback: bool, max_body: int,
               runner_options: dict[str, Any] | Callable[[], dict[str, Any]] | None = None,
               ) -> tuple[Guard, Server]:
    """The application over `project`, behind its guard, and what its routes share
    (the runs, to stop them when the server stops).

    `choose_model(trace_model, preset, requested)` returns the model to call;
    `access`: the token every request must show (None: none, on loopback
    only); `loopback`: the server is bound to a loopback address (only loopback
    Host names are served).
    """
    hub = EventHub()
    fixed = runner_options if callable(runner_options) else partial(dict, runner_options or {})
    runs = BackgroundRuns(project, hub, fixed)
    server = Server(project, choose_model, hub, runs, fixed)
    app = FastAPI(title="agentfs", version="1", docs_url=None, redoc_url=None,
                  description="The trace API of an agentfs workspace (docs/api.md).")
    app.state.agentfs = server
    app.include_router(build_router(server), dependencies=_security(access))
    app.mount("/static", StaticFiles(directory=str(STATIC)), name="static")

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(str(STATIC / "index.html"), media_type="text/html")

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return _error(exc.status, exc.error, exc.hint)

    @app.exception_handler(AgentfsError)
    async def agentfs_error(request: Request, exc: AgentfsError) -> JSONResponse:
        hint = exc.api_hint
        if isinstance(exc, TraceLocked) and exc.trace_id and runs.running(exc.trace_id):
            hint = (f"this server runs it: POST /api/traces/{exc.trace_id}/stop ends the run "
                    "after its current step; then try again")
        return _error(status_of(exc), exc.message, hint)

    @app.exception_handler(RequestValidationError)
    async def bad_body(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [_problem(e) for e in exc.errors()]
        text = "; ".join(f"{p['where']}: {p['problem']}" for p in problems)
        return _error(422, f"bad request: {text}", "see GET /openapi.json for the shapes",
                      problems=problems)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        if exc.status_code == 400:  # FastAPI could not decode the body into JSON at all
            return _error(422, "bad request: body: not JSON in UTF-8 (bytes that are not "
                          "UTF-8, another charset, or nested too deep to read)",
                          "send a JSON object encoded in UTF-8")
        hint = "GET /openapi.json lists the API" if exc.status_code in (404, 405) else None
        response = _error(exc.status_code, str(exc.detail), hint)
        response.headers.update(exc.headers or {})  # e.g. Allow, with a 405
        return response

    @app.exception_handler(OSError)
    async def io_error(request: Request, exc: OSError) -> JSONResponse:
        where = f" ({exc.filename})" if exc.filename else ""
        return _error(500, f"{exc.strerror or exc}{where}", None)

    return Guard(app, GuardSettings(max_body, access, loopback)), server


async def warm_up(app: Guard) -> int:
    """Send the application one request of its own before the server takes any:
    `GET` of a path no route serves, which reads and writes nothing; returns the
    status it was answered (404). FastAPI sets up its routes at the first request
    it routes; this moves that set-up from the first visitor's page load to the
    server's start (docs/api.md). Past the guard, which would ask for the token:
    the request never leaves the process."""
    status, _ = await get_in_process(app.app, "/api/-warm-up")
    return status


def remember_names(project: Project, stop: threading.Event,
                   more_than: int = REMEMBER_FROM) -> list[str]:
    """List the message folders of every trace with more than `more_than` of them,
    where their names were not saved yet or changed since, and save the names
    (`agentfs/store/message_dir.py:MessageDir.sequences`, `agentfs/store/foldernames.py`):
    what the first view of a long compressed trace would otherwise list while its
    visitor waits, as after a `git clone`. `agentfs serve` runs it on a thread once it
    listens; `stop` ends it between traces. Returns the ids of the traces it looked
    at. A trace that cannot be read is left to its views, which say why."""
    looked: list[str] = []
    for trace_id in project.workspace.trace_ids():
        if stop.is_set():
            break
        try:
            listed = folders(project.workspace.trace_dir(trace_id) / MESSAGES_DIR)
        except OSError:  # unreadable: its views say why
            continue
        if len(listed) - 1 <= more_than:
            continue  # `folders` lists messages/ itself first
        try:
            project.trace(trace_id).message_dir.sequences(0)
        except (AgentfsError, OSError):  # its views say why
            continue
        looked.append(trace_id)
    return looked


async def get_in_process(app: ASGIApp, path: str, query: str = "") -> tuple[int, bytes]:
    """One `GET` of `path?query` through the ASGI application `app`, in this process,
    as from loopback: the status it was answered (0 if it started no answer) and the
    body."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "GET", "scheme": "http", "path": path, "raw_path": path.encode(),
             "root_path": "", "query_string": query.encode(),
             "headers": [(b"host", b"127.0.0.1")],
             "client": ("127.0.0.1", 0), "server": ("127.0.0.1", 0)}

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    answered: list[int] = []
    chunks: list[bytes] = []

    async def send(message: Any) -> None:
        if message["type"] == "http.response.start":
            answered.append(message["status"])
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return (answered[0] if answered else 0), b"".join(chunks)


def _security(access: Access | None) -> list[Any]:
    """How the schema says each route is authenticated: a bearer token, or the
    page's cookie (either one). Declared only: the guard checks them
    (`agentfs/server/guard.py:Guard`), before any route runs."""
    if access is None:
        return []
    return [Security(HTTPBearer(auto_error=False, description="The token `agentfs serve` "
                                "printed, or was given with --token / AGENTFS_SERVE_TOKEN")),
            Security(APIKeyCookie(name=access.cookie_name, auto_error=False,
                                  description="The page's session, set when a browser opens "
                                  "the address `agentfs serve` printed (/?token=...)"))]


def _problem(error: dict[str, Any]) -> dict[str, str]:
    """One problem of a bad request: where (`body.field`) and what."""
    if error.get("type") == "json_invalid":  # loc is ("body", character offset)
        at = error["loc"][1] if len(error.get("loc", ())) > 1 else "?"
        detail = (error.get("ctx") or {}).get("error", "")
        return {"where": "body", "problem": f"not valid JSON: {detail} (at character {at})"}
    return {"where": ".".join(str(p) for p in error.get("loc", ())), "problem": error["msg"]}


def _error(status: int, error: str, hint: str | None, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": error, "hint": hint, **extra}, status_code=status)
