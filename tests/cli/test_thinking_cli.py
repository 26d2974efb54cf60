"""`[thinking]` in agentfs.toml and `--thinking BUDGET` / `--no-thinking` on run and watch."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentfs.config import WorkspaceConfig, load_config
from agentfs.core.project import Project
from agentfs.errors import ConfigError
from agentfs.testing import FakeAnthropicServer
from agentfs.testing.fake_anthropic import sign_thinking
from tests.conftest import assert_git_clean, git, run_cli

MODEL = ("--model", "anthropic:claude-test")


@pytest.fixture
def server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer(strict_thinking=True) as fake:
        yield fake


def env(server: FakeAnthropicServer) -> dict[str, str]:
    return {"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": server.base_url}


def configure(root: Path, text: str) -> None:
    config = root / "agentfs.toml"
    config.write_text(config.read_text() + text)
    git(root, "commit", "-qam", "config")


def test_thinking_is_off_by_default():
    assert WorkspaceConfig().thinking_budget is None


def test_a_budget_not_below_max_tokens_is_refused_with_a_clear_error(workspace):
    configure(workspace, "max_tokens = 4096\n[thinking]\nenabled = true\nbudget_tokens = 4096\n")
    with pytest.raises(ConfigError) as info:
        load_config(workspace / "agentfs.toml")
    assert str(info.value) == (
        f"{workspace / 'agentfs.toml'}: thinking: budget_tokens (4096) must be less than "
        "max_tokens (4096): the thinking counts toward max_tokens; raise max_tokens or lower "
        "the budget")
    done = run_cli("run", "t", "-m", "hi", *MODEL, cwd=workspace, check=False)
    assert done.returncode == 1 and "must be less than max_tokens (4096)" in done.stderr


def test_a_budget_below_1024_is_refused(workspace):
    configure(workspace, "[thinking]\nenabled = true\nbudget_tokens = 512\n")
    with pytest.raises(ConfigError, match="thinking.budget_tokens: Input should be greater "
                                          "than or equal to 1024"):
        load_config(workspace / "agentfs.toml")


def test_a_disabled_thinking_table_is_not_checked_against_max_tokens(workspace):
    configure(workspace, "max_tokens = 1000\n[thinking]\nbudget_tokens = 2048\n")
    assert load_config(workspace / "agentfs.toml").thinking_budget is None


def test_the_run_flag_reaches_the_request(workspace, server):
    server.enqueue({"text": "thought about it"})
    run_cli("run", "t", "-m", "think", *MODEL, "--thinking", "2000", cwd=workspace,
            env=env(server))
    (request,) = server.requests
    assert request.body["thinking"] == {"type": "enabled", "budget_tokens": 2000}
    [thought] = Project.open(workspace).trace("t").main_path()[-1].thinking or []
    assert thought["signature"] == sign_thinking(thought["thinking"])  # stored as it came
    assert_git_clean(workspace)


def test_no_thinking_overrides_the_configuration(workspace, server):
    configure(workspace, "max_tokens = 8000\n[thinking]\nenabled = true\nbudget_tokens = 4000\n")
    server.enqueue({"text": "a"}, {"text": "b"})
    run_cli("run", "t", "-m", "one", *MODEL, cwd=workspace, env=env(server))
    run_cli("run", "t", "-m", "two", *MODEL, "--no-thinking", cwd=workspace, env=env(server))
    first, second = (r.body for r in server.requests)
    assert first["thinking"] == {"type": "enabled", "budget_tokens": 4000}
    assert "thinking" not in second


@pytest.mark.parametrize(("flags", "message"), [
    (("--thinking", "5000"), ("--thinking 5000: thinking: budget_tokens (5000) must be less "
                             "than max_tokens (4096)")),
    (("--thinking", "100"), ("--thinking 100: thinking.budget_tokens: Input should be greater "
                            "than or equal to 1024")),
    (("--thinking", "2000", "--no-thinking"), "--thinking and --no-thinking do not go together"),
])
@pytest.mark.parametrize("command", ["run", "watch"])
def test_a_bad_flag_is_a_usage_error(workspace, command, flags, message):
    args = ("run", "t", "-m", "x") if command == "run" else ("watch", "--once")
    done = run_cli(*args, *MODEL, *flags, cwd=workspace, check=False)
    assert done.returncode == 2 and message in done.stderr
    assert not (workspace / "traces" / "t").exists()


def test_the_watch_flag_reaches_the_requests_of_its_runs(workspace, server):
    (workspace / "inbox" / "task.md").write_text("please think\n")
    server.enqueue({"text": "done"})
    run_cli("watch", "--once", "--settle", "0", *MODEL, "--thinking", "1500", cwd=workspace,
            env=env(server))
    (request,) = server.requests
    assert request.body["thinking"] == {"type": "enabled", "budget_tokens": 1500}
    assert_git_clean(workspace)
