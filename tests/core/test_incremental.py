"""What a run carries from step to step (main path, model-turn count, token sums) always
equals what is found from scratch: through tool steps, injections, Level 1 and Level 2
compression, rewinds, hand edits and dropped files."""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentfs.core.compaction import loop_start
from agentfs.core.prefix import PrefixMap, PrefixSums, shared_prefix
from agentfs.core.project import Project, init_workspace
from agentfs.core.request import RequestBuilder, is_model_turn
from agentfs.core.runner import Runner
from agentfs.core.tokens import TokenCounter
from agentfs.errors import AgentfsError
from agentfs.models.base import ModelRequest, ModelResponse
from agentfs.store import history
from agentfs.store.messages import Message, ToolCall
from agentfs.store.trace import Trace
from agentfs.testing import FunctionModel
from tests.conftest import assert_git_clean, user


def msg(n: int, text: str = "") -> Message:
    return Message(id=f"msg-{n:06d}", sequence=n, parent_sequence=n - 1 or None,
                   role="user", content=text or f"message {n}")


# --- PrefixSums, alone -----------------------------------------------------------

list_ops = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(1, 5)),
    st.tuples(st.just("truncate"), st.integers(0, 50)),
    st.tuples(st.just("copy"), st.integers(0, 50)),  # an equal copy of one message
    st.tuples(st.just("change"), st.integers(0, 50)),  # one message replaced by another
    st.tuples(st.just("switch"), st.integers(0, 5)),  # measure another list
), max_size=40)


@settings(max_examples=200, deadline=None)
@given(list_ops)
def test_prefix_sums_equal_the_sum_of_the_measure(ops):
    sums = PrefixSums(lambda m: len(m.text), keep=3)
    lists = [[msg(1)] for _ in range(6)]
    current = 0
    newest = 1
    for op, arg in ops:
        messages = lists[current]
        if op == "append":
            for _ in range(arg):
                newest += 1
                messages.append(msg(newest, "x" * (newest % 7)))
        elif op == "truncate":
            del messages[arg % (len(messages) + 1):]
        elif op == "copy" and messages:
            i = arg % len(messages)
            messages[i] = messages[i].model_copy()
        elif op == "change" and messages:
            i = arg % len(messages)
            messages[i] = messages[i].model_copy(update={"content": f"changed {arg}"})
        elif op == "switch":
            current = arg
        assert sums.total(lists[current]) == sum(len(m.text) for m in lists[current])


def test_shared_prefix_finds_the_first_difference():
    a = [msg(n) for n in range(1, 101)]
    for cut in (0, 1, 37, 99, 100):
        b = a[:cut] + [msg(1000)] + a[cut + 1:]
        assert shared_prefix(a, b) == min(cut, 100)
    assert shared_prefix(a, a[:40]) == 40


def test_prefix_map_reuses_the_results_for_the_shared_start():
    copies = []

    def copy(m: Message) -> Message:
        copies.append(m.sequence)
        return m.model_copy()

    mapped = PrefixMap(copy)
    first = [msg(n) for n in range(1, 11)]
    a = mapped(first)
    b = mapped([*first, msg(11)])
    assert copies == [*range(1, 11), 11]
    assert all(x is y for x, y in zip(a, b, strict=False))  # b: a, then one more
    changed = [*first[:5], msg(6, "other"), *first[6:]]
    assert [m.text for m in mapped(changed)] == [m.text for m in changed]
    assert copies[-5:] == [6, 7, 8, 9, 10]


def loop_start_forward(messages):
    """The earlier, forward-scanning definition of `loop_start`."""
    start = index = 0
    while index < len(messages):
        if messages[index].role == "assistant":
            index += 1
            continue
        end = index
        while end < len(messages) and messages[end].role != "assistant":
            end += 1
        if not any(m.role == "tool" for m in messages[index:end]):
            start = end
        index = end
    return start


@given(st.lists(st.sampled_from(["user", "assistant", "tool"]), max_size=30))
def test_loop_start_from_the_end_finds_what_the_forward_scan_found(roles):
    messages = [Message(id=f"m{i}", sequence=i + 1, role=r) for i, r in enumerate(roles)]
    assert loop_start(messages) == loop_start_forward(messages)


# --- a whole run, checked at every step -------------------------------------------


@contextlib.contextmanager
def checked():
    """Make every carried value be compared with the one found from scratch."""
    real_main_path, real_count, real_turns = Trace.main_path, Trace.count, Trace.model_turns
    real_bound, real_request = TokenCounter.upper_bound, TokenCounter.request
    real_conversation = RequestBuilder._conversation
    real_to_send = RequestBuilder._to_send
    calls = {"main_path": 0, "count": 0, "tokens": 0}

    def main_path(self, messages=None):
        got = real_main_path(self, messages)
        if messages is None:
            calls["main_path"] += 1
            expected = self.path_to(self.meta.head, self.messages())
            assert [m.sequence for m in got] == [m.sequence for m in expected]
            assert got == expected  # read one by one (MessageDir.lookup): equal, not shared
        return got

    def count(self, test):
        calls["count"] += 1
        got = real_count(self, test)
        assert got == sum(1 for m in self.messages().values() if test(m))
        return got

    def model_turns(self):  # kept with the summary: equal to a count over every file
        calls["count"] += 1
        got = real_turns(self)
        assert got == sum(1 for m in self.messages().values() if is_model_turn(m))
        return got

    def upper_bound(self, system, messages, tools):
        calls["tokens"] += 1
        got = real_bound(self, system, messages, tools)
        assert got == real_bound(TokenCounter(), system, messages, tools)
        return got

    def request(self, system, messages, tools):
        got = real_request(self, system, messages, tools)
        assert got == real_request(TokenCounter(), system, messages, tools)
        return got

    def conversation(self, path):
        got = real_conversation(self, path)
        assert got == [m for m in path if m.role != "system"]
        return got

    def to_send(self, trace, system, messages, tools):
        got = real_to_send(self, trace, system, messages, tools)
        fresh = RequestBuilder(self.config, self.model_name)
        assert got == real_to_send(fresh, trace, system, messages, tools)
        return got

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(RequestBuilder, "_to_send", to_send)
        patch.setattr(Trace, "main_path", main_path)
        patch.setattr(Trace, "count", count)
        patch.setattr(Trace, "model_turns", model_turns)
        patch.setattr(TokenCounter, "upper_bound", upper_bound)
        patch.setattr(TokenCounter, "request", request)
        patch.setattr(RequestBuilder, "_conversation", conversation)
        yield calls


def respond(request: ModelRequest) -> ModelResponse:
    """Goals added and finished (for Level 1), files written, an answer now and then."""
    if request.branch_type is not None:
        return ModelResponse(text=f"{request.branch_type} of {len(request.messages)} messages")
    turn = request.call_index
    if turn % 7 == 6:
        return ModelResponse(text=f"answer at {turn}")
    if turn % 7 == 0:
        call = ToolCall(id=f"toolu_{turn}", name="goal", input={"add": f"task {turn}"})
    elif turn % 7 == 4:
        call = ToolCall(id=f"toolu_{turn}", name="goal",
                        input={"done": str(turn // 7 + 1), "summary": "done"})
    else:
        call = ToolCall(id=f"toolu_{turn}", name="write_file",
                        input={"path": f"out/{turn}.txt", "content": "line\n" * turn})
    return ModelResponse(text=f"turn {turn}", tool_calls=[call])


operations = st.lists(
    st.one_of(
        st.tuples(st.just("run"), st.integers(1, 6)),
        st.tuples(st.just("user"), st.integers(0, 9)),
        st.tuples(st.just("compress"), st.just(0)),
        st.tuples(st.just("rewind"), st.integers(0, 1000)),
        st.tuples(st.just("edit"), st.integers(0, 1000)),
        st.tuples(st.just("drop"), st.integers(0, 9)),
    ),
    min_size=2,
    max_size=8,
)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations, st.sampled_from(["on_overflow", "on_complete", "none"]),
       st.sampled_from([3000, 1_000_000]), st.booleans())  # 3000: room for system + tools
def test_carried_state_equals_the_state_found_from_scratch(ops, level1, window, thinking):
    root = Path(tempfile.mkdtemp(prefix="agentfs-incr-"))
    try:
        init_workspace(root / "ws")
        project = Project.open(root / "ws")
        project.new_trace("t", user("start"))
        config = project.config.model_copy(update={
            "goal_compression": level1, "context_window": window, "settle": 0.0})
        config = config.with_thinking(1024 if thinking else None)
        runner = Runner(project.workspace, project.repo, FunctionModel(respond), config=config)
        with checked() as calls:
            for op, arg in ops:
                apply(project, runner, op, arg)
                trace = project.trace("t")
                assert trace.main_path()[0].sequence == 1
        assert calls["main_path"]
        if any(op not in ("compress", "rewind") for op, _ in ops):  # a model was called
            assert calls["count"] and calls["tokens"]
        assert_git_clean(project.workspace.root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def apply(project: Project, runner: Runner, op: str, arg: int) -> None:
    trace = project.trace("t")
    if op == "run":
        runner.run("t", max_iterations=arg, inject_skills=["agentfs-workspace"] if arg % 2 else ())
    elif op == "user":
        runner.run("t", [f"note {arg}"], max_iterations=1)
    elif op == "compress":
        with contextlib.suppress(AgentfsError):  # too short to compress
            runner.compress("t")
    elif op == "rewind":
        path = trace.main_path()
        with trace.lock(), contextlib.suppress(AgentfsError):  # calls left unanswered
            trace.rewind(path[max(1, arg % len(path))].sequence)
    elif op == "edit":  # a person rewrites a message on the path, then runs on
        path = trace.main_path()
        target = trace.message_path(path[arg % len(path)])
        target.write_bytes(target.read_bytes().replace(b"turn", b"TURN"))
        runner.run("t", max_iterations=1)
    else:  # a file dropped into the inbox, taken by the next run
        inbox = trace.inbox_dir
        inbox.mkdir(exist_ok=True)
        (inbox / f"drop-{arg}.md").write_text(f"dropped {arg}\n")
        runner.run("t", max_iterations=2)


def test_a_model_turn_is_counted_once_through_appends_and_rescans(project):
    project.new_trace("t", user("go"))
    trace = project.trace("t")
    assert trace.count(is_model_turn) == 0
    with trace.lock():
        trace.commit_step("assistant", [trace.new_message("assistant", "one")])
        assert trace.count(is_model_turn) == 1
        synthetic = trace.new_message("assistant", "", synthetic="skill")
        trace.commit_step("assistant", [synthetic])
        assert trace.count(is_model_turn) == 1
    (trace.messages_dir / "000099-assistant.md").write_text(
        json_frontmatter(99, "assistant") + "by hand\n")
    assert trace.count(is_model_turn) == 2  # the folder changed: counted anew


def json_frontmatter(sequence: int, role: str) -> str:
    return f"---\nsequence: {sequence}\nrole: {role}\nparent_sequence: 1\n---\n"


def test_a_long_run_carries_its_path_instead_of_walking_it(project, monkeypatch):
    """Every request of a run walks only the messages its last step added."""
    project.new_trace("t", user("go"))
    walked = []
    real = history.path_to

    def counting_path_to(messages, sequence, *, where=""):
        path = real(messages, sequence, where=where)
        walked.append(len(path))
        return path

    monkeypatch.setattr(history, "path_to", counting_path_to)
    turns = iter(range(100))

    def model(request: ModelRequest) -> ModelResponse:
        n = next(turns)
        if n == 30:
            return ModelResponse(text="done")
        return ModelResponse(text=f"t{n}", tool_calls=[
            ToolCall(id=f"toolu_{n}", name="list_files", input={})])

    runner = Runner(project.workspace, project.repo, FunctionModel(model), config=project.config)
    runner.run("t")
    # whole walks: at the start of the run (recovery refreshes the folder) only
    assert len(walked) <= 3, walked
    assert json.loads((project.workspace.root / "traces/t/trace.json").read_text())["head"] > 60
