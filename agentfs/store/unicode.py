"""Text that UTF-8 can hold. Python strings can hold a lone surrogate (U+D800 to
U+DFFF): JSON's `\\ud800` escape makes one, and Python keeps bytes of file names
and arguments that are not UTF-8 as them. No UTF-8 file can hold one, so each door
either replaces them (what agentfs takes as it comes: a model's turn, a tool's
result) or refuses them (what a person or client wrote: a file, a request), here
found once for all.
"""

from __future__ import annotations

import json
import operator
import re
from typing import Any

__all__ = ["LONE_SURROGATE", "escaped", "load_json", "shown", "valid_unicode"]

#: What no UTF-8 text holds.
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
#: A JSON escape of a surrogate: half of a pair (valid) or a lone one (not).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def valid_unicode(value: Any) -> Any:
    """Text, or JSON data, with each lone surrogate replaced by U+FFFD (`value` itself
    if it holds none) and each pair of them joined."""
    if isinstance(value, str):
        if value.isascii():
            return value
        try:
            value.encode()  # far faster than a search, in C
            return value
        except UnicodeEncodeError:
            pass
        # a pair split in two (two JSON escapes read apart) is joined again
        return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    if isinstance(value, list):
        items = [valid_unicode(item) for item in value]
        return value if all(map(operator.is_, items, value)) else items
    if isinstance(value, dict):
        pairs = [(valid_unicode(key), valid_unicode(item)) for key, item in value.items()]
        same = all(new is old for pair, was in zip(pairs, value.items(), strict=True)
                   for new, old in zip(pair, was, strict=True))
        return value if same else dict(pairs)
    return value


def load_json(text: str | bytes) -> Any:
    """`json.loads` of UTF-8 text (after a byte order mark, as `json.loads` reads bytes),
    refusing a lone surrogate escape, which JSON allows and UTF-8 does not (a pair of
    them is one character, and fine).

    Raises:
        json.JSONDecodeError: not JSON, or a lone surrogate escape (its place given).
        UnicodeDecodeError: bytes that are not UTF-8 (UTF-16 included).
        RecursionError: nested too deeply.
    """
    document = text.decode("utf-8-sig") if isinstance(text, bytes) else text
    value = json.loads(document)
    if "\\u" in document and valid_unicode(value) is not value:
        raise json.JSONDecodeError("a lone surrogate escape (\\ud800 to \\udfff) is not "
                                   "valid Unicode text", document, _lone_escape(document))
    return value


def _lone_escape(document: str) -> int:
    """Where the first lone surrogate escape of a JSON text starts (0 if not found)."""
    low_at = -1  # where the low half of a pair just seen starts
    for found in _SURROGATE_ESCAPE.finditer(document):
        start = found.start()
        before = document[:start]
        if (len(before) - len(before.rstrip("\\"))) % 2:
            continue  # an escaped backslash, then the letters `ud800`
        if start == low_at:
            continue  # the low half of a pair
        if found[0][3].lower() in "89ab":  # a high half: a pair if a low one follows
            low = _SURROGATE_ESCAPE.match(document, found.end())
            if low is not None and low[0][3].lower() in "cdef":
                low_at = found.end()
                continue
        return start
    return 0


def escaped(text: str) -> str:
    """`text` as UTF-8 can print it: bytes of a name that are not UTF-8 as `\\xNN`, other
    lone surrogates as `\\udNNN`."""
    return LONE_SURROGATE.sub(_escaped, text)


def shown(name: str) -> str:
    """A file name as UTF-8 can print it (`escaped`), a backslash doubled: told apart
    from a name that holds those characters."""
    return escaped(name.replace("\\", "\\\\"))


def _escaped(found: re.Match[str]) -> str:
    code = ord(found[0])
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"
