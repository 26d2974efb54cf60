"""A trace's steps read back from Git: the commits on `main` whose trailers name the
trace, newest first, along first parents and the remote's lines that `agentfs sync`
merged (`main_log`; cheap: no tree diffs); for a fork, followed back into the trace
it was copied from (`lineage_log`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from dulwich.objects import Commit

from agentfs.store.commits import StepKind, parse_trailers, parse_usage, subject
from agentfs.store.git.remote import git_lines
from agentfs.store.git.repo import GitRepo
from agentfs.store.meta import parse_meta
from agentfs.store.spent import Spent

__all__ = ["ADDS_MESSAGES", "LoggedStep", "Version", "file_versions", "lineage_log",
           "lineage_step_of_message", "main_log", "step_of_message", "trace_log"]

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


def trace_log(repo: GitRepo, trace_id: str, limit: int | None = None, *,
              start: bytes | None = None) -> Iterator[LoggedStep]:
    """The trace's steps on `main` (from commit `start` back, if given), newest first;
    at most `limit` of them."""
    shown = 0
    for sha, commit in main_log(repo, start):
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


def main_log(repo: GitRepo, start: bytes | None = None) -> Iterator[tuple[bytes, Commit]]:
    """The commits of `main` (from commit `start` back, if given), each after all its
    children, each once: back along first parents, and at a sync merge along both
    parents. `agentfs sync` puts the person's clone first, so steps that reached the
    remote meanwhile (a worker's, another person's sync) are on the merge's second
    parent. A side branch (an `outcome` commit's second parent) is never walked.

    Along first parents only commits are read, no tree. From the first sync merge
    down, the order is Git's (`git rev-list --topo-order`, `_below`), which a walk of
    our own could only rebuild: two people's first-parent lines meet only where they
    cloned, so no shorter walk can tell where each merge's lines part."""
    sha = start if start is not None else repo.head()
    while sha is not None:
        commit = repo.commit(sha)
        if _is_sync(commit):
            try:
                yield from _below(repo, sha)
                return
            except FileNotFoundError:  # no `git` binary: first parents only, as before
                pass
        yield sha, commit
        sha = commit.parents[0] if commit.parents else None


def _is_sync(commit: Commit) -> bool:
    return len(commit.parents) == 2 and (
        parse_trailers(commit.message).get("Agentfs-Kind") == StepKind.SYNC)


def _below(repo: GitRepo, merge: bytes) -> Iterator[tuple[bytes, Commit]]:
    """`merge` and what `main_log` walks to from it, in Git's topological order: every
    commit comes after all its children, so whether a walked parent leads to it is
    known when it comes."""
    wanted = {merge}
    for line in git_lines(repo.root, "rev-list", "--topo-order", merge.decode()):
        if line in wanted:
            wanted.discard(line)
            commit = repo.commit(line)
            yield line, commit
            wanted.update(commit.parents if _is_sync(commit) else commit.parents[:1])
            if not wanted:
                return


def step_of_message(repo: GitRepo, trace_id: str, sequence: int) -> LoggedStep | None:
    """The step of the trace itself that committed message `sequence` on `main`, or None
    (for a message a fork copied, its `create` step: see `lineage_step_of_message`).

    A new message always gets a sequence above every existing one, so the steps that
    add messages have growing sequences: the one that added `sequence` is the oldest
    of them whose own sequence is at least `sequence` (a tool step is named by its
    last result). Walks the trace's whole log.
    """
    return _adding_step(trace_log(repo, trace_id), sequence)


def lineage_log(repo: GitRepo, traces_dir: str, trace_id: str) -> Iterator[tuple[str, LoggedStep]]:
    """The trace's steps, newest first, each with the id of the trace whose step it is:
    its own steps on `main`; then, for a fork (`agentfs fork`), the steps the trace it
    was copied from had taken when the fork was made; and so on for a fork of a fork.
    A fork's `create` step is left out: it copied the messages, its origin's steps
    made them and changed the workspace's files.

    Where a fork came from is read from `trace.json` as its `create` commit holds it
    (`traces_dir` is the folder of the traces), not from the file a person may edit.
    """
    owner: str | None = trace_id
    start = None
    while owner is not None:
        origin = None
        for step in trace_log(repo, owner, start=start):
            if step.kind == StepKind.CREATE:
                origin = _origin(repo, f"{traces_dir}/{owner}", step.commit.encode())
                if origin is not None:
                    break
            yield owner, step
        owner, start = origin if origin is not None else (None, None)


def lineage_step_of_message(repo: GitRepo, traces_dir: str, trace_id: str,
                            sequence: int) -> tuple[str, LoggedStep] | None:
    """The step that made message `sequence` and the trace it belongs to, or None:
    `step_of_message`, except that for a message a fork copied (its `create` step
    added it) the step is looked up in the trace it was copied from, as that trace
    was when the fork was made, and so on."""
    owner, start = trace_id, None
    while True:
        found = _adding_step(trace_log(repo, owner, start=start), sequence)
        origin = (_origin(repo, f"{traces_dir}/{owner}", found.commit.encode())
                  if found is not None and found.kind == StepKind.CREATE else None)
        if origin is None:
            return (owner, found) if found is not None else None
        owner, start = origin


def _adding_step(steps: Iterable[LoggedStep], sequence: int) -> LoggedStep | None:
    """Of `steps` (newest first), the one that added message `sequence`."""
    found = None
    for step in steps:
        if step.kind in ADDS_MESSAGES and step.sequence is not None:
            if step.sequence < sequence:
                break
            found = step
    return found


def _origin(repo: GitRepo, trace_dir: str, create: bytes) -> tuple[str, bytes] | None:
    """For a fork (the trace in `trace_dir`, created by commit `create`), the trace it
    was copied from and the commit before `create`, where that trace's steps as of
    the fork begin; None for a trace of its own."""
    data = repo.read_file(create, f"{trace_dir}/trace.json")
    try:
        origin = parse_meta(data).forked_from if data is not None else None
    except ValueError:
        return None  # not agentfs's: no origin to follow
    parents = repo.commit(create).parents
    return (origin.trace, parents[0]) if origin is not None and parents else None


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
