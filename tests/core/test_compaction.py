"""Level 1 compression: what is kept, what goes, and that requests stay valid."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from agentfs.core.compaction import CLEARED, compress_completed_goals, compress_goal
from agentfs.core.goals import Goal, GoalTree
from agentfs.core.runner import Runner
from agentfs.models.anthropic_messages import to_api_messages
from agentfs.models.replay import ReplayModel
from agentfs.store.message_dir import message_relpath
from agentfs.store.messages import Message, ToolCall
from agentfs.testing import check_request
from tests.conftest import git, run_cli


class Builder:
    """Builds a message list: user turns, assistant turns with their results."""

    def __init__(self) -> None:
        self.messages: list[Message] = []

    def _add(self, role: str, content: str = "", **fields) -> Message:
        n = len(self.messages) + 2
        message = Message(id=f"m{n}", sequence=n, role=role, content=content, **fields)
        self.messages.append(message)
        return message

    def user(self, text: str, goal: str | None = None) -> None:
        self._add("user", text, goal_id=goal)

    def turn(self, goal: str | None, *calls: tuple[str, dict], text: str = "") -> None:
        n = len(self.messages)
        tool_calls = [ToolCall(id=f"c{n}_{i}", name=name, input=args)
                      for i, (name, args) in enumerate(calls)]
        self._add("assistant", text, goal_id=goal, tool_calls=tool_calls or None)
        for call in tool_calls:
            self._add("tool", f"result of {call.name}", tool_call_id=call.id, goal_id=goal)


def request_body(messages: list[Message]) -> dict:
    return {"model": "m", "max_tokens": 10, "messages": to_api_messages(messages),
            "tools": [{"name": n, "description": "", "input_schema": {"type": "object"}}
                      for n in ("goal", "read_file", "grep")]}


def test_finished_goal_keeps_goal_calls_and_clears_the_done_result():
    b = Builder()
    b.user("build it")
    b.turn(None, ("goal", {"add": "Research"}))
    b.turn("1", ("read_file", {"path": "a"}), ("grep", {"pattern": "x"}))
    b.turn("1", text="thinking aloud")
    b.turn("1", ("goal", {"done": "1", "summary": "found it"}), ("read_file", {"path": "b"}))
    b.user("next")

    out = compress_goal(b.messages, "1")

    texts = [(m.role, m.text) for m in out]
    assert ("assistant", "thinking aloud") not in texts
    assert not any(m.tool_calls and m.tool_calls[0].name == "grep" for m in out)
    done_result = next(m for m in out if m.role == "tool" and m.tool_call_id.endswith("_0")
                       and m.sequence > 8)
    assert done_result.text == CLEARED
    assert any(m.text == "result of read_file" for m in out)  # same turn as done: kept
    assert check_request(request_body(out)) == []
    assert b.messages[-3].text == "result of goal"  # the stored messages are untouched


def test_the_latest_turn_is_never_cut():
    b = Builder()
    b.user("go")
    b.turn("1", ("read_file", {"path": "a"}))
    assert compress_goal(b.messages, "1") == b.messages


def test_on_overflow_stops_once_it_fits():
    b = Builder()
    b.user("go")
    for goal in ("1", "2"):
        b.turn(goal, ("read_file", {"path": goal * 200}))
        b.turn(goal, ("goal", {"done": goal}))
    b.user("more")
    tree = GoalTree(goals=[Goal(id="1", title="a", status="done"),
                           Goal(id="2", title="b", status="done")])
    everything = compress_completed_goals(b.messages, tree)
    first_only = compress_completed_goals(b.messages, tree, enough=lambda ms: True)
    assert len(everything) < len(first_only) < len(b.messages)


@st.composite
def histories(draw):
    b = Builder()
    b.user("start")
    goals = ["1", "2", "3"]
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["work", "goal", "mixed", "text", "user"]))
        goal = draw(st.sampled_from([None, *goals]))
        if kind == "user":
            b.user("more", goal)
        elif kind == "text":
            b.turn(goal, text="note")
        elif kind == "work":
            b.turn(goal, *[("read_file", {"path": "x"})] * draw(st.integers(1, 3)))
        elif kind == "goal":
            b.turn(goal, ("goal", {draw(st.sampled_from(["done", "abandon", "focus"])):
                                   draw(st.sampled_from(goals))}))
        else:
            b.turn(goal, ("goal", {"done": draw(st.sampled_from(goals))}), ("grep", {}))
    b.user("end")
    finished = draw(st.lists(st.sampled_from(goals), unique=True))
    tree = GoalTree(goals=[Goal(id=g, title=g, status="done" if g in finished else "open")
                           for g in goals])
    return b.messages, tree


@settings(max_examples=200, deadline=None)
@given(histories())
def test_compressed_requests_are_always_valid(history):
    messages, tree = history
    out = compress_completed_goals(messages, tree)
    assert check_request(request_body(out)) == []
    assert [m.role for m in out if m.role == "user"] == [m.role for m in messages
                                                         if m.role == "user"]
    kept_calls = {c.id for m in out for c in m.tool_calls or []}
    assert {m.tool_call_id for m in out if m.role == "tool"} == kept_calls


def test_runner_compresses_what_it_sends_and_show_as_sent_agrees(workspace, write_script):
    big = "x " * 600
    script = write_script([
        {"tool_calls": [{"name": "goal", "input": {"add": "Read"}}]},
        {"tool_calls": [{"name": "write_file", "input": {"path": "big.txt", "content": big}}]},
        {"tool_calls": [{"name": "read_file", "input": {"path": "big.txt"}}]},
        {"tool_calls": [{"name": "goal", "input": {"done": "1", "summary": "read it"}}]},
        {"text": "summary written"},
        {"text": "second answer"},
    ])
    run_cli("run", "t", "-m", "read big.txt", "--model", f"replay:{script}", cwd=workspace)
    config = workspace / "agentfs.toml"  # now make the window small: Level 1 must act
    config.write_text(config.read_text() + "\ncontext_window = 1000\n"
                      "compression_threshold = 1.0\n")
    git(workspace, "commit", "-qam", "small window")
    from agentfs.core.project import Project

    project = Project.open(workspace)
    stored = project.trace("t").main_path()
    model = ReplayModel(script)
    request = Runner(project.workspace, project.repo, model, config=project.config).preview("t")
    sent_ids = {m.id for m in request.messages}
    dropped = [m for m in stored[1:] if m.id not in sent_ids]
    assert dropped and all(m.goal_id == "1" for m in dropped)
    assert not any(big.strip() in m.text for m in request.messages)
    assert any(m.text == CLEARED for m in request.messages)
    assert all((workspace / "traces/t/messages" / message_relpath(m.file_name())).exists() for m in dropped)

    as_sent = json.loads(run_cli("show", "t", "--json", "--as-sent", cwd=workspace).stdout)
    assert [m["id"] for m in as_sent["messages"][1:]] == [m.id for m in request.messages]
    full = json.loads(run_cli("show", "t", "--json", cwd=workspace).stdout)
    assert len(full["messages"]) > len(as_sent["messages"])
    assert check_request(request_body(request.messages)) == []


# --- with extended thinking ---------------------------------------------------------------


def test_the_current_tool_loop_starts_after_the_last_user_message_without_results():
    from agentfs.core.compaction import loop_start

    b = Builder()
    b.user("go")
    assert loop_start(b.messages) == 1  # a user message last: no loop yet
    b.turn(None, ("read_file", {"path": "a"}))
    b.user("a message dropped into the inbox")  # merges with the results: still the loop
    b.turn(None, ("grep", {"pattern": "x"}))
    assert loop_start(b.messages) == 1
    b.turn(None, text="done")
    b.user("next")
    b.user("and more")
    start = len(b.messages)
    b.turn(None, ("read_file", {"path": "b"}))
    assert loop_start(b.messages) == start
    assert loop_start([]) == 0


def test_without_thinking_keeps_the_order_of_the_other_blocks():
    from agentfs.core.compaction import without_thinking
    from agentfs.models.anthropic_messages import assistant_blocks

    call = ToolCall(id="c1", name="read_file", input={})
    message = Message(id="m", sequence=3, role="assistant", content="afterwards",
                      tool_calls=[call], thinking=[{"type": "thinking", "thinking": "t",
                                                    "signature": "s"}],
                      blocks=[{"thinking": 0}, {"tool_use": "c1"}, {"text": 10}])
    bare = without_thinking(message)
    assert [b["type"] for b in assistant_blocks(bare)] == ["tool_use", "text"]
    assert message.thinking is not None  # the stored message is untouched
    plain = Message(id="p", sequence=4, role="assistant", content="x")
    assert without_thinking(plain) is plain


def test_finished_within_compresses_only_goals_finished_in_the_messages():
    b = Builder()
    b.user("go")
    b.turn(None, ("goal", {"add": "A"}), ("goal", {"add": "B"}))
    b.turn("1", ("read_file", {"path": "a"}))
    b.turn("1", ("goal", {"done": "1", "summary": "a"}))
    b.turn("2", ("read_file", {"path": "b"}))
    b.turn(None, text="a pause")
    b.user("next")
    head = list(b.messages)
    b.turn("2", ("goal", {"done": "2", "summary": "b"}))  # finished after `head`
    tree = GoalTree(goals=[Goal(id="1", title="A", status="done"),
                           Goal(id="2", title="B", status="done")])
    compressed = compress_completed_goals(head, tree, finished_within=True)
    assert compressed == compress_goal(head, "1")  # goal 2 is left as it was
    assert compress_completed_goals(head, tree) != compressed
