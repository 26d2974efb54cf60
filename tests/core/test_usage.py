"""What model calls used, per message, step, run and trace, and what it cost: recorded
once at the source, carried in trace.json, shown by every view."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agentfs.config import WorkspaceConfig
from agentfs.core.project import Project
from agentfs.core.runner import Runner
from agentfs.core.usage import Totals
from agentfs.errors import ConfigError
from agentfs.models.anthropic import AnthropicModel
from agentfs.models.base import ModelResponse
from agentfs.prices import PriceTable
from agentfs.store.messages import ToolCall, Usage
from agentfs.store.meta import load_meta
from agentfs.store.spent import Spent
from agentfs.testing import FakeAnthropicServer, ScriptedModel
from tests.conftest import assert_git_clean, git, replay_workspace, run_cli, user

SONNET = "claude-sonnet-4-5-20250929"


def turn(text: str, *, calls: list[ToolCall] | None = None, tokens: int = 1000,
         cached: int = 0, out: int = 100, model: str = SONNET) -> ModelResponse:
    return ModelResponse(text=text, tool_calls=calls or [], model=model, usage=Usage(
        input_tokens=tokens, output_tokens=out, cache_read_input_tokens=cached))


def two_turns() -> ScriptedModel:
    call = ToolCall(id="toolu_1", name="list_files", input={"pattern": "*"})
    return ScriptedModel(turn("looking", calls=[call], tokens=1000, out=50),
                         turn("done", tokens=200, cached=1000, out=20))


def assistants(project: Project, trace: str = "t"):
    return [m for m in project.trace(trace).messages().values()
            if m.role == "assistant" and not m.synthetic]


def test_each_model_turn_records_its_usage_and_time_and_the_trace_keeps_the_sums(project):
    project.new_trace("t", user("go"))
    result = project.runner(two_turns()).run("t")

    turns = assistants(project)
    assert [m.usage.input_tokens for m in turns] == [1000, 200]
    assert all(m.timing is not None and m.timing.wall_ms >= m.timing.model_ms >= 0
               for m in turns)
    meta = project.trace("t").meta
    assert meta.usage is not None
    sums = meta.usage.models[SONNET]
    assert (sums.calls, sums.input_tokens, sums.cache_read_input_tokens, sums.output_tokens) \
        == (2, 1200, 1000, 70)
    assert sums.model_ms == sum(m.timing.model_ms for m in turns)
    assert (result.input_tokens, result.cached_tokens, result.output_tokens) == (2200, 1000, 70)
    assert result.wall_ms >= result.model_ms
    assert_git_clean(project.workspace.root)


def test_a_model_turns_commit_carries_its_usage_as_a_git_trailer(project):
    project.new_trace("t", user("go"))
    project.runner(two_turns()).run("t")
    root = project.workspace.root

    trailers = git(root, "log", "--format=%(trailers:key=Agentfs-Usage,valueonly)%x00", "main")
    values = [v.strip() for v in trailers.split("\x00") if v.strip()]
    assert values[0].startswith(f"{SONNET} in=200 cache_read=1000 cache_write=0 out=20 ")
    assert values[1].startswith(f"{SONNET} in=1000 cache_read=0 ")
    assert len(values) == 2  # the user's and the tool's commits carry none


def test_committing_a_counted_message_again_does_not_count_it_twice(project):
    project.new_trace("t", user("go"))
    project.runner(two_turns()).run("t")
    trace = project.trace("t")
    before = trace.meta.usage.model_copy(deep=True)

    trace.commit_step("edit", assistants(project), move_head=False)  # as recovery re-commits

    assert project.trace("t").meta.usage == before


def test_a_trace_from_before_counting_is_counted_once_from_its_files(project):
    project.new_trace("t", user("go"))
    project.runner(two_turns()).run("t")
    root = project.workspace.root
    path = root / "traces" / "t" / "trace.json"
    data = json.loads(path.read_text())
    del data["usage"]  # as an older agentfs wrote it
    path.write_text(json.dumps(data, indent=2) + "\n")
    git(root, "commit", "-qam", "older agentfs")

    project.runner(ScriptedModel(turn("again", tokens=5, out=1))).run("t", ["more"])

    sums = project.trace("t").meta.usage.models[SONNET]
    assert (sums.calls, sums.input_tokens, sums.output_tokens) == (3, 1205, 71)


def test_a_side_branch_s_calls_count_when_it_is_merged(project):
    project.new_trace("t", user("go"))
    project.runner(two_turns()).run("t")
    project.runner(two_turns()).run("t", ["and again"])
    summary = turn("the summary", tokens=3000, out=300, model="claude-haiku-4-5")

    project.runner(ScriptedModel(summary)).compress("t")

    models = project.trace("t").meta.usage.models
    assert models["claude-haiku-4-5"].input_tokens == 3000
    assert models[SONNET].calls == 4


def test_prices_match_dated_ids_without_the_provider_and_the_workspaces_own_win():
    defaults = PriceTable()
    price, estimated = defaults.find("anthropic:" + SONNET)
    assert (price.input, price.output, estimated) == (3, 15, True)
    assert defaults.find("claude-sonnet-4") [0].input == 3  # the longest key wins ...
    assert defaults.find("claude-opus-4-5-x")[0].input == 5  # ... over claude-opus-4
    assert defaults.find("replay:demo.json") is None

    own = PriceTable(WorkspaceConfig.model_validate(
        {"prices": {"claude-sonnet-4-5": {"input": 1, "output": 2}}}).prices)
    cost = own.cost({SONNET: Spent(calls=1, input_tokens=2_000_000, output_tokens=1_000_000)})
    assert (cost.amount, cost.estimated, cost.text()) == (4.0, False, "$4.0000")


def test_a_price_keyed_with_its_provider_prices_that_provider_s_model_only():
    own = PriceTable(WorkspaceConfig.model_validate({"prices": {
        "openai:gpt-4.1": {"input": 2, "output": 8},
        "anthropic:claude-sonnet-4-5": {"input": 100, "output": 100},
        "gpt-4.1-mini": {"input": 0.4, "output": 1.6}}}).prices)
    assert own.find("openai:gpt-4.1") == (own.given["openai:gpt-4.1"], False)
    assert own.find("openai:gpt-4.1-2025-04-14")[0].input == 2
    assert own.find("other:gpt-4.1") is None  # another provider's model of that name
    assert own.find("openai:gpt-4.1-mini")[0].input == 0.4  # the longer name wins
    assert own.find("anthropic:" + SONNET) == (own.given["anthropic:claude-sonnet-4-5"], False)
    cost = own.cost({"openai:gpt-4.1": Spent(calls=1, input_tokens=1_000_000)})
    assert (cost.amount, cost.text()) == (2.0, "$2.0000")


def test_a_price_key_whose_model_name_holds_a_colon_still_matches():
    own = PriceTable(WorkspaceConfig.model_validate({"prices": {
        "llama3:8b": {"input": 1, "output": 2},
        "ft:gpt-4o-mini:acme::abc": {"input": 3, "output": 4}}}).prices)
    assert own.find("openai:llama3:8b")[0].input == 1
    assert own.find("openai:ft:gpt-4o-mini:acme::abc")[0].input == 3
    assert own.find("openai:llama3:70b") is None


def test_an_unpriced_model_that_used_tokens_says_so_instead_of_costing_nothing():
    cost = PriceTable().cost({"local:llama": Spent(calls=1, input_tokens=10)})
    assert cost.text() == "no price for local:llama"
    assert PriceTable().cost({"replay:x": Spent(calls=3)}).text() == "$0.0000"
    mixed = PriceTable().cost({SONNET: Spent(calls=1, input_tokens=1_000_000),
                               "local:llama": Spent(calls=1, input_tokens=10)})
    assert mixed.text() == "~$3.0000 + no price for local:llama"  # not the whole spend


def test_calls_that_reported_no_tokens_show_their_time_not_a_row_of_zeros():
    replay = Totals.of({"replay:x": Spent(calls=3, model_ms=200, wall_ms=300)}, PriceTable())
    assert replay.text() == "3 calls · model 0.2 s · wall 0.3 s"
    assert Totals.of({}, PriceTable()).text() == "no model calls"
    unpriced = Totals.of({"local:llama": Spent(calls=1, input_tokens=10)}, PriceTable())
    assert unpriced.text() == "10 in, 0 cached · 0 out · model 0.0 s · no price for local:llama"


def test_a_replay_run_s_summary_shows_its_calls_and_time_without_a_cost(tmp_path):
    root = replay_workspace(tmp_path / "ws", {"turns": [{"text": "answer"}]})
    done = run_cli("run", "t", "-m", "go", cwd=root)
    summary = done.stderr.strip().splitlines()[-1]
    assert summary.startswith("t: replay:script.json, 1 model call, model ")
    assert "$" not in summary and "tokens" not in summary  # as `show` and `status`
    assert "$" not in run_cli("show", "t", cwd=root).stdout.splitlines()[-1]


@pytest.mark.parametrize("entry, problem", [
    ('input = -1\noutput = 2', "input must be at least 0"),
    ('input = 1\noutput = 2\ncahce_read = 1', "cahce_read"),
    ('output = 2', "input"),
])
def test_a_bad_price_entry_is_refused_naming_the_file_and_key(project, entry, problem):
    toml = project.workspace.config_path
    toml.write_text(toml.read_text() + f'\n[prices."my-model"]\n{entry}\n')
    with pytest.raises(ConfigError) as caught:
        Project.open(project.workspace.root)
    assert "agentfs.toml" in str(caught.value) and "prices" in str(caught.value)
    assert problem in str(caught.value)


def cli_workspace(project: Project) -> Project:
    project.new_trace("t", user("go"))
    project.runner(two_turns()).run("t")
    return project


def test_status_show_and_log_show_what_the_calls_used_and_cost(project):
    root = cli_workspace(project).workspace.root

    status = run_cli("status", cwd=root).stdout
    assert "2 calls, 2,270 tokens, ~$0.0" in status
    row = json.loads(run_cli("status", "--json", cwd=root).stdout)["traces"][0]
    assert row["usage"]["calls"] == 2 and row["usage"]["cost"]["estimated"] is True
    assert row["usage"]["cost"]["usd"] == pytest.approx(
        (1200 * 3 + 1000 * 0.3 + 70 * 15) / 1e6)
    assert row["updated"]

    shown = run_cli("show", "t", cwd=root).stdout
    assert "assistant  · 1,200 in, 1,000 cached · 20 out · model" in shown
    assert shown.rstrip().splitlines()[-1].startswith("t: 2 calls · 2,200 in, 1,000 cached")
    record = json.loads(run_cli("show", "t", "--json", cwd=root).stdout)
    assert record["usage"]["output_tokens"] == 70
    assert [m["usage"]["output_tokens"] for m in record["messages"] if m["usage"]] == [50, 20]

    log = run_cli("log", "t", cwd=root).stdout.splitlines()
    assert "· 1,200 in, 1,000 cached · 20 out" in log[0] and "·" not in log[1].split("#")[-1][:8]
    steps = json.loads(run_cli("log", "t", "--json", cwd=root).stdout)["steps"]
    assert steps[0]["usage"]["cost"]["text"].startswith("~$")
    assert steps[1]["usage"] is None


def test_a_workspace_price_changes_every_view_without_rewriting_a_file(project):
    root = cli_workspace(project).workspace.root
    toml = root / "agentfs.toml"
    toml.write_text(toml.read_text() + '\n[prices."claude-sonnet-4-5"]\ninput = 0\noutput = 0\n')
    before = git(root, "rev-parse", "HEAD")

    assert "2 calls, 2,270 tokens, $0.0000" in run_cli("status", cwd=root).stdout
    assert git(root, "rev-parse", "HEAD") == before


def test_status_prices_traces_without_loading_pydantic(project):
    root = cli_workspace(project).workspace.root
    run_cli("status", cwd=root)  # the configuration is validated once
    probe = ("import sys\nfrom agentfs.cli import main\nsys.argv = ['agentfs', 'status']\n"
             "try:\n    main()\nexcept SystemExit:\n    pass\n"
             "assert 'pydantic' not in sys.modules, 'pydantic was imported'\n")
    done = subprocess.run([sys.executable, "-c", probe], cwd=root, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "~$" in done.stdout


def test_the_anthropic_provider_s_usage_reaches_the_trace_through_the_real_sdk(project):
    project.new_trace("t", user("go"))
    with FakeAnthropicServer() as server:
        server.enqueue({"text": "hello"})
        model = AnthropicModel("claude-sonnet-4-5", api_key="k", base_url=server.base_url,
                               sleep=lambda s: None)
        Runner(project.workspace, project.repo, model, config=project.config).run("t")

    (answer,) = assistants(project)
    assert answer.usage.output_tokens > 0 and answer.timing.model_ms >= 0
    spent = next(iter(project.trace("t").meta.usage.models.values()))
    assert spent.output_tokens == answer.usage.output_tokens
    meta = load_meta(project.trace("t").meta_path, "traces/t/trace.json")
    assert meta.usage == project.trace("t").meta.usage  # what was written reads back


def test_a_message_given_twice_is_counted_once_and_returned_once() -> None:
    """A new trace's first step counts every file on disk and the step's messages, which
    are on disk too: each is counted once (its turns of the model too)."""
    from agentfs.store.messages import Message
    from agentfs.store.meta import Spending

    spending = Spending()
    answer = Message(id="a", sequence=3, role="assistant", content="x", model="m")
    user = Message(id="u", sequence=2, role="user", content="q")
    assert spending.count([user, answer, answer]) == [user, answer]
    assert spending.models["m"].calls == 1 and spending.through == 3
    assert spending.count([answer]) == []
