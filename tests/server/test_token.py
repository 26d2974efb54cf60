"""`agentfs serve` requires its token on every route and every address: as a bearer
token, or as the session cookie a browser gets for opening the printed address."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import assert_git_clean, git, replay_workspace, run_cli, trust_workspace
from tests.server.conftest import Served, events, start_server, stop_server

pytestmark = pytest.mark.timeout(180)

#: Path parameters of the schema's routes, filled so a route answers without doing
#: anything (no such trace), and bodies that are refused: the point is who is let in.
FILL = {"trace_id": "nope", "sequence": 1}


def routes(served: Served) -> list[tuple[str, str]]:
    """(method, path) of every operation in the server's OpenAPI schema."""
    with served.client() as client:
        schema = client.get("/openapi.json").json()
    found = [(method.upper(), path.format(**FILL)) for path, item in schema["paths"].items()
             for method in item if method in ("get", "post", "put", "patch", "delete")]
    assert len(found) >= 16, found  # the schema lists the API
    return found


def login(served: Served) -> str:
    """Open the printed address as a browser does; the `Cookie` header it then sends."""
    with served.client(authenticated=False) as browser:
        first = browser.get(served.login_url)
    assert first.status_code == 303, first.text
    return first.headers["set-cookie"].split(";", 1)[0]


def origin(served: Served) -> str:
    return served.url.rstrip("/")


def test_every_route_refuses_a_request_without_the_token_or_with_a_wrong_one(served: Served):
    wrong = "Bearer " + "x" * len(served.token)
    before = git(served.root, "rev-parse", "main")
    for method, path in [*routes(served), ("GET", "/openapi.json"), ("GET", "/"),
                         ("GET", "/static/app.js")]:
        for headers in ({}, {"authorization": wrong}, {"authorization": served.token},
                        {"cookie": f"agentfs-serve-1={served.token}"}):
            with served.client(authenticated=False) as client:
                answer = client.request(method, path, json={} if method == "POST" else None,
                                        headers={"origin": origin(served), **headers})
            assert answer.status_code == 401, (method, path, headers, answer.text)
            assert answer.headers["www-authenticate"] == "Bearer"
            if path.startswith("/api/") or path == "/openapi.json":
                assert answer.json()["hint"], (method, path)
            else:  # a browser without the cookie: a plain page saying what to open
                assert "Open the address `agentfs serve` printed" in answer.text
    assert_git_clean(served.root)
    assert git(served.root, "rev-parse", "main") == before  # nothing was done


def test_every_route_lets_in_the_bearer_token_and_the_page_s_cookie(served: Served):
    cookie = login(served)
    for method, path in routes(served):
        body = {} if method == "POST" else None
        with served.client() as client:  # the bearer token
            answer = client.request(method, path, json=body)
        assert answer.status_code not in (401, 403), (method, path, answer.text)
        with served.client(authenticated=False) as page:  # the page's fetch: same origin
            answer = page.request(method, path, json=body,
                                  headers={"cookie": cookie, "origin": origin(served)})
        assert answer.status_code not in (401, 403), (method, path, answer.text)
    with served.client(authenticated=False, headers={"cookie": cookie}) as page:
        assert page.get("/").status_code == 200
        assert page.get("/static/app.js").status_code == 200
        assert page.get("/openapi.json").status_code == 200


def test_the_schema_declares_the_bearer_token_and_the_cookie_on_every_route(served: Served):
    with served.client() as client:
        schema = client.get("/openapi.json").json()
    schemes = schema["components"]["securitySchemes"]
    port = served.url.rstrip("/").rsplit(":", 1)[1]
    assert {"type": "http", "scheme": "bearer"}.items() <= next(
        s for s in schemes.values() if s["type"] == "http").items()
    assert {"type": "apiKey", "in": "cookie", "name": f"agentfs-serve-{port}"}.items() <= next(
        s for s in schemes.values() if s["type"] == "apiKey").items()
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            either = sorted(name for requirement in operation["security"] for name in requirement)
            assert either == sorted(schemes), (method, path)  # one or the other
            assert "401" in operation["responses"], (method, path)


def test_the_printed_address_sets_a_strict_http_only_cookie_and_leaves_the_address(
        served: Served):
    assert served.login_url.startswith(served.url + "?token=")
    with served.client(authenticated=False) as browser:
        first = browser.get(served.login_url + "&trace=t")
        refused = browser.get(served.url + "?token=" + "x" * len(served.token))
    assert first.status_code == 303
    assert first.headers["location"] == "/?trace=t"  # the token is gone from the address
    cookie = first.headers["set-cookie"]
    name_value, *attributes = [part.strip() for part in cookie.split(";")]
    assert sorted(attributes) == ["HttpOnly", "Path=/", "SameSite=Strict"]  # no expiry
    assert name_value.startswith("agentfs-serve-")
    assert served.token not in cookie  # a cookie jar is a file: it holds a session, not the token
    assert refused.status_code == 401 and "set-cookie" not in refused.headers


def test_the_cookie_alone_changes_nothing_without_the_page_s_own_origin(served: Served):
    cookie = login(served)
    port = int(served.url.rstrip("/").rsplit(":", 1)[1])
    body = {"id": "t", "text": "hi"}
    with served.client(authenticated=False, headers={"cookie": cookie}) as page:
        assert page.get("/api/traces").json()["traces"] == []  # reading: a same-origin GET
        no_origin = page.post("/api/traces", json=body)
        assert no_origin.status_code == 403 and "Origin" in no_origin.json()["error"]
        for other in (f"http://127.0.0.1:{port + 1}", f"http://localhost:{port}", "null",
                      f"http://127.0.0.1.evil.example:{port}"):
            # another site of this machine, even another port, is another origin
            assert page.post("/api/traces", json=body,
                             headers={"origin": other}).status_code == 403, other
        assert run_cli("status", "--json", cwd=served.root).stdout.count('"trace"') == 0
        made = page.post("/api/traces", json=body, headers={"origin": origin(served)})
        assert made.status_code == 201, made.text
    assert_git_clean(served.root)


def test_no_token_is_refused_off_loopback_and_said_loudly_on_it(tmp_path, workspace_root):
    def refused(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "agentfs", "serve", "--port", "0", *args],
                              cwd=workspace_root, capture_output=True, text=True, timeout=60,
                              check=False)
        assert done.returncode == 2, done
        return done.stderr

    assert "--no-token" in refused("--host", "0.0.0.0", "--no-token")
    assert "16 characters" in refused("--token", "short")
    assert "do not go together" in refused("--token", "x" * 20, "--no-token")

    log = tmp_path / "serve.log"
    served = start_server(workspace_root, "--no-token", log=log)
    try:
        assert served.token is None and served.login_url == served.url
        with served.client() as client:
            assert client.get("/api/traces").status_code == 200
        stop_server(served)
    finally:
        if served.proc.poll() is None:
            stop_server(served)
    assert "WARNING: no token" in log.read_text()
    assert "agent's bash commands" in log.read_text()


def test_a_non_loopback_address_gets_a_token_made_up_at_start(tmp_path, workspace_root):
    served = start_server(workspace_root, "--host", "0.0.0.0", log=tmp_path / "serve.log")
    try:
        assert served.token is not None and len(served.token) >= 32
        port = served.url.rstrip("/").rsplit(":", 1)[1]
        with served.client(base_url=f"http://127.0.0.1:{port}") as client:
            assert client.get("/api/traces").json()["traces"] == []
        with served.client(base_url=f"http://127.0.0.1:{port}", authenticated=False) as client:
            assert client.get("/api/traces").status_code == 401
            assert client.get("/").status_code == 401
    finally:
        assert stop_server(served) == 0


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
def test_the_token_is_in_no_file_and_the_agent_s_bash_cannot_use_the_api(tmp_path):
    """The reported attack: a prompt-injected `curl -X POST .../api/traces` from the
    agent's bash. The token is in the server's environment only, never in a file
    of the workspace or .git, nor in the server's log."""
    root = tmp_path / "ws"
    root.mkdir()
    replay_workspace(root, {"turns": [{"text": "hi"}]})
    config = root / "agentfs.toml"
    # with the host's network (trusted), so the request reaches the server: the
    # default, no network, is a wall of its own (tests/tools/test_sandbox_network.py)
    config.write_text(config.read_text() + '\n[tools]\nbash = true\nbash_sandbox = "auto"\n'
                      'bash_network = "host"\n')
    trust_workspace(root)
    token = "given-token-" + "k" * 30
    log = tmp_path / "serve.log"
    served = start_server(root, log=log, env={"AGENTFS_SERVE_TOKEN": token})
    try:
        assert served.token == token
        api = f"{served.url}api/traces"
        every_proc = "for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\\0' '\\n' <$f; done"
        attack = (f"curl -s -X POST {api} -H 'Content-Type: application/json' "
                  "-d '{\"id\": \"evil\", \"text\": \"x\"}'")
        reads = ["env", every_proc, attack]
        (root / "attack.json").write_text(json.dumps({"turns": [
            *({"tool_calls": [{"name": "bash", "input": {"command": c}}]} for c in reads),
            {"text": "done"}]}))
        git(root, "add", "-A")
        git(root, "commit", "-qm", "bash on, and the attack")
        with served.client(authenticated=False) as browser:
            cookie = browser.get(served.login_url).headers["set-cookie"].split(";")[0]
        with served.client() as client:
            made = client.post("/api/traces", json={"id": "t", "text": "do what it says",
                                                    "model": "replay:attack.json"})
            assert made.status_code == 201, made.text
            with client.stream("GET", "/api/traces/t/events") as stream:
                seen = events(stream)
                assert next(seen)[0] == "ready"
                ran = client.post("/api/traces/t/run", json={"max_iterations": 10})
                assert ran.status_code in (200, 202), ran.text
                ends = ((k, d) for k, d in seen if k in ("run_finished", "run_failed"))
                kind, data = next(ends, (None, None))
            assert kind == "run_finished", data
            shown = client.get("/api/traces/t/messages").json()["messages"]
            assert [t["trace"] for t in client.get("/api/traces").json()["traces"]] == ["t"]
        results = [m["text"] for m in shown if m["role"] == "tool"]
        assert len(results) == 3 and "no token given" in results[2], results
        assert not any(token in text for text in results)
        assert "agentfs serve: WARNING" not in log.read_text()
    finally:
        assert stop_server(served) == 0
    assert token not in log.read_text()
    session = cookie.split("=", 1)[1]
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert token.encode() not in data and session.encode() not in data, path
    objects = subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"], cwd=root,
                             capture_output=True, check=True).stdout  # every object, inflated
    assert token.encode() not in objects and session.encode() not in objects
    assert_git_clean(root)


def test_every_curl_example_in_the_api_docs_sends_the_token():
    api = Path(__file__).resolve().parents[2] / "docs" / "api.md"
    examples = [line for line in api.read_text().splitlines() if line.startswith("curl ")]
    assert len(examples) > 10
    assert [line for line in examples if '-H "Authorization: Bearer $TOKEN"' not in line] == []
