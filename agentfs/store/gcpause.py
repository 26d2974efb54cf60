"""Pausing Python's cyclic garbage collector while a long trace is loaded.

Loading a trace creates tens of thousands of objects that all stay alive.
The collector runs every few hundred allocations and, as they pile up,
walks all of them again: on a 10,000-message trace that tripled the time
to list the committed files. Nothing made during a load is garbage, so the
collector is paused for its duration (reference counting still frees what
is dropped) and restored after.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Run the block with the cyclic collector off, then restore its state."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
