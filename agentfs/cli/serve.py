"""`agentfs serve`: the trace API and the viewer page over HTTP (the `serve` extra)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import click

from agentfs.cli.context import LiveOptions, choose_model
from agentfs.cli.options import approve_option
from agentfs.errors import AgentfsError

if TYPE_CHECKING:
    import socket

    from agentfs.core.project import Project

INSTALL = "pip install 'agentfs-workspace[serve]'"
DEFAULT_MAX_BODY = 1024 * 1024


@click.command()
@click.argument("workspace", type=click.Path(file_okay=False, path_type=Path), required=False)
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (--no-token only on 127.0.0.1/localhost/::1).")
@click.option("--port", type=click.IntRange(0, 65535), default=8321, show_default=True,
              help="Port to listen on; 0 picks a free one (the URL printed says which).")
@click.option("--token", envvar="AGENTFS_SERVE_TOKEN",
              help="The token every request must show (default: one made up at start, "
              "printed in the page's URL); AGENTFS_SERVE_TOKEN keeps it out of `ps`.")
@click.option("--no-token", is_flag=True,
              help="Require no token, on a loopback address only: any local process "
              "can then drive the API.")
@click.option("--model", help="Model for runs and compressions started here "
              "(default: each trace's, else its preset's, else agentfs.toml's).")
@click.option("--max-body", type=click.IntRange(min=1), default=DEFAULT_MAX_BODY,
              show_default=True, help="Largest request body accepted, in bytes.")
@approve_option("server's runs", asked="the call waits in traces/TRACE/approval.json for "
                "the page, POST .../approval or `agentfs approve`")
def serve(  # noqa: PLR0913, PLR0917 -- click passes one parameter per option
        workspace: Path | None, host: str, port: int, token: str | None, no_token: bool,
        model: str | None, max_body: int, approve: bool | None,
) -> None:
    """Serve WORKSPACE's traces over HTTP: the trace API and a viewer page at /.

    The API (docs/api.md, schema at /openapi.json) lists traces, reads their
    messages, side branches and goals, posts user messages through the
    trace's inbox, starts and stops runs (events as server-sent events),
    compresses and rewinds, with the same locks as the commands. Every
    request needs the token: the first line printed is the page's address
    with it (http://HOST:PORT/?token=...); API clients send
    `Authorization: Bearer TOKEN`. It listens on 127.0.0.1 unless --host says
    otherwise. Under --approve, a run's call that may change something waits
    in traces/TRACE/approval.json; the page shows it with Yes, No and Always.
    Ctrl-C lets runs finish their current step, then exits.
    """
    from agentfs.cli.options import approve_policy

    try:
        import uvicorn

        from agentfs.server.app import create_app, warm_up
        from agentfs.server.auth import Access
        from agentfs.server.guard import is_loopback
    except ImportError as exc:
        raise click.ClickException(
            f"agentfs serve needs the serve extra ({exc.name or exc} is missing): {INSTALL}"
        ) from None
    from agentfs.core.project import Project
    from agentfs.models.base import Model
    from agentfs.tools.subprocesses import safe_environment

    # No command the server runs (bash, hooks, git) inherits the token.
    os.environ.pop("AGENTFS_SERVE_TOKEN", None)
    token = _token(host, token, no_token)
    project = Project.open(workspace)

    def choose(trace_model: str | None, preset: str | None, requested: str | None) -> Model:
        return choose_model(project, trace_model, preset, requested or model)

    early: list[int] = []  # Ctrl-C before the server runs: it stops as soon as it does
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: early.append(signum))
    sock = _listen(host, port)
    bound_host, bound_port = sock.getsockname()[:2]
    access = None if token is None else Access.for_port(token, bound_port)
    app, server = create_app(project, choose, access=access, loopback=is_loopback(host),
                             max_body=max_body,
                             runner_options=LiveOptions(project, {
                                 "command_env": safe_environment(os.environ),
                                 "approve": approve_policy(approve)}))
    import asyncio  # here: every command imports this module, few need asyncio

    try:  # before the address is out: the first visitor waits less
        asyncio.run(warm_up(app))
    except Exception as exc:  # noqa: BLE001 -- only a speed-up: the server starts without it
        click.echo(f"agentfs serve: the warm-up request failed ({exc!r}); the first "
                   "page load may be slower", err=True)
    stopping = threading.Event()  # ends the listing of long traces' folders
    remembering = threading.Thread(target=_remember_names, args=(project, stopping),
                                   daemon=True, name="agentfs-remember-names")
    remembering.start()
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    url = f"http://{shown}:{bound_port}/" + (f"?token={quote(token, safe='')}" if token else "")
    click.echo(f"agentfs serve: {url} (workspace {project.workspace.root})")
    if token is None:
        click.echo("agentfs serve: WARNING: no token (--no-token): any process on this "
                   "machine, the agent's bash commands included when they have network, "
                   "can read and drive every trace through this API", err=True)
    sys.stdout.flush()

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            stopping.set()
            server.hub.close()  # end the event streams, so connections can close
            server.runs.stop_all(timeout=0)  # runs stop after their current step
            super().handle_exit(sig, frame)

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            """Ctrl-C and SIGTERM stop the server, which then exits 0 (uvicorn's own
            handler raises the signal again once it stopped)."""
            saved = {sig: signal.signal(sig, self.handle_exit)
                     for sig in (signal.SIGINT, signal.SIGTERM)}
            if early:
                self.handle_exit(early[0], None)
            try:
                yield
            finally:
                for sig, handler in saved.items():
                    signal.signal(sig, handler)

    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                            timeout_graceful_shutdown=5)
    try:
        Server(config).run(sockets=[sock])
    finally:
        click.echo("agentfs serve: stopping; runs finish their current step", err=True)
        stopping.set()
        server.hub.close()
        server.runs.stop_all()
        remembering.join()  # done with the trace it was listing
        sock.close()


def _remember_names(project: Project, stop: threading.Event) -> None:
    """`agentfs/server/app.py:remember_names`, on the server's thread for it: an
    error is said, and the server goes on (it is only a speed-up)."""
    from agentfs.server.app import remember_names

    try:
        remember_names(project, stop)
    except Exception as exc:  # noqa: BLE001 -- only a speed-up, as the warm-up is
        click.echo(f"agentfs serve: listing the folders of long traces failed ({exc!r}); "
                   "their first views may be slower", err=True)


def _token(host: str, token: str | None, no_token: bool) -> str | None:
    """The token every request must show: --token (or AGENTFS_SERVE_TOKEN), one made
    up, or None with --no-token on a loopback address."""
    from agentfs.server.auth import MIN_TOKEN, new_token
    from agentfs.server.guard import is_loopback

    if token is not None and no_token:
        raise click.UsageError("--no-token and a token (--token or AGENTFS_SERVE_TOKEN) "
                               "do not go together")
    if no_token and not is_loopback(host):
        raise click.UsageError(
            f"--no-token with --host {host} would let other machines drive this workspace: "
            "drop --no-token (a token is made up and printed), or listen on 127.0.0.1")
    if token is not None and len(token) < MIN_TOKEN:
        raise click.UsageError(f"--token: use at least {MIN_TOKEN} characters "
                               "(or give none: one is made up)")
    if token is None and not no_token:
        return new_token()
    return token


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket on `host:port` (port 0: a free one)."""
    import socket

    sock = None
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        if sock is not None:
            sock.close()
        raise AgentfsError(f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                           hint="another server may use it: choose another with --port N, "
                           "or --port 0 for a free one") from None
    sock.set_inheritable(True)
    return sock
