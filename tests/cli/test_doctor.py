"""`agentfs doctor`, `agentfs status` on broken files, and what a new trace records."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from dulwich.objects import Blob

from agentfs.store.git.repo import GitRepo
from tests.conftest import assert_git_clean, git, replay_workspace, run_cli

SCRIPT = {"turns": [{"text": "One."}, {"text": "Two."}, {"text": "Three."}]}


def make(tmp_path: Path) -> Path:
    ws = replay_workspace(tmp_path / "ws", SCRIPT)
    run_cli("run", "good", "-m", "hello", cwd=ws)
    run_cli("run", "other", "-m", "hello", cwd=ws)
    return ws


def message_files(ws: Path, trace: str) -> list[Path]:
    return sorted((ws / "traces" / trace / "messages").rglob("*.md"))


def test_doctor_on_a_healthy_workspace_says_ok_and_exits_0(tmp_path: Path) -> None:
    ws = make(tmp_path)
    done = run_cli("doctor", cwd=ws)
    assert done.stdout.startswith("ok: ")
    assert "2 traces" in done.stdout and "6 message files" in done.stdout
    checked = run_cli("status", "--check", cwd=ws).stdout  # the check, then the traces
    assert checked.startswith(done.stdout) and "good " in checked
    assert_git_clean(ws)


def test_doctor_prints_one_line_per_problem_naming_the_file_and_its_fix(tmp_path: Path) -> None:
    ws = make(tmp_path)
    toml = ws / "agentfs.toml"
    toml.write_text(toml.read_text() + "max_iteration = 3\n")
    (ws / "traces" / "good" / "trace.json").write_text("{not json")
    system, user, _ = message_files(ws, "other")
    user.write_text("---\nrole: [nonsense\n---\nhi\n")
    shutil.copy(system, system.parent.parent / system.name)  # a second file for sequence 1
    meta_path = ws / "traces" / "other" / "trace.json"
    meta = json.loads(meta_path.read_text())
    meta["side_queue"] = {"reason": "compress", "head": 3,
                          "steps": [{"type": "magic", "state": "waiting"}]}
    meta_path.write_text(json.dumps(meta))
    staged = ws / "traces" / "good" / "goals.json"
    staged.write_text("{}\n")
    git(ws, "add", "traces/good/goals.json")
    first = message_files(ws, "good")[0]
    git(ws, "rm", "-q", "--cached", first.relative_to(ws).as_posix())

    done = run_cli("doctor", cwd=ws, check=False)
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert len(lines) == 7, done.stdout
    config, trace_json, bad_user, duplicate, queue, *index = lines
    assert "agentfs.toml" in config and "did you mean 'max_iterations'?" in config
    assert "traces/good/trace.json: not valid JSON" in trace_json
    assert "git checkout HEAD -- traces/good/trace.json" in trace_json
    assert str(user) in bad_user
    assert "sequence 1 is also used by" in duplicate and "rename one" in duplicate
    assert "trace.json: side_queue: unknown side-branch type 'magic'" in queue
    assert "delete its side_queue" in queue
    missing, staged_path = first.relative_to(ws).as_posix(), "traces/good/goals.json"
    fix = "agentfs commits trace files itself: `git restore --staged {}` puts the index back to HEAD"
    assert sorted(index) == sorted([
        f"{missing}: missing from the index (staged as deleted) ({fix.format(missing)})",
        f"traces/good/goals.json: staged but not committed ({fix.format(staged_path)})",
    ])
    assert run_cli("status", "--check", cwd=ws, check=False).stdout == done.stdout


def test_doctor_names_a_count_of_model_turns_a_commit_outside_agentfs_left_wrong(
        tmp_path: Path) -> None:
    """`iterations` is kept by agentfs's commits; one made with git by hand can leave it
    behind the files, and a run would then count its turns from the wrong number."""
    ws = make(tmp_path)
    meta_path = ws / "traces" / "good" / "trace.json"
    meta = json.loads(meta_path.read_text())
    assert meta["iterations"] == 1  # the one answer of `make`
    meta_path.write_text(json.dumps({**meta, "iterations": 7}, indent=2) + "\n")
    git(ws, "commit", "-qam", "by hand")
    done = run_cli("doctor", cwd=ws, check=False)
    assert done.returncode == 1
    assert ("traces/good/trace.json: iterations is 7, but the message files hold 1 turn(s) of "
            "the model") in done.stdout and "set it to 1" in done.stdout
    meta_path.write_text(json.dumps({**meta, "iterations": 1}, indent=2) + "\n")
    assert run_cli("doctor", cwd=ws).stdout.startswith("ok: ")


def test_doctor_leaves_the_count_to_the_run_that_commits_a_turn_a_crash_left(
        tmp_path: Path) -> None:
    """A turn's file written and not committed (a crash): the count in trace.json is
    right for what is committed, and the next run adopts and counts the file."""
    from agentfs.store.messages import Message, render_message

    ws = make(tmp_path)
    *_, last = message_files(ws, "good")
    answer = Message(id="cut", sequence=4, parent_sequence=3, role="assistant", content="Cut.")
    (last.parent / "000004-assistant.md").write_bytes(render_message(answer))
    assert "iterations" not in run_cli("doctor", cwd=ws, check=False).stdout
    run_cli("run", "good", "-m", "and on", cwd=ws)
    assert json.loads((ws / "traces" / "good" / "trace.json").read_text())["iterations"] == 3
    assert run_cli("doctor", cwd=ws).stdout.startswith("ok: ")


def test_status_of_a_broken_trace_json_names_it_and_exits_1(tmp_path: Path) -> None:
    ws = make(tmp_path)
    (ws / "traces" / "good" / "trace.json").write_text("{not json")
    done = run_cli("status", cwd=ws, check=False)
    assert done.returncode == 1
    assert "head #None" not in done.stdout
    broken = next(line for line in done.stdout.splitlines() if line.startswith("good "))
    assert "BROKEN" in broken and "trace.json: not valid JSON" in broken
    assert "other " in done.stdout  # the other traces are still listed
    as_json = run_cli("status", "--json", cwd=ws, check=False)
    assert as_json.returncode == 1 and json.loads(as_json.stdout)["traces"][0]["error"]


def test_status_with_an_invalid_agentfs_toml_fails_naming_it(tmp_path: Path) -> None:
    ws = make(tmp_path)
    run_cli("status", cwd=ws)  # remembered as valid
    toml = ws / "agentfs.toml"
    toml.write_text(toml.read_text() + "[tools]\nbsh = true\n")
    done = run_cli("status", cwd=ws, check=False)
    assert done.returncode == 1
    assert f"{toml}: tools.bsh" in done.stderr and "did you mean 'bash'?" in done.stderr
    toml.write_text("max_iterations = [\n")
    done = run_cli("status", cwd=ws, check=False)
    assert done.returncode == 1 and f"{toml}: invalid TOML" in done.stderr


def test_a_trace_run_creates_records_the_model_it_was_given(tmp_path: Path) -> None:
    ws = replay_workspace(tmp_path / "ws", SCRIPT)
    (ws / "script.json").rename(ws / "mine.json")
    (ws / "sub").mkdir()
    run_cli("run", "t", "-m", "hello", "--model", "replay:../mine.json", cwd=ws / "sub")
    meta = json.loads((ws / "traces" / "t" / "trace.json").read_text())
    assert meta["model"] == "replay:mine.json"  # read from the workspace root later
    done = run_cli("run", "t", "-m", "again", cwd=ws)  # agentfs.toml's script is gone
    assert "Two." in done.stdout


def test_request_timeout_in_agentfs_toml_reaches_the_anthropic_provider(
    tmp_path: Path, monkeypatch
) -> None:
    from agentfs.errors import ModelError

    given: dict = {}

    class Recorder:
        def __init__(self, model_id: str, **options: object) -> None:
            given.update(options, model_id=model_id)
            raise ModelError("recorded")

    monkeypatch.setattr("agentfs.models.anthropic.AnthropicModel", Recorder)
    ws = replay_workspace(tmp_path / "ws", SCRIPT, config={"max_iterations = 50": (
        "max_iterations = 50\nrequest_timeout = 12.5")})
    done = run_cli("run", "t", "-m", "hi", "--model", "anthropic:claude-x", cwd=ws,
                   env={"ANTHROPIC_API_KEY": "k"}, check=False)
    assert "recorded" in done.stderr
    assert given["model_id"] == "claude-x" and given["timeout"] == 12.5


def test_an_agentfs_toml_link_is_followed_but_a_huge_one_is_refused(tmp_path: Path) -> None:
    """Trust is for the configuration's content, so a link to it is fine; a file too
    large to be one is named, not loaded by every command."""
    ws = make(tmp_path)
    toml = ws / "agentfs.toml"
    kept = tmp_path / "shared.toml"
    kept.write_bytes(toml.read_bytes())
    toml.unlink()
    toml.symlink_to(kept)
    run_cli("status", cwd=ws)
    run_cli("doctor", cwd=ws)
    with kept.open("ab") as f:
        f.write(b"# padding\n" * 110_000)  # still valid TOML, over 1 MiB
    for command in ("status", "doctor"):
        done = run_cli(command, cwd=ws, check=False)
        assert done.returncode == 1, command
        assert f"{toml}: file is 1,1" in done.stdout + done.stderr, command
        assert "over the 1,048,576-byte limit" in done.stdout + done.stderr, command


def test_an_agentfs_toml_that_is_no_file_is_named_not_passed_over(tmp_path: Path) -> None:
    """Not a parent workspace's settings instead: this folder's file is refused."""
    outer = make(tmp_path)
    inner = outer / "inner"
    run_cli("init", str(inner), cwd=outer)
    (inner / "agentfs.toml").unlink()
    (inner / "agentfs.toml").symlink_to("/dev/zero")
    done = run_cli("status", cwd=inner, check=False)
    assert done.returncode == 1
    assert f"{inner / 'agentfs.toml'}: is not a regular file" in done.stderr



def test_doctor_names_linked_skills_knowledge_and_inboxes(tmp_path: Path) -> None:
    """A clone can bring these folders as links; a run then reads or takes nothing
    through them. `doctor` names each, as it names a linked trace folder."""
    ws = make(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    linked = [ws / "skills", ws / "knowledge", ws / "inbox", ws / "traces" / "good" / "inbox"]
    for folder in linked:
        shutil.rmtree(folder, ignore_errors=True)
        folder.symlink_to(outside)
    done = run_cli("doctor", cwd=ws, check=False)
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    for folder in linked:
        assert any(str(folder) in line and "symlink" in line for line in lines), folder
    for folder in linked:
        folder.unlink()
        folder.mkdir()
    assert run_cli("doctor", cwd=ws).stdout.startswith("ok: ")


def test_doctor_says_when_packing_has_not_kept_up_and_git_gc_clears_it(tmp_path: Path) -> None:
    """Packing never fails a step, so a repository it stopped on only grows: doctor
    names the backlog and `git gc`."""
    ws = make(tmp_path)
    objects = ws / ".git" / "objects"
    repo = GitRepo(ws)
    for n in range(3000):  # what packing that stopped leaves after a few hundred steps
        repo.objects.add_raw(Blob.type_num, b"%d\n" % n)
    repo.close()
    done = run_cli("doctor", cwd=ws, check=False)
    assert done.returncode == 1
    assert "loose objects" in done.stdout and "`git gc`" in done.stdout
    assert str(objects) in done.stdout
    git(ws, "gc", "-q", "--prune=now")
    assert run_cli("doctor", cwd=ws).stdout.startswith("ok: ")
    assert_git_clean(ws)


def test_doctor_names_a_main_path_that_leads_to_a_missing_file(tmp_path: Path) -> None:
    """What `show` and `run` refuse, doctor names: a file deleted by hand, with the
    command that restores it, as the run names it; `show`, which commits nothing, with
    the command that finds it."""
    ws = make(tmp_path)
    _, user, answer = message_files(ws, "good")
    user.unlink()  # the answer's parent
    done = run_cli("doctor", cwd=ws, check=False)
    assert done.returncode == 1
    [line] = done.stdout.splitlines()
    needs = f"the main path needs message #2 (parent of {answer.name})"
    assert needs in line and f"`git checkout HEAD -- {user.relative_to(ws).as_posix()}`" in line
    refused = run_cli("show", "good", cwd=ws, check=False)
    assert refused.returncode == 1 and needs in refused.stderr
    listed = refused.stderr.split("`")[1]
    assert listed.startswith("git ls-files --deleted ")
    assert git(ws, *listed.split()[1:]).strip() == user.relative_to(ws).as_posix()


FOLDER = "traces/demo/messages/000000-000999"


def _drop_first_line(path: Path) -> None:
    path.write_text(path.read_text().split("\n", 1)[1])


@pytest.mark.parametrize(("edit", "said"), [
    # the first `---` deleted: the fields would become the text (calls or none)
    (lambda ws: _drop_first_line(ws / FOLDER / "000003-assistant.md"),
     "000003-assistant.md: the file no longer starts with its frontmatter's `---` line"),
    (lambda ws: _drop_first_line(ws / FOLDER / "000012-assistant.md"),
     "000012-assistant.md: the file no longer starts with its frontmatter's `---` line"),
    (lambda ws: (ws / FOLDER / "000012-assistant.md").write_text(
        "\n" + (ws / FOLDER / "000012-assistant.md").read_text()),
     "000012-assistant.md: the file no longer starts with its frontmatter's `---` line"),
    (lambda ws: (ws / FOLDER / "000012-assistant.md").write_text(
        "Edited: by me\n" + (ws / FOLDER / "000012-assistant.md").read_text()),
     "000012-assistant.md: the file no longer starts with its frontmatter's `---` line"),
    (lambda ws: (ws / FOLDER / "000007-tool.md").write_text(""),
     "000007-tool.md: the edit changes which tool call the result answers"),
    (lambda ws: (ws / "traces/demo/trace.json").write_text(
        (ws / "traces/demo/trace.json").read_text().replace('"head": 12', '"head": 10')),
     "message #10 asks for tool call(s) goal that agentfs did not just receive from the model as they stand"),
    (lambda ws: (ws / "traces/demo/trace.json").unlink(),
     "no trace.json"),
    (lambda ws: (ws / FOLDER / "000013-tool.md").write_text(
        "---\nrole: tool\ntool_call_id: nowhere\n---\nresult\n"),
     "000013-tool.md: a tool result for call 'nowhere', which no tool call waiting"),
], ids=["lost-fence-calls", "lost-fence-answer", "line-before-fence", "text-before-fence",
        "emptied-result",
        "head-on-calls", "trace-json-gone", "result-of-no-call"])
def test_doctor_reports_what_the_next_run_refuses(tmp_path: Path, edit, said) -> None:
    """doctor's dry run of the checks a run makes before it goes on: the edit compared
    with its commit, the calls at the head, a trace folder without trace.json."""
    ws = tmp_path / "demo"
    run_cli("demo", str(ws), cwd=tmp_path)
    edit(ws)
    found = run_cli("doctor", cwd=ws, check=False)
    assert found.returncode == 1 and said in found.stdout, found.stdout
    fix = ("--pending-tools run" if "asks for tool call" in said
           else "`rm -- traces/" if "a tool result for" in said
           else "`git checkout -- traces/" if "no trace.json" in said
           else "`git checkout HEAD -- traces/")
    assert fix in found.stdout  # a command to run, as given
    refused = run_cli("run", "demo", "-m", "go on", cwd=ws, check=False)
    assert refused.returncode == 1 and said in refused.stderr, refused.stderr


@pytest.mark.parametrize("edit", [
    lambda ws: (ws / "traces/demo/approval.json").write_text("{ not json"),
    lambda ws: (ws / "traces/demo/goals.json").write_text("{ not json"),
    lambda ws: (ws / FOLDER / "000008-assistant.md").unlink(),
], ids=["new-approval-json", "goals-json", "deleted-message"])
def test_doctor_names_an_edit_that_breaks_a_file_as_the_run_refuses_it(tmp_path: Path,
                                                                        edit) -> None:
    """An uncommitted edit of a file doctor also reads is reported once, in the run's
    words, and the commands named undo it (for a file never committed, `rm`, not
    `git checkout`)."""
    ws = tmp_path / "demo"
    run_cli("demo", str(ws), cwd=tmp_path)
    edit(ws)
    found = run_cli("doctor", cwd=ws, check=False)
    assert found.returncode == 1
    [line] = found.stdout.splitlines()
    refused = run_cli("run", "demo", "-m", "go on", cwd=ws, check=False)
    assert refused.returncode == 1
    assert line.replace("the next run refuses your changes under traces/demo",
                        "your changes under traces/demo were not committed") in refused.stderr
    for command in [c for c in line.split("`")[1::2] if c.startswith(("git ", "rm "))]:
        subprocess.run(command.split(), cwd=ws, check=True, capture_output=True)
    assert run_cli("doctor", cwd=ws).stdout.startswith("ok: ")
    assert_git_clean(ws)


def test_the_undo_hint_of_a_refused_edit_runs_as_given(tmp_path: Path) -> None:
    """A committed file is checked out again and a new one removed, by the commands the
    refusal names (a role changed by renaming the file)."""
    ws = tmp_path / "demo"
    run_cli("demo", str(ws), cwd=tmp_path)
    answer = ws / FOLDER / "000012-assistant.md"
    renamed = answer.with_name("000012-user.md")
    renamed.write_text(answer.read_text().replace("role: assistant", "role: user"))
    answer.unlink()
    assert _undo_as_given(ws) == [
        "git checkout HEAD -- traces/demo/messages/000000-000999/000012-assistant.md",
        "rm -- traces/demo/messages/000000-000999/000012-user.md"]
    assert_git_clean(ws)
    run_cli("run", "demo", "-m", "go on", cwd=ws)


def _undo_as_given(ws: Path) -> list[str]:
    """The commands the run's refusal names, each run as given (they must work)."""
    refused = run_cli("run", "demo", "-m", "go on", cwd=ws, check=False)
    assert refused.returncode == 1, refused.stderr
    commands = [c for c in refused.stderr.split("`")[1::2] if c.startswith(("git ", "rm "))]
    for command in commands:
        subprocess.run(command.split(), cwd=ws, check=True, capture_output=True)
    return commands


def test_the_undo_hint_of_a_staged_rename_runs_as_given(tmp_path: Path) -> None:
    """`git mv` stages the change: `git checkout -- FILE` would be refused for the old
    name (the index no longer has it), and `rm` would leave the new one staged."""
    ws = tmp_path / "demo"
    run_cli("demo", str(ws), cwd=tmp_path)
    git(ws, "mv", f"{FOLDER}/000012-assistant.md", f"{FOLDER}/000013-assistant.md")
    moved = ws / FOLDER / "000013-assistant.md"
    moved.write_text(moved.read_text().replace("sequence: 12", "sequence: 13"))
    assert _undo_as_given(ws) == [
        "git checkout HEAD -- traces/demo/messages/000000-000999/000012-assistant.md",
        "git rm -qf -- traces/demo/messages/000000-000999/000013-assistant.md"]
    assert run_cli("doctor", cwd=ws).stdout.startswith("ok: ")
    assert_git_clean(ws)


def test_a_git_revert_stopped_on_a_conflict_is_named_with_its_abort(tmp_path: Path) -> None:
    """A revert of an older step stops on trace.json; the refusal says how to abort
    it, and its checkout works on the unmerged file, where `git checkout --` does not."""
    ws = tmp_path / "demo"
    run_cli("demo", str(ws), cwd=tmp_path)
    run_cli("run", "demo", "-m", "once more", cwd=ws)
    step = git(ws, "log", "--format=%H", "--grep", "demo: user #13").split()[0]
    reverted = subprocess.run(["git", "revert", "--no-edit", step], cwd=ws, check=False,
                              capture_output=True, text=True)
    assert reverted.returncode != 0 and "traces/demo/trace.json" in git(
        ws, "diff", "--name-only", "--diff-filter=U")
    refused = run_cli("run", "demo", cwd=ws, check=False)
    assert refused.returncode == 1
    assert "`git revert --abort` undoes the unfinished `revert`, or fix" in refused.stderr
    assert "restore it with `git checkout HEAD -- traces/demo/trace.json`" in refused.stderr
    git(ws, "revert", "--abort")
    assert run_cli("doctor", cwd=ws).stdout.startswith("ok: ")
    assert_git_clean(ws)


def test_a_count_of_turns_edited_by_hand_is_committed_as_the_files_count(tmp_path: Path) -> None:
    ws = tmp_path / "demo"
    run_cli("demo", str(ws), cwd=tmp_path)
    meta = ws / "traces/demo/trace.json"
    committed = json.loads(meta.read_text())["iterations"]
    meta.write_text(meta.read_text().replace(f'"iterations": {committed}', '"iterations": 2'))
    head = git(ws, "rev-parse", "HEAD").strip()
    assert run_cli("doctor", cwd=ws).returncode == 0
    run_cli("run", "demo", "-m", "go on", cwd=ws)
    kinds = git(ws, "log", "--format=%(trailers:key=Agentfs-Kind,valueonly)", f"{head}..")
    assert "edit" not in kinds.split()  # the edit undone by the count: nothing to commit
    assert json.loads(meta.read_text())["iterations"] == committed + 1
    assert run_cli("doctor", cwd=ws).returncode == 0
