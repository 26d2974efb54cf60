"""A real Git server on loopback for tests of a worker fleet: `git daemon` with
pushes enabled, serving bare repositories from a folder of one's own.

    with GitServer(tmp_path / "server") as server:
        url = server.create("ws")  # git://127.0.0.1:PORT/ws.git, an empty bare repo
        ...
        server.stop()   # the remote is unreachable (a partition)
        server.start()  # back, on the same port

Only loopback, only the folder given; nothing outside it is served.
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Self

__all__ = ["GitServer"]


class GitServer:
    """`git daemon --enable=receive-pack --export-all` on 127.0.0.1 and a free port."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.base.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        self._proc: subprocess.Popen | None = None

    def create(self, name: str) -> str:
        """An empty bare repository `name.git`; returns its URL."""
        subprocess.run(["git", "init", "--quiet", "--bare", "--initial-branch=main",
                        str(self.base / f"{name}.git")], check=True)
        return self.url(name)

    def url(self, name: str) -> str:
        return f"git://127.0.0.1:{self.port}/{name}.git"

    def start(self, timeout: float = 10.0) -> None:
        """Serve, and return once the port accepts connections."""
        self._proc = subprocess.Popen(
            ["git", "daemon", "--reuseaddr", "--enable=receive-pack", "--export-all",
             "--informative-errors", f"--base-path={self.base}", "--listen=127.0.0.1",
             f"--port={self.port}", str(self.base)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if self._proc.poll() is not None:
                    raise RuntimeError(
                        f"git daemon exited with {self._proc.returncode}") from None
                time.sleep(0.02)
        raise RuntimeError(f"git daemon did not listen on port {self.port} in {timeout} s")

    def stop(self) -> None:
        """Stop serving: connections are refused until `start()`."""
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(timeout=10)
            self._proc = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
