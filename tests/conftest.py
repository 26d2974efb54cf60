"""Shared fixtures: real temporary workspaces checked with the real `git` binary."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agentfs.core.project import Project, init_workspace
from agentfs.store.git.packing import wait_for_packing
from agentfs.store.ingest import parse_dropped_text


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slow: long campaigns (e.g. 50 kill -9 trials); CI runs them, "
        "`-m 'not slow'` leaves them out while developing",
    )


# Commits made by tests must not depend on the developer's git identity.
os.environ.setdefault("GIT_CONFIG_NOSYSTEM", "1")


#: Free space a RAM filesystem must have for the tests' folders to go there (a whole
#: run writes about 2 GB; pytest keeps the last run's folders: `tmp_path_retention_count`).
MEMORY_TEMP_FREE = 8 << 30


def _temp_in_memory(candidate: str = "/dev/shm") -> None:
    """Put the tests' temporary folders (and their subprocesses' `TMPDIR`) on a RAM
    filesystem when the machine has one with room and the person set no `TMPDIR`.

    agentfs fsyncs every file it writes before renaming it; on a disk each fsync
    costs milliseconds and the kill campaigns write thousands of files, so the
    suite ran about 3× faster in memory (docs/decisions.md, "The tests' workspaces
    live in memory"). A kill -9, which is what the crash tests simulate, leaves the
    same state on either filesystem.
    """
    if "TMPDIR" in os.environ or not os.access(candidate, os.W_OK | os.X_OK):
        return
    with open("/proc/mounts", encoding="utf-8", errors="replace") as mounts:
        if not any(line.split()[1:3] == [candidate, "tmpfs"] for line in mounts):
            return
    space = os.statvfs(candidate)
    if space.f_bavail * space.f_frsize < MEMORY_TEMP_FREE:
        return
    os.environ["TMPDIR"] = candidate
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again


if sys.platform == "linux":
    _temp_in_memory()


def git(root: Path, *args: str) -> str:
    """Run the real git in `root`; fail the test on a non-zero exit."""
    done = subprocess.run(
        ["git", *args], cwd=root, capture_output=True, text=True, check=False,
        env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
             "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"},
    )
    assert done.returncode == 0, f"git {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


#: The base commit's digits in a side branch's name (`agentfs/<trace>/<kind>-<base>`).
_BRANCH_BASE = re.compile(r"(agentfs/[^/\s]+/[a-z_]+-)[0-9a-f]{8}\b")


def mask_branch_bases(text: str) -> str:
    """`text` with the commit in each side branch name shown as `<base>`: commit ids
    differ between runs made at different times."""
    return _BRANCH_BASE.sub(r"\1<base>", text)


def side_branches(root: Path, trace: str, kind: str) -> list[str]:
    """The trace's side branches of type `kind` (`agentfs/<trace>/<kind>-<base>`), in the
    order they were made: by the sequence their last commit records."""
    names = git(root, "for-each-ref", "--format=%(refname:short)",
                f"refs/heads/agentfs/{trace}/{kind}-*").split()
    return sorted(names, key=lambda name: int(git(
        root, "log", "-1", "--format=%(trailers:key=Agentfs-Sequence,valueonly)", name)))


def long_trace(project: Project, trace_id: str, count: int, *,
               parents: dict[int, int | None] | None = None, commit: bool = False) -> None:
    """Trace `trace_id` with messages 1..count: #1 and #2 as `agentfs new` makes them,
    the rest written as files (fast: no agentfs step each), alternately a user and an
    assistant message `#<sequence>` continuing the one before, unless `parents` says
    otherwise (None: a hand-written file without parent_sequence); committed in one
    commit with the real git if `commit`."""
    from agentfs.store.messages import Message, render_message

    trace = project.new_trace(trace_id, user("hello"))
    parents = parents or {}
    for sequence in range(3, count + 1):
        message = Message(id=f"m{sequence}", sequence=sequence,
                          parent_sequence=parents.get(sequence, sequence - 1),
                          role="assistant" if sequence % 2 else "user", content=f"#{sequence}")
        path = trace.message_path(message)
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(render_message(message))
    trace.meta.head = count
    trace.meta.next_sequence = count + 1
    trace.meta.iterations = len(range(3, count + 1, 2))  # the assistant messages, as a run keeps it
    trace.save_meta()
    if commit:
        root = project.workspace.root
        git(root, "add", "-A", str(trace.dir))
        git(root, "commit", "-q", "-m", f"{trace_id}: {count} messages")


def message_paths(messages: Path) -> list[Path]:
    """The files below a trace's `messages/` (in their folders), in name order."""
    return sorted((p for p in messages.rglob("*") if p.is_file()), key=lambda p: p.name)


#: What depends on the clock in a message file: the time a context injection ran, and
#: how long a model turn took (`timing`, in Markdown frontmatter or JSON).
_CLOCKED = (re.compile(rb"## Current time\n[^\n]*"), re.compile(rb"(?m)^timing:\n(?:  .*\n)+"),
            re.compile(rb'\n\s*"timing": \{[^}]*\},?'))


def without_clock(data: bytes) -> bytes:
    """A message file's bytes without what two runs of the same script may differ in."""
    for pattern in _CLOCKED:
        data = pattern.sub(b"", data)
    return data


def assert_git_clean(root: Path) -> None:
    """`git status --porcelain` and `git diff --cached` empty, `git fsck --strict` clean.

    First waits for packing a killed process left running (its `git pack-objects` goes
    on writing the merged pack, and a `git fsck` beside a merge may report the packs
    being deleted as broken)."""
    assert wait_for_packing(root / ".git", timeout=120), "packing went on for 120 s"
    assert git(root, "status", "--porcelain", "--untracked-files=all") == ""
    assert git(root, "diff", "--cached", "--name-status") == ""  # the index matches HEAD
    git(root, "fsck", "--strict", "--no-dangling")


@pytest.fixture(autouse=True)
def trust_file_per_test(tmp_path_factory: pytest.TempPathFactory,
                        monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test has its own trust file (`agentfs trust`), never the person's own."""
    folder = tmp_path_factory.mktemp("agentfs-config")
    monkeypatch.setenv("AGENTFS_CONFIG_DIR", str(folder))
    return folder


@pytest.fixture(autouse=True)
def dev_null_stays_a_device() -> Iterator[None]:
    """Fail the test after which `/dev/null` is no longer the null device.

    Tests run as root on CI, where a rename onto `/dev/null` (a lock-and-rename of a
    file named `/dev/null`, an atomic write to a path that leads there) replaces the
    device with a plain file, and every later reader of `/dev/null` (readline's
    `INPUTRC`, a bind mount over a hidden file) sees what was written into it. This
    names the test (or, under xdist, the moment) it happened.
    """
    was_device = _is_null_device()
    yield
    if was_device and not _is_null_device():
        pytest.fail("/dev/null is no longer a character device after this test: as root, "
                    "`rm /dev/null; mknod -m 666 /dev/null c 1 3` restores it")


def _is_null_device() -> bool:
    try:
        return stat.S_ISCHR(os.stat(os.devnull).st_mode)
    except FileNotFoundError:
        return False


def trust_workspace(root: Path) -> None:
    """`agentfs trust ROOT`: the commands its agentfs.toml declares run from now on."""
    run_cli("trust", str(root), cwd=root)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A fresh, empty workspace (git repo + agentfs.toml on a replay model)."""
    root = tmp_path / "ws"
    init_workspace(root)
    return root


@pytest.fixture
def project(workspace: Path) -> Project:
    return Project.open(workspace)


def user(text: str):
    """A user message as `agentfs new -m` makes it."""
    return parse_dropped_text("<test>", text.encode())


@pytest.fixture
def write_script(tmp_path: Path) -> Callable[[list[dict]], Path]:
    """Write a replay script with these turns; returns its path."""

    def write(turns: list[dict], **lists: list[dict]) -> Path:
        path = tmp_path / f"script-{len(list(tmp_path.glob('script-*')))}.json"
        path.write_text(json.dumps({"turns": turns, **lists}))
        return path

    return write


def replay_workspace(root: Path, script: dict, files: dict[str, str] | None = None,
                     config: dict[str, str] | None = None) -> Path:
    """`agentfs init ROOT` on the replay model playing `script` (script.json), with
    `files` written, `config` replacements made in agentfs.toml, all committed."""
    run_cli("init", str(root), cwd=root.parent)
    for name, text in (files or {}).items():
        (root / name).write_text(text)
    (root / "script.json").write_text(json.dumps(script))
    toml = root / "agentfs.toml"
    text = toml.read_text().replace('model = "anthropic:claude-sonnet-4-5"',
                                    'model = "replay:script.json"')
    for old, new in (config or {}).items():
        text = text.replace(old, new)
    toml.write_text(text)
    git(root, "add", "-A")
    git(root, "commit", "-qm", "user setup")
    return root


def in_a_terminal(*args: str, cwd: Path) -> tuple[str, str]:
    """What `agentfs ARGS` prints with its standard output a terminal (a pseudo-
    terminal; its line breaks read back as `\r\n`), and its standard error."""
    import pty

    leader, follower = pty.openpty()
    done = subprocess.run([sys.executable, "-m", "agentfs", *args], cwd=cwd, stdout=follower,
                          stderr=subprocess.PIPE, check=False, timeout=60)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal's other side is closed: all read
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    return b"".join(chunks).decode(), done.stderr.decode()


def run_cli(*args: str, cwd: Path, env: dict | None = None, check: bool = True,
            timeout: float = 120, isolated: bool = False) -> subprocess.CompletedProcess:
    """Run the `agentfs` command in `cwd` as a user would, its errors and exit code
    included: in this process (fast), or with `isolated` as a real `python -m agentfs`
    process (for signals, kills and timeouts)."""
    if isolated:
        done = subprocess.run(
            [sys.executable, "-m", "agentfs", *args], cwd=cwd, capture_output=True, text=True,
            env={**os.environ, **(env or {})}, timeout=timeout, check=False,
        )
    else:
        done = _run_in_process(list(args), cwd, env or {})
    if check:
        assert done.returncode == 0, f"agentfs {' '.join(args)} → {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def _run_in_process(args: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    """`agentfs ARGS` through its real entry point, with cwd, environment, argv, signal
    handlers and standard streams restored afterwards."""
    import contextlib
    import io
    import signal

    from agentfs.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved_cwd, saved_env, saved_argv = os.getcwd(), dict(os.environ), sys.argv
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    os.chdir(cwd)
    os.environ.update(env)
    sys.argv = ["agentfs", *args]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        sys.argv = saved_argv
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return subprocess.CompletedProcess(["agentfs", *args], code, out.getvalue(), err.getvalue())


def kill_runs_at_random(args: list[str], *, cwd: Path, times: int, seed: int,
                        delay: tuple[float, float], env: dict | None = None) -> int:
    """Start `agentfs ARGS` `times` times, SIGKILL each at a random instant (unless it
    finished first); returns how many kills landed inside a run."""
    import random
    import signal
    import time

    rng = random.Random(seed)
    kills = 0
    for _ in range(times):
        proc = subprocess.Popen(
            [sys.executable, "-m", "agentfs", *args], cwd=cwd,
            env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        time.sleep(rng.uniform(*delay))  # a random instant, not a synchronisation
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            kills += 1
        _, stderr = proc.communicate()
        assert proc.returncode in (0, -signal.SIGKILL), stderr.decode()
    return kills
