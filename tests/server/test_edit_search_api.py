"""Editing a message in place, its versions, and search, over real HTTP; `agentfs
search` on the command line."""

from __future__ import annotations

import json

import pytest

from tests.conftest import assert_git_clean, git, run_cli
from tests.server.conftest import Served

pytestmark = pytest.mark.timeout(180)


def test_an_edit_is_committed_as_a_hand_edit_and_its_versions_compare(served: Served):
    root = served.root
    run_cli("new", "t", "-m", "Read notes.md please", cwd=root)
    run_cli("run", "t", cwd=root)  # 3 assistant (call), 4 tool, 5 answer
    path = root / "traces/t/messages/000000-000999/000002-user.md"
    header = path.read_text().partition("---\n")[2].partition("---\n")[0]
    with served.client() as client:
        never = client.get("/api/traces/t/messages/2/versions").json()
        assert never == {"trace": "t", "sequence": 2, "edited": False, "versions": [],
                         "file": "traces/t/messages/000000-000999/000002-user.md"}

        edited = client.put("/api/traces/t/messages/2", json={"text": "Read notes.md twice"})
        assert edited.status_code == 200, edited.text
        assert edited.json() == {"trace": "t", "sequence": 2, "committed": True,
                                 "file": "traces/t/messages/000000-000999/000002-user.md"}
        # the frontmatter is kept byte for byte, the body replaced: what an editor does
        assert path.read_text() == f"---\n{header}---\nRead notes.md twice\n"
        assert git(root, "log", "-1", "--format=%s").strip() == (
            "t: edit #5 messages/000000-000999/000002-user.md")
        assert "Agentfs-Kind: edit" in git(root, "log", "-1", "--format=%b")

        again = client.put("/api/traces/t/messages/2", json={"text": "Read notes.md twice"})
        assert again.json()["committed"] is False  # the same text: nothing to commit

        path.write_text(path.read_text().replace("twice", "three times"))  # by hand
        shown = client.get("/api/traces/t/messages/2/versions").json()
        # a hand edit not committed yet is not a version; the page's edit commits it first
        assert [v["text"] for v in shown["versions"]] == ["Read notes.md twice",
                                                          "Read notes.md please"]
        client.put("/api/traces/t/messages/2", json={"text": "Read notes.md, then answer"})
        shown = client.get("/api/traces/t/messages/2/versions").json()
        assert shown["edited"] is True
        assert [(v["kind"], v["text"]) for v in shown["versions"]] == [
            ("edit", "Read notes.md, then answer"), ("edit", "Read notes.md three times"),
            ("edit", "Read notes.md twice"), ("before", "Read notes.md please")]
        newest = shown["versions"][0]
        assert "-Read notes.md three times\n+Read notes.md, then answer\n" in newest["diff"]
        assert "diff" not in shown["versions"][-1]  # the oldest has nothing before it
        assert git(root, "log", "-2", "--format=%s").split("\n")[:2] == [
            "t: edit #5 messages/000000-000999/000002-user.md"] * 2

        shown = client.get("/api/traces/t/messages").json()["messages"]
        assert shown[1]["text"] == "Read notes.md, then answer"  # what the model sees next
    assert_git_clean(root)


def test_a_refused_edit_leaves_the_file_and_history_as_they_were(served: Served):
    root = served.root
    run_cli("new", "t", "-m", "hello", cwd=root)
    path = root / "traces/t/messages/000000-000999/000002-user.md"
    before, log = path.read_bytes(), git(root, "log", "--format=%H")
    with served.client() as client:
        # text that makes the file unreadable: the hand edit's refusal, nothing committed
        refused = client.put("/api/traces/t/messages/2", json={"text": "a\x00b"})
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"] == (
            f"{path}: binary file (contains NUL bytes)")
        assert path.read_bytes() == before
        assert git(root, "log", "--format=%H") == log


        # a file a person wrote without frontmatter: text that would give it tool calls
        # changes what the message is, and is refused as that hand edit would be
        path.write_text("hello, by hand\n")
        calls = "---\ntool_calls: [{id: c1, name: read_file, input: {}}]\n---\nhi"
        refused = client.put("/api/traces/t/messages/2", json={"text": calls})
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"] == (
            "traces/t/messages/000000-000999/000002-user.md: the edit changes the message's "
            "tool calls (0 before, 1 now; a lost frontmatter `---` line does this); your "
            "changes under traces/t were not committed")
        assert refused.json()["hint"] == (
            "traces/t/messages/000000-000999/000002-user.md has its text of before again; "
            "send another text")
        assert path.read_text() == "hello, by hand\n"  # put back; the person's edit is
        assert git(root, "log", "-1", "--format=%s").strip() == (  # committed before it
            "t: edit #2 messages/000000-000999/000002-user.md")

        missing = client.put("/api/traces/t/messages/99", json={"text": "x"})
        assert missing.status_code == 404
        assert "has no message #99" in missing.json()["error"]
        assert client.put("/api/traces/t/messages/2", json={}).status_code == 422
    assert_git_clean(root)


def test_search_finds_messages_across_traces_bounded(served: Served):
    root = served.root
    run_cli("new", "a", "-m", "Where are the Notes?", cwd=root)
    run_cli("new", "b", "-m", "notes and more notes", cwd=root)
    run_cli("new", "c", "-m", "nothing here", cwd=root)
    with served.client() as client:
        found = client.get("/api/search", params={"q": "NOTES"}).json()
        assert [(h["trace"], h["sequence"], h["role"], h["on_path"]) for h in found["hits"]] == [
            ("a", 2, "user", True), ("b", 2, "user", True)]
        assert found["hits"][0]["excerpt"] == "Where are the Notes?"
        assert found["more"] is False and found["unreadable"] == {}

        cut = client.get("/api/search", params={"q": "notes", "limit": 1}).json()
        assert len(cut["hits"]) == 1 and cut["more"] is True
        both = client.get("/api/search", params={"q": "more notes"}).json()
        assert [h["trace"] for h in both["hits"]] == ["b"]  # every word must be there
        assert client.get("/api/search", params={"q": "  "}).status_code == 422
        assert client.get("/api/search", params={"q": "x", "limit": 0}).status_code == 422

    shown = run_cli("search", "notes", cwd=root)
    assert shown.stdout.splitlines() == ["a#2 user: Where are the Notes?",
                                         "b#2 user: notes and more notes"]
    as_json = json.loads(run_cli("search", "notes", "--json", "-n", "1", cwd=root).stdout)
    assert as_json["more"] is True and as_json["hits"][0]["trace"] == "a"
    none = run_cli("search", "absent", cwd=root, check=False)
    assert none.returncode == 1 and "no message holds 'absent'" in none.stderr
