"""Random sequences of run / compress / rewind keep every invariant."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentfs.core.project import Project, init_workspace
from agentfs.core.runner import Runner
from agentfs.errors import AgentfsError
from agentfs.models.anthropic import AnthropicModel
from agentfs.models.base import ModelRequest, ModelResponse
from agentfs.store.messages import ToolCall
from agentfs.testing import FunctionModel, check_request
from tests.conftest import assert_git_clean, message_paths, user


def respond(request: ModelRequest) -> ModelResponse:
    """Writes a file on most turns, answers with text on every fourth."""
    if request.branch_type == "compression":
        return ModelResponse(text=f"summary of {len(request.messages)} messages")
    turn = len(request.messages)
    if turn % 4 == 0:
        return ModelResponse(text=f"answer at {turn}")
    return ModelResponse(text=f"turn {turn}", tool_calls=[ToolCall(
        id=f"toolu_{turn}_{request.call_index}", name="write_file",
        input={"path": f"out/{turn}.txt", "content": f"{turn}\n"})])


def body(request: ModelRequest) -> dict:
    model = AnthropicModel("m", api_key="unused")
    return model.build_params(request)


def valid_rewind_targets(trace) -> list[int]:
    messages = trace.messages()
    targets = []
    for sequence in messages:
        try:
            trace.path_to(sequence, messages)
        except AgentfsError:
            continue
        targets.append(sequence)
    return targets


operations = st.lists(
    st.one_of(
        st.tuples(st.just("run"), st.integers(1, 4)),
        st.tuples(st.just("compress"), st.just(0)),
        st.tuples(st.just("rewind"), st.integers(0, 1000)),
        st.tuples(st.just("user"), st.integers(0, 9)),
    ),
    min_size=3,
    max_size=9,
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations)
def test_run_compress_rewind_keep_invariants(ops):
    root = Path(tempfile.mkdtemp(prefix="agentfs-prop-"))
    try:
        init_workspace(root / "ws")
        project = Project.open(root / "ws")
        project.new_trace("t", user("start"))
        requests: list[ModelRequest] = []

        def recording(request: ModelRequest) -> ModelResponse:
            requests.append(request)
            return respond(request)

        runner = Runner(project.workspace, project.repo, FunctionModel(recording),
                        config=project.config)
        seen_files: set[str] = set()
        for op, arg in ops:
            trace = project.trace("t")
            if op == "run":
                runner.run("t", max_iterations=arg)
            elif op == "user":
                runner.run("t", [f"note {arg}"], max_iterations=1)
            elif op == "compress":
                with contextlib.suppress(AgentfsError):  # e.g. nothing to compress yet
                    runner.compress("t")
            else:
                targets = [s for s in valid_rewind_targets(trace) if s >= 2]
                if targets:
                    # suppressed: a point that would leave tool calls unanswered
                    with trace.lock(), contextlib.suppress(AgentfsError):
                        trace.rewind(targets[arg % len(targets)])
            trace = project.trace("t")
            files = {p.name for p in message_paths(trace.messages_dir)}
            assert seen_files <= files, "a message file was lost"
            seen_files = files
            path = trace.main_path()
            assert path[0].role == "system" and path[0].sequence == 1
            assert all(m.branch_type is None for m in path)
            assert_git_clean(project.workspace.root)
        for request in requests:  # main-path and compression side-branch requests alike
            assert check_request(body(request)) == []
    finally:
        shutil.rmtree(root, ignore_errors=True)
