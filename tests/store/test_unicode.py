"""Text that UTF-8 cannot hold (lone surrogates: JSON's `\\ud800` escapes, bytes of names
that are not UTF-8) at the doors where people and clones bring it: refused, naming
the file, before anything is committed; never a traceback, never a stuck trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentfs.server.events import sse
from agentfs.store.messages import MessageFileError, parse_message
from agentfs.store.unicode import load_json, shown, valid_unicode
from tests.conftest import assert_git_clean, git, replay_workspace, run_cli

SCRIPT = {"turns": [{"text": "first answer"}, {"text": "second answer"},
                    {"text": "third answer"}]}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """Trace t: #1 system, #2 user, #3 the first answer."""
    root = replay_workspace(tmp_path / "ws", SCRIPT)
    run_cli("run", "t", "-m", "hello", cwd=root)
    return root


def test_lone_surrogates_are_found_replaced_and_shown():
    assert valid_unicode("caf\udce9 \ud83d\ude00") == "caf\ufffd \U0001f600"  # a pair joins
    data = {"k": ["ok", 1]}
    assert valid_unicode(data) is data  # nothing to change: the same object
    assert load_json('{"a": "\\ud83d\\ude00", "b": "\\\\ud800"}') == {
        "a": "\U0001f600", "b": "\\ud800"}  # a pair, and an escaped backslash, are text
    with pytest.raises(json.JSONDecodeError, match="lone surrogate escape.*column 15"):
        load_json(b'{"content": "a\\ud800b"}')
    assert load_json(b'\xef\xbb\xbf{"a": 1}') == {"a": 1}  # an editor's byte order mark
    assert shown("caf\udce9 \ud800 a\\b") == "caf\\xe9 \\ud800 a\\\\b"
    event = sse("rejected", {"file": "caf\udce9.md"})  # a name that is not UTF-8
    assert json.loads(event.decode().split("data: ", 1)[1]) == {"file": "caf\udce9.md"}


def test_a_json_message_file_holding_a_lone_surrogate_escape_is_refused_naming_it():
    with pytest.raises(MessageFileError, match=r"000006-user\.json: invalid JSON at line 1 "
                       "column 15: a lone surrogate escape"):
        parse_message(Path("000006-user.json"), b'{"content": "a\\ud800b"}\n')
    fine = parse_message(Path("000006-user.json"), b'{"content": "\\ud83d\\ude00"}\n')
    assert fine.content == "\U0001f600"


def test_dropped_files_with_such_text_or_a_name_that_is_not_utf8_are_put_aside_once(ws):
    inbox = ws / "traces" / "t" / "inbox"
    (inbox / "escape.json").write_text('{"content": "a\\ud800b"}')
    (inbox / "caf\udce9.md").write_text("a name in Latin-1\n")
    (inbox / "fine.md").write_text("a good one\n")
    run_cli("run", "t", cwd=ws)
    rejected = inbox / ".rejected"
    assert sorted(p.name for p in rejected.iterdir() if not p.name.startswith(".")) == sorted(
        ["escape.json", "escape.json.reason.txt", "caf\udce9.md", "caf\udce9.md.reason.txt"])
    assert (rejected / "caf\udce9.md.reason.txt").read_text() == (
        "caf\\xe9.md was not taken as a message: its name is not valid UTF-8 "
        "(save it under a name in UTF-8)\n")
    assert "a lone surrogate escape (\\ud800 to \\udfff) is not valid" in (  # not doubled
        rejected / "escape.json.reason.txt").read_text()
    shown_messages = json.loads(run_cli("show", "t", "--json", cwd=ws).stdout)["messages"]
    assert [m["text"] for m in shown_messages[-2:]] == ["a good one", "second answer"]
    assert_git_clean(ws)

    (ws / "inbox" / "caf\udce9.md").write_text("a new trace's, in Latin-1\n")
    run_cli("watch", "--once", "--settle", "0", cwd=ws)
    assert (ws / "inbox" / ".rejected" / "caf\udce9.md.reason.txt").exists()
    assert run_cli("status", cwd=ws).stdout.startswith("t ")  # no trace made of it
    assert_git_clean(ws)


@pytest.mark.parametrize("name", ["trace.json", "approval.json"])
def test_a_trace_file_edited_to_hold_a_lone_surrogate_escape_is_refused_before_a_commit(
        ws, name):
    path = ws / "traces" / "t" / name
    if name == "approval.json":
        path.write_text(json.dumps({"call_id": "c1", "tool": "write_file", "sequence": 3,
                                    "input": {}, "answer": None}))
        git(ws, "add", "-A")
        git(ws, "commit", "-qm", "a call waits")
    text = path.read_text()
    path.write_text(text.replace('"write_file"', '"write\\ud800"') if name == "approval.json"
                    else text.replace('"preset": null', '"preset": "p\\ud800"'))
    head = git(ws, "rev-parse", "HEAD")
    commands = [["approve", "t"]] if name == "approval.json" else [["run", "t", "-m", "more"]]
    for args in [*commands, ["doctor"]]:
        done = run_cli(*args, cwd=ws, check=False)
        assert done.returncode == 1
        assert f"traces/t/{name}: not valid JSON (a lone surrogate escape" in done.stderr + done.stdout
    assert git(ws, "rev-parse", "HEAD") == head
    git(ws, "checkout", "--", f"traces/t/{name}")
    assert_git_clean(ws)


def test_a_model_name_that_is_not_utf8_or_not_a_model_is_refused_before_a_trace_is_made(ws):
    for model, words in (("anthropic:claude\udcff", "is not valid UTF-8"),
                         ("nope", "is not PROVIDER:NAME")):
        done = run_cli("new", "u", "-m", "hi", "--model", model, cwd=ws, check=False)
        assert done.returncode == 1 and words in done.stderr
        assert not (ws / "traces" / "u").exists()
    done = run_cli("run", "t", "-m", "x", "--model", "anthropic:claude\udcff", cwd=ws,
                   check=False)
    assert done.returncode == 1 and "is not valid UTF-8" in done.stderr  # not retried
    assert_git_clean(ws)


def test_a_message_file_written_by_hand_after_the_last_is_answered_by_the_next_run(ws):
    written = ws / "traces/t/messages/000000-000999/000004-user.md"
    written.write_text("and now?\n")
    assert "second answer" in run_cli("run", "t", cwd=ws).stdout
    shown_messages = json.loads(run_cli("show", "t", "--json", cwd=ws).stdout)["messages"]
    assert [m["text"] for m in shown_messages[-2:]] == ["and now?", "second answer"]
    assert_git_clean(ws)
    # one committed with git is not adopted: the run still finds nothing to do, and
    # says so without looking for a model (the default needs an API key)
    later = written.with_name("000006-user.md")
    later.write_text("committed by hand\n")
    git(ws, "add", "-A")
    git(ws, "commit", "-qm", "a message by git")
    (ws / "agentfs.toml").write_text((ws / "agentfs.toml").read_text().replace(
        'model = "replay:script.json"', 'model = "anthropic:claude-sonnet-4-5"'))
    git(ws, "commit", "-qam", "the default model")
    done = run_cli("run", "t", cwd=ws, env={"ANTHROPIC_API_KEY": ""})
    assert "waiting for a user message" in done.stderr
