"""Prompt-cache prefix stability and compression, on long runs through the real SDK.

The same scripted conversation runs once per Level 1 mode (`goal_compression`
= `none`, `on_complete`, and `on_overflow`, the default), each with the
`anthropic:` model pointed at `agentfs.testing.FakeAnthropicServer`. The
model works through tasks: it adds a goal, reads three notes files with
`read_file` and marks the goal done, so the trace grows by a few hundred
tokens per call; agentfs adds its periodic `get_current_context` calls. A
small `context_window` (8,000, or 5,000 with --quick; threshold 0.5) makes
Level 2 (a summary made on a side branch) compress several times in 120
model calls (30 with --quick). Requests for a summary are answered with a
short text and do not advance the script, so every run makes the same
main-path model calls whatever was compressed.

Definitions, over every Messages API request the server got, in arrival
order, side-branch requests included:

- The *blocks* of a request are what Anthropic's prompt cache hashes, in its
  order (tools, then system, then messages): the model, each tool, each
  system block, then each content block of each message, tagged with its
  role; each as canonical JSON (sorted keys, `cache_control` left out).
- A pair of consecutive requests *keeps the prefix* when the earlier one's
  blocks are the first blocks of the later one. The last message of the
  earlier request may have gained blocks in the later one (tool results and
  a user message merge into one message), but a block that changed does not
  count: cache hits end at block boundaries.
- Each pair falls in one of three kinds. *Right after Level 2*: the earlier
  request is a side branch's request for a summary, so the later one is the
  first on the new main path (expected not to keep the prefix). *Across a
  Level 1 change*: the number of "Execution details cleared." results sent,
  that is of goals Level 1 compressed, differs between the two (expected not
  to keep it: Level 1 drops messages from the middle). Every other pair is
  *within a segment* (budget: >= 99% keep the prefix); where such a pair
  stops matching is printed.
- *Tokens* are the fake server's usage, replayed with `PromptCache` (the same
  simulation in the same order; checked against the usage the runner
  recorded): bytes / 4 of a request's canonical JSON, split into input,
  cache read and cache creation. A request's *total* is their sum.
  *Cache-read share* is the sum of cache reads over the sum of the totals.
- *Input tokens sent* is the sum of the totals of a run's requests, side
  branches included. *Before / after Level 2* are the totals of the last
  main-path request before each side branch and of the first one after it.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentfs.core.compaction import CLEARED
from agentfs.core.project import Project, init_workspace
from agentfs.core.sidebranch import SUMMARY_REQUEST
from agentfs.models.resolve import ProviderSettings, resolve_model
from agentfs.testing import FakeAnthropicServer, PromptCache
from bench.fixtures import PARAGRAPH, git
from bench.report import Results

MODES = ("none", "on_complete", "on_overflow")
READS_PER_GOAL = 3
NOTES = 12
CONFIG = """
goal_compression = "{mode}"
context_window = {window}
compression_threshold = 0.5
"""
ASKS_FOR_SUMMARY = SUMMARY_REQUEST[: SUMMARY_REQUEST.index("]") + 1]
FINAL_TEXT = "All tasks are done."
WITHIN, LEVEL1, LEVEL2 = "within", "level1", "level2"


@dataclass
class Run:
    """What one run sent, and what the runner made of the answers."""

    mode: str
    bodies: list[dict[str, Any]]
    usage: list[dict[str, int]]  # the fake server's, one per body
    calls: int
    seconds: float

    def sent(self) -> int:
        return sum(_total(u) for u in self.usage)


def run(results: Results, quick: bool, scratch: Path) -> None:
    steps, window = (30, 5000) if quick else (120, 8000)
    runs = [_drive(scratch / mode, mode, steps, window) for mode in MODES]
    for r in runs:
        _cache_figures(results, r)
    for r in runs:
        _compression_figures(results, r)
    for r in runs[1:]:
        results.add("compression", f"input tokens sent, {r.mode} / none",
                    r.sent() / runs[0].sent(), "x")


class Script:
    """The model: a fixed sequence of tool calls, whatever the request holds."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.step = 0

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        if _asks_for_summary(body):
            return {"text": f"Summary: {self.step} steps done, each task's notes were read."}
        step, self.step = self.step, self.step + 1
        if step >= self.steps:
            return {"text": FINAL_TEXT}
        task, position = divmod(step, READS_PER_GOAL + 2)
        goal = str(task + 1)
        if position == 0:
            return _call(f"Starting task {goal}.", "goal", add=f"Task {goal}")
        if position <= READS_PER_GOAL:
            note = (task * READS_PER_GOAL + position) % NOTES
            return _call(f"Reading note {note}.", "read_file", path=f"notes/{note}.md")
        return _call(f"Task {goal} done.", "goal", done=goal, summary=f"Read task {goal}'s notes")


def _call(text: str, tool: str, **arguments: str) -> dict[str, Any]:
    return {"text": text, "tool_calls": [{"name": tool, "input": arguments}]}


def _drive(root: Path, mode: str, steps: int, window: int) -> Run:
    """Run the script to its end in a new workspace at `root`; record every request."""
    init_workspace(root)
    with (root / "agentfs.toml").open("a") as config:
        config.write(CONFIG.format(mode=mode, window=window))
    (root / "notes").mkdir()
    for note in range(NOTES):
        (root / "notes" / f"{note}.md").write_text(f"# Note {note}\n\n" + PARAGRAPH * 10)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "bench: notes")
    project = Project.open(root)
    with FakeAnthropicServer() as server:
        script = Script(steps)  # one model, answering every request
        server.enqueue(*[script] * (2 * steps + 10))
        settings = ProviderSettings({"anthropic": {"api_key": "bench", "base_url": server.base_url}})
        model = resolve_model("anthropic:claude-bench", base_dir=root, settings=settings)
        runner = project.runner(model)
        started = time.perf_counter()
        outcome = runner.run("t", ["Work through the tasks, one goal each."],
                             max_iterations=steps + 1)
        seconds = time.perf_counter() - started
        bodies = [r.body for r in server.requests]
    project.repo.close()
    if outcome.iterations != steps + 1 or outcome.final_text != FINAL_TEXT:
        raise RuntimeError(f"{mode}: the run stopped early ({outcome.stop} after "
                           f"{outcome.iterations} calls): {outcome.final_text!r}")
    cache = PromptCache()  # replays the server's simulation, request by request
    usage = [cache.usage(body) for body in bodies]
    replayed = sum(_total(u) for u in usage)  # the run counts summary requests too
    if replayed != outcome.input_tokens:
        raise RuntimeError(f"{mode}: the replayed usage ({replayed} tokens) is not the usage "
                           f"the runner recorded ({outcome.input_tokens})")
    return Run(mode, bodies, usage, outcome.iterations, seconds)


# --- cache -------------------------------------------------------------------------


def _cache_figures(results: Results, r: Run) -> None:
    kept: dict[str, list[bool]] = {WITHIN: [], LEVEL1: [], LEVEL2: []}
    for earlier, later in zip(r.bodies, r.bodies[1:]):
        kind = _kind(earlier, later)
        kept[kind].append(_keeps_prefix(earlier, later))
        if kind == WITHIN and not kept[kind][-1]:
            print(f"  {'':<12} prefix broken within a segment ({r.mode}): "
                  f"{_first_difference(earlier, later)}")
    if not kept[WITHIN] or len(kept[LEVEL2]) < 2:
        raise RuntimeError(f"{r.mode}: {len(r.bodies)} requests, {len(kept[LEVEL2])} Level 2 "
                           "compressions; the run is too short or the context window too large")
    read = sum(u["cache_read_input_tokens"] for u in r.usage)
    results.add("cache", f"prefix kept within segments ({r.mode})", _percent(kept[WITHIN]), "%",
                f"budget >= 99; {len(kept[WITHIN])} pairs")
    results.add("cache", f"prefix kept right after Level 2 ({r.mode})", _percent(kept[LEVEL2]),
                "%", f"expected 0; {len(kept[LEVEL2])} pairs")
    results.add("cache", f"pairs across a Level 1 change ({r.mode})", len(kept[LEVEL1]), "pairs",
                f"{sum(kept[LEVEL1])} kept the prefix")
    results.add("cache", f"cache-read share of input tokens ({r.mode})",
                100 * read / r.sent(), "%")


def _kind(earlier: dict[str, Any], later: dict[str, Any]) -> str:
    if _asks_for_summary(earlier):
        return LEVEL2
    if _cleared(earlier) != _cleared(later):
        return LEVEL1
    return WITHIN


def _asks_for_summary(body: dict[str, Any]) -> bool:
    last = _content(body["messages"][-1])[-1]
    return last.get("type") == "text" and last["text"].startswith(ASKS_FOR_SUMMARY)


def _cleared(body: dict[str, Any]) -> int:
    """How many goals Level 1 compressed in this request (one cleared result each)."""
    return sum(block.get("type") == "tool_result" and block.get("content") == CLEARED
               for message in body["messages"] for block in _content(message))


def _content(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def _blocks(body: dict[str, Any]) -> list[tuple[str, bytes]]:
    """(where, canonical JSON) of each block, in the prompt cache's order."""
    items: list[tuple[str, Any]] = [("model", body.get("model"))]
    items += [(f"tools[{i}]", tool) for i, tool in enumerate(body.get("tools") or [])]
    system = body.get("system") or []
    if isinstance(system, str):
        system = [{"type": "text", "text": system}]
    items += [(f"system[{i}]", block) for i, block in enumerate(system)]
    for i, message in enumerate(body["messages"]):
        items += [(f"messages[{i}].content[{j}]", {"role": message["role"], **block})
                  for j, block in enumerate(_content(message))]
    return [(where, _canonical(item)) for where, item in items]


def _canonical(item: Any) -> bytes:
    if isinstance(item, dict):
        item = {k: v for k, v in item.items() if k != "cache_control"}
    return json.dumps(item, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _keeps_prefix(earlier: dict[str, Any], later: dict[str, Any]) -> bool:
    before = [data for _, data in _blocks(earlier)]
    after = [data for _, data in _blocks(later)]
    return after[: len(before)] == before


def _first_difference(earlier: dict[str, Any], later: dict[str, Any]) -> str:
    """Where the later request stops extending the earlier one, and how."""
    for (where, before), (_, after) in zip(_blocks(earlier), _blocks(later)):
        if before != after:
            old, new = (data[:80].decode(errors="replace") for data in (before, after))
            return f"{where}: {old!r}... -> {new!r}..."
    return "the later request is shorter"


def _percent(flags: list[bool]) -> float:
    return 100 * sum(flags) / len(flags)


# --- compression -------------------------------------------------------------------


def _total(usage: dict[str, int]) -> int:
    return (usage["input_tokens"] + usage["cache_read_input_tokens"]
            + usage["cache_creation_input_tokens"])


def _compression_figures(results: Results, r: Run) -> None:
    totals = [_total(u) for u in r.usage]
    sides = [i for i, body in enumerate(r.bodies) if _asks_for_summary(body)]
    before = [totals[i - 1] for i in sides]
    after = [totals[i + 1] for i in sides]
    each = ", ".join(f"{b}->{a}" for b, a in zip(before, after))
    results.add("compression", f"input tokens sent ({r.mode})", r.sent(), "tok",
                f"{r.calls} model calls + {len(sides)} summaries in {r.seconds:.1f} s")
    results.add("compression", f"Level 2 compressions ({r.mode})", len(sides), "")
    results.add("compression", f"mean tokens before Level 2 ({r.mode})",
                statistics.mean(before), "tok", each)
    results.add("compression", f"mean tokens after Level 2 ({r.mode})",
                statistics.mean(after), "tok")
    results.add("compression", f"mean saving per Level 2 ({r.mode})",
                statistics.mean(100 * (1 - a / b) for b, a in zip(before, after)), "%")
