"""Declared skill injection: which skills must be (re-)injected before a model call.

A run declares skills (`run(inject_skills=[...])`). Each injection is recorded
in `trace.json` as `injected_skills[name] = {message_id, sequence}` (the id of
the skill's tool result). Before every model call the runner checks that
message is still among the last `threshold` messages about to be sent; if it
was compressed away or has drifted further back, the skill is injected again
as a synthetic `skill` call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from pydantic import BaseModel, ValidationError

from agentfs.store.messages import Message, Synthetic, ToolCall
from agentfs.store.meta import TraceMeta

DEFAULT_SKILL_RECENCY = 10


class InjectedSkill(BaseModel):
    """Where a declared skill was last injected (a record in trace.json)."""

    message_id: str
    sequence: int


def skill_records(meta: TraceMeta) -> dict[str, InjectedSkill]:
    """The injection records of a trace; a record a person broke counts as absent (the
    skill is then injected again)."""
    records = {}
    for name, data in meta.injected_skills.items():
        try:
            records[name] = InjectedSkill.model_validate(data)
        except ValidationError:
            continue
    return records


def record_injection(meta: TraceMeta, name: str, message: Message) -> None:
    """Note that skill `name` was last injected as `message` (saved by the next commit)."""
    meta.injected_skills[name] = InjectedSkill(
        message_id=message.id, sequence=message.sequence
    ).model_dump()


def skills_to_inject(
    declared: Iterable[str],
    records: Mapping[str, InjectedSkill],
    sent: Sequence[Message],
    threshold: int,
) -> list[str]:
    """Declared skills whose last injection is not among the last `threshold` messages
    of `sent` (the list about to go to the model)."""
    recent = {m.id for m in sent[-threshold:]} if threshold > 0 else set()
    return [
        name
        for name in dict.fromkeys(declared)
        if name not in records or records[name].message_id not in recent
    ]


def loaded_by(calls: Sequence[ToolCall]) -> set[str]:
    """Skills a turn's own `skill` calls load: agentfs does not load them again."""
    return {str(c.input.get("name")) for c in calls if c.name == "skill" and c.input.get("name")}


def synthetic_calls(prefix: str, skills: Sequence[str], context: bool) -> list[ToolCall]:
    """Tool calls agentfs appends: `skill(name)` for each skill, then `get_current_context`."""
    calls = [
        ToolCall(id=f"{prefix}_skill_{i}", name="skill", input={"name": name}, synthetic=Synthetic.SKILL)
        for i, name in enumerate(skills)
    ]
    if context:
        calls.append(
            ToolCall(id=f"{prefix}_context", name="get_current_context", input={}, synthetic=Synthetic.CONTEXT)
        )
    return calls
