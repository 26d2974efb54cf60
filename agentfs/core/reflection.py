"""Reflection and knowledge evaluation side branches, and their outcomes on `main`.

Reflection lets the model save lessons from the trace as pending knowledge
items; knowledge evaluation accepts or rejects pending items. Both run on a
side branch (`agentfs/core/sidebranch.py:run_branch`) and end in one
`outcome` commit on main that writes the item files, with the branch's head
as second parent.
"""

from __future__ import annotations

from agentfs.core.knowledge import (
    KnowledgeItem,
    judge_knowledge_tool,
    knowledge_search_tool,
    load_items,
    save_knowledge_tool,
)
from agentfs.core.sidebranch import run_branch
from agentfs.models.base import Model
from agentfs.store.atomic import atomic_write
from agentfs.store.messages import Message
from agentfs.store.trace import Trace
from agentfs.tools.base import ToolRegistry
from agentfs.tools.files import FILE_TOOLS

REFLECTION = "reflection"
KNOWLEDGE_EVAL = "knowledge_eval"
READ_ONLY_TOOLS = [t for t in FILE_TOOLS if t.name in ("read_file", "list_files", "grep")]

REFLECT_PROMPT = """\
[agentfs: reflection] Before this work continues, look back at it. Save each \
lesson worth reusing in other tasks (a pitfall, a working approach, a fact about \
this workspace) with the save_knowledge tool: one item per lesson, short and \
specific. Save nothing if nothing is worth keeping. Then answer with one line."""

EVAL_PROMPT = """\
[agentfs: knowledge evaluation] Judge these pending knowledge items with the \
judge_knowledge tool: accept an item only if it is correct, specific and reusable; \
reject it otherwise. Give a short reason each time.

{items}"""


def reflect(trace: Trace, model: Model, history: list[Message], *, system: str,
            max_tokens: int) -> list[KnowledgeItem]:
    """Run a reflection branch; commit the items it saved on main. Returns them."""
    folder = trace.workspace.knowledge_dir
    taken = {item.id for item in load_items(folder)}
    collected: list[KnowledgeItem] = []
    source = history[-1].sequence if history else None
    tools = ToolRegistry([
        save_knowledge_tool(collected, trace.id, source, taken),
        knowledge_search_tool(folder),
        *READ_ONLY_TOOLS,
    ])
    branch, head, _ = run_branch(
        trace, model, REFLECTION, history, REFLECT_PROMPT, system=system,
        specs=tools.specs(), tools=tools, max_tokens=max_tokens,
    )
    _commit_items(trace, collected, head, f"{branch}: {len(collected)} knowledge item(s)")
    return collected


def evaluate_knowledge(trace: Trace, model: Model, history: list[Message], *, system: str,
                       max_tokens: int) -> list[KnowledgeItem]:
    """Run a knowledge_eval branch over the pending items; commit the verdicts on main."""
    pending = {i.id: i for i in load_items(trace.workspace.knowledge_dir) if i.status == "pending"}
    if not pending:
        return []
    listing = "\n\n".join(f"### {i.id}: {i.title}\n{i.body}" for i in pending.values())
    tools = ToolRegistry([judge_knowledge_tool(pending), knowledge_search_tool(
        trace.workspace.knowledge_dir)])
    branch, head, _ = run_branch(
        trace, model, KNOWLEDGE_EVAL, history, EVAL_PROMPT.format(items=listing),
        system=system, specs=tools.specs(), tools=tools, max_tokens=max_tokens,
    )
    judged = [i for i in pending.values() if i.status != "pending"]
    _commit_items(trace, judged, head, f"{branch}: {len(judged)} item(s) judged")
    return judged


def pending_items(trace: Trace) -> bool:
    return any(i.status == "pending" for i in load_items(trace.workspace.knowledge_dir))


def _commit_items(trace: Trace, items: list[KnowledgeItem], head: bytes, summary: str) -> None:
    paths = []
    for item in items:
        path = trace.workspace.knowledge_dir / f"{item.id}.md"
        atomic_write(path, item.render(), tmp_dir=trace.tmp_dir)
        paths.append(trace.workspace.relpath(path))
    trace.commit_step("outcome", [], extra_paths=paths, extra_parents=[head], summary=summary)
