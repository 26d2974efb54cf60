"""One runner per trace: the lock excludes others and dies with its holder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agentfs.errors import TraceLocked
from agentfs.store.tracelock import TraceLock, is_locked, read_holder


@pytest.fixture
def lock_dir(tmp_path: Path) -> Path:
    return tmp_path / ".git" / "agentfs" / "locks"


def test_second_holder_in_the_same_process_is_refused(lock_dir: Path) -> None:
    assert not is_locked(lock_dir, "demo")  # no lock file yet
    first = TraceLock(lock_dir, "demo")
    with first:
        assert is_locked(lock_dir, "demo")
        with pytest.raises(TraceLocked) as info:
            TraceLock(lock_dir, "demo").acquire()
        assert f"pid {os.getpid()}" in info.value.message
        assert "'demo'" in info.value.message
        assert info.value.hint
        # Other traces are independent.
        with TraceLock(lock_dir, "other"):
            assert is_locked(lock_dir, "other")
        assert not is_locked(lock_dir, "other")
        assert is_locked(lock_dir, "demo")  # probing does not steal or drop it
    assert not is_locked(lock_dir, "demo")
    with TraceLock(lock_dir, "demo"):  # free again
        assert read_holder(lock_dir / "demo.lock")["pid"] == os.getpid()


HOLDER = r"""
import sys
from pathlib import Path
from agentfs.store.tracelock import TraceLock
lock = TraceLock(Path(sys.argv[1]), "demo")
lock.acquire()
print("locked", flush=True)
sys.stdin.readline()  # hold it until killed
"""


def test_lock_of_a_killed_process_is_free(lock_dir: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lock_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "locked\n"
        assert is_locked(lock_dir, "demo")
        with pytest.raises(TraceLocked) as info:
            TraceLock(lock_dir, "demo").acquire()
        assert f"pid {child.pid}" in info.value.message

        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=10) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        for stream in (child.stdin, child.stdout, child.stderr):
            if stream is not None:
                stream.close()

    # The file stays behind (naming the dead holder) but the lock is free.
    lock_file = lock_dir / "demo.lock"
    assert json.loads(lock_file.read_text())["pid"] == child.pid
    assert not is_locked(lock_dir, "demo")
    with TraceLock(lock_dir, "demo"):
        assert is_locked(lock_dir, "demo")
        assert read_holder(lock_file)["pid"] == os.getpid()
    assert not is_locked(lock_dir, "demo")
