"""A new trace that starts as a copy of another trace's main path (`agentfs fork`).

The copy keeps each message file's bytes, sequence and parent, so its main path
reads exactly as the original's did up to the fork point, and the messages
keep their ids. The files beside the messages (goals.json) are taken as they
were when that message was committed. The new trace records where it came from
in `trace.json` (`forked_from`), and its one `create` commit says so; the
original trace is only read.
"""

from __future__ import annotations

from agentfs.errors import AgentfsError
from agentfs.store.atomic import atomic_write
from agentfs.store.history import is_model_turn
from agentfs.store.inbox import KEEP
from agentfs.store.message_dir import message_relpath
from agentfs.store.meta import ForkOrigin, Spending, TraceContext, TraceMeta
from agentfs.store.regularfile import read_trace_file
from agentfs.store.steplog import step_of_message
from agentfs.store.trace import Trace
from agentfs.store.workspace import TRACE_FILE, check_trace_id

__all__ = ["default_fork_id", "fork_trace"]


def default_fork_id(source_id: str, taken: set[str]) -> str:
    """`SOURCE-fork-N` with the lowest N not taken (the source id cut to fit 64)."""
    n = 1
    while True:
        suffix = f"-fork-{n}"
        candidate = source_id[: 64 - len(suffix)] + suffix
        if candidate not in taken:
            return check_trace_id(candidate)
        n += 1


def fork_trace(source: Trace, new_id: str, at: int) -> Trace:
    """Create trace `new_id` from `source`'s main path up to message `at`, in one
    `create` commit. The caller holds both traces' locks, and has committed the
    source's pending edits (so its files are what its commits hold).

    Raises:
      AgentfsError: `at` cannot be a head (see `Trace.head_target`).
      TraceExists: `new_id` is taken.
    """
    path = source.head_target(at, verb="fork at")
    step = step_of_message(source.repo, source.id, at)
    meta = TraceMeta(
        id=new_id, model=source.meta.model, preset=source.meta.preset,
        iterations=sum(map(is_model_turn, path)),
        context=TraceContext(inject_skills=list(source.meta.context.inject_skills)),
        forked_from=ForkOrigin(trace=source.id, sequence=at,
                               commit=step.commit if step is not None else None),
        # the calls of the copied messages were made for the source: counted there only
        usage=Spending(through=max(m.sequence for m in path)),
    )
    trace = Trace.create(source.workspace, source.repo, meta)
    durable = source.repo.durable
    copied = []
    for message in path:
        data = source.message_path(message).read_bytes()
        target = trace.messages_dir / message_relpath(message.file_name())
        atomic_write(target, data, tmp_dir=trace.tmp_dir, sync_dir=durable)
        copied.append(trace.rel(target))
    extra = [*copied, *_copy_side_files(source, trace, step.commit if step else None)]
    keep = trace.inbox_dir / KEEP  # the inbox people drop files into, as `agentfs new` makes it
    keep.parent.mkdir(parents=True, exist_ok=True)
    keep.write_bytes(b"")
    extra.append(trace.rel(keep))
    trace.meta.head = at
    trace.meta.next_sequence = max(m.sequence for m in path) + 1
    origin = f"{source.id} at #{at}"
    body = f"Forked from trace {origin}" + (f" (commit {step.commit})" if step else "") + "."
    trace.commit_step("create", [], summary=f"forked from {origin}", body=body,
                      extra_paths=extra)
    trace.message_dir.messages(refresh=True)
    return trace


def _copy_side_files(source: Trace, trace: Trace, commit: str | None) -> list[str]:
    """Copy the files directly in the source's folder other than trace.json (goals.json)
    as `commit` holds them (else as they are now); returns the new paths."""
    prefix = source.rel(source.dir)
    if commit is not None:
        found = {name: source.repo.read_file(commit.encode(), f"{prefix}/{name}")
                 for name, (mode, _) in source.repo.entries(commit.encode(), prefix).items()
                 if name != TRACE_FILE and mode & 0o170000 == 0o100000}
    else:
        found = {p.name: read_trace_file(p) for p in source.dir.iterdir()
                 if p.is_file() and not p.is_symlink() and p.name != TRACE_FILE}
    written = []
    for name, data in sorted(found.items()):
        if data is None:
            raise AgentfsError(f"{prefix}/{name}: not readable at commit {commit}")
        target = trace.dir / name
        atomic_write(target, data, tmp_dir=trace.tmp_dir, sync_dir=trace.repo.durable)
        written.append(trace.rel(target))
    return written
