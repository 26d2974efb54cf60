"""The copies a merge keeps of a file changed both ways (`agentfs sync`).

Named in one place, with no heavy imports, because the inbox rules
(`agentfs/store/inbox.py:is_ignored_name`) must know them too: a copy is never
a message, and `sync` refuses to push while one is left.
"""

from __future__ import annotations

import re

__all__ = ["CONFLICT_COPY", "conflict_copy"]

#: `<path>.conflict-<12 hex of the merging side's commit>`.
CONFLICT_COPY = re.compile(r".*\.conflict-[0-9a-f]{12}\Z", re.DOTALL)


def conflict_copy(path: str, ours: bytes) -> str:
    """Where a merge keeps our version of `path` when both sides changed it."""
    return f"{path}.conflict-{ours.decode()[:12]}"
