"""Paged views of a trace (issue 23): `/messages` and `/tree` with `limit` and `before`,
and `agentfs show --tail/--from`, over a real `agentfs serve` and the real CLI."""

from __future__ import annotations

import json

import pytest

from agentfs.core.project import Project
from tests.conftest import long_trace, run_cli
from tests.server.conftest import Served, compressed_and_rewound

pytestmark = pytest.mark.timeout(180)


def sequences(records: list[dict]) -> list[int]:
    return [m["sequence"] for m in records]


def test_tree_pages_hold_the_path_and_what_hangs_from_it_once(served: Served):
    compressed_and_rewound(served.root)  # path 1, 2, 12; 3-9 replaced; 6-7, 13-14 off
    with served.client() as client:
        whole = client.get("/api/traces/t/tree").json()
        tail = client.get("/api/traces/t/tree", params={"limit": 2}).json()
        first = client.get("/api/traces/t/tree", params={"limit": 2, "before": 2}).json()
    assert "older" not in whole  # without limit: as it always was
    assert tail["path"] == [2, 12] and tail["older"] == 2
    assert sequences(tail["messages"]) == [2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 14]
    [branch] = tail["branches"]  # the compression continued #9, which this page holds
    assert branch["from_sequence"] == 9
    assert first["path"] == [1] and first["older"] is None and first["branches"] == []
    assert sequences(first["messages"]) == [1]
    # the two pages together are the whole tree, each message once, marked alike
    assert sorted(first["messages"] + tail["messages"], key=lambda m: m["sequence"]) \
        == whole["messages"]
    for key in ("head", "usage", "goals", "running", "approval"):
        assert tail[key] == whole[key]


def test_messages_pages_walk_back_to_the_first_message(served: Served):
    long_trace(Project.open(served.root), "t", 250, commit=True)
    with served.client() as client:
        whole = client.get("/api/traces/t/messages").json()
        pages, before = [], None
        while True:
            params = {"limit": 100} if before is None else {"limit": 100, "before": before}
            page = client.get("/api/traces/t/messages", params=params).json()
            pages.insert(0, page)
            before = page["older"]
            if before is None:
                break
    assert [sequences(p["messages"]) for p in pages] == [
        list(range(1, 51)), list(range(51, 151)), list(range(151, 251))]
    assert [p["older"] for p in pages] == [None, 51, 151]
    assert [m for p in pages for m in p["messages"]] == whole["messages"]
    # the command line prints the same page
    cli = json.loads(run_cli("show", "t", "--tail", "100", "--json", cwd=served.root).stdout)
    assert cli == pages[-1]
    text = run_cli("show", "t", "--from", "248", cwd=served.root).stdout
    assert "#248 user" in text and "#250 user" in text and "#247" not in text
    assert text.startswith("… (the main path goes on before #248)")
    past = run_cli("show", "t", "--from", "999", cwd=served.root).stdout
    assert "(no message of the main path from #999 on: its head is #250)" in past


def test_bad_page_values_are_422_with_a_hint(served: Served):
    run_cli("new", "t", "-m", "hi", cwd=served.root)
    with served.client() as client:
        for route in ("messages", "tree"):
            for params, words in [
                ({"limit": 0}, "limit must be from 1 to 1000"),
                ({"limit": 5000}, "limit must be from 1 to 1000"),
                ({"limit": "many"}, "limit"),
                ({"before": 2}, "before needs limit"),
                ({"limit": 10, "before": -1}, "before must be a message's sequence"),
                ({"limit": 10, "before": 99}, "no message #99"),
            ]:
                response = client.get(f"/api/traces/t/{route}", params=params)
                assert response.status_code == 422, (route, params, response.text)
                body = response.json()
                assert words in body["error"] and body["hint"], (route, params, body)


def test_tree_pages_fold_long_runs_off_the_path_and_read_them_on_demand(served: Served):
    long_trace(Project.open(served.root), "t", 80, parents={30: 2}, commit=True)  # 3-29 off
    run_cli("rewind", "t", "55", cwd=served.root)  # 56-80 off the path too
    with served.client() as client:
        whole = client.get("/api/traces/t/tree").json()
        tail = client.get("/api/traces/t/tree", params={"limit": 100}).json()
        messages = client.get("/api/traces/t/messages",
                              params={"limit": 100, "all": True}).json()
        pages, at = [], 3
        while at is not None:
            page = client.get("/api/traces/t/tree",
                              params={"first": at, "end": 30, "limit": 10}).json()
            pages.append(page)
            at = page["next"]
        after_head = client.get("/api/traces/t/tree",
                                params={"first": 56, "limit": 100}).json()
        bad = [client.get("/api/traces/t/tree", params=params) for params in (
            {"first": 3}, {"end": 30, "limit": 10}, {"first": 3, "limit": 10, "before": 9},
            {"first": 30, "end": 3, "limit": 10}, {"first": 3, "limit": 5000})]
    assert "folds" not in whole  # without limit: as it always was
    assert tail["path"] == [1, 2, *range(30, 56)] and tail["older"] is None
    assert tail["folds"] == [
        {"after": 2, "before": 30, "first": 3, "last": 29, "count": 27},
        {"after": 55, "before": None, "first": 56, "last": 80, "count": 25}]
    assert sequences(tail["messages"]) == tail["path"]  # the folded ones are left out
    assert messages["folds"] == tail["folds"] and messages["messages"] == [
        {k: v for k, v in m.items() if k not in ("parent", "source_branch", "replaced_by")}
        for m in tail["messages"]]
    # the fold's pages hold its messages once each, as the whole tree has them
    assert [sequences(p["messages"]) for p in pages] == [
        list(range(3, 13)), list(range(13, 23)), list(range(23, 30))]
    assert [p["next"] for p in pages] == [13, 23, None]
    by_sequence = {m["sequence"]: m for m in whole["messages"]}
    assert [m for p in pages for m in p["messages"]] == [by_sequence[s] for s in range(3, 30)]
    assert sequences(after_head["messages"]) == list(range(56, 81))
    for response in bad:
        assert response.status_code == 422 and response.json()["hint"], response.text
    # the command line says what its page left out
    cli = json.loads(run_cli("show", "t", "--tail", "100", "--all", "--json",
                             cwd=served.root).stdout)
    assert cli["folds"] == tail["folds"]
    text = run_cli("show", "t", "--tail", "100", "--all", cwd=served.root).stdout
    assert "… 27 messages off the path left out, #3 to #29" in text
