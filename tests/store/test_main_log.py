"""`steplog.main_log` and `tracerefs.unfolded` on random histories of a remote that
people clone, work on, push to and sync with, written and checked by the real git
binary: a sync merge has the person's line first and the remote second, commit
times tie and run backwards, and side branches merged with a plain message hang
off some commits."""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from agentfs.remote.tracerefs import unfolded
from agentfs.store.git.repo import GitRepo
from agentfs.store.steplog import main_log, step_of_message, trace_log
from tests.conftest import git

SYNC_MESSAGE = "sync: merge the remote's main\n\nAgentfs-Kind: sync\n"
OUTCOME_MESSAGE = "outcome: a side branch's result\n\nAgentfs-Kind: outcome\n"
PEOPLE = 4


@dataclass
class History:
    """Commits planned in Python (name, parents, commit time, message), then written
    by one `git fast-import`; the remote's main and each person's clone as they end."""

    planned: list[tuple[str, list[int], int, str]] = field(default_factory=list)
    held: list[set[int]] = field(default_factory=list)  # each commit and its ancestors
    remote: int = 0
    remote_tips: list[int] = field(default_factory=list)  # every value main had
    clones: dict[int, int] = field(default_factory=dict)

    def commit(self, name: str, parents: list[int], when: int, message: str = "") -> int:
        self.planned.append((name, parents, when, message.replace("\n", f" ({name})\n", 1)
                             if message else f"{name}\n"))
        self.held.append({len(self.planned) - 1}.union(*(self.held[p] for p in parents)))
        return len(self.planned) - 1

    def push(self, commit: int) -> None:
        self.remote = commit
        self.remote_tips.append(commit)

    def write(self, root: Path) -> tuple[list[str], dict[str, str]]:
        """Each commit's id, and each id's name."""
        git(root, "init", "-q", "--initial-branch=main")
        stream = []
        for n, (_, parents, when, message) in enumerate(self.planned):
            data = message.encode()
            stream.append(f"commit refs/heads/main\nmark :{n + 1}\n"
                          f"committer t <t@t> {1_700_000_000 + when} +0000\n"
                          f"data {len(data)}\n{message}\n")
            stream += [f"{'from' if k == 0 else 'merge'} :{p + 1}\n" for k, p in enumerate(parents)]
            if not parents and n:
                stream.append("from 0000000000000000000000000000000000000000\n")
            stream.append("\n")
        stream.append(f"reset refs/heads/main\nfrom :{self.remote + 1}\n\n")
        marks = root / ".git" / "marks"
        subprocess.run(["git", "fast-import", "--quiet", f"--export-marks={marks}"], cwd=root,
                       input="".join(stream).encode(), check=True)
        ids = [""] * len(self.planned)
        for line in marks.read_text().splitlines():
            mark, sha = line.split()
            ids[int(mark[1:]) - 1] = sha
        return ids, {sha: self.planned[n][0] for n, sha in enumerate(ids)}


def new_history() -> History:
    history = History()
    history.push(history.commit("root", [], 0))
    return history


OPS = st.lists(
    st.tuples(
        st.sampled_from(["worker", "clone", "step", "step", "sync", "sync", "sync", "outcome"]),
        st.integers(0, PEOPLE - 1),  # who
        st.integers(0, 12),  # commit time: ties and times that run backwards
        st.integers(0, 50),  # which earlier main a clone starts from; whether a sync pushes
    ),
    min_size=24, max_size=60,
)


def play(ops: list[tuple[str, int, int, int]]) -> History:
    """Play `ops`: a worker's step pushed onto the remote's main; a person's (re)clone
    of an earlier main, step, sync (a fast-forward pull or push where one holds the
    other, else a sync merge, pushed unless `extra` is odd: a push that lost its race,
    merged again at the next sync), or outcome (a side branch of two commits merged
    with a plain message)."""
    history = new_history()
    for n, (op, who, when, extra) in enumerate(ops):
        name = f"{op}{n}-p{who}"
        if op == "worker":
            history.push(history.commit(name, [history.remote], when))
            continue
        if op == "clone" or who not in history.clones:
            tips = history.remote_tips if op == "clone" else [history.remote]
            history.clones[who] = tips[extra % len(tips)]
        mine = history.clones[who]
        if op == "step":
            history.clones[who] = history.commit(name, [mine], when)
        elif op == "outcome":
            side = history.commit(f"{name}-side1", [mine], when)
            side = history.commit(f"{name}-side2", [side], (when * 7) % 13)
            history.clones[who] = history.commit(name, [mine, side], when, OUTCOME_MESSAGE)
        elif op == "sync":
            if mine in history.held[history.remote]:
                history.clones[who] = history.remote  # a fast-forward pull
            elif history.remote in history.held[mine]:
                history.push(mine)  # a fast-forward push
            else:
                merged = history.commit(name, [mine, history.remote], when, SYNC_MESSAGE)
                history.clones[who] = merged
                if extra % 2 == 0:
                    history.push(merged)
    return history


def walked_by_git(root: Path, tip: str) -> dict[str, list[str]]:
    """The commits reachable from `tip` along first parents and a sync merge's second
    parent, each with the parents walked to, as git reads them."""
    shown = git(root, "log", "-z", "--format=%H%x09%P%x09%(trailers:key=Agentfs-Kind,valueonly)",
                tip)
    parents: dict[str, list[str]] = {}
    for entry in filter(None, shown.split("\0")):
        sha, listed, kind = entry.split("\t")
        every = listed.split()
        parents[sha] = every if kind.strip() == "sync" and len(every) == 2 else every[:1]
    walked: dict[str, list[str]] = {}
    todo = [tip]
    while todo:
        sha = todo.pop()
        if sha not in walked:
            walked[sha] = parents[sha]
            todo.extend(parents[sha])
    return walked


def check_main_log(root: Path, repo: GitRepo, names: dict[str, str], tip: str) -> None:
    logged = [sha.decode() for sha, _ in main_log(repo, tip.encode())]
    named = [names[sha] for sha in logged]
    walked = walked_by_git(root, tip)
    assert len(logged) == len(set(logged)), f"a commit given twice: {named}"
    assert set(logged) == set(walked), (
        f"missing {sorted(names[s] for s in set(walked) - set(logged))}, "
        f"extra {sorted(names[s] for s in set(logged) - set(walked))}")
    place = {sha: n for n, sha in enumerate(logged)}
    for sha in logged:
        for parent in walked[sha]:
            assert place[sha] < place[parent], f"{names[parent]} before its child {names[sha]}: {named}"


def check_unfolded(root: Path, repo: GitRepo, main: str, tip: str) -> None:
    """A clone's tip as a trace ref: its first-parent line down to where main holds it."""
    held = set(git(root, "rev-list", main).split())  # no negative ref: no early end
    line = []
    for sha in git(root, "rev-list", "--first-parent", tip).split():
        if sha in held:
            break
        line.append(sha.encode())
    assert unfolded(repo, main, {"t": tip}) == {"t": line[::-1]}


# Found by the property (with min_size 24; pinned here): p0 pushes a step, p1's sync
# merges it, p2 clones that merge, then p0, p1 and p2 each commit and sync in turn.
# The last merge's lines meet at p1's first merge, but p0's line, nested in p1's
# second merge, is walked back to p0's first step below there: main_log gives that
# step before its child, p1's first merge.
THREE_SYNC_IN_TURN = [
    ("step", 0, 1, 0), ("sync", 0, 1, 0),
    ("clone", 1, 1, 0), ("step", 1, 2, 0), ("sync", 1, 3, 0),
    ("clone", 2, 0, 50), ("step", 2, 4, 0),
    ("step", 0, 5, 0), ("sync", 0, 6, 0),
    ("step", 1, 7, 0), ("sync", 1, 8, 0),
    ("sync", 2, 9, 0),
]


@settings(max_examples=60, deadline=None)
@example(ops=THREE_SYNC_IN_TURN)
@given(ops=OPS)
def test_main_log_gives_each_commit_git_reaches_once_children_first(ops):
    """From main and from each clone, main_log gives the commits git reaches along
    first parents and sync merges' second parents, each once, each before the
    parents walked to, never a side branch's; a clone's unfolded line is its
    first-parent line down to the first commit main holds."""
    history = play(ops)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ids, names = history.write(root)
        repo = GitRepo(root)
        try:
            for tip in sorted({history.remote, *history.clones.values()}):
                check_main_log(root, repo, names, ids[tip])
                check_unfolded(root, repo, ids[history.remote], ids[tip])
        finally:
            repo.close()


def test_a_step_a_nested_sync_merge_brought_comes_after_the_trace_steps_made_on_it(tmp_path):
    """A step pushed from a clone (t #5), merged by another person's sync, and the
    trace's next step made on that merge (t #7): after three more syncs whose lines
    meet at #7, while one nested line reaches back to #5, the trace's log still has
    #7 first and `step_of_message` finds it."""
    history = new_history()

    def step(name: str, parent: int, sequence: int) -> int:
        return history.commit(name, [parent], sequence, f"t #{sequence}\n\nAgentfs-Trace: t\n"
                              f"Agentfs-Kind: user\nAgentfs-Sequence: {sequence}\n")

    def sync(name: str, ours: int, theirs: int) -> int:
        return history.commit(name, [ours, theirs], 20, SYNC_MESSAGE)

    q1 = step("q1", 0, 5)  # q runs t and pushes
    merged = sync("p-merge", history.commit("p1", [0], 1), q1)  # p syncs
    t7 = step("t7", merged, 7)  # a worker folds t's next step; a and b clone that
    q_merge = sync("q-merge", history.commit("q2", [q1], 2), t7)  # q syncs
    b_merge = sync("b-merge", history.commit("b1", [t7], 3), q_merge)  # b syncs
    history.push(sync("a-merge", history.commit("a1", [t7], 4), b_merge))  # a syncs
    ids, names = history.write(tmp_path)
    repo = GitRepo(tmp_path)
    try:
        logged = [names[step.commit] for step in trace_log(repo, "t")]
        found = step_of_message(repo, "t", 7)
    finally:
        repo.close()
    assert logged == ["t7", "q1"]
    assert found is not None and found.commit == ids[t7]


def test_the_whole_log_reads_each_commit_about_once_when_two_people_sync_in_turn(tmp_path):
    """Two people each commit and sync in turn, so the lines of each sync merge meet
    only at the root: the walk of all of main reads each commit a few times at most,
    as a first-parent walk would, not once per sync merge above it."""
    history = new_history()
    mine = {0: history.remote, 1: history.remote}
    for n in range(15):
        for who in (0, 1):
            step = history.commit(f"step{n}-p{who}", [mine[who]], n)
            mine[who] = history.commit(f"sync{n}-p{who}", [step, history.remote], n, SYNC_MESSAGE)
            history.push(mine[who])
    history.write(tmp_path)
    repo = GitRepo(tmp_path)
    reads = 0
    read = repo.commit

    def counted(sha: bytes):
        nonlocal reads
        reads += 1
        return read(sha)

    repo.commit = counted  # type: ignore[method-assign]
    try:
        logged = list(main_log(repo))
    finally:
        repo.close()
    assert len(logged) == 61
    assert reads <= 4 * len(logged), f"{reads} commits read for a log of {len(logged)}"
