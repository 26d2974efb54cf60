"""Work over a list of messages that mostly grows at its end, kept between calls.

A run sends the main path at every iteration, and the path is the last one plus
the messages of one step. What is computed over it (token sums, copies without
thinking blocks) is kept with the list it was computed for; the next list pays
a comparison with it, done in C (`==`, identity first), plus the new messages.
A list that differs earlier (Level 1 compression, a rewind, an edit) is
computed again from the first difference. What is kept is replaced, never
changed in place, so a builder shared between threads stays correct.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from agentfs.store.messages import Message

__all__ = ["PrefixMap", "PrefixSums", "shared_prefix"]


def shared_prefix(a: Sequence[Message], b: Sequence[Message]) -> int:
    """How many messages `a` and `b` share at their start (`==`), with slice
    comparisons in C: a bisection when they differ somewhere."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    low, high = 0, n  # a[:low] == b[:low]; a[:high] != b[:high]
    while high - low > 1:
        middle = (low + high) // 2
        if a[low:middle] == b[low:middle]:
            low = middle
        else:
            high = middle
    return low


@dataclass(frozen=True)
class _Measured:
    messages: list[Message]
    sums: list[int]  # sums[i]: the measure of messages[:i]


class PrefixSums:
    """A per-message measure summed over lists, measured again only past the part a
    list shares with one measured before (the last `keep` lists are remembered).

    Messages are compared with `==`, so an equal copy counts as the same message.
    """

    def __init__(self, measure: Callable[[Message], int], keep: int = 4) -> None:
        self.measure = measure
        self.keep = keep
        self._kept: tuple[_Measured, ...] = ()

    def total(self, messages: Sequence[Message]) -> int:
        messages = list(messages)
        kept = self._kept
        best, shared = _longest_shared(kept, messages)
        sums = best.sums[: shared + 1] if best is not None else [0]
        running = sums[-1]
        for message in messages[shared:]:
            running += self.measure(message)
            sums.append(running)
        self._kept = _remember(kept, _Measured(messages, sums), best, shared, self.keep)
        return running


@dataclass(frozen=True)
class _Mapped:
    messages: list[Message]
    results: list[Message]


class PrefixMap:
    """`[transform(m) for m in messages]`, transforming again only past the part a
    list shares with one transformed before; the results for the shared part are
    the same objects as last time (so sums over them are found in `PrefixSums`)."""

    def __init__(self, transform: Callable[[Message], Message], keep: int = 2) -> None:
        self.transform = transform
        self.keep = keep
        self._kept: tuple[_Mapped, ...] = ()

    def __call__(self, messages: Sequence[Message]) -> list[Message]:
        messages = list(messages)
        kept = self._kept
        best, shared = _longest_shared(kept, messages)
        results = best.results[:shared] if best is not None else []
        results += [self.transform(m) for m in messages[shared:]]
        self._kept = _remember(kept, _Mapped(messages, results), best, shared, self.keep)
        return list(results)


_Kept = TypeVar("_Kept", _Measured, _Mapped)


def _longest_shared(kept: tuple[_Kept, ...], messages: list[Message]) -> tuple[_Kept | None, int]:
    """The remembered list sharing the longest start with `messages`, and how long."""
    best: _Kept | None = None
    shared = 0
    for entry in kept:
        n = shared_prefix(entry.messages, messages)
        if best is None or n > shared:
            best, shared = entry, n
    return best, shared


def _remember(kept: tuple[_Kept, ...], new: _Kept, best: _Kept | None, shared: int,
              keep: int) -> tuple[_Kept, ...]:
    """`new` first; `best` dropped when `new` extends it; at most `keep` entries."""
    superseded = best if best is not None and shared == len(best.messages) else None
    return (new,) + tuple(e for e in kept if e is not superseded)[: keep - 1]
