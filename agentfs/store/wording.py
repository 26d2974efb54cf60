"""Counts as people read them, in commit subjects and terminal lines: `1 file`,
`3 files`, never `file(s)`. Standard library only: the CLI imports it at startup."""

from __future__ import annotations

__all__ = ["counted"]


def counted(number: int, noun: str) -> str:
    """`1 call`, `3 calls`: a count and its noun, in the singular for one."""
    return f"{number} {noun}" + ("" if number == 1 else "s")
