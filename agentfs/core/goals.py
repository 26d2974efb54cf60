"""The GoalTree (`goals.json`) and the `goal` tool that maintains it.

Goals have dotted ids (`1`, `1.2`, `1.2.1`); one goal is in focus and every
message records the focused goal's id, which is what Level 1 compression
later uses to find a finished goal's messages.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentfs.errors import AgentfsError
from agentfs.store.goalsfile import Goal, GoalsFile, GoalStatus
from agentfs.store.regularfile import MAX_CONTROL_BYTES
from agentfs.tools.base import Tool, ToolContext, ToolFailure, schema

__all__ = ["Goal", "GoalError", "GoalStatus", "GoalTree", "goal_tool"]

MARKS = {"open": "[ ]", "done": "[x]", "abandoned": "[-]"}


class GoalError(AgentfsError):
    """A goal operation that cannot be done (unknown id, already finished)."""


class GoalTree(GoalsFile):
    """`goals.json` (`agentfs/store/goalsfile.py:GoalsFile`, which reads and writes
    it) and what the agent does with it."""

    def walk(self) -> list[Goal]:
        found: list[Goal] = []
        pending = list(reversed(self.goals))
        while pending:
            goal = pending.pop()
            found.append(goal)
            pending.extend(reversed(goal.children))
        return found

    def find(self, goal_id: str) -> Goal:
        for goal in self.walk():
            if goal.id == goal_id:
                return goal
        known = ", ".join(g.id for g in self.walk()) or "none yet"
        raise GoalError(f"no goal {goal_id!r} (goals: {known})")

    def add(self, title: str, under: str | None = None) -> Goal:
        siblings = self.find(under).children if under else self.goals
        goal_id = f"{under}.{len(siblings) + 1}" if under else str(len(siblings) + 1)
        goal = Goal(id=goal_id, title=title)
        siblings.append(goal)
        if self.focus is None:
            self.focus = goal.id
        return goal

    def finish(self, goal_id: str, status: GoalStatus, summary: str | None) -> Goal:
        goal = self.find(goal_id)
        if goal.status != "open":
            raise GoalError(f"goal {goal_id} is already {goal.status}")
        goal.status = status
        goal.summary = summary
        if self.focus is not None and (self.focus == goal_id or self.focus.startswith(goal_id + ".")):
            self.focus = self._next_focus(goal_id)
        return goal

    def _next_focus(self, finished: str) -> str | None:
        """After finishing a goal: its parent if still open, else the first open goal."""
        parent = finished.rpartition(".")[0]
        if parent and self.find(parent).status == "open":
            return parent
        return next((g.id for g in self.walk() if g.status == "open"), None)

    def to_prompt(self, include_summary: bool = False) -> str:
        """The tree as text; with `include_summary`, finished goals show their summaries."""
        if not self.goals:
            return "(no goals yet: use the goal tool to plan)"
        lines: list[str] = []

        def render(goals: list[Goal], depth: int) -> None:
            for goal in goals:
                arrow = " ← focus" if goal.id == self.focus else ""
                lines.append(f"{'  ' * depth}{MARKS[goal.status]} {goal.id} {goal.title}{arrow}")
                if include_summary and goal.summary and goal.status != "open":
                    lines.append(f"{'  ' * depth}    summary: {goal.summary}")
                render(goal.children, depth + 1)

        render(self.goals, 0)
        return "\n".join(lines)

    def focus_reminder(self) -> str:
        if self.focus is None:
            return "No goal is in focus."
        title = next((g.title for g in self.walk() if g.id == self.focus), "(not in the tree)")
        return f"Current focus: {self.focus} {title}"


GOAL_TOOL_DESCRIPTION = """\
Plan and track your work as a tree of goals. One call can: add a goal \
(`add`: title, optionally `under`: parent id), move the focus (`focus`: id), \
finish a goal (`done`: id with a `summary` of what was achieved), or give one \
up (`abandon`: id with a `summary` of why). Ids look like 1, 1.2, 1.2.1.\
"""


def goal_tool(goals_path: Path) -> Tool:
    """The `goal` tool for the trace whose GoalTree is at `goals_path`."""

    def run(arguments: dict[str, Any], context: ToolContext) -> str:
        tree = GoalTree.load(goals_path)
        updates: list[str] = []
        if not any(arguments.get(k) for k in ("add", "focus", "done", "abandon")):
            raise ToolFailure("give one of: add, focus, done, abandon")
        if arguments.get("add"):
            goal = tree.add(str(arguments["add"]), arguments.get("under") or None)
            updates.append(f"added {goal.id} {goal.title}")
        if arguments.get("focus"):
            goal = tree.find(str(arguments["focus"]))
            tree.focus = goal.id
            updates.append(f"focus moved to {goal.id} {goal.title}")
        finishing: tuple[tuple[str, GoalStatus], ...] = (("done", "done"), ("abandon", "abandoned"))
        for action, status in finishing:
            if arguments.get(action):
                goal = tree.finish(str(arguments[action]), status, arguments.get("summary"))
                updates.append(f"{goal.id} {status}")
        data = tree.dump()
        if len(data) > MAX_CONTROL_BYTES:  # it could not be read back: every step would fail
            raise ToolFailure(f"the goal tree would be {len(data):,} bytes, over the "
                              f"{MAX_CONTROL_BYTES:,}-byte limit of goals.json; finish or "
                              "abandon goals with shorter summaries")
        context.write(goals_path, data)
        return "## Updates\n" + "\n".join(f"- {u}" for u in updates) + (
            f"\n\n## Current plan\n{tree.to_prompt()}\n\n{tree.focus_reminder()}"
        )

    return Tool(
        "goal",
        GOAL_TOOL_DESCRIPTION,
        schema(
            {
                "add": {"type": "string", "description": "Title of a new goal"},
                "under": {"type": "string", "description": "Parent goal id for `add`"},
                "focus": {"type": "string", "description": "Goal id to focus on"},
                "done": {"type": "string", "description": "Goal id that is finished"},
                "abandon": {"type": "string", "description": "Goal id to give up"},
                "summary": {"type": "string", "description": "For done/abandon: outcome or reason"},
            }
        ),
        run,
        read_only=True,  # the trace's own goal tree only
    )
