"""The sandbox has no network by default: a command cannot reach agentfs's own API, nor
any other service listening on this machine's loopback or on its Unix sockets."""

from __future__ import annotations

import http.server
import os
import platform
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentfs.tools import ToolContext, ToolRegistry
from agentfs.tools.bash import bash_tool
from agentfs.tools.sandbox import choose_sandbox
from agentfs.tools.socket_filter import MACHINES
from agentfs.tools.subprocesses import safe_environment
from tests.conftest import git, run_cli, trust_workspace
from tests.server.conftest import start_server, stop_server
from tests.tools.test_sandbox import needs_bwrap

needs_curl = pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
needs_python3 = pytest.mark.skipif(shutil.which("python3") is None,
                                   reason="python3 is not installed for the sandbox to run")
needs_socket_filter = pytest.mark.skipif(
    platform.machine() not in MACHINES,
    reason=f"agentfs has no socket filter for {platform.machine()} (docs/security.md)")
GREETING = b"a host service's greeting"


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


@pytest.fixture
def unix_services() -> Iterator[tuple[str, socket.socket]]:
    """A stream socket that greets whoever connects and a datagram socket, both of the
    host, any user may write to (mode 0777, as Docker's is to its group), in a folder
    the sandbox sees (not /tmp, which it replaces): (the stream's path, the datagram
    socket)."""
    folder = Path(tempfile.mkdtemp(prefix="agentfs-sockets-", dir="/var/tmp"))
    folder.chmod(0o755)
    stream = socket.socket(socket.AF_UNIX)
    datagram = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    stream.bind(str(folder / "svc.sock"))
    datagram.bind(str(folder / "log.sock"))
    for name in ("svc.sock", "log.sock"):
        (folder / name).chmod(0o777)
    stream.listen()

    def greet() -> None:
        while True:
            try:
                client, _ = stream.accept()
            except OSError:  # closed: the test is over
                return
            with client:
                client.sendall(GREETING)

    thread = threading.Thread(target=greet, daemon=True)
    thread.start()
    try:
        yield str(folder / "svc.sock"), datagram
    finally:
        stream.shutdown(socket.SHUT_RDWR)
        stream.close()
        datagram.close()
        thread.join()
        shutil.rmtree(folder)


# Connects to the stream socket, and sends to the datagram socket from a socket of its
# own and from one of a socketpair, each step whatever the one before did.
REACH_UNIX = """
import socket, sys
stream, log = sys.argv[1], sys.argv[1].replace("svc.sock", "log.sock")
def attempt(what, step):
    try:
        print(what, step())
    except OSError as exc:
        print(what, "refused:", exc)
def greeting():
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(stream)
        return s.recv(100)
attempt("stream", greeting)
attempt("datagram", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b"d", log))
attempt("pair", lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)[0].sendto(b"p", log))
"""

# What a command without network still has: stream socketpairs, multiprocessing's
# pipes and pool (fork), and git.
LOCAL_WORK = """
import multiprocessing, socket
def square(x):
    return x * x
if __name__ == "__main__":
    a, b = socket.socketpair()
    a.sendall(b"ping")
    print("socketpair", b.recv(4))
    left, right = multiprocessing.Pipe()
    left.send("over a pipe")
    print("pipe", right.recv())
    with multiprocessing.get_context("fork").Pool(2) as pool:
        print("pool", pool.map(square, [1, 2, 3]))
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        try:
            socket.socket(socket.AF_UNIX, kind)
            print("unix socket made")
        except PermissionError as exc:
            print("unix socket refused:", exc)
"""


def bash(root: Path, command: str, network: str) -> str:
    """What a sandboxed bash call of `command` answers."""
    tool = bash_tool(30, 10_000, safe_environment(os.environ),
                     sandbox=choose_sandbox("bwrap", network, root))  # type: ignore[arg-type]
    return ToolRegistry([tool]).call("bash", {"command": command},
                                     ToolContext(root, "t")).content


def received(datagram: socket.socket) -> list[bytes]:
    """The datagrams waiting on the host's socket."""
    datagram.setblocking(False)
    found = []
    while True:
        try:
            found.append(datagram.recv(100))
        except BlockingIOError:
            return found


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


@needs_bwrap
@needs_python3
@needs_socket_filter
def test_a_unix_socket_of_the_host_is_reached_only_with_the_host_network(
        workspace, unix_services):
    path, datagram = unix_services
    (workspace / "reach.py").write_text(REACH_UNIX)
    answer = bash(workspace, f"python3 reach.py {path}", "none")
    assert GREETING.decode() not in answer
    assert answer.count("refused: [Errno 13] Permission denied") == 3, answer
    assert received(datagram) == []
    answer = bash(workspace, f"python3 reach.py {path}", "host")
    assert GREETING.decode() in answer, answer
    assert sorted(received(datagram)) == [b"d", b"p"]


@needs_bwrap
@needs_python3
@needs_socket_filter
def test_without_network_a_command_has_socketpairs_and_multiprocessing_and_no_unix_socket(
        workspace):
    (workspace / "local.py").write_text(LOCAL_WORK)
    answer = bash(workspace, "python3 local.py && git log --oneline | wc -l", "none")
    assert "socketpair b'ping'\npipe over a pipe\npool [1, 4, 9]\n" in answer, answer
    assert answer.count("unix socket refused: [Errno 13] Permission denied") == 2
    assert answer.endswith("1\n[exit status 0]")


@needs_bwrap
@needs_python3
def test_where_agentfs_has_no_socket_filter_the_start_says_unix_sockets_stay_reachable(
        workspace, unix_services, monkeypatch):
    sandbox = choose_sandbox("bwrap", "none", workspace)
    monkeypatch.setattr(platform, "machine", lambda: "riscv64")
    assert sandbox.socket_filter is None
    assert "can connect to this machine's Unix sockets" in sandbox.notices()[-1]
    assert "riscv64" in sandbox.notices()[-1]
    tool = bash_tool(30, 10_000, safe_environment(os.environ), sandbox=sandbox)
    assert tool.description.endswith("It has no network.")
    (workspace / "reach.py").write_text(REACH_UNIX)
    answer = ToolRegistry([tool]).call("bash", {"command": f"python3 reach.py {unix_services[0]}"},
                                       ToolContext(workspace, "t")).content
    assert GREETING.decode() in answer  # the limit the notice tells of


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
        assert "loopback and Unix sockets" in notices[-1]
    assert set(notices) <= set(done.stderr.splitlines())
