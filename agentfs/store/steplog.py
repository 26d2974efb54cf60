"""A trace's steps read back from Git: the commits on `main` whose trailers name the
trace, newest first, along first parents only (cheap: no tree diffs)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from agentfs.store.commits import StepKind, parse_trailers, parse_usage, subject
from agentfs.store.git.repo import GitRepo
from agentfs.store.spent import Spent

__all__ = ["ADDS_MESSAGES", "LoggedStep", "Version", "file_versions", "step_of_message",
           "trace_log"]

#: Kinds of step that may change a file already committed under a trace.
CHANGES_FILES = frozenset({StepKind.EDIT, StepKind.RECOVER, StepKind.UPGRADE})

#: Kinds of step that add message files to `main` (the others name the head).
ADDS_MESSAGES = frozenset({StepKind.CREATE, StepKind.USER, StepKind.ASSISTANT, StepKind.TOOL,
                           StepKind.SUMMARY, StepKind.RECOVER})


@dataclass(frozen=True)
class LoggedStep:
    """One committed step: its commit, kind, message sequence and summary line, and
    for a model's turn, the model and what its call used (`Agentfs-Usage`)."""

    commit: str
    kind: str
    sequence: int | None
    summary: str
    usage: tuple[str, Spent] | None = None


def trace_log(repo: GitRepo, trace_id: str, limit: int | None = None) -> Iterator[LoggedStep]:
    """The trace's steps on `main`, newest first; at most `limit` of them."""
    shown = 0
    for sha, commit in repo.first_parent_log():
        if limit is not None and shown >= limit:
            return
        trailers = parse_trailers(commit.message)
        if trailers.get("Agentfs-Trace") != trace_id:
            continue
        sequence = trailers.get("Agentfs-Sequence", "")
        summary = subject(commit.message).split(f"#{sequence}", 1)[-1].strip() if sequence else ""
        usage = trailers.get("Agentfs-Usage")
        yield LoggedStep(sha.decode(), trailers.get("Agentfs-Kind", "?"),
                         int(sequence) if sequence.isdigit() else None, summary,
                         parse_usage(usage) if usage else None)
        shown += 1


def step_of_message(repo: GitRepo, trace_id: str, sequence: int) -> LoggedStep | None:
    """The step that committed message `sequence` on `main`, or None.

    A new message always gets a sequence above every existing one, so the steps that
    add messages have growing sequences: the one that added `sequence` is the oldest
    of them whose own sequence is at least `sequence` (a tool step is named by its
    last result). Walks the trace's whole log.
    """
    found = None
    for step in trace_log(repo, trace_id):
        if step.kind in ADDS_MESSAGES and step.sequence is not None:
            if step.sequence < sequence:
                break
            found = step
    return found


@dataclass(frozen=True)
class Version:
    """One committed content of a file: the step that committed it (for the first
    version, the step before the first change) and its bytes."""

    commit: str
    kind: str
    summary: str
    data: bytes


def file_versions(repo: GitRepo, trace_id: str, path: str, sequence: int,
                  limit: int = 20) -> list[Version]:
    """The contents message file `path` (of message `sequence`) had on `main`, newest
    first, at most `limit`: what each `edit` (or `recover`, `upgrade`) step that changed
    it committed, then what it held before the oldest of them.

    Only the trace's steps after the message was added are read (a step's sequence
    grows with the trace, as in `step_of_message`), and of those only the trees of
    the kinds that can change a committed file.
    """
    versions: list[Version] = []
    for step in trace_log(repo, trace_id):
        if step.kind in ADDS_MESSAGES and step.sequence is not None and step.sequence < sequence:
            break
        if step.kind not in CHANGES_FILES:
            continue
        sha = step.commit.encode()
        parents = repo.commit(sha).parents
        now = repo.read_file(sha, path)
        before = repo.read_file(parents[0], path) if parents else None
        if now is None or now == before:
            continue
        versions.append(Version(step.commit, step.kind, step.summary, now))
        if before is None:
            break
        versions.append(Version(parents[0].decode(), "before", "", before))
        if len(versions) > 2 * limit:
            break
    return _merged(versions)[:limit]


def _merged(versions: list[Version]) -> list[Version]:
    """Each content once where it follows itself: the `before` of a newer change is
    the content an older change committed, which names the step better."""
    merged: list[Version] = []
    for version in versions:
        if merged and merged[-1].data == version.data:
            if merged[-1].kind == "before":
                merged[-1] = version
            continue
        merged.append(version)
    return merged
