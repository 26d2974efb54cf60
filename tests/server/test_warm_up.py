"""`agentfs serve` sends its application one request of its own before it prints its
address (`agentfs/server/app.py:warm_up`): that request must reach no route, and
read or write nothing of the workspace."""

from __future__ import annotations

import asyncio
from pathlib import Path

from fastapi.testclient import TestClient

from agentfs.cli.context import choose_model
from agentfs.core.project import Project
from agentfs.server.app import create_app, warm_up
from tests.conftest import assert_git_clean, run_cli
from tests.server.conftest import make_workspace


def _files(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under `root`, .git included: (size, mtime)."""
    return {str(p.relative_to(root)): (p.lstat().st_size, p.lstat().st_mtime_ns)
            for p in root.rglob("*")}


def test_the_warm_up_reaches_no_route_and_leaves_the_workspace_as_it_was(tmp_path: Path):
    root = make_workspace(tmp_path / "ws")
    run_cli("new", "t", "-m", "Read notes.md please", cwd=root)
    run_cli("run", "t", cwd=root)
    project = Project.open(root)
    app, _ = create_app(project, lambda trace_model, preset, requested: choose_model(
        project, trace_model, preset, requested), access=None, loopback=True,
        max_body=1 << 20)
    before = _files(root)

    assert asyncio.run(warm_up(app)) == 404

    assert _files(root) == before  # no cache, list or lock file written, nothing read into one
    assert_git_clean(root)
    with TestClient(app, base_url="http://127.0.0.1") as client:  # and it serves as before
        tree = client.get("/api/traces/t/tree", params={"limit": 100})
        assert tree.status_code == 200, tree.text
        assert [m["sequence"] for m in tree.json()["messages"]][:2] == [1, 2]


def test_a_warm_up_that_fails_is_said_and_the_server_starts_anyway(
        tmp_path: Path, monkeypatch) -> None:
    import uvicorn

    import agentfs.server.app

    root = make_workspace(tmp_path / "ws")

    async def failing(app) -> int:
        raise RuntimeError("the warm-up broke")

    served: list[object] = []
    monkeypatch.setattr(agentfs.server.app, "warm_up", failing)
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: served.append(self))
    done = run_cli("serve", "--port", "0", cwd=root)
    assert "the warm-up request failed (RuntimeError('the warm-up broke'))" in done.stderr
    assert "agentfs serve: http://127.0.0.1:" in done.stdout  # the address, after it
    assert len(served) == 1  # and the server ran
