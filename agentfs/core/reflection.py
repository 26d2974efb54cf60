"""Reflection and knowledge evaluation side branches, and their outcomes on `main`.

Reflection asks the model for lessons from the trace, which become pending
knowledge items; knowledge evaluation asks it to accept or reject pending
items. Both run on a side branch (`agentfs/core/sidebranch.py:run_branch`)
that continues the main path's request with the same tool list, so what was
already sent stays byte-identical. The model answers in text, in a format
the prompt gives (`parse_lessons`, `parse_verdicts`); of the tools it is
offered, only the read-only ones run there (`READ_ONLY_TOOLS`), other calls
get an error result. Each branch ends in an `outcome` commit holding the item
files, which the queue merges into main (`agentfs/core/sidequeue.py`).
"""

from __future__ import annotations

import re
from collections.abc import Collection

from agentfs.core.knowledge import KnowledgeItem, load_items, slug
from agentfs.core.sidebranch import SideWork, commit_outcome, run_branch
from agentfs.store.meta import QueueStep
from agentfs.store.trace import Trace

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


def reflection_branch(work: SideWork, step: QueueStep) -> None:
    """Ask for lessons on the branch; its outcome is one pending knowledge item per
    lesson (`knowledge/<id>.md`)."""
    trace = work.trace
    text = run_branch(work, step, REFLECT_PROMPT, runnable=READ_ONLY_TOOLS)
    taken = {item.id for item in load_items(trace.workspace.knowledge_dir)}
    messages = work.request.messages
    source = messages[-1].sequence if messages else None
    files = {}
    for title, body in parse_lessons(text):
        item = KnowledgeItem(id=slug(title, taken), title=title, body=body,
                             source_trace=trace.id, source_sequence=source)
        taken.add(item.id)
        files[_item_path(trace, item)] = item.render()
    commit_outcome(work, step, [], files, f"{len(files)} knowledge item(s)")


def knowledge_eval_branch(work: SideWork, step: QueueStep) -> None:
    """Show the pending items on the branch and ask for verdicts; its outcome is the
    judged items' files, with their new status and reason."""
    trace = work.trace
    pending = {i.id: i for i in pending_items(trace, step.items)}
    listing = "\n\n".join(f"### {i.id}: {i.title}\n{i.body}" for i in pending.values())
    text = run_branch(work, step, EVAL_PROMPT.format(items=listing), runnable=READ_ONLY_TOOLS)
    for verdict, item_id, reason in parse_verdicts(text):
        item = pending.get(item_id)
        if item is not None and item.status == "pending":
            item.status = "accepted" if verdict == "accept" else "rejected"
            item.reason = reason
    judged = [i for i in pending.values() if i.status != "pending"]
    commit_outcome(work, step, [], {_item_path(trace, i): i.render() for i in judged},
                   f"{len(judged)} item(s) judged")


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


def pending_items(trace: Trace, only: Collection[str] | None = None) -> list[KnowledgeItem]:
    """The pending knowledge items (of those named in `only`, if given)."""
    return [i for i in load_items(trace.workspace.knowledge_dir)
            if i.status == "pending" and (only is None or i.id in only)]


def _item_path(trace: Trace, item: KnowledgeItem) -> str:
    return trace.rel(trace.workspace.knowledge_dir / f"{item.id}.md")
