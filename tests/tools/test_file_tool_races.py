"""File tools open exactly what they checked: a symlink swapped in between the check
and the open (by a bash command running beside them, say) never leads them outside
the workspace, for reading or for writing."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from agentfs.tools import ToolContext, ToolRegistry
from agentfs.tools.files import file_tools

TRIES = 1000
SECRET = "SECRET-OUTSIDE-THE-WORKSPACE"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder outside the workspace with a secret in it."""
    path = tmp_path / "outside"
    path.mkdir()
    (path / "f").write_text(SECRET + "\n")
    return path


@contextmanager
def flipping(flip: Callable[[], None]) -> Iterator[None]:
    """Run `flip` again and again in a thread while the block runs."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            flip()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=60)
        assert not thread.is_alive()


def file_flipper(root: Path, target: Path) -> Callable[[], None]:
    """`f` turns from a regular file into a symlink to `target` and back, atomically."""
    def flip() -> None:
        os.symlink(target, root / "f.link")
        os.replace(root / "f.link", root / "f")
        (root / "f.file").write_text("inside\n")
        os.replace(root / "f.file", root / "f")
    return flip


def folder_flipper(root: Path, target: Path) -> Callable[[], None]:
    """`d` turns from a real folder into a symlink to `target` and back. A write may
    make a new `d` in a gap; it is set aside."""
    def flip() -> None:
        try:
            os.rename(root / "d", root / "d.real")
            os.symlink(target, root / "d")
            os.unlink(root / "d")
        except OSError:
            pass
        while os.path.lexists(root / "d.real"):
            try:
                os.rename(root / "d.real", root / "d")
            except OSError:
                if os.path.islink(root / "d"):
                    os.unlink(root / "d")
                else:
                    os.rename(root / "d", root / f"d.made-{uuid.uuid4().hex}")
    return flip


def tries_until(succeeded: Callable[[], bool], count: int = TRIES) -> Iterator[int]:
    """`count` tries, and more while none `succeeded` (the flipper may win many in a
    row), up to 20 times as many: the race must have been run both ways."""
    for n in range(20 * count):
        if n >= count and succeeded():
            return
        yield n


def calls(root: Path) -> Callable[..., tuple[str, bool]]:
    registry = ToolRegistry(file_tools())

    def call(name: str, **arguments) -> tuple[str, bool]:
        result = registry.call(name, arguments, ToolContext(root, "t"))
        return str(result.content), result.is_error

    return call


def test_reads_never_return_a_file_swapped_in_by_a_symlink(workspace, outside):
    (workspace / "f").write_text("inside\n")
    call = calls(workspace)
    results = []
    with flipping(file_flipper(workspace, outside / "f")):
        for _ in tries_until(lambda: any(text == "inside\n" for text, _ in results)):
            results.append(call("read_file", path="f"))
    leaked = [text for text, _ in results if SECRET in text]
    assert leaked == []
    assert any(text == "inside\n" for text, _ in results)  # the race was run


def test_reads_through_a_folder_swapped_for_a_symlink_stay_inside(workspace, outside):
    (workspace / "d").mkdir()
    (workspace / "d" / "f").write_text("inside\n")
    call = calls(workspace)
    results = []
    with flipping(folder_flipper(workspace, outside)):
        for _ in tries_until(lambda: any(not failed for _, failed in results)):
            results.append(call("read_file", path="d/f"))
            results.append(call("grep", pattern="SECRET|inside", path="d"))
    assert [text for text, _ in results if SECRET in text] == []
    assert any("inside" in text and not failed for text, failed in results)


def test_edits_never_read_a_file_swapped_in_by_a_symlink(workspace, outside):
    (workspace / "f").write_text("inside\n")
    call = calls(workspace)
    results = []
    with flipping(file_flipper(workspace, outside / "f")):
        for _ in tries_until(lambda: any("(now 7 bytes)" in text for text, _ in results)):
            results.append(call("write_file", path="f", content="", append=True))
    secret_size = f"(now {len(SECRET) + 1} bytes)"
    assert [text for text, _ in results if secret_size in text] == []
    assert any("(now 7 bytes)" in text for text, _ in results)
    assert (outside / "f").read_text() == SECRET + "\n"


def test_writes_through_a_folder_swapped_for_a_symlink_stay_inside(workspace, outside):
    (workspace / "d").mkdir()
    call = calls(workspace)
    results = []
    with flipping(folder_flipper(workspace, outside)):
        for n in tries_until(lambda: any(not failed for _, failed in results), TRIES // 4):
            results.append(call("write_file", path=f"d/new-{n}", content="written\n"))
    assert sorted(p.name for p in outside.iterdir()) == ["f"]
    assert (outside / "f").read_text() == SECRET + "\n"
    assert any(not failed for _, failed in results)
