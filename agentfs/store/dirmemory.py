"""What a process keeps in memory of the `messages/` folders it read, bounded.

Every `MessageDir` of one folder in a process shares what the others parsed and
listed (`DirMemory`): a server builds a `Trace` per request, and each would
otherwise parse and list afresh. A long-lived process (`agentfs serve`,
`agentfs watch`, a worker) reads many traces; without a bound it would keep every
message it ever read (about 34 MB per 10,000-message trace read whole). So the
folders are kept least recently used first out, up to `KEEP_MESSAGES` parsed
messages' worth (a kept file name counts as `NAMES_PER_MESSAGE`-th of one); the
folder asked for last is kept whatever its size. Forgetting is always safe:
what a `MessageDir` still holds stays valid, and the next one reads the saved
caches on disk, as a new process does.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from pathlib import Path

from agentfs.store import foldernames
from agentfs.store.messages import Message
from agentfs.store.parsecache import ParseCache
from agentfs.store.stamps import Stamp

__all__ = ["KEEP_MESSAGES", "NAMES_PER_MESSAGE", "DirMemory", "Folder", "Kept", "forget",
           "memory_of"]

#: A folder's files as last scanned: their stamps, and the messages by sequence
#: (in order) with where each was found, below `messages/`.
Folder = tuple[dict[str, Stamp], dict[int, Message], dict[int, str]]
#: What one folder's names tell: the folder's (inode, mtime, ctime) when listed, the
#: sequences of its own message files in order, and, once a page of messages listed
#: them (`agentfs/store/message_dir.py:MessageDir._span_names`), the sequences and
#: names of every message file name in it, misplaced ones too, in order (None where
#: only the sequences were listed or loaded from the saved names).
Kept = tuple[foldernames.FolderStamp, list[int], tuple[list[int], list[str]] | None]

#: How much a process keeps of the folders it read besides the last one asked for,
#: in parsed messages (about 3.4 KB each for the benchmark's messages).
KEEP_MESSAGES = 20_000
#: Kept file names that weigh as much as one parsed message (about 110 bytes each).
NAMES_PER_MESSAGE = 16


class DirMemory:
    """What this process keeps of one `messages/` folder, for every `MessageDir` of it."""

    def __init__(self, cache_path: Path) -> None:
        self.parsed = ParseCache(cache_path)  # parsed files, by folder and name
        self.folders: dict[str, Folder] = {}  # folders as last scanned while settled
        self.names: dict[str, Kept] = {}  # what each folder's names tell while settled
        self.names_loaded = False  # the saved names were added to `names`

    def weight(self) -> int:
        """What it holds, in parsed messages' worth (`NAMES_PER_MESSAGE`)."""
        names = sum(len(kept[1]) for kept in list(self.names.values()))  # a copy: threads
        return self.parsed.held() + names // NAMES_PER_MESSAGE


class _Memories:
    """The memory of every folder this process read, least recently asked for first."""

    def __init__(self) -> None:
        self.by_path: OrderedDict[str, DirMemory] = OrderedDict()
        self.weights: dict[str, int] = {}  # each one's weight when it was last left
        self.total = 0  # the sum of `weights`
        self.lock = threading.Lock()  # a server's threads ask for folders side by side
        # Calls since every kept folder was last weighed: a folder read after another was
        # asked for (requests overlap) is weighed again within as many calls as are kept.
        self.calls = 0
        # Forgotten memories a `MessageDir` still holds (a long run): taken back when asked
        # for, not made twice.
        self.evicted: weakref.WeakValueDictionary[str, DirMemory] = weakref.WeakValueDictionary()

    def _weigh(self, key: str) -> None:
        weight = self.by_path[key].weight()
        self.total += weight - self.weights[key]
        self.weights[key] = weight

    def of(self, key: str, cache_path: Path) -> DirMemory:
        with self.lock:
            if self.by_path:
                last = next(reversed(self.by_path))
                if last != key:  # left for another: weigh what it holds now
                    self._weigh(last)
            self.calls += 1
            if self.calls >= len(self.by_path):  # amortized: one weight() per call
                self.calls = 0
                for other in self.by_path:
                    self._weigh(other)
            memory = self.by_path.get(key)
            if memory is None:
                memory = self.evicted.pop(key, None) or DirMemory(cache_path)
                self.by_path[key] = memory
                self.weights[key] = memory.weight()
                self.total += self.weights[key]
            else:
                self.by_path.move_to_end(key)
            if memory.parsed.dir != cache_path:
                memory.parsed = ParseCache(cache_path)
            while len(self.by_path) > 1 and self.total - self.weights[key] > KEEP_MESSAGES:
                oldest, gone = self.by_path.popitem(last=False)  # never `key`: the last
                self.total -= self.weights.pop(oldest)
                self.evicted[oldest] = gone  # found again while a live MessageDir holds it
            return memory

    def clear(self) -> None:
        with self.lock:
            self.by_path.clear()
            self.weights.clear()
            self.total = 0
            self.calls = 0
            self.evicted.clear()


_memories = _Memories()


def memory_of(path: Path, cache_path: Path) -> DirMemory:
    """The memory of the `messages/` folder at `path` (parse cache files at
    `cache_path`), made if none; the least recently used others are forgotten while
    they weigh more than `KEEP_MESSAGES`.

    A folder is weighed when another is asked for after it, and every kept folder
    once in as many calls as are kept (about one weighing a call): one read by
    another thread meanwhile is weighed again within that many calls."""
    return _memories.of(str(path), cache_path)


def forget() -> None:
    """Forget every folder, as a new process starts (tests and benchmarks)."""
    _memories.clear()
