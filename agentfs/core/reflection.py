"""Reflection and knowledge evaluation side branches, and their outcomes on `main`.

Reflection asks the model for lessons from the trace, which become pending
knowledge items; knowledge evaluation asks it to accept or reject pending
items. Both run on a side branch (`agentfs/core/sidebranch.py:run_branch`)
that continues the main path's request with the same tool list, so what was
already sent stays byte-identical. The model answers in text, in a format
the prompt gives (`parse_lessons`, `parse_verdicts`); of the tools it is
offered, only the read-only ones run there (`READ_ONLY_TOOLS`), other calls
get an error result. Each branch ends in one `outcome` commit on main that
writes the item files, with the branch's head as second parent.
"""

from __future__ import annotations

import re
from dataclasses import replace

from agentfs.core.knowledge import KnowledgeItem, load_items, slug
from agentfs.core.sidebranch import run_branch
from agentfs.models.base import Model, ModelRequest
from agentfs.store.atomic import atomic_write
from agentfs.store.messages import Message
from agentfs.store.trace import Trace
from agentfs.tools.base import ToolRegistry

REFLECTION = "reflection"
KNOWLEDGE_EVAL = "knowledge_eval"
#: The tools that run on reflection and knowledge-evaluation branches; they change nothing.
READ_ONLY_TOOLS = frozenset({"read_file", "list_files", "grep", "knowledge_search"})

REFLECT_PROMPT = """\
[agentfs: reflection] Before this work continues, look back at it. Write each \
lesson worth reusing in other tasks (a pitfall, a working approach, a fact about \
this workspace) as a section of your answer: a line starting with `## ` and a short \
title, then the lesson in a few specific lines. Write no section if nothing is worth \
keeping. You may read files and search knowledge with the tools; no other tool runs \
here."""

EVAL_PROMPT = """\
[agentfs: knowledge evaluation] Judge these pending knowledge items: accept an item \
only if it is correct, specific and reusable; reject it otherwise. Answer with one \
line per item, `accept ID: reason` or `reject ID: reason`. You may read files and \
search knowledge with the tools; no other tool runs here.

{items}"""

VERDICT = re.compile(r"^\W*(accept|reject)\W+([\w.-]+)\W*(.*)$", re.IGNORECASE)


def reflect(trace: Trace, model: Model, request: ModelRequest, tools: ToolRegistry,
            ) -> list[KnowledgeItem]:
    """Run a reflection branch after `request` (the main path's, as sent, with
    `tools` its registry); commit the lessons as pending items on main. Returns them."""
    branch, head, text = run_branch(
        trace, model, REFLECTION, request, REFLECT_PROMPT, tools=tools,
        runnable=READ_ONLY_TOOLS,
    )
    folder = trace.workspace.knowledge_dir
    taken = {item.id for item in load_items(folder)}
    source = request.messages[-1].sequence if request.messages else None
    collected = []
    for title, body in parse_lessons(text):
        item = KnowledgeItem(id=slug(title, taken), title=title, body=body,
                             source_trace=trace.id, source_sequence=source)
        taken.add(item.id)
        collected.append(item)
    _commit_items(trace, collected, head, f"{branch}: {len(collected)} knowledge item(s)")
    return collected


def reflect_on_answer(trace: Trace, model: Model, request: ModelRequest, answer: Message,
                      tools: ToolRegistry) -> list[KnowledgeItem]:
    """Reflection after `answer`, the model's final answer to `request`."""
    return reflect(trace, model, replace(request, messages=[*request.messages, answer]), tools)


def evaluate_knowledge(trace: Trace, model: Model, request: ModelRequest,
                       tools: ToolRegistry) -> list[KnowledgeItem]:
    """Run a knowledge_eval branch over the pending items; commit the verdicts on main."""
    pending = {i.id: i for i in load_items(trace.workspace.knowledge_dir) if i.status == "pending"}
    if not pending:
        return []
    listing = "\n\n".join(f"### {i.id}: {i.title}\n{i.body}" for i in pending.values())
    branch, head, text = run_branch(
        trace, model, KNOWLEDGE_EVAL, request, EVAL_PROMPT.format(items=listing), tools=tools,
        runnable=READ_ONLY_TOOLS,
    )
    for verdict, item_id, reason in parse_verdicts(text):
        item = pending.get(item_id)
        if item is not None and item.status == "pending":
            item.status = "accepted" if verdict == "accept" else "rejected"
            item.reason = reason
    judged = [i for i in pending.values() if i.status != "pending"]
    _commit_items(trace, judged, head, f"{branch}: {len(judged)} item(s) judged")
    return judged


def parse_lessons(text: str) -> list[tuple[str, str]]:
    """(title, text) of each `## ` section of a reflection answer; a section without
    a title or a text is skipped, and so is anything before the first section."""
    lessons = []
    for part in re.split(r"^## ", text, flags=re.MULTILINE)[1:]:
        title, _, body = part.partition("\n")
        if title.strip() and body.strip():
            lessons.append((title.strip(), body.strip()))
    return lessons


def parse_verdicts(text: str) -> list[tuple[str, str, str]]:
    """(`accept` or `reject`, item id, reason) of each verdict line of an answer."""
    found = []
    for line in text.splitlines():
        match = VERDICT.match(line.strip())
        if match:
            found.append((match[1].lower(), match[2], match[3].strip()))
    return found


def pending_items(trace: Trace) -> bool:
    return any(i.status == "pending" for i in load_items(trace.workspace.knowledge_dir))


def _commit_items(trace: Trace, items: list[KnowledgeItem], head: bytes, summary: str) -> None:
    paths = []
    for item in items:
        path = trace.workspace.knowledge_dir / f"{item.id}.md"
        atomic_write(path, item.render(), tmp_dir=trace.tmp_dir)
        paths.append(trace.workspace.relpath(path))
    trace.commit_step("outcome", [], extra_paths=paths, extra_parents=[head], summary=summary)
