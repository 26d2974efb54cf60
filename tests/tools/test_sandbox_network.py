"""The sandbox has no network by default: a command cannot reach agentfs's own API, nor
any other service listening on this machine's loopback."""

from __future__ import annotations

import http.server
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentfs.tools import ToolContext, ToolRegistry
from agentfs.tools.bash import bash_tool
from agentfs.tools.sandbox import choose_sandbox
from agentfs.tools.subprocesses import safe_environment
from tests.conftest import git, run_cli, trust_workspace
from tests.server.conftest import start_server, stop_server
from tests.tools.test_sandbox import needs_bwrap

needs_curl = pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")


@pytest.fixture
def local_service() -> Iterator[str]:
    """A plain HTTP server on 127.0.0.1, as a service of the machine would be."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()
    thread.join()


def fetch(root: Path, url: str, network: str) -> str:
    """What curl in a sandboxed bash says of GET url: its HTTP status, or no connection."""
    tool = bash_tool(30, 10_000, safe_environment(os.environ),
                     sandbox=choose_sandbox("bwrap", network))  # type: ignore[arg-type]
    result = ToolRegistry([tool]).call(
        "bash", {"command": f"curl -sS -m 10 -o /dev/null -w 'status %{{http_code}}\\n' {url} "
                 "|| echo 'no connection'"}, ToolContext(root, "t"))
    return result.content


@needs_bwrap
@needs_curl
def test_a_sandboxed_command_cannot_reach_a_service_on_loopback(workspace, local_service):
    answer = fetch(workspace, local_service, "none")
    assert "no connection" in answer and "status 200" not in answer


@needs_bwrap
@needs_curl
def test_with_the_host_network_a_sandboxed_command_reaches_it(workspace, local_service):
    assert "status 200" in fetch(workspace, local_service, "host")


@needs_bwrap
@needs_curl
def test_a_sandboxed_command_cannot_reach_agentfs_serve(workspace, tmp_path):
    served = start_server(workspace, log=tmp_path / "serve.log")
    try:
        answer = fetch(workspace, served.url.rstrip("/") + "/api/traces", "none")
    finally:
        stop_server(served)
    assert "no connection" in answer


@needs_bwrap
@needs_curl
def test_with_the_host_network_the_api_still_refuses_a_command_without_its_token(
        workspace, tmp_path):
    served = start_server(workspace, "--token", "a-token-bash-never-sees",
                          log=tmp_path / "serve.log")
    try:
        answer = fetch(workspace, served.url.rstrip("/") + "/api/traces", "host")
    finally:
        stop_server(served)
    assert "status 401" in answer or "status 403" in answer


def test_the_default_is_no_network_and_the_host_network_is_said_at_start(
        workspace, write_script):
    assert choose_sandbox("auto").network == "none"
    config = workspace / "agentfs.toml"
    config.write_text(config.read_text() + '\n[tools]\nbash = true\nbash_network = "host"\n')
    git(workspace, "commit", "-qam", "bash with the host network")
    script = write_script([{"text": "done"}, {"text": "done"}])
    untrusted = run_cli("run", "t", "-m", "go", "--model", f"replay:{script}", cwd=workspace)
    assert "bash with the network" in untrusted.stderr  # skipped until trusted
    trust_workspace(workspace)
    done = run_cli("run", "t", "-m", "again", "--model", f"replay:{script}", cwd=workspace)
    notices = choose_sandbox("auto", "host", workspace).notices()
    if choose_sandbox("auto", "host").bwrap is not None:
        assert "loopback" in notices[-1]
    assert set(notices) <= set(done.stderr.splitlines())
