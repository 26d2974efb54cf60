"""MCP servers end to end: the real test server (`agentfs.testing.mcp_server`, written
with the SDK) over stdio and streamable HTTP, driven by `agentfs run` on a replay
model or the fake Anthropic server, in real workspaces checked with git."""

from __future__ import annotations

import itertools
import json
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentfs.testing import FakeAnthropicServer, assert_valid_request, mcp_server
from agentfs.testing.mcp_server import NOTE_FILE, PNG_BYTES, README_TEXT, McpHttpServer
from agentfs.tools.mcp_client import shutdown_mcp
from tests.conftest import assert_git_clean, git, replay_workspace, run_cli, trust_workspace

#: The test server of the code under test (by its file: `-m` in the workspace would import
#: whichever agentfs the interpreter has installed); `-P` keeps its folder off `sys.path`.
SERVER = [sys.executable, "-P", mcp_server.__file__]
TOKEN = "Bearer test-token-7"


@pytest.fixture(autouse=True)
def mcp_sessions() -> Iterator[None]:
    """Every session a test opened is shut down after it (their servers' processes end)."""
    yield
    shutdown_mcp()


@pytest.fixture(scope="module")
def http_server() -> Iterator[McpHttpServer]:
    with McpHttpServer() as server:
        yield server


def stdio_table(name: str = "t", command: list[str] | None = None, timeout: float = 10) -> str:
    return (f"\n[mcp_servers.{name}]\ncommand = {json.dumps(command or SERVER)}\n"
            f"timeout = {timeout}\n")


def http_table(url: str, name: str = "t", timeout: float = 10) -> str:
    return (f'\n[mcp_servers.{name}]\nurl = "{url}"\nheaders = {{Authorization = "MCP_TEST_TOKEN"}}'
            f"\ntimeout = {timeout}\n")


def mcp_workspace(root: Path, turns: list[dict[str, Any]], table: str, *,
                  trusted: bool = True) -> Path:
    """A workspace on a replay model playing `turns`, with the `[mcp_servers]` `table`."""
    replay_workspace(root, {"turns": turns}, config={
        "max_iterations = 50": "max_iterations = 50\n" + table})
    if trusted:
        trust_workspace(root)
    return root


def calls(*pairs: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "input": arguments} for name, arguments in pairs]}


def shown(root: Path, trace: str = "t") -> list[dict[str, Any]]:
    return json.loads(run_cli("show", trace, "--json", cwd=root).stdout)["messages"]


def tool_results(root: Path, trace: str = "t") -> list[tuple[str, bool]]:
    return [(m["text"], bool(m.get("is_error"))) for m in shown(root, trace) if m["role"] == "tool"]


def recorded_tools(root: Path, trace: str = "t", rev: str = "HEAD") -> dict[str, list[str]]:
    """The MCP tool lists trace.json records, as committed at `rev`."""
    meta = json.loads(git(root, "show", f"{rev}:traces/{trace}/trace.json"))
    return {server: [t["name"] for t in tools]
            for server, tools in meta["context"].get("mcp_tools", {}).items()}


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_tool_call_round_trips_through_a_real_server_over_stdio_and_http(
        tmp_path, transport, request):
    if transport == "http":
        table = http_table(request.getfixturevalue("http_server").url)
    else:
        table = stdio_table()
    root = mcp_workspace(tmp_path / "ws", [
        calls(("t__add", {"a": 2, "b": 3}), ("t__echo", {"text": "héllo"}),
              ("t__authorization", {})),
        {"text": "The sum is 5."},
    ], table)
    done = run_cli("run", "t", "-m", "add 2 and 3", cwd=root, env={"MCP_TEST_TOKEN": TOKEN})
    assert "The sum is 5." in done.stdout
    results = tool_results(root)
    assert results[:2] == [("5", False), ("héllo", False)]
    assert results[2] == ((TOKEN, False) if transport == "http" else ("(none)", False))
    assert {"add", "echo", "authorization"} <= set(recorded_tools(root)["t"])
    assert TOKEN not in git(root, "show", "HEAD:traces/t/trace.json")
    assert TOKEN not in (root / "agentfs.toml").read_text()
    assert_git_clean(root)


def test_the_server_s_tools_are_offered_with_their_schemas_and_read_only_hints(tmp_path):
    from agentfs.core.project import Project
    from agentfs.core.trust import config_fingerprint
    from agentfs.testing import ScriptedModel

    root = mcp_workspace(tmp_path / "ws", [], stdio_table(), trusted=False)
    project = Project.open(root)
    model = ScriptedModel("done")
    runner = project.runner(model, trusted=config_fingerprint(project.config))
    runner.run("t", ["go"])
    specs = {t.name: t for t in model.requests[0].tools}
    assert specs["t__add"].input_schema["properties"]["a"]["type"] == "integer"
    assert specs["t__add"].input_schema["required"] == ["a", "b"]
    assert specs["t__echo"].description == "Return the text unchanged."
    trust_workspace(root)
    [listing] = json.loads(run_cli("tools", "--json", cwd=root).stdout)["mcp_servers"]
    read_only = {t["offered_as"]: t["read_only"] for t in listing["tools"]}
    assert read_only["t__echo"] is True and read_only["t__add"] is False


def test_an_image_result_is_written_into_the_workspace_and_committed_with_the_step(tmp_path):
    root = mcp_workspace(tmp_path / "ws", [calls(("t__image", {})), {"text": "a pixel"}],
                         stdio_table())
    run_cli("run", "t", "-m", "draw", cwd=root)
    [(text, is_error)] = tool_results(root)
    assert not is_error
    assert text.startswith("[image: mcp-files/t/") and text.endswith(".png (image/png)]")
    path = text.removeprefix("[image: ").split(" ")[0]
    assert (root / path).read_bytes() == PNG_BYTES
    tool_commit = git(root, "log", "--format=%H", "--grep", "tool #4").split()[0]
    assert path in git(root, "show", "--name-only", "--format=", tool_commit).split()
    assert_git_clean(root)


def test_a_file_a_stdio_server_writes_is_committed_with_the_tool_step_and_rewound(tmp_path):
    root = mcp_workspace(tmp_path / "ws", [calls(("t__note", {"text": "hello"})),
                                           {"text": "done"}], stdio_table())
    run_cli("run", "t", "-m", "take a note", cwd=root)
    [result] = [m for m in shown(root) if m["role"] == "tool"]
    assert result["text"] == f"wrote {NOTE_FILE}" and result["files_changed"] == [NOTE_FILE]
    tool_commit = git(root, "log", "--format=%H", "--grep", "tool #4").split()[0]
    assert NOTE_FILE in git(root, "show", "--name-only", "--format=", tool_commit).split()
    assert "+hello" in run_cli("log", "t", "-p", cwd=root).stdout
    assert_git_clean(root)
    run_cli("rewind", "t", "2", "--files", cwd=root)
    assert not (root / NOTE_FILE).exists()
    assert_git_clean(root)


def test_an_error_result_is_stored_as_an_error_and_the_run_goes_on(tmp_path):
    root = mcp_workspace(tmp_path / "ws", [
        calls(("t__fail", {"reason": "the disk is on fire"})), {"text": "it failed"}],
        stdio_table())
    done = run_cli("run", "t", "-m", "try", cwd=root)
    [(text, is_error)] = tool_results(root)
    assert is_error and "the disk is on fire" in text
    assert "it failed" in done.stdout


def test_a_hanging_and_a_crashing_server_give_clear_errors_and_the_run_goes_on(tmp_path):
    root = mcp_workspace(tmp_path / "ws", [
        calls(("t__hang", {})),
        calls(("t__crash", {})),
        calls(("t__echo", {"text": "still here"})),
        {"text": "survived"},
    ], stdio_table(timeout=1.5))
    done = run_cli("run", "t", "-m", "break it", cwd=root)
    hang, crash, echo = tool_results(root)
    where = f"MCP server 't' ({' '.join(SERVER)})"
    assert hang == (f"{where} did not answer within 1.5 s while running hang (timeout)", True)
    assert crash[1] and crash[0].startswith(f"{where} failed while running crash (")
    assert "started again on its next use" in crash[0]
    assert echo == ("still here", False)  # started again after the crash
    assert "survived" in done.stdout
    assert_git_clean(root)


def test_garbage_on_stdout_is_skipped_or_named_in_the_error_and_the_run_goes_on(tmp_path):
    chatty = [*SERVER, "--banner"]
    not_mcp = [sys.executable, "-c",
               "import time; print('hello, I am no MCP server', flush=True); time.sleep(60)"]
    root = mcp_workspace(tmp_path / "ws", [
        calls(("chatty__echo", {"text": "heard"})), {"text": "went on"}],
        stdio_table("chatty", chatty) + stdio_table("silent", not_mcp)
        + "startup_timeout = 2\n")
    done = run_cli("run", "t", "-m", "go", cwd=root)
    assert tool_results(root) == [("heard", False)]  # the banner line was skipped
    [line] = [line for line in done.stderr.splitlines() if "MCP server 'silent'" in line]
    assert "did not start within 2 s (startup_timeout)" in line
    assert "it wrote something that is not an MCP message" in line
    assert "Traceback" not in done.stderr
    assert "went on" in done.stdout


@pytest.mark.parametrize(("command", "reason"), [
    (["/nonexistent/mcp-server", "--flag"], "No such file or directory"),
    ([sys.executable, "-c", "import sys; sys.stderr.write('boom: no config\\n'); sys.exit(2)"],
     "its stderr ends: boom: no config"),
])
def test_a_server_that_cannot_start_is_reported_once_with_its_command_and_the_reason(
        tmp_path, command, reason):
    root = mcp_workspace(tmp_path / "ws", [
        calls(("list_files", {})), calls(("list_files", {})), {"text": "done without it"}],
        stdio_table("broken", command))
    done = run_cli("run", "t", "-m", "go", cwd=root)
    assert "done without it" in done.stdout
    shown_command = " ".join(command) if command[0].startswith("/nonexistent") else command[0]
    assert done.stderr.count("MCP server 'broken'") == 1, done.stderr
    line = next(line for line in done.stderr.splitlines() if "MCP server 'broken'" in line)
    assert shown_command in line and "could not start" in line and reason in line
    assert "mcp_tools" not in json.loads(git(root, "show", "HEAD:traces/t/trace.json"))["context"]


def test_an_untrusted_workspace_skips_its_mcp_servers_says_so_and_runs_them_once_trusted(
        tmp_path):
    marker = tmp_path / "started"
    command = ["sh", "-c", f"touch {marker}; exec {' '.join(SERVER)}"]
    root = mcp_workspace(tmp_path / "ws", [
        calls(("t__echo", {"text": "one"})), {"text": "first"},
        calls(("t__echo", {"text": "two"})), {"text": "second"},
    ], stdio_table(command=command), trusted=False)
    done = run_cli("run", "t", "-m", "go", cwd=root)
    assert not marker.exists()
    assert "they are skipped:" in done.stderr
    assert f"MCP server 't': sh -c 'touch {marker}; exec" in done.stderr
    assert tool_results(root)[0][0].startswith("unknown tool 't__echo'")
    listed = run_cli("tools", cwd=root)
    assert "skipped: not trusted on this machine" in listed.stdout
    assert not marker.exists()

    trust_workspace(root)
    run_cli("run", "t", "-m", "again", cwd=root)
    assert marker.exists()
    assert tool_results(root)[-1] == ("two", False)


def test_agentfs_tools_lists_each_server_with_its_tools_resources_and_prompts(
        tmp_path, http_server):
    root = mcp_workspace(tmp_path / "ws", [], stdio_table("local")
                         + http_table(http_server.url, "remote"))
    listed = run_cli("tools", "--mcp", cwd=root, env={"MCP_TEST_TOKEN": TOKEN}).stdout
    assert f"local: {' '.join(SERVER)}" in listed
    assert f"remote: {http_server.url}" in listed
    assert "  local__echo (read-only): Return the text unchanged.\n" in listed
    assert "  remote__add: Add two integers.\n" in listed
    assert "    notes://readme (readme): The notes' readme.\n" in listed
    assert "    notes://{name} (note): A note by name.\n" in listed
    assert "    review(subject): Ask for a review of a subject.\n" in listed

    data = json.loads(run_cli("tools", "--json", cwd=root, env={"MCP_TEST_TOKEN": TOKEN}).stdout)
    [local, remote] = data["mcp_servers"]
    assert {t["offered_as"] for t in local["tools"]} >= {"local__echo", "local__image"}
    assert local["problem"] is None and local["resources"] == []  # asked only with --mcp
    assert remote["name"] == "remote"

    missing = run_cli("tools", cwd=root, env={"MCP_TEST_TOKEN": ""}, check=False)
    assert missing.returncode == 1
    assert "$MCP_TEST_TOKEN it takes are not set" in missing.stdout
    assert README_TEXT  # the resource's text is served by the same server


# --- the prompt cache ------------------------------------------------------------------


def _without_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_without_cache_control(v) for v in value]
    return value


def _fake_run(root: Path, server: FakeAnthropicServer, message: str) -> None:
    run_cli("run", "t", "-m", message, "--model", "anthropic:claude-test", cwd=root,
            env={"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": server.base_url})


def test_the_tool_list_stays_byte_identical_across_turns_runs_and_a_restarted_server(tmp_path):
    root = mcp_workspace(tmp_path / "ws", [], (
        "\nmax_tokens = 8000\n[thinking]\nenabled = true\nbudget_tokens = 2000\n")
        + stdio_table())
    with FakeAnthropicServer(strict_thinking=True) as server:
        server.enqueue(
            {"text": "Echo.", "tool_calls": [{"name": "t__echo", "input": {"text": "a"}}]},
            {"text": "Crash.", "tool_calls": [{"name": "t__crash", "input": {}}]},
            {"text": "Add.", "tool_calls": [{"name": "t__add", "input": {"a": 1, "b": 1}}]},
            {"text": "Done."},
        )
        _fake_run(root, server, "first")
        server.enqueue(
            {"text": "Echo.", "tool_calls": [{"name": "t__echo", "input": {"text": "b"}}]},
            {"text": "Done again."},
        )
        _fake_run(root, server, "second")
        bodies = [_without_cache_control(r.body) for r in server.requests]
        assert server.thinking_violations == []
    assert len(bodies) == 6
    assert {t["name"] for t in bodies[0]["tools"]} >= {"t__echo", "t__crash", "t__add"}
    for earlier, later in itertools.pairwise(bodies):
        assert_valid_request(later)
        assert json.dumps(later["tools"]) == json.dumps(earlier["tools"])  # byte for byte
        assert later["system"] == earlier["system"]
    assert tool_results(root)[2] == ("2", False)  # after the crash: restarted


@pytest.mark.parametrize("announce", [True, False], ids=["announced", "unannounced"])
def test_a_changed_tool_list_is_taken_at_the_next_step_and_recorded_in_trace_json(
        tmp_path, announce):
    # Announced or not, the change is offered at the next request: a server the
    # step called is listed again at the boundary, so a late announcement (it
    # travels apart from the result) cannot make the new tool one step late.
    # A server of its own: `grow` changes the server for good.
    with McpHttpServer() as http, FakeAnthropicServer() as server:
        root = mcp_workspace(tmp_path / "ws", [], http_table(http.url, "g"))
        server.enqueue(
            {"text": "Echo.", "tool_calls": [{"name": "g__echo", "input": {"text": "x"}}]},
            {"text": "Grow.", "tool_calls": [{"name": "g__grow",
                                               "input": {"announce": announce}}]},
            {"text": "Extra.", "tool_calls": [{"name": "g__extra", "input": {}}]},
            {"text": "Done."},
        )
        run_cli("run", "t", "-m", "go", "--model", "anthropic:claude-test", cwd=root,
                env={"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": server.base_url,
                     "MCP_TEST_TOKEN": TOKEN})
        tools = [[t["name"] for t in r.body["tools"]] for r in server.requests]
    assert len(tools) == 4
    assert tools[0] == tools[1] and "g__extra" not in tools[1]  # unchanged within the step
    assert "g__extra" in tools[2] and tools[2] == tools[3]
    assert tool_results(root)[-1] == ("extra ran", False)
    grow_step = git(root, "log", "--format=%H", "--grep", "assistant #7").split()[0]
    assert "extra" not in recorded_tools(root, rev=f"{grow_step}~1")["g"]
    assert "extra" in recorded_tools(root, rev=grow_step)["g"]  # with the request that offered it
    assert_git_clean(root)


# --- the README ------------------------------------------------------------------------


def test_the_readme_s_mcp_example_runs_as_written(tmp_path):
    from tests.test_readme import _check_comment

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## Tools from MCP servers", 1)[1].split("\n## ", 1)[0]
    toml = section.split("```toml\n", 1)[1].split("```", 1)[0]
    script = section.split("```json\n", 1)[1].split("```", 1)[0]
    commands = [line for line in section.split("Then:\n\n```\n", 1)[1].split("```", 1)[0]
                .splitlines() if line.startswith("agentfs ")]
    assert len(commands) == 3
    run_cli("demo", str(tmp_path / "demo"), cwd=tmp_path)
    root = tmp_path / "demo"
    config = root / "agentfs.toml"
    config.write_text(config.read_text() + "\n" + toml.replace('"python3"',
                                                               json.dumps(sys.executable)))
    (root / "mcp-script.json").write_text(script)
    for line in commands:
        command, _, comment = line.partition("  #")
        done = run_cli(*shlex.split(command)[1:], cwd=root)
        out = (done.stdout + done.stderr).replace(sys.executable, "python3")
        _check_comment(command, comment.strip(), out)
    assert ("5", False) in tool_results(root, "sums")


def test_a_call_to_a_server_that_now_answers_garbage_is_a_clear_error_and_the_run_goes_on(
        tmp_path):
    root = mcp_workspace(tmp_path / "ws", [
        calls(("t__echo", {"text": "one"})), {"text": "first"},
        calls(("t__echo", {"text": "two"})), {"text": "second"},
    ], stdio_table())
    run_cli("run", "t", "-m", "go", cwd=root)  # the tool list is recorded
    config = root / "agentfs.toml"
    garbage = [sys.executable, "-c", "import time; print('{not json', flush=True); time.sleep(60)"]
    config.write_text(config.read_text().replace(json.dumps(SERVER), json.dumps(garbage))
                      + "startup_timeout = 2\n")
    git(root, "commit", "-qam", "the server changed")
    trust_workspace(root)
    done = run_cli("run", "t", "-m", "again", cwd=root)
    text, is_error = tool_results(root)[-1]
    assert is_error
    assert text.startswith("MCP server 't' (") and "did not start within 2 s" in text
    assert "it wrote something that is not an MCP message" in text
    assert done.stderr.count("  [MCP server 't'") == 1  # said once, besides the result
    assert "second" in done.stdout


def test_a_tool_record_edited_out_of_shape_is_listed_again_instead_of_failing_the_run(tmp_path):
    root = mcp_workspace(tmp_path / "ws", [
        calls(("t__echo", {"text": "one"})), {"text": "first"},
        calls(("t__echo", {"text": "two"})), {"text": "second"},
    ], stdio_table())
    run_cli("run", "t", "-m", "go", cwd=root)
    meta_path = root / "traces" / "t" / "trace.json"
    meta = json.loads(meta_path.read_text())
    del meta["context"]["mcp_tools"]["t"][0]["input_schema"]
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    done = run_cli("run", "t", "-m", "again", cwd=root)
    assert "second" in done.stdout
    assert tool_results(root)[-1] == ("two", False)
    meta = json.loads(git(root, "show", "HEAD:traces/t/trace.json"))
    assert all("input_schema" in r for r in meta["context"]["mcp_tools"]["t"])


def test_a_server_run_with_python_m_never_imports_a_package_written_into_the_workspace(
        tmp_path):
    """A stdio server runs in the workspace, where the model writes files: `python -m
    agentfs.testing.mcp_server` (the README's example) starts the installed module,
    not an `agentfs/` package put into the workspace."""
    root = mcp_workspace(tmp_path / "ws", [calls(("t__add", {"a": 2, "b": 3})),
                                           {"text": "done"}],
                         stdio_table(command=[sys.executable, "-m", "agentfs.testing.mcp_server"]))
    planted = root / "agentfs" / "testing"
    planted.mkdir(parents=True)
    for folder in (root / "agentfs", planted):
        (folder / "__init__.py").write_text("")
    (planted / "mcp_server.py").write_text(
        "import pathlib\npathlib.Path('hijacked').write_text('yes')\n")

    run_cli("run", "t", "-m", "add 2 and 3", cwd=root)

    assert not (root / "hijacked").exists()
    assert tool_results(root)[0] == ("5", False)


def test_agentfs_tools_shows_a_failed_server_s_stderr_line_by_line(tmp_path):
    script = ("import sys; sys.stderr.write('Traceback (most recent call last):\\n"
              "ValueError: \\x1b]0;title\\x07bad\\n'); sys.exit(3)")
    crash = [sys.executable, "-c", script]
    root = mcp_workspace(tmp_path / "ws", [{"text": "done"}], stdio_table("broken", crash))
    done = run_cli("tools", "--mcp", cwd=root, check=False)
    out, lines = done.stdout, done.stdout.splitlines()
    assert done.returncode == 1  # a server that failed
    assert "  ValueError: \\x1b]0;title\\x07bad" in lines  # its own line, escapes shown
    assert "\\x0a" not in out and "\x1b" not in out
