"""The goal tool never writes a goals.json it would refuse to read back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentfs.core import goals
from agentfs.tools.base import ToolContext, ToolRegistry


def test_a_goal_tree_over_the_read_limit_is_refused_and_the_file_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "goals.json"
    registry = ToolRegistry()
    registry.add(goals.goal_tool(path))
    context = ToolContext(root=tmp_path, trace_id="t")
    registry.call("goal", {"add": "ship it"}, context)
    kept = path.read_bytes()
    monkeypatch.setattr(goals, "MAX_CONTROL_BYTES", len(kept) + 10)
    result = registry.call("goal", {"add": "x" * 100}, context)
    assert result.is_error and "over the" in str(result) and "goals.json" in str(result)
    assert path.read_bytes() == kept
    assert [g["title"] for g in json.loads(kept)["goals"]] == ["ship it"]
