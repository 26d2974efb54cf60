"""`goals.json`: the goal tree's shape on disk and its one reader.

Runs, `agentfs doctor` and the check of a hand edit before recovery commits it
(`agentfs/store/recovery.py`) read the file through `GoalsFile.load`, so a tree
one of them refuses is refused by all. What the agent does with the tree is
`agentfs/core/goals.py:GoalTree`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal, Self

from pydantic import BaseModel, Field, ValidationError

from agentfs.errors import AgentfsError, validation_problems
from agentfs.store.regularfile import read_trace_file

__all__ = ["Goal", "GoalStatus", "GoalsFile"]

GoalStatus = Literal["open", "done", "abandoned"]


class Goal(BaseModel):
    id: str
    title: str
    status: GoalStatus = "open"
    summary: str | None = Field(default=None, description="What was achieved, or why abandoned")
    children: list[Goal] = Field(default_factory=list)


class GoalsFile(BaseModel):
    """Contents of `goals.json`: the goals and the id of the one in focus."""

    goals: list[Goal] = Field(default_factory=list)
    focus: str | None = None

    @classmethod
    def load(cls, path: Path) -> Self:
        """The tree in `path`; an empty one if there is no such file.

        Raises:
            AgentfsError: the file cannot be read as a goal tree (naming it and why).
        """
        try:
            return cls.model_validate_json(read_trace_file(path))
        except FileNotFoundError:
            return cls()
        except ValidationError as exc:
            raise AgentfsError(
                f"{path}: not a valid goal tree ({validation_problems(exc)})",
                hint="fix it or restore it with git",
            ) from None

    def dump(self) -> bytes:
        return (json.dumps(self.model_dump(mode="json"), indent=2, ensure_ascii=False)
                + "\n").encode()
