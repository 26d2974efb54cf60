"""Every answer of `agentfs serve` carries the page's security headers
(`agentfs/server/guard.py:SECURITY_HEADERS`): the page, its files, the API's
answers and errors, the event stream, and the guard's own refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from agentfs.cli.context import choose_model
from agentfs.core.project import Project
from agentfs.server.app import create_app
from agentfs.server.auth import Access
from agentfs.server.guard import SECURITY_HEADERS
from tests.conftest import run_cli
from tests.server.conftest import make_workspace

TOKEN = "a-token-long-enough-for-the-server-0123456789"


@pytest.fixture
def client(tmp_path: Path):
    root = make_workspace(tmp_path / "ws")
    run_cli("new", "t", "-m", "Read notes.md please", cwd=root)
    project = Project.open(root)
    app, _ = create_app(project, lambda trace_model, preset, requested: choose_model(
        project, trace_model, preset, requested), access=Access.for_port(TOKEN, 80),
        loopback=True, max_body=1 << 20)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        yield client


def _assert_secured(response) -> None:
    for name, value in SECURITY_HEADERS.items():
        assert response.headers.get_list(name) == [value], (response.status_code, name)


def test_every_answer_carries_the_security_headers(client: TestClient):
    bearer = {"authorization": f"Bearer {TOKEN}"}
    answers = {
        "page": client.get("/", headers=bearer),
        "page file": client.get("/static/app.js", headers=bearer),
        "API": client.get("/api/traces/t/tree", params={"limit": 10}, headers=bearer),
        "API error": client.get("/api/traces/nope", headers=bearer),
        "no route": client.get("/api/nothing-here", headers=bearer),
        "bad body": client.post("/api/traces", json={"id": 3}, headers=bearer),
        "no token (the guard)": client.get("/api/traces"),
        "wrong host (the guard)": client.get("/api/traces", headers={
            **bearer, "host": "evil.example"}),
    }
    assert [(what, a.status_code) for what, a in answers.items()] == [
        ("page", 200), ("page file", 200), ("API", 200), ("API error", 404),
        ("no route", 404), ("bad body", 422), ("no token (the guard)", 401),
        ("wrong host (the guard)", 421)]
    for answer in answers.values():
        _assert_secured(answer)
    etag = answers["page file"].headers["etag"]
    for answer in (client.get("/static/app.js", headers={**bearer, "if-none-match": etag}),
                   client.head("/static/app.js", headers=bearer)):
        assert answer.status_code in (200, 304), answer.status_code
        _assert_secured(answer)
    assert client.get("/static/app.js", headers={**bearer, "if-none-match": etag}
                      ).status_code == 304
    with client.stream("GET", "/api/traces/t/events", headers=bearer) as events:
        assert events.status_code == 200
        _assert_secured(events)
