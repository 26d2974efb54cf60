"""The parts of the MCP client that need no server: names, configuration, trust, results."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest
from mcp import types

from agentfs.config import load_config
from agentfs.core.trust import config_fingerprint, judge, workspace_commands
from agentfs.errors import ConfigError
from agentfs.tools.base import ToolContext
from agentfs.tools.mcp_tools import TOOL_NAME, ToolRecord, offered_name, result_of, tool_of


def test_tool_names_are_the_server_and_the_tool_joined_by_two_underscores():
    assert offered_name("github", "create_issue") == "github__create_issue"


@pytest.mark.parametrize("tool", ["read.file", "résumé", "a b", "x" * 80, "é" * 70, "fetch\n"])
def test_names_the_messages_api_would_refuse_are_cleaned_and_stay_distinct(tool):
    name = offered_name("srv", tool)
    assert TOOL_NAME.match(name), name
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name), name  # a final line break too
    assert name.startswith("srv__")
    assert offered_name("srv", tool) == name  # the same every time
    assert offered_name("srv", tool + "!") != name


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agentfs.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(("table", "says"), [
    ('[mcp_servers.x]\ncommand = ["a"]\nurl = "http://h/mcp"\n',
     "mcp_servers.x: Value error, give either `command` (a stdio server) or `url`"),
    ("[mcp_servers.x]\ntimeout = 3\n", "give either `command`"),
    ('[mcp_servers.x]\nurl = "http://h/mcp"\nheaders = {Authorization = "Bearer abc"}\n',
     "mcp_servers.x.headers: Value error, the value of 'Authorization' must name"),
    ('[mcp_servers.x]\ncommand = ["a"]\nheaders = {A = "B"}\n', "`headers` are for HTTP"),
    ('[mcp_servers.x]\nurl = "ftp://h"\n', "mcp_servers.x.url"),
    ('[mcp_servers."a__b"]\ncommand = ["a"]\n', "'a__b' cannot name an MCP server"),
    ('[mcp_servers."a\\n"]\ncommand = ["a"]\n', "cannot name an MCP server"),
    ('[mcp_servers.x]\ncomand = ["a"]\n', "did you mean 'command'?"),
])
def test_a_bad_server_table_is_refused_naming_the_file_and_the_key(tmp_path, table, says):
    path = _config(tmp_path, table)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(path) in str(caught.value) and says in str(caught.value)


def test_mcp_servers_are_workspace_commands_and_an_edit_of_one_asks_for_trust_again(tmp_path):
    config = load_config(_config(tmp_path, (
        '[mcp_servers.local]\ncommand = ["srv", "--x"]\nenv = ["TOKEN"]\n'
        '[mcp_servers.remote]\nurl = "https://h/mcp"\nheaders = {Authorization = "AUTH"}\n')))
    lines = [c.line() for c in workspace_commands(config)]
    assert lines == ["MCP server 'local': srv --x (with $TOKEN)",
                     "MCP server 'remote': connects to https://h/mcp (sending $AUTH)"]
    trusted = config_fingerprint(config)
    assert judge(config, trusted).config.mcp_servers == config.mcp_servers
    assert judge(config, None).config.mcp_servers == {}
    edited = load_config(_config(tmp_path, (
        '[mcp_servers.local]\ncommand = ["srv", "--y"]\nenv = ["TOKEN"]\n'
        '[mcp_servers.remote]\nurl = "https://h/mcp"\nheaders = {Authorization = "AUTH"}\n')))
    assert judge(edited, trusted).config.mcp_servers == {}


def test_results_keep_text_name_links_and_embedded_text_and_mark_errors(tmp_path):
    context = ToolContext(root=tmp_path, trace_id="t")
    result = result_of(types.CallToolResult(content=[
        types.TextContent(type="text", text="first"),
        types.ResourceLink(type="resource_link", uri="file:///a.txt", name="a",
                           description="the a file"),
        types.EmbeddedResource(type="resource", resource=types.TextResourceContents(
            uri="notes://x", text="embedded text")),
    ]), context, "srv")
    assert result.content == ("first\n[resource link file:///a.txt (a): the a file]\n"
                              "[resource notes://x]\nembedded text")
    assert not result.is_error
    failed = result_of(types.CallToolResult(content=[], is_error=True), context, "srv")
    assert failed.is_error and "reported an error" in failed.content
    assert context.changed == set()


def test_binary_parts_are_written_once_by_content_and_named(tmp_path):
    context = ToolContext(root=tmp_path, trace_id="t")
    data = base64.b64encode(b"RIFF fake audio").decode()
    part = types.AudioContent(type="audio", data=data, mime_type="audio/wav")
    first = result_of(types.CallToolResult(content=[part, part]), context, "srv")
    [path] = context.changed
    assert path.startswith("mcp-files/srv/") and path.endswith(".wav")
    assert first.content == f"[audio: {path} (audio/wav)]\n[audio: {path} (audio/wav)]"
    assert (tmp_path / path).read_bytes() == b"RIFF fake audio"


def test_without_the_mcp_package_a_run_that_would_use_a_server_stops_saying_how_to_install_it(
        tmp_path, monkeypatch):
    import importlib.util

    from tests.conftest import replay_workspace, run_cli, trust_workspace

    root = replay_workspace(tmp_path / "ws", {"turns": [{"text": "hi"}]}, config={
        "max_iterations = 50": 'max_iterations = 50\n[mcp_servers.x]\ncommand = ["srv"]\n'})
    trust_workspace(root)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *rest: None if name == "mcp" else real(name, *rest))
    done = run_cli("run", "t", "-m", "go", cwd=root, check=False)
    assert done.returncode == 1
    assert "declares MCP servers (x), but the mcp package is not installed" in done.stderr
    assert "pip install 'agentfs-workspace[mcp]'" in done.stderr


def _writer(root: Path, *names: str):
    """A server's `call` that writes `names` in `root`, as a local server's tool would."""
    def call(tool: str, arguments: dict) -> types.CallToolResult:
        for name in names:
            (root / name).write_bytes(b"x")
        return types.CallToolResult(content=[types.TextContent(type="text", text="wrote")])

    return call


@pytest.mark.parametrize(("local", "read_only", "compared"), [
    (True, False, True), (False, False, False), (True, True, False)])
def test_the_work_tree_is_compared_around_acting_calls_of_stdio_servers_only(
        tmp_path, local, read_only, compared):
    record = ToolRecord(name="w", description="", input_schema={}, read_only=read_only)
    tool = tool_of("s", record, _writer(tmp_path, "a.txt"), local=local)
    context = ToolContext(tmp_path, "t")
    assert tool.run({}, context).content == "wrote"
    assert context.changed == ({"a.txt"} if compared else set())


def test_a_name_a_stdio_server_writes_that_agentfs_cannot_store_is_named_in_the_result(
        tmp_path):
    record = ToolRecord(name="w", description="", input_schema={}, read_only=False)
    tool = tool_of("s", record, _writer(tmp_path, "back\\slash.txt", "fine.txt"), local=True)
    context = ToolContext(tmp_path, "t")
    assert tool.run({}, context).content == (
        "wrote\n[not committed, names agentfs cannot store: 'back\\\\slash.txt' (it holds a "
        "NUL or a backslash)]")
    assert context.changed == {"fine.txt"}
