"""The two kinds of file lock and the one way of waiting (`agentfs/store/locking.py`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentfs.store.locking import FileLock, create_exclusive, is_held, retry

HOLDER = r"""
import sys
from pathlib import Path
from agentfs.store.locking import FileLock
lock = FileLock(Path(sys.argv[1]))
assert lock.acquire()
print("held", flush=True)
sys.stdin.readline()
"""


def hold_in_another_process(path: Path) -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline() == "held\n"
    return child


def test_a_lock_another_process_holds_is_not_got_until_that_process_dies(tmp_path: Path) -> None:
    path = tmp_path / "locks" / "x.lock"
    child = hold_in_another_process(path)
    try:
        assert is_held(path)
        with FileLock(path, wait=0) as lock:
            assert not lock.held
        with FileLock(path, wait=0.05) as lock:
            assert not lock.held
    finally:
        child.kill()
        child.communicate()  # closes its pipes
    assert not is_held(path) and path.exists()  # the file stays, and means nothing
    with FileLock(path, wait=0) as lock:
        assert lock.held and is_held(path)
    assert not is_held(path)


def test_a_lock_file_left_behind_or_missing_is_not_held(tmp_path: Path) -> None:
    assert not is_held(tmp_path / "never.lock")
    (tmp_path / "left.lock").write_text("an old holder's record\n")
    assert not is_held(tmp_path / "left.lock")


def test_an_exclusive_create_makes_its_folders_and_refuses_an_existing_file(
    tmp_path: Path
) -> None:
    path = tmp_path / "a" / "b" / "main.lock"
    fd = create_exclusive(path)
    try:
        with pytest.raises(FileExistsError):
            create_exclusive(path)
    finally:
        os.close(fd)


def test_retry_tries_until_an_attempt_succeeds_and_gives_up_at_its_deadline() -> None:
    calls = []

    def third_time() -> str | None:
        calls.append(1)
        return "got" if len(calls) == 3 else None

    assert retry(third_time, None) == "got" and len(calls) == 3
    calls.clear()
    assert retry(lambda: calls.append(1), 0) is None and len(calls) == 1  # 0: tries once
    calls.clear()
    assert retry(lambda: calls.append(1), 0.02) is None and len(calls) >= 2
