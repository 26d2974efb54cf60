"""Fast start: `agentfs --help` and `agentfs status` load neither the runner nor the
heavy dependencies, and the lazy public API still resolves every name.

What is checked is which modules a new process imports (behaviour), never how
long it takes; `bench/startup.py` measures the time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_cli

#: Never needed to print help or the status of a workspace.
HEAVY = ("anthropic", "pydantic", "pydantic_core", "tiktoken", "dulwich", "watchdog", "yaml",
         "asyncio", "agentfs.core.runner", "agentfs.core.project", "agentfs.models",
         "agentfs.tools")


def imported_by(args: list[str], cwd: Path) -> set[str]:
    """Modules a new `python -X importtime ARGS` process imports (importtime's stderr)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *args], cwd=cwd, capture_output=True, text=True,
        env={**os.environ}, check=False, timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines()
            if line.startswith("import time:") and "|" in line}


def heavy_in(modules: set[str]) -> set[str]:
    return {m for m in modules for h in HEAVY if m == h or m.startswith(h + ".")}


def test_import_agentfs_cli_loads_no_heavy_dependency(tmp_path):
    modules = imported_by(["-c", "import agentfs.cli, agentfs.cli.commands"], tmp_path)
    assert "click" in modules and "agentfs.cli.commands" in modules  # the probe sees imports
    assert heavy_in(modules) == set()


def test_help_loads_no_heavy_dependency(tmp_path):
    modules = imported_by(["-m", "agentfs", "--help"], tmp_path)
    assert heavy_in(modules) == set()


def without_times(row: dict) -> dict:
    """A status row without what depends on the clock: when it was written, how long
    its calls took."""
    usage = row.get("usage")
    usage = usage and {k: v for k, v in usage.items() if k not in ("model_ms", "wall_ms")}
    return {**{k: v for k, v in row.items() if k not in ("updated", "last_activity")},
            "usage": usage}


def test_status_of_a_workspace_with_a_trace_loads_no_heavy_dependency(workspace):
    run_cli("new", "t", "-m", "hello", cwd=workspace)
    (workspace / "traces" / "t" / "inbox" / "next.md").write_text("more\n")
    modules = imported_by(["-m", "agentfs", "status"], workspace)
    assert heavy_in(modules) == set()
    rows = json.loads(run_cli("status", "--json", cwd=workspace).stdout)["traces"]
    assert [without_times(row) for row in rows] == [{
        "trace": "t", "head": 2, "running": False, "pending_inbox": ["next.md"], "rejected": [],
        "usage": {"calls": 0, "input_tokens": 0, "cached_tokens": 0, "output_tokens": 0,
                  "cost": {"usd": 0.0, "estimated": False, "unpriced": [], "text": "$0.0000"},
                  "text": "no model calls"},
        "status": "idle", "messages": 2, "title": "hello"}]


#: What only running a trace needs: its tools, context injection and goals.
RUN_ONLY = ("agentfs.tools", "agentfs.core.context", "agentfs.core.goals", "agentfs.core.runner",
            "anthropic", "tiktoken", "regex", "asyncio")


def test_show_and_log_load_nothing_only_a_run_needs(workspace):
    run_cli("new", "t", "-m", "hello", cwd=workspace)
    for command in (["show", "t", "--tail", "5"], ["log", "t"]):
        modules = imported_by(["-m", "agentfs", *command], workspace)
        assert "agentfs.store.messages" in modules  # the probe sees what was read
        loaded = {m for m in modules for h in RUN_ONLY if m == h or m.startswith(h + ".")}
        assert loaded == set(), command


@pytest.mark.parametrize(("content", "problem"), [
    ("{not json", "not valid JSON"),
    ('{"id": "t", "head": "two"}', "invalid fields: head"),
    ('{"id": "t", "head": 2, "context": []}', "invalid fields: context"),
    ('["a list"]', "invalid fields"),
    ('{"id": "t", "format_version": 99}', "written by a newer agentfs"),
])
def test_status_reports_a_broken_trace_json_with_what_is_wrong(workspace, content, problem):
    run_cli("new", "good", "-m", "hello", cwd=workspace)
    run_cli("new", "t", "-m", "hello", cwd=workspace)
    (workspace / "traces" / "t" / "trace.json").write_text(content)
    rows = json.loads(run_cli("status", "--json", cwd=workspace, check=False).stdout)["traces"]
    assert without_times(rows[0]) | {"usage": None} == {
        "trace": "good", "head": 2, "running": False, "pending_inbox": [], "rejected": [],
        "usage": None, "status": "idle", "messages": 2, "title": "hello"}
    assert rows[1]["trace"] == "t" and rows[1]["head"] is None and rows[1]["messages"] is None
    assert problem in rows[1]["error"] and "trace.json" in rows[1]["error"]
    done = run_cli("status", cwd=workspace, check=False)
    assert done.returncode == 1 and "t " in done.stdout and "BROKEN" in done.stdout


def test_status_sees_a_running_trace(workspace):
    from agentfs.core.project import Project

    run_cli("new", "t", "-m", "hello", cwd=workspace)
    with Project.open(workspace).trace("t").lock():
        rows = json.loads(run_cli("status", "--json", cwd=workspace).stdout)["traces"]
    assert rows[0]["running"] is True
    rows = json.loads(run_cli("status", "--json", cwd=workspace).stdout)["traces"]
    assert rows[0]["running"] is False


def test_new_with_the_id_of_a_running_trace_says_it_exists(workspace):
    from agentfs.core.project import Project

    run_cli("new", "t", "-m", "hello", cwd=workspace)
    with Project.open(workspace).trace("t").lock():  # a run holds it
        done = run_cli("new", "t", "-m", "again", cwd=workspace, check=False)
    assert done.returncode == 1, done.stderr
    assert "trace 't' already exists" in done.stderr and "agentfs run t" in done.stderr


def test_public_api_resolves_every_name_lazily_in_a_new_process(tmp_path):
    probe = (
        "import sys, agentfs\n"
        "assert 'pydantic' not in sys.modules and 'agentfs.core.runner' not in sys.modules\n"
        "from agentfs import Project, Runner\n"
        "assert Project.__name__ == 'Project' and 'agentfs.core.runner' in sys.modules\n"
        "for name in agentfs.__all__:\n"
        "    getattr(agentfs, name)\n"
        "assert set(agentfs.__all__) <= set(dir(agentfs))\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True,
                          text=True, check=False, timeout=60)
    assert done.stdout.strip() == "ok", done.stderr


def test_public_api_names_one_home_for_each_name_and_nothing_else():
    import agentfs

    assert set(agentfs.__all__) == set(agentfs._HOMES) | {"__version__"}
    for name, home in agentfs._HOMES.items():
        value = getattr(agentfs, name)
        assert value is getattr(sys.modules[home], name)
    with pytest.raises(AttributeError, match="no attribute 'Nonesuch'"):
        agentfs.Nonesuch  # noqa: B018
    assert not hasattr(agentfs, "Nonesuch")
