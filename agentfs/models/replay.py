"""The `replay` model: scripted responses from a JSON or YAML file, fully offline.

    {"turns": [{"text": "...", "tool_calls": [{"name": "read_file", "input": {...}}]}, ...],
     "compression": [...], "reflection": [...], "knowledge_eval": [...]}

Main-path calls take `turns` in order; each side-branch type takes its own
list. The position is the request's `call_index`, which the runner derives
from the files on disk, so a killed and resumed run picks up where it stopped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentfs.errors import ConfigError, ModelError, validation_problems
from agentfs.models.base import ModelRequest, ModelResponse, TextSink
from agentfs.store.frontmatter import FrontmatterError, load_yaml
from agentfs.store.messages import ToolCall, Usage
from agentfs.store.regularfile import FileRefused, read_regular


class ReplayToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    input: dict[str, Any] = Field(default_factory=dict)


class ReplayTurn(BaseModel):
    """One scripted assistant turn: text and/or tool calls."""

    model_config = ConfigDict(extra="forbid")

    text: str = ""
    tool_calls: list[ReplayToolCall] = Field(default_factory=list)


class ReplayScript(BaseModel):
    model_config = ConfigDict(extra="forbid")

    turns: list[ReplayTurn] = Field(default_factory=list)
    compression: list[ReplayTurn] = Field(default_factory=list)
    reflection: list[ReplayTurn] = Field(default_factory=list)
    knowledge_eval: list[ReplayTurn] = Field(default_factory=list)

    def for_branch(self, branch_type: str | None) -> list[ReplayTurn]:
        if branch_type is None:
            return self.turns
        return getattr(self, branch_type, None) or []


#: The largest replay script read: scripts may hold huge tool inputs on purpose (tests
#: of the limits), but not a file that would exhaust memory.
MAX_SCRIPT_BYTES = 256 * 1024 * 1024


def load_script(path: Path) -> ReplayScript:
    """Read and validate a replay script; errors name the file and the entry."""
    try:
        # a regular file (a link to one too) within a limit: a name like
        # `replay:/dev/zero` in a dropped file must not hang or exhaust the run
        text = read_regular(path, MAX_SCRIPT_BYTES, what="replay scripts",
                            follow=True).decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"replay script {path} does not exist", hint="check the path after 'replay:'"
        ) from None
    except FileRefused as exc:
        raise ConfigError(f"replay script {exc.message}", hint=exc.hint) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"replay script {path}: cannot read ({exc})") from None
    try:
        # YAML with the message files' limits: no aliases (a script may come with a clone)
        data = json.loads(text) if path.suffix == ".json" else load_yaml(text)
    except (json.JSONDecodeError, FrontmatterError) as exc:
        raise ConfigError(f"replay script {path}: not valid JSON/YAML ({exc})") from None
    try:
        return ReplayScript.model_validate(data or {})
    except ValidationError as exc:
        raise ConfigError(f"replay script {path}: {validation_problems(exc)}") from None


class ReplayModel:
    """Plays back a `ReplayScript`."""

    def __init__(self, script_path: Path) -> None:
        self.script_path = script_path
        self.script = load_script(script_path)
        self.name = f"replay:{script_path.name}"

    def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelResponse:
        turns = self.script.for_branch(request.branch_type)
        list_name = request.branch_type or "turns"
        if request.call_index >= len(turns) and request.branch_type:
            raise ModelError(
                f"replay script {self.script_path.name} has no more '{list_name}' entries "
                f"(all {len(turns)} used): a side branch needs one for each of its calls",
                hint=f"add entries to '{list_name}' in {self.script_path}",
            )
        if request.call_index >= len(turns):
            text = (
                f"[replay script {self.script_path.name} has no more '{list_name}' entries "
                f"(all {len(turns)} used); stopping.]"
            )
            turn = ReplayTurn(text=text)
        else:
            turn = turns[request.call_index]
        if turn.text and on_text is not None:
            on_text(turn.text)
        prefix = "toolu_replay" if request.branch_type is None else f"toolu_{request.branch_type}"
        calls = [
            ToolCall(id=f"{prefix}_{request.call_index}_{i}", name=c.name, input=c.input)
            for i, c in enumerate(turn.tool_calls)
        ]
        return ModelResponse(
            text=turn.text,
            tool_calls=calls,
            stop_reason="tool_use" if calls else "end_turn",
            usage=Usage(),
            model=self.name,
        )
