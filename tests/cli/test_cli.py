"""The `agentfs` command end to end, on temporary workspaces."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import assert_git_clean, git, replay_workspace, run_cli

SCRIPT = {
    "turns": [
        {"text": "Looking.", "tool_calls": [{"name": "read_file", "input": {"path": "notes.md"}}]},
        {"text": "Writing.", "tool_calls": [
            {"name": "write_file", "input": {"path": "summary.md", "content": "short\n"}}]},
        {"text": "Done: summary.md written."},
        {"text": "Second answer."},
        {"text": "Third answer."},
    ]
}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return replay_workspace(tmp_path / "ws", SCRIPT, {"notes.md": "some notes\n"})


def show_json(root: Path, *args: str) -> dict:
    return json.loads(run_cli("show", "t", "--json", *args, cwd=root).stdout)


def test_new_run_show_log_status(ws):
    run_cli("new", "t", "-m", "Summarize notes.md", cwd=ws)
    done = run_cli("run", "t", cwd=ws)
    assert "Looking." in done.stdout and "Done: summary.md written." in done.stdout
    assert "read_file" in done.stderr
    assert (ws / "summary.md").read_text() == "short\n"
    assert_git_clean(ws)

    shown = show_json(ws)
    assert shown["trace"] == "t" and shown["head"] == 7
    assert [m["role"] for m in shown["messages"]] == [
        "system", "user", "assistant", "tool", "assistant", "tool", "assistant"]
    first = shown["messages"][2]
    assert set(first) >= {"id", "sequence", "parent_sequence", "role", "text", "tool_calls",
                          "tool_call_id", "synthetic", "goal_id", "on_path"}
    assert first["tool_calls"][0]["name"] == "read_file"
    assert all(m["on_path"] for m in shown["messages"])

    text = run_cli("show", "t", cwd=ws).stdout
    assert "#3 assistant" in text and "→ read_file" in text

    log = run_cli("log", "t", cwd=ws).stdout.splitlines()
    assert [line.split()[1] for line in log] == [
        "assistant", "tool", "assistant", "tool", "assistant", "user", "create"]
    assert len(run_cli("log", "t", "-n", "2", cwd=ws).stdout.splitlines()) == 2
    negative = run_cli("log", "t", "-n", "-1", cwd=ws, check=False)
    assert negative.returncode == 2 and "-1 is not in the range x>=0" in negative.stderr

    status = json.loads(run_cli("status", "--json", cwd=ws).stdout)
    (row,) = status["traces"]
    assert {k: row[k] for k in ("trace", "head", "running", "pending_inbox", "rejected")} == {
        "trace": "t", "head": 7, "running": False, "pending_inbox": [], "rejected": []}
    assert row["usage"]["calls"] == 3 and row["updated"]


def test_run_by_path_from_a_subdirectory(ws):
    run_cli("new", "t", "-m", "hi", cwd=ws)
    sub = ws / "traces" / "t" / "messages"
    done = run_cli("run", str(ws / "traces" / "t"), "--max-iterations", "1", cwd=sub)
    assert "Looking." in done.stdout
    assert "--max-iterations" in done.stderr


def test_a_message_that_is_not_utf8_is_refused_before_anything_is_written(ws):
    run_cli("new", "t", "-m", "hi", cwd=ws)
    before = git(ws, "rev-parse", "HEAD")
    for trace in ("t", "fresh"):  # appended, or the first message of a new trace
        done = run_cli("run", trace, "-m", "caf\udcff", cwd=ws, check=False)  # argv byte 0xff
        assert done.returncode == 1
        assert "is not valid UTF-8 text (at character 3); nothing was written" in done.stderr
    done = run_cli("new", "fresh", "-m", "caf\udcff", cwd=ws, check=False)
    assert done.returncode == 1 and "<-m>: not valid UTF-8 (byte 3)" in done.stderr
    piped = subprocess.run([sys.executable, "-m", "agentfs", "new", "fresh", "-m", "-"],
                           cwd=ws, input=b"caf\xff", capture_output=True, check=False)
    assert piped.returncode == 1 and b"<-m>: not valid UTF-8 (byte 3)" in piped.stderr
    assert not (ws / "traces" / "fresh").exists()
    assert git(ws, "rev-parse", "HEAD") == before
    assert_git_clean(ws)


def test_edit_then_run_records_edit_and_model_sees_it(ws):
    run_cli("new", "t", "-m", "Summarize notes.md", cwd=ws)
    run_cli("run", "t", cwd=ws)
    message = ws / "traces/t/messages/000000-000999/000003-assistant.md"
    message.write_text(message.read_text().replace("Looking.", "Looking (edited)."))
    run_cli("run", "t", "-m", "again", cwd=ws)
    kinds = [line.split()[1] for line in run_cli("log", "t", cwd=ws).stdout.splitlines()]
    assert kinds[:3] == ["assistant", "user", "edit"]
    texts = [m["text"] for m in show_json(ws)["messages"]]
    assert "Looking (edited)." in texts
    assert_git_clean(ws)


def test_a_broken_goals_json_stops_the_run_before_anything_is_committed(ws):
    run_cli("new", "t", "-m", "Summarize notes.md", cwd=ws)
    run_cli("run", "t", cwd=ws)
    goals = ws / "traces/t/goals.json"
    goals.write_text('{"goals": [{"id": "1", "title": "plan", "status": "finished"}]}')
    log = git(ws, "log", "--format=%H")
    done = run_cli("run", "t", "-m", "again", cwd=ws, check=False)
    assert done.returncode == 1, done
    assert "goals.json: not a valid goal tree" in done.stderr, done.stderr
    assert "`rm -- traces/t/goals.json`" in done.stderr, done.stderr  # never committed
    assert git(ws, "log", "--format=%H") == log  # neither the edit nor the message
    goals.write_text('{"goals": [{"id": "1", "title": "plan", "status": "done"}]}')
    run_cli("run", "t", "-m", "again", cwd=ws)
    kinds = [line.split()[1] for line in run_cli("log", "t", cwd=ws).stdout.splitlines()]
    assert kinds[:3] == ["assistant", "user", "edit"]
    assert "[x] 1 plan" in run_cli("goals", "t", cwd=ws).stdout
    assert_git_clean(ws)


def test_rewind_keeps_later_messages_off_path(ws):
    run_cli("new", "t", "-m", "Summarize notes.md", cwd=ws)
    run_cli("run", "t", cwd=ws)
    out = run_cli("rewind", "t", "4", cwd=ws).stdout
    assert "#7" in out and "#4" in out
    run_cli("run", "t", "-m", "instead", cwd=ws)

    everything = show_json(ws, "--all")
    on = [m["sequence"] for m in everything["messages"] if m["on_path"]]
    off = [m["sequence"] for m in everything["messages"] if not m["on_path"]]
    assert on == [1, 2, 3, 4, 8, 9]
    assert off == [5, 6, 7]
    assert "[off path]" in run_cli("show", "t", "--all", cwd=ws).stdout
    assert "rewind" in run_cli("log", "t", cwd=ws).stdout
    assert_git_clean(ws)


def test_new_from_file_with_frontmatter(ws, tmp_path):
    task = tmp_path / "task.md"
    task.write_text("---\ngoal_id: '1'\n---\nDo the thing.\n")
    run_cli("new", "t", "-f", str(task), cwd=ws)
    message = show_json(ws)["messages"][1]
    assert message["text"] == "Do the thing." and message["goal_id"] == "1"


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (("run", "nope"), 1, "no trace 'nope'"),
        (("show", "bad id!"), 1, "invalid trace id"),
        (("new", "t"), 2, "exactly one of -m TEXT or -f FILE"),
        (("rewind", "t", "notanumber"), 2, "not a valid integer"),
        (("run", "t", "--model", "replay:missing.json"), 1, "missing.json does not exist"),
        (("run", "t", "--model", "nonsense"), 1, "is not PROVIDER:NAME"),
        (("rewind", "t", "99"), 1, "has no message #99"),
        (("rewind", "t", "99"), 1, "`agentfs show t --all` lists the sequences"),
    ],
)
def test_errors_are_one_line_with_exit_codes(ws, args, code, needle):
    run_cli("new", "t", "-m", "hi", cwd=ws) if args[0] != "new" else None
    done = run_cli(*args, cwd=ws, check=False)
    assert done.returncode == code, done.stderr
    assert needle in done.stderr
    assert "Traceback" not in done.stderr


def test_missing_api_key_explains_how_to_fix(tmp_path):
    root = tmp_path / "fresh"
    run_cli("init", str(root), cwd=tmp_path)
    run_cli("new", "t", "-m", "hi", cwd=root)
    done = run_cli("run", "t", cwd=root, env={"ANTHROPIC_API_KEY": ""}, check=False)
    assert done.returncode == 1
    assert "ANTHROPIC_API_KEY" in done.stderr and "replay:" in done.stderr
    assert "Traceback" not in done.stderr


def test_outside_a_workspace(tmp_path):
    done = run_cli("status", cwd=tmp_path, check=False)
    assert done.returncode == 1
    assert "agentfs init" in done.stderr


def test_bad_message_file_names_the_file(ws):
    run_cli("new", "t", "-m", "hi", cwd=ws)
    bad = ws / "traces/t/messages/000000-000999/000002-user.md"
    bad.write_bytes(b"---\nrole: [unclosed\n---\nhi\n")
    done = run_cli("run", "t", cwd=ws, check=False)
    assert done.returncode == 1
    assert "000002-user.md" in done.stderr and "YAML" in done.stderr
    bad.write_bytes(b"\xff\xfe not utf-8")
    done = run_cli("show", "t", cwd=ws, check=False)
    assert "000002-user.md" in done.stderr and "UTF-8" in done.stderr
    (ws / "traces/t/messages/000000-000999/000009-robot.md").write_text("hi")
    bad.write_text("hi")
    done = run_cli("show", "t", cwd=ws, check=False)
    assert "000009-robot.md" in done.stderr and "unknown role" in done.stderr
    # nothing committed was lost or rewritten
    assert git(ws, "show", "HEAD:traces/t/messages/000000-000999/000002-user.md").endswith("hi\n")


@pytest.mark.parametrize("linked", [
    "traces", "traces/t", "traces/t/messages", "traces/t/messages/000000-000999",
    "traces/t/inbox"])
def test_a_trace_folder_that_is_a_symlink_is_refused_and_nothing_goes_through_it(
        ws, tmp_path, linked):
    """A clone can bring a link where a trace's folder belongs: no command reads
    or writes message files through it, not even to tidy a loose file into it."""
    run_cli("new", "t", "-m", "hi", cwd=ws)
    outside = tmp_path / "outside"
    (ws / linked).rename(outside)
    (ws / linked).symlink_to(outside)
    git(ws, "add", "-A")
    git(ws, "commit", "-qm", "a link, as a clone brings it")
    before = sorted(p.relative_to(outside) for p in outside.rglob("*"))
    shard = linked.endswith("-000999")
    if shard:  # a loose file beside the link, which upgrade would move into its folder
        loose = ws / "traces/t/messages/000003-user.md"
        loose.write_text("---\nrole: user\n---\nmine\n")
    for args in (("run", "t", "-m", "again"), ("run", "t"), ("show", "t"), ("doctor",)):
        done = run_cli(*args, cwd=ws, check=False)
        assert done.returncode == 1, args
        assert f"{ws / linked}: is a symlink, not a folder" in done.stderr + done.stdout, args
    if linked in ("traces", "traces/t"):  # not even the names in its inbox are listed
        inbox = outside / "inbox" if linked == "traces/t" else outside / "t" / "inbox"
        inbox.mkdir(exist_ok=True)
        (inbox / "private-name.md").write_text("x\n")
        before = sorted(p.relative_to(outside) for p in outside.rglob("*"))
    listing = [("status",), ("status", "--json"), ("goals", "t")]
    reading = {"traces": listing, "traces/t": listing, "traces/t/messages": [("status",)]}
    for args in reading.get(linked, []):  # the list and the goal tree say so too
        done = run_cli(*args, cwd=ws, check=False)
        assert "is a symlink, not a folder" in done.stdout + done.stderr
        assert "private-name" not in done.stdout + done.stderr
    assert sorted(p.relative_to(outside) for p in outside.rglob("*")) == before
    if shard:
        assert loose.read_text().endswith("mine\n")  # not moved into the link
    assert git(ws, "status", "--porcelain", "--untracked-files=no") == ""


@pytest.mark.parametrize(("name", "what"), [
    ("messages", "the folder of the trace's messages"), ("inbox", "the trace's inbox folder")])
def test_a_file_where_a_trace_folder_belongs_is_refused_with_the_fix(ws, name, what):
    """A file in the place of `messages/` stopped every command with "Not a
    directory"; one in the place of `inbox/` was committed as an edit, and the trace
    took no dropped file after that."""
    run_cli("new", "t", "-m", "hi", cwd=ws)
    folder = ws / "traces/t" / name
    shutil.rmtree(folder)
    folder.write_text("not a folder\n")
    log = git(ws, "log", "--format=%H")
    for args in (("run", "t", "-m", "again"), ("run", "t"), ("show", "t"), ("status",)):
        done = run_cli(*args, cwd=ws, check=False)
        assert done.returncode == 1, args
        said = done.stdout + done.stderr
        assert f"{folder}: is a file, not {what}" in said, said
        assert f"git checkout -- {name}" in said, said
    assert git(ws, "log", "--format=%H") == log
    folder.unlink()  # the hint: move the file away, then git checkout puts the folder back
    git(ws / "traces/t", "checkout", "--", name)
    run_cli("run", "t", "-m", "again", cwd=ws)
    (ws / "traces/t/inbox/next.md").write_text("and once more\n")  # drops are taken again
    run_cli("run", "t", cwd=ws)
    assert "t: user #9 and once more" in git(ws, "log", "--format=%s")
    assert_git_clean(ws)


def test_a_message_file_name_ending_in_a_line_break_is_no_message_file(ws):
    """Git lets a name end in a line break, and a clone brings it. The name's
    pattern ended in `$`, which matches before a final line break, so the file
    was message #N: recovery committed a copy under the plain name, and every
    command then stopped on two files for #N."""
    run_cli("new", "t", "-m", "hi", cwd=ws)
    run_cli("run", "t", cwd=ws)
    following = json.loads((ws / "traces/t/trace.json").read_text())["next_sequence"]
    odd = ws / "traces/t/messages/000000-000999" / f"{following:06d}-user.md\n"
    odd.write_text("by hand\n")
    head = git(ws, "rev-parse", "HEAD")
    waiting = run_cli("run", "t", cwd=ws)
    assert "waiting for a user message" in waiting.stderr
    for args in (("doctor",), ("run", "t", "-m", "again")):
        done = run_cli(*args, cwd=ws, check=False)
        assert done.returncode == 1, args
        assert "not a message file name" in done.stdout + done.stderr, args
    assert git(ws, "rev-parse", "HEAD") == head  # nothing committed
    odd.unlink()
    run_cli("run", "t", "-m", "again", cwd=ws)
    assert_git_clean(ws)


@pytest.mark.parametrize("name", ["trace.json", "goals.json", "approval.json"])
def test_a_trace_file_that_is_a_symlink_is_refused_unread(ws, tmp_path, name):
    """Even a link to a copy of the file (so it would parse) is refused, naming the file;
    a link to `/dev/zero` would otherwise never end the read."""
    run_cli("new", "t", "-m", "hi", cwd=ws)
    path = ws / "traces/t" / name
    outside = tmp_path / name
    if name == "trace.json":
        outside.write_bytes(path.read_bytes())
        path.unlink()
    else:  # a goal tree, a waiting call: files a clone may bring
        outside.write_text(json.dumps({"goals": []} if name == "goals.json" else {
            "trace": "t", "tool_use_id": "x", "name": "bash", "input": {}, "answer": "yes"}))
    path.symlink_to(outside)
    git(ws, "add", "-A")
    git(ws, "commit", "-qm", "a link, as a clone brings it")
    for args in (("run", "t", "-m", "again"), ("doctor",)):
        done = run_cli(*args, cwd=ws, check=False)
        assert done.returncode == 1, args
        assert f"{path}: is a symlink; trace files must be regular files" in (
            done.stderr + done.stdout), args
    assert git(ws, "status", "--porcelain") == ""


def test_a_folder_named_like_the_next_message_file_does_not_take_its_place(ws):
    """It is no message, but its name is taken: the next message gets the next one."""
    run_cli("new", "t", "-m", "hi", cwd=ws)
    (ws / "traces/t/messages/000000-000999/000003-user.md/x").mkdir(parents=True)
    run_cli("run", "t", "-m", "again", "--max-iterations", "1", cwd=ws)
    written = ws / "traces/t/messages/000000-000999/000004-user.md"
    assert written.read_text().rstrip().endswith("again")
    assert "000004-user.md" in git(ws, "ls-files", "traces/t/messages")


def test_the_settings_init_writes_commented_out_work_once_uncommented(tmp_path):
    """The generated agentfs.toml offers keys to uncomment: they must be real ones."""
    from agentfs.config import load_config

    root = tmp_path / "ws"
    run_cli("init", str(root), cwd=tmp_path)
    text = (root / "agentfs.toml").read_text()
    assert "openai:" in text and "replay:" in text
    (root / "agentfs.toml").write_text(
        text.replace("# [tools]", "[tools]").replace("# bash =", "bash =")
        .replace("# approve =", "approve ="))
    config = load_config(root / "agentfs.toml")
    assert config.tools.bash is True and config.tools.approve == "acting"


def test_a_key_above_or_below_the_table_it_belongs_to_is_named_with_where_it_goes(tmp_path):
    """Uncommenting `bash = true` alone leaves it above `[tools]`; a key added at the
    end of the file lands in its last table: the error says where each belongs."""
    root = tmp_path / "ws"
    run_cli("init", str(root), cwd=tmp_path)
    toml = root / "agentfs.toml"
    text = toml.read_text()
    toml.write_text(text.replace("# bash =", "bash ="))
    done = run_cli("status", cwd=root, check=False)
    assert done.returncode == 1
    assert (f"{toml}: bash: Extra inputs are not permitted ('bash' is a key of [tools]: "
            "write it below the `[tools]` line)") in done.stderr
    toml.write_text(text + "[tools]\nbash = true\nmax_iterations = 5\n")
    done = run_cli("doctor", cwd=root, check=False)
    assert ("tools.max_iterations: Extra inputs are not permitted ('max_iterations' "
            "belongs at the top of the file, above the first [table] line: every key "
            "after the `[tools]` line belongs to [tools])") in done.stdout + done.stderr


def test_init_on_existing_repo_adds_only_what_is_missing(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / "README.md").write_text("mine\n")
    (root / "skills").mkdir()
    (root / "skills" / "own.md").write_text("---\nname: own\n---\nx\n")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "user's commit")
    out = run_cli("init", cwd=root).stdout
    assert "agentfs.toml" in out and "skills" not in out
    assert (root / "README.md").read_text() == "mine\n"
    assert git(root, "log", "--format=%s").splitlines() == [
        "agentfs: init agentfs workspace", "user's commit"]
    assert "already a workspace" in run_cli("init", cwd=root).stdout
    assert_git_clean(root)


def test_head_not_on_main_is_refused(ws):
    git(ws, "checkout", "-q", "-b", "feature")
    done = run_cli("new", "t", "-m", "hi", cwd=ws, check=False)
    assert done.returncode == 1 and "git checkout main" in done.stderr


def test_demo_copies_example_and_runs_offline(tmp_path):
    target = tmp_path / "demo"
    done = run_cli("demo", str(target), cwd=tmp_path, env={"ANTHROPIC_API_KEY": ""})
    assert "Done." in done.stdout
    assert (target / "notes" / "action-items.md").exists()
    assert_git_clean(target)
    log = git(target, "log", "--format=%s")
    assert "demo: tool" in log and "demo: assistant" in log
    again = run_cli("demo", str(target), cwd=tmp_path, check=False)
    assert again.returncode == 2 and "not empty" in again.stderr


def test_help_lists_commands():
    done = run_cli("--help", cwd=Path.cwd())
    for command in ("init", "new", "run", "show", "log", "rewind", "status", "demo"):
        assert command in done.stdout


def test_status_shows_a_trace_whose_last_run_failed(tmp_path):
    root = tmp_path / "ws"
    run_cli("init", str(root), cwd=tmp_path)
    run_cli("new", "t", "-m", "hello", cwd=root)
    failed = run_cli("run", "t", "--model", "anthropic:claude-test", cwd=root, check=False,
                     env={"ANTHROPIC_API_KEY": ""})
    assert failed.returncode == 1
    from agentfs.core.project import Project

    trace = Project.open(root).trace("t")
    with trace.lock():
        trace.record_error("the model could not be reached")  # as the watcher records it
    text = run_cli("status", cwd=root).stdout
    assert "failed" in text and "last run: the model could not be reached" in text
    rows = json.loads(run_cli("status", "--json", cwd=root).stdout)["traces"]
    assert rows[0]["last_error"] == "the model could not be reached"


def test_daily_cli_reads_stdin_prints_json_and_waits_without_credentials(tmp_path):
    root = tmp_path / "ws"
    run_cli("init", str(root), cwd=tmp_path)
    script = root / "script.json"
    script.write_text(json.dumps({"turns": [{"text": "answer"}] * 5}))
    import io
    import sys

    stdin = sys.stdin
    try:
        sys.stdin = io.TextIOWrapper(io.BytesIO(b"from a pipe\n"))
        run_cli("new", "t", "-m", "-", "--model", "replay:script.json", cwd=root)
        sys.stdin = io.TextIOWrapper(io.BytesIO(b"---\ngoal_id: x\n---\nfrom a piped file\n"))
        run_cli("new", "u", "-f", "-", "--model", "replay:script.json", cwd=root)
    finally:
        sys.stdin = stdin
    shown = json.loads(run_cli("show", "t", "--json", cwd=root).stdout)
    assert shown["messages"][1]["text"] == "from a pipe"
    shown = json.loads(run_cli("show", "u", "--json", cwd=root).stdout)
    assert shown["messages"][1]["text"] == "from a piped file"

    done = run_cli("run", "t", cwd=root)
    assert "replay:" in done.stderr and "1 model call," in done.stderr
    # nothing to do: said before any model or key is needed
    waiting = run_cli("run", "t", "--model", "anthropic:claude-test", cwd=root,
                      env={"ANTHROPIC_API_KEY": ""})
    assert "is waiting for a user message" in waiting.stderr
    before = git(root, "rev-parse", "HEAD")
    assert "nothing to do" in run_cli("rewind", "t", "3", cwd=root).stdout
    assert git(root, "rev-parse", "HEAD") == before  # no empty commit

    steps = json.loads(run_cli("log", "t", "--json", cwd=root).stdout)["steps"]
    assert [s["kind"] for s in steps] == ["assistant", "user", "create"]
    assert steps[0]["sequence"] == 3
    assert json.loads(run_cli("goals", "t", "--json", cwd=root).stdout) == {
        "goals": [], "focus": None}
    refused = run_cli("run", "t", "--preset", "nope", "-m", "x", cwd=root, check=False)
    assert refused.returncode == 2 and "(no preset)" in refused.stderr


def test_one_call_is_counted_in_the_singular(ws):
    stopped = run_cli("run", "t", "-m", "Summarize notes.md", "--max-iterations", "1", cwd=ws)
    assert "stopped after 1 model call (--max-iterations)" in stopped.stderr
    assert "  1 call " in run_cli("status", cwd=ws).stdout + " "
