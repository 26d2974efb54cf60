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

__all__ = ["LONE_SURROGATE", "load_json", "shown", "valid_unicode"]

#: What no UTF-8 text holds.
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
#: A JSON escape of a surrogate: half of a pair (valid) or a lone one (not).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_BYTES_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


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
    """`json.loads`, refusing a lone surrogate escape, which JSON allows and UTF-8 does not.

    Raises:
        json.JSONDecodeError: not JSON, or a lone surrogate escape (its place given).
        UnicodeDecodeError: bytes that are not UTF-8.
        RecursionError: nested too deeply.
    """
    value = json.loads(text)
    found = (_BYTES_ESCAPE.search(text) if isinstance(text, bytes)
             else _SURROGATE_ESCAPE.search(text))
    if found is not None and valid_unicode(value) is not value:
        document = text.decode() if isinstance(text, bytes) else text
        escape = _SURROGATE_ESCAPE.search(document)
        raise json.JSONDecodeError("a lone surrogate escape (\\ud800 to \\udfff) is not "
                                   "valid Unicode text", document, escape.start() if escape else 0)
    return value


def shown(text: str) -> str:
    """`text` as UTF-8 can print it: bytes of a name that are not UTF-8 as `\\xNN`, other
    lone surrogates as `\\udNNN` (a file name is told apart from its neighbours)."""
    return LONE_SURROGATE.sub(_escaped, text)


def _escaped(found: re.Match[str]) -> str:
    code = ord(found[0])
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"
