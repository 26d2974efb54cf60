"""`agentfs sync` between two people's clones and a real git server: work on different
traces merges, trace.json merges key by key, and a message edited on both machines
stops the sync with both versions kept, nothing pushed until the person chooses."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agentfs.remote.sync import merge_json
from agentfs.testing.gitserver import GitServer
from tests.conftest import assert_git_clean, git, run_cli
from tests.remote.fleet import person_clone, worker_clone


@pytest.fixture
def pair(tmp_path: Path):
    """Two clones of one workspace (traces a and b) on a git daemon: (first, second, bare)."""
    with GitServer(tmp_path / "server") as server:
        url = server.create("ws")
        first = person_clone(tmp_path, url, ("a", "b"))
        second = worker_clone(tmp_path, url, "second")
        yield first, second, server.base / "ws.git"


def edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def edited_on_both(first: Path, second: Path, ours: str, theirs: str) -> str:
    """Trace a's first user message edited on both clones, the first's synced; its path."""
    message = "traces/a/messages/000000-000999/000002-user.md"
    (first / message).write_text(ours)
    (second / message).write_text(theirs)
    run_cli("sync", cwd=first)
    return message


def test_drops_into_different_traces_on_two_clones_merge_and_reach_both(pair):
    first, second, bare = pair
    (first / "traces" / "a" / "inbox" / "x.md").write_text("from the first\n")
    (second / "traces" / "b" / "inbox" / "y.md").write_text("from the second\n")
    (second / "inbox" / "new.md").write_text("a new trace\n")
    assert "pushed" in run_cli("sync", cwd=first).stdout
    assert "pulled; pushed" in run_cli("sync", cwd=second).stdout
    assert "pulled" in run_cli("sync", cwd=first).stdout
    for clone in (first, second):
        assert (clone / "traces" / "a" / "inbox" / "x.md").is_file()
        assert (clone / "traces" / "b" / "inbox" / "y.md").is_file()
        assert (clone / "inbox" / "new.md").is_file()
        assert_git_clean(clone)
    assert git(first, "rev-parse", "HEAD") == git(second, "rev-parse", "HEAD")
    assert run_cli("sync", cwd=first).stdout.strip() == "up to date"
    git(bare, "fsck", "--strict", "--no-dangling")



def logged(clone: Path, trace: str) -> list[str]:
    """The commits `agentfs log TRACE --json` lists, newest first."""
    return [step["commit"] for step in
            json.loads(run_cli("log", trace, "--json", cwd=clone).stdout)["steps"]]


def test_agentfs_log_lists_the_steps_a_sync_merge_put_on_its_second_parent(pair):
    """A sync merges with the clone's commits first, so steps the remote got meanwhile
    (trace b, run and synced on the second clone) hang off the merge's second parent:
    `agentfs log` lists them all the same, and every step of a and b once, also
    after the second clone's sync merges that merge (a merged line within a line)."""
    first, second, bare = pair
    run_cli("run", "b", "-m", "go on", cwd=second)
    assert "pushed" in run_cli("sync", cwd=second).stdout
    (first / "traces" / "a" / "inbox" / "x.md").write_text("from the first\n")
    assert "pulled; pushed" in run_cli("sync", cwd=first).stdout
    run_cli("run", "a", cwd=first)
    run_cli("run", "b", "-m", "and on", cwd=second)
    assert "pushed" in run_cli("sync", cwd=first).stdout
    assert "pulled; pushed" in run_cli("sync", cwd=second).stdout
    assert len(git(bare, "rev-list", "--merges", "main").split()) == 2
    for trace in ("a", "b"):
        every = git(bare, "log", "--format=%H", f"--grep=^Agentfs-Trace: {trace}$",
                    "main").split()
        assert sorted(logged(second, trace)) == sorted(every), trace
    assert "go on" in run_cli("log", "b", cwd=first).stdout
    steps = json.loads(run_cli("log", "b", "--json", cwd=second).stdout)["steps"]
    assert [s["summary"] for s in steps if s["kind"] == "user"] == ["and on", "go on", "hello"]
    go_on = next(s["sequence"] for s in steps if s["summary"] == "go on")
    rewound = run_cli("rewind", "b", str(go_on), "--files", cwd=first)
    assert rewound.stdout.endswith(f"to #{go_on}\n"), rewound.stdout



def test_a_trace_run_here_and_on_the_remote_stops_the_sync_until_the_person_chooses(pair):
    """Both clones answered the same dropped message and went on: two messages with
    one number each, which a path-by-path merge would push side by side (a trace no
    run can read). Sync stops before merging, saying where each run went and how to
    choose; the person forks their run, then takes the remote's: every trace reads,
    inbox files dropped meanwhile are kept."""
    first, second, bare = pair
    (first / "traces" / "a" / "inbox" / "q.md").write_text("the question\n")
    run_cli("sync", cwd=first)
    run_cli("sync", cwd=second)
    run_cli("run", "a", cwd=second)
    run_cli("run", "a", "-m", "theirs next", cwd=second)
    run_cli("sync", cwd=second)
    run_cli("run", "a", "-m", "mine next", cwd=first)
    (first / "traces" / "b" / "inbox" / "later.md").write_text("for b\n")
    (first / "traces" / "a" / "inbox" / "later.md").write_text("for a, later\n")
    before = git(bare, "rev-parse", "main")
    stopped = run_cli("sync", cwd=first, check=False)
    assert stopped.returncode == 1
    assert ("trace a was run both here and on the remote since this clone last synced "
            "(a: #") in stopped.stderr, stopped.stderr
    assert "to #5 here" in stopped.stderr and "to #6 on the remote" in stopped.stderr
    assert "agentfs fork a --at 5" in stopped.stderr and "--theirs a" in stopped.stderr
    assert git(bare, "rev-parse", "main") == before
    assert run_cli("doctor", cwd=first).stdout.startswith("ok: ")
    run_cli("fork", "a", "--at", "5", "mine", cwd=first)
    out = run_cli("sync", "--theirs", "a", cwd=first).stdout
    assert "a: took the remote's version" in out and "pushed" in out, out
    run_cli("sync", cwd=second)
    for clone in (first, second):
        assert run_cli("doctor", cwd=clone).stdout.startswith("ok: ")
        theirs = run_cli("show", "a", cwd=clone).stdout
        mine = run_cli("show", "mine", cwd=clone).stdout
        assert "theirs next" in theirs and "mine next" not in theirs
        assert "mine next" in mine and "theirs next" not in mine and "the question" in mine
        assert (clone / "traces" / "a" / "inbox" / "later.md").is_file()
        assert (clone / "traces" / "b" / "inbox" / "later.md").is_file()
        assert_git_clean(clone)
    assert run_cli("sync", cwd=first).stdout.strip() == "up to date"
    git(bare, "fsck", "--strict", "--no-dangling")



def test_a_trace_refs_run_crossing_newer_steps_on_main_is_never_pushed_side_by_side(pair):
    """A run elsewhere (here: the second clone, pushed to the trace's ref as a worker
    pushes) started before the person's own run of the trace reached main. Carried
    onto it, its messages would take the same numbers: sync pushes nothing and says
    how to keep that run, and after that the trace reads on every side."""
    first, second, bare = pair
    run_cli("run", "a", cwd=first)  # answers hello: #3 is an answer here, a question there
    run_cli("sync", cwd=first)
    run_cli("run", "a", "-m", "the worker's", cwd=second)
    git(second, "push", "-q", "origin", "main:refs/agentfs/traces/a")
    before = git(bare, "rev-parse", "main")
    stopped = run_cli("sync", cwd=first, check=False)
    assert stopped.returncode == 1, stopped.stdout
    assert "pushing would give two messages one number (a: #" in stopped.stderr, stopped.stderr
    assert git(bare, "rev-parse", "main") == before
    commands = re.findall(r"`(git [^`]+)`", stopped.stderr)  # as the hint says
    assert [c.split()[1] for c in commands] == ["branch", "push"], stopped.stderr
    for command in commands:
        git(first, *command.split()[1:])
    assert run_cli("sync", cwd=first).stdout.strip() == "up to date"
    branch = commands[0].split()[2]
    assert "the worker's" in git(first, "log", "--format=%s", branch)
    assert run_cli("doctor", cwd=first).stdout.startswith("ok: ")



def test_theirs_for_a_trace_not_run_on_both_sides_is_refused_and_nothing_is_pushed(pair):
    """`--theirs` takes whatever the remote has of a trace, even nothing: asked for a
    trace only this clone changed (or one it does not have), sync refuses."""
    first, second, bare = pair
    run_cli("run", "b", "-m", "go on", cwd=second)
    run_cli("sync", cwd=second)
    run_cli("new", "mine", "-m", "only here", cwd=first)
    before = git(bare, "rev-parse", "main")
    for trace in ("mine", "nosuch"):
        refused = run_cli("sync", "--theirs", trace, cwd=first, check=False)
        assert refused.returncode == 1
        assert f"--theirs {trace}: trace {trace} was not run both here and on the remote" \
            in refused.stderr, refused.stderr
    assert git(bare, "rev-parse", "main") == before
    assert "pushed" in run_cli("sync", cwd=first).stdout
    run_cli("sync", cwd=second)
    assert run_cli("doctor", cwd=second).stdout.startswith("ok: ")


def test_a_trace_already_broken_on_the_remote_does_not_stop_a_sync_that_did_not_break_it(pair):
    """Two files with one number pushed by hand (or by an older sync): a sync that adds
    a drop to that trace still goes through; only what a push would add is refused."""
    first, second, _ = pair
    messages = second / "traces" / "a" / "messages" / "000000-000999"
    (messages / "000002-assistant.md").write_text(
        (messages / "000002-user.md").read_text().replace("user", "assistant"))
    git(second, "add", "-A")
    git(second, "commit", "-qm", "a second message numbered 2")
    git(second, "push", "-q", "origin", "main")
    run_cli("sync", cwd=first)
    (first / "traces" / "a" / "inbox" / "q.md").write_text("still here\n")
    assert "pushed" in run_cli("sync", cwd=first).stdout



def test_theirs_leaves_a_dropped_file_this_clones_run_took_for_the_remotes_run(pair):
    """A file dropped here reached the remote's inbox, but the remote's run of the
    trace had started without it; this clone's run took it. Taking the remote's
    trace must not take the file with this clone's run: it waits in the inbox."""
    first, second, bare = pair
    run_cli("run", "a", "-m", "theirs", cwd=second)  # before the drop reaches it
    (first / "traces" / "a" / "inbox" / "q.md").write_text("the question\n")
    run_cli("sync", cwd=first)
    run_cli("sync", cwd=second)
    run_cli("run", "a", cwd=first)  # takes q.md from the inbox
    assert run_cli("sync", cwd=first, check=False).returncode == 1
    run_cli("sync", "--theirs", "a", cwd=first)
    assert (first / "traces" / "a" / "inbox" / "q.md").read_text() == "the question\n"
    assert "traces/a/inbox/q.md" in git(bare, "ls-tree", "-r", "--name-only", "main")
    assert run_cli("doctor", cwd=first).stdout.startswith("ok: ")


def test_trace_json_changed_on_both_clones_merges_key_by_key(pair):
    first, second, _ = pair
    edit_json(first / "traces" / "a" / "trace.json", model="replay:script.json")
    edit_json(second / "traces" / "a" / "trace.json", preset="careful")
    run_cli("sync", cwd=first)
    done = run_cli("sync", cwd=second)
    assert "merged traces/a/trace.json" in done.stdout
    merged = json.loads((second / "traces" / "a" / "trace.json").read_text())
    assert (merged["model"], merged["preset"]) == ("replay:script.json", "careful")
    assert_git_clean(second)


def test_a_message_edited_on_both_clones_keeps_both_and_pushes_nothing(pair):
    first, second, bare = pair
    message = edited_on_both(first, second, "hello, as the first clone says it\n",
                             "hello, as the second clone says it\n")
    remote_main = git(bare, "rev-parse", "main")
    done = run_cli("sync", cwd=second, check=False)
    assert done.returncode == 1
    assert message in done.stderr and "conflict-" in done.stderr
    assert git(bare, "rev-parse", "main") == remote_main  # nothing pushed
    assert (second / message).read_text() == "hello, as the first clone says it\n"
    [aside] = (second / "traces" / "a" / "messages" / "000000-000999").glob("000002-user.md.conflict-*")
    assert aside.read_text() == "hello, as the second clone says it\n"
    assert_git_clean(second)
    # the person chooses their own version, then syncs again
    (second / message).write_text(aside.read_text())
    aside.unlink()
    assert "pushed" in run_cli("sync", cwd=second).stdout
    run_cli("sync", cwd=first)
    assert (first / message).read_text() == "hello, as the second clone says it\n"
    git(bare, "fsck", "--strict", "--no-dangling")


def test_sync_counts_the_files_it_commits_in_words(pair):
    first, _, _ = pair
    (first / "traces" / "a" / "inbox" / "x.md").write_text("one\n")
    assert run_cli("sync", cwd=first).stdout.startswith("committed 1 file;")
    assert git(first, "log", "-1", "--format=%s").startswith("sync: 1 file from ")
    (first / "traces" / "a" / "inbox" / "y.md").write_text("two\n")
    (first / "traces" / "b" / "inbox" / "z.md").write_text("three\n")
    assert run_cli("sync", cwd=first).stdout.startswith("committed 2 files;")
    assert git(first, "log", "-1", "--format=%s").startswith("sync: 2 files from ")


def test_sync_to_an_unreachable_remote_says_so_and_keeps_the_drops(tmp_path, pair):
    first, _, _ = pair
    (first / "traces" / "a" / "inbox" / "x.md").write_text("waits\n")
    done = run_cli("sync", "git://127.0.0.1:1/nowhere.git", cwd=first, check=False)
    assert done.returncode == 1 and "cannot reach" in done.stderr
    assert git(first, "show", "HEAD:traces/a/inbox/x.md") == "waits\n"  # committed here


def test_merge_json_takes_each_side_and_the_trace_further_along():
    base = b'{"head": 4, "model": null, "preset": null}'
    ours = b'{"head": 4, "model": "m", "preset": null}'
    theirs = b'{"head": 6, "model": null, "preset": "p"}'
    assert json.loads(merge_json(base, ours, theirs)) == {"head": 6, "model": "m", "preset": "p"}
    both = merge_json(b'{"head": 4}', b'{"head": 7}', b'{"head": 6}')
    assert both is None  # both ran on: a real conflict
    assert merge_json(None, b"[1]", b"{}") is None
    assert merge_json(b"{", b"{}", b"{}") is None


def test_merge_json_adds_both_sides_changes_to_the_count_of_model_turns():
    """`iterations` counts message files: a turn removed here and one added there
    leave as many as before, whichever trace is further along."""
    merged = merge_json(b'{"head": 4, "iterations": 2}', b'{"head": 4, "iterations": 1}',
                        b'{"head": 6, "iterations": 3}')
    assert json.loads(merged) == {"head": 6, "iterations": 2}


def turns(root: Path, trace: str) -> tuple[int, int]:
    """trace.json's `iterations` at HEAD, and the turns of the model in its files there."""
    from agentfs.core.project import Project
    from agentfs.store.history import is_model_turn

    committed = json.loads(git(root, "show", f"HEAD:traces/{trace}/trace.json"))["iterations"]
    messages = Project.open(root).trace(trace).messages(refresh=True)
    return committed, sum(map(is_model_turn, messages.values()))


def test_sync_commits_a_trace_edit_as_a_run_would_and_pushes_the_right_count(pair):
    """A turn of the model deleted by hand here, one more run there: sync commits the
    deletion as an `edit` step that counts the turns again (not in its own `git add
    -u` commit), the merge adds both sides' changes, and the next run goes on from
    the right place in the replay script."""
    first, second, _ = pair
    run_cli("run", "a", "-m", "one", cwd=first)
    run_cli("run", "a", "-m", "two", cwd=first)
    run_cli("rewind", "a", "2", cwd=first)  # both answers off the path, still counted
    run_cli("sync", cwd=first)
    run_cli("sync", cwd=second)
    run_cli("run", "a", "-m", "three", cwd=second)
    run_cli("sync", cwd=second)
    off_path = min((first / "traces/a/messages").rglob("*-assistant.md"))  # of "one"
    off_path.unlink()
    out = run_cli("sync", cwd=first).stdout
    assert "pulled" in out and "pushed" in out
    assert out.startswith("a: committed what changed here as an edit step\n"), out
    assert "edit" in git(first, "log", "--format=%s", "-3")
    assert turns(first, "a") == (2, 2)
    assert run_cli("doctor", cwd=first).stdout.startswith("ok: ")
    assert_git_clean(first)


def test_sync_refuses_a_trace_edit_that_breaks_it_and_pushes_nothing(pair):
    first, _, bare = pair
    before = git(bare, "rev-parse", "main")
    message = first / "traces/a/messages/000000-000999/000002-user.md"
    message.write_text("---\nrole: nobody\n---\nbroken\n")
    done = run_cli("sync", cwd=first, check=False)
    assert done.returncode == 1 and "000002-user.md" in done.stderr
    assert git(bare, "rev-parse", "main") == before
    assert message.read_text().endswith("broken\n")  # nothing lost


def test_a_second_sync_with_a_conflict_left_unresolved_refuses_and_pushes_nothing(pair):
    first, second, bare = pair
    edited_on_both(first, second, "first\n", "second\n")
    assert run_cli("sync", cwd=second, check=False).returncode == 1
    remote_main = git(bare, "rev-parse", "main")
    done = run_cli("sync", cwd=second, check=False)  # nothing resolved
    assert done.returncode == 1
    assert "conflict copies" in done.stderr and ".conflict-" in done.stderr
    assert git(bare, "rev-parse", "main") == remote_main
    assert "conflict-" not in git(bare, "ls-tree", "-r", "--name-only", "main")


def test_a_conflict_copy_in_an_inbox_is_never_a_message():
    from agentfs.store.git.conflicts import conflict_copy
    from agentfs.store.inbox import is_ignored_name
    copy = conflict_copy("traces/a/inbox/note.md", b"0123456789abcdef" * 2)
    assert is_ignored_name(copy.rsplit("/", 1)[1])
    assert not is_ignored_name("note.md") and not is_ignored_name("x.conflict-notes.md")


def test_sync_holds_every_traces_lock_until_it_is_done(pair, monkeypatch):
    from agentfs.errors import TraceLocked
    from agentfs.remote import sync as module
    from agentfs.store.tracelock import TraceLock
    from agentfs.store.workspace import Workspace
    first, _, _ = pair
    workspace = Workspace(first)
    tried: list[str] = []

    def during(workspace, *_):
        for trace_id in ("a", "b"):
            try:
                with TraceLock(workspace.state_dir / "locks", trace_id):
                    tried.append(f"{trace_id} ran")
            except TraceLocked:
                tried.append(f"{trace_id} locked")
        return module.SyncReport()

    monkeypatch.setattr(module, "_sync_locked", during)
    module.sync(workspace, "origin")
    assert tried == ["a locked", "b locked"]
    with TraceLock(workspace.state_dir / "locks", "a"):
        pass  # released afterwards
