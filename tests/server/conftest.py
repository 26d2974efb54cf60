"""A real `agentfs serve` process on a free port, over a workspace made with the CLI."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs

import pytest

from tests.conftest import replay_workspace, run_cli

httpx = pytest.importorskip("httpx2", reason="the API tests need the test extra (httpx2)")
pytest.importorskip("fastapi", reason="agentfs serve needs the serve extra: "
                    "pip install 'agentfs-workspace[serve]'")

#: Text turns after the first (a tool call), so any number of runs has answers.
SCRIPT = {
    "turns": [
        {"text": "Looking at **notes.md**.",
         "tool_calls": [{"name": "read_file", "input": {"path": "notes.md"}}]},
        *({"text": f"Answer {n}: `done`."} for n in range(1, 60)),
    ],
    "compression": [{"text": f"Summary {n}: the user asked for notes; it was read."}
                    for n in range(1, 10)],
    "reflection": [{"text": "## Read the notes first\nOpen notes.md before answering.\n"}],
    "knowledge_eval": [{"text": "accept read-the-notes-first: specific and reusable"}],
}


def make_workspace(root: Path) -> Path:
    """A workspace on the replay model, with notes.md to read."""
    return replay_workspace(root, SCRIPT, {"notes.md": "some notes\n"})


def compressed_and_rewound(root: Path) -> None:
    """Trace `t`: a tool step, a rewind, a compression, then a rewind past what came
    after it. Main path #1, #2, #12 (the summary); #3-#9 replaced by it; #6-#7 left
    off by the first rewind, #13-#14 by the second; #10-#11 on the compression branch."""
    run_cli("new", "t", "-m", "Read notes.md please", cwd=root)
    run_cli("run", "t", cwd=root)  # 3 assistant (call), 4 tool, 5 answer
    run_cli("run", "t", "-m", "second question", cwd=root)  # 6, 7
    run_cli("rewind", "t", "5", cwd=root)
    run_cli("run", "t", "-m", "third question", cwd=root)  # 8, 9
    run_cli("compress", "t", cwd=root)  # 10, 11 on the branch; 12 summary
    run_cli("run", "t", "-m", "fourth question", cwd=root)  # 13, 14
    run_cli("rewind", "t", "12", cwd=root)


@dataclass
class Served:
    """A running server: `url` is its base (`http://127.0.0.1:PORT/`), `login_url`
    the address it printed (the page's, with `?token=`), `token` its token (None
    with --no-token); `client()` sends the token as a bearer token."""

    url: str
    login_url: str
    token: str | None
    root: Path
    proc: subprocess.Popen
    stdout: list[str]

    def client(self, *, authenticated: bool = True, **kw) -> httpx.Client:
        headers = dict(kw.pop("headers", {}))
        if authenticated and self.token is not None:
            headers["authorization"] = f"Bearer {self.token}"
        return httpx.Client(**{"base_url": self.url, "timeout": 60, "headers": headers, **kw})


def start_server(root: Path, *args: str, log: Path, env: dict | None = None) -> Served:
    """`python -m agentfs serve --port 0 ARGS` in `root`; returns once it printed its URL."""
    with log.open("w") as errors:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agentfs", "serve", "--port", "0", *args], cwd=root,
            stdout=subprocess.PIPE, stderr=errors, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        )
    lines = read_lines(proc, 1)
    assert lines and lines[0].startswith("agentfs serve: http://"), (lines, log.read_text())
    login_url = lines[0].split()[2]
    base, _, query = login_url.partition("?")
    token = parse_qs(query)["token"][0] if query else None
    return Served(base, login_url, token, root, proc, lines)


def read_lines(served_or_proc, count: int, deadline: float = 60) -> list[str]:
    """The next `count` lines the server printed (fewer if it exits first)."""
    lines = _lines_of(served_or_proc.proc if isinstance(served_or_proc, Served)
                      else served_or_proc)
    end = time.monotonic() + deadline
    found: list[str] = []
    while len(found) < count:
        try:
            line = lines.get(timeout=max(0.0, end - time.monotonic()))
        except queue.Empty:
            break
        if line is None:
            break
        found.append(line)
    return found


_readers: dict[int, queue.Queue] = {}


def _lines_of(proc: subprocess.Popen) -> queue.Queue:
    """A queue of the process's stdout lines (None at the end), read by a thread."""
    if proc.pid not in _readers:
        lines: queue.Queue = queue.Queue()

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.put(line.rstrip("\n"))
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        _readers[proc.pid] = lines
    return _readers[proc.pid]


def stop_server(served: Served) -> int:
    """Ctrl-C, as a person would; returns the exit code."""
    served.proc.send_signal(signal.SIGINT)
    code = served.proc.wait(timeout=60)
    assert read_lines(served.proc, 100, deadline=10) is not None  # the pump ends
    served.proc.stdout.close()
    return code


def events(response) -> Iterator[tuple[str, dict]]:
    """Server-sent events from a streamed response (keep-alives skipped)."""
    kind, data = "", ""
    for line in response.iter_lines():
        if line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            data += line[6:]
        elif not line and data:
            yield kind, json.loads(data)
            kind, data = "", ""


@pytest.fixture
def workspace_root(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return make_workspace(root)


@pytest.fixture
def served(workspace_root: Path, tmp_path: Path) -> Iterator[Served]:
    server = start_server(workspace_root, log=tmp_path / "serve.log")
    try:
        yield server
    finally:
        if server.proc.poll() is None:
            code = stop_server(server)
            assert code == 0, (tmp_path / "serve.log").read_text()
