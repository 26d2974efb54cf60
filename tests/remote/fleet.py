"""A fleet on loopback: a `git daemon` serving a bare workspace, one person's clone,
worker clones running `python -m agentfs watch --remote`, and the counts the tests
assert on (every user message answered exactly once, nothing stuck)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from agentfs.store.message_dir import parse_message_relpath
from agentfs.store.messages import load_message
from tests.conftest import git
from tests.watch.test_watch import replay_workspace

LEASE = "2"


def person_clone(tmp_path: Path, url: str, traces: tuple[str, ...], answers: int = 60) -> Path:
    """The person's workspace on the replay model, with `traces`, pushed to `url`."""
    root = replay_workspace(tmp_path, answers, traces)
    git(root, "remote", "add", "origin", url)
    git(root, "push", "-q", "origin", "main")
    return root


def worker_clone(tmp_path: Path, url: str, name: str) -> Path:
    root = tmp_path / name
    git(tmp_path, "clone", "-q", url, str(root))
    return root


def start_worker(root: Path, *extra: str) -> subprocess.Popen:
    """`agentfs watch --remote origin` on clone `root`, logging to `<root>.log`."""
    with open(log_of(root), "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "agentfs", "watch", "--remote", "origin", "--lease", LEASE,
             "--json", *extra], cwd=root, stdout=log, stderr=subprocess.STDOUT)


def log_of(root: Path) -> Path:
    return root.with_name(root.name + ".log")


def pull(root: Path) -> None:
    """The person's clone, brought to the remote's main (`agentfs sync` without drops)."""
    git(root, "pull", "-q", "--ff-only", "origin", "main")


def answers(root: Path) -> tuple[Counter, list[str]]:
    """How often each user message (by text) was answered, and what is stuck.

    Text-only replay turns answer the user messages before them: each run of user
    messages on a main path must be followed by exactly one assistant message.
    Stuck: a trace whose main path ends with a user message, or a waiting inbox file.
    """
    counts: Counter = Counter()
    stuck: list[str] = []
    for trace_dir in sorted(p for p in (root / "traces").iterdir() if p.is_dir()):
        meta = json.loads((trace_dir / "trace.json").read_text())
        messages = {}
        for path in (trace_dir / "messages").rglob("*"):
            if parse_message_relpath(path.relative_to(trace_dir / "messages").as_posix()) is None:
                continue
            message = load_message(path)
            messages[message.sequence] = message
        chain = []
        seq = meta["head"]
        while seq is not None:
            chain.append(messages[seq])
            seq = messages[seq].parent_sequence
        chain.reverse()
        block: list[str] = []
        previous = None
        for message in chain:
            if message.role == "user":
                block.append(f"{trace_dir.name}: {message.text}")
                counts[block[-1]] += 0
            elif message.role == "assistant" and block:
                counts.update(block)
                block = []
            elif message.role == "assistant" and previous == "assistant":
                counts[f"answer without a question in {trace_dir.name}"] += 2
            previous = message.role
        if block:
            stuck.append(f"{trace_dir.name}: ends with user messages {block}")
        inbox = trace_dir / "inbox"
        if inbox.is_dir():
            stuck += [f"{trace_dir.name}: {p.name} waits" for p in inbox.glob("*.md")]
        user_texts = Counter(m.text for m in messages.values() if m.role == "user")
        counts.update({f"{trace_dir.name}: {t}": n - 1 for t, n in user_texts.items() if n > 1})
    return counts, stuck


def wait_for(condition, timeout: float, what: str, poll: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def steps_twice(root: Path) -> list[str]:
    """Steps (trace, kind, sequence) committed more than once on main."""
    subjects = git(root, "log", "--first-parent", "--format=%s", "main").splitlines()
    seen = Counter(s.split(" ", 3)[:3].__str__() for s in subjects
                   if " user #" in s or " assistant #" in s)
    return [s for s, n in seen.items() if n > 1]


def drop_round(person: Path, traces: list[str], round_no: int) -> list[str]:
    """One message into each trace's inbox; returns them as `answers` names them."""
    keys = []
    for trace in traces:
        text = f"m{round_no}-{trace}"
        (person / "traces" / trace / "inbox" / f"r{round_no:03d}.md").write_text(text + "\n")
        keys.append(f"{trace}: {text}")
    return keys
