"""What tells that a file changed since it was last looked at, and when that can be
trusted: the rule every cache of agentfs keeps its entries by (parsed messages,
folder names, clean folders, the trace list). Standard library only, so the trace
list (`agentfs status`) can use it without loading the message format.
"""

from __future__ import annotations

import os

__all__ = ["COARSE_NS", "RACY_NS", "Stamp", "settled", "stamp_of"]

#: A change this recent (ns) may be followed by another in the same clock tick.
RACY_NS = 100_000_000
#: The same for a file system that keeps whole seconds.
COARSE_NS = 2_000_000_000

Stamp = tuple[int, int, int, int]  # (mtime_ns, ctime_ns, size, inode)


def stamp_of(st: os.stat_result) -> Stamp:
    """What tells that a file changed: (mtime, ctime, size, inode). ctime is set by
    the system on every change and cannot be set back by a program."""
    return st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino


def settled(changed_ns: int, racy_after: int) -> bool:
    """True if a file last changed at `changed_ns`, seen after `racy_after` (ns), cannot
    change again without its stamp changing: the change is older than the last clock
    ticks (`RACY_NS`, or `COARSE_NS` with whole-second timestamps), as Git decides
    for its index's "racily clean" entries. A parsed file is kept by its mtime; a
    whole folder (`_folders`, recovery's clean folders) by the later of its files'
    mtime and ctime, which a program cannot set back."""
    return changed_ns < racy_after and bool(
        changed_ns % 1_000_000_000 or changed_ns < racy_after - COARSE_NS
    )
