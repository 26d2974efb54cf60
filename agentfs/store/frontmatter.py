"""YAML frontmatter of Markdown files: messages, skills and knowledge items all use this one.

These files are untrusted input (a person or a dropped file wrote them), so
YAML is read with limits: no anchors or aliases (an alias bomb is refused at
its first anchor, before anything is expanded), at most `MAX_DEPTH` nested
collections, at most `MAX_HEADER_BYTES`. The nodes are composed from parser
events without recursion, so even a 100,000-deep `[[[...` cannot exhaust the
stack. Writing checks the same limits first: agentfs never writes a header
it would refuse to read.

The fence rules keep message files byte-identical on a round trip: the file
starts with a `---` line (after an optional BOM; CRLF allowed), the header
ends at the next line that is exactly `---`, and the body loses one final
newline, which `render` adds back.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.events import (
    AliasEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from agentfs.errors import AgentfsError

__all__ = [
    "MAX_DEPTH",
    "MAX_HEADER_BYTES",
    "FrontmatterError",
    "Problem",
    "check_depth",
    "load_yaml",
    "misplaced_fields",
    "render",
    "replace_body",
    "split",
]

#: Collections nested deeper than this are refused (the top-level mapping counts as 1).
MAX_DEPTH = 32
#: Larger headers are refused: every small YAML value costs hundreds of bytes of memory.
MAX_HEADER_BYTES = 256 * 1024

#: The header starts on the file's second line; YAML marks count lines from 0.
_FIRST_LINE = 2

_CONTAINERS = (dict, list, tuple, set, frozenset)


class Problem(enum.StrEnum):
    """What is wrong with a header, so callers can word the common cases their own way."""

    UNCLOSED = "unclosed"
    SYNTAX = "syntax"
    NOT_MAPPING = "not a mapping"
    ALIAS = "alias"
    TOO_DEEP = "too deep"
    TOO_LARGE = "too large"


class FrontmatterError(AgentfsError):
    """Frontmatter agentfs refuses to read or write; callers add the file name.

    `problem` says what is wrong, `line` is the line in the file (the opening
    `---` is line 1) when known, and the message combines them.
    """

    def __init__(
        self, kind: Problem, problem: str, *, line: int | None = None, hint: str | None = None
    ) -> None:
        where = f" at line {line}" if line is not None else ""
        if kind is Problem.SYNTAX:
            message = f"malformed YAML frontmatter{where}: {problem}"
        else:
            message = f"{problem}{where}"
        super().__init__(message, hint=hint)
        self.kind = kind
        self.problem = problem
        self.line = line


def split(text: str) -> tuple[dict[str, Any] | None, str]:
    """Split a Markdown text into its frontmatter fields and its body.

    Returns:
        `(fields, body)`. `fields` is None when the text has no frontmatter;
        the body is then the whole text. The body loses one final newline.

    Raises:
        FrontmatterError: the header is not closed, not valid YAML, not a
            mapping, or over a limit.
    """
    fence = _fence(text)
    if fence is None:
        return None, text.removesuffix("\n")
    header_start, header_end, body_start = fence
    fields = _load(text[header_start:header_end])
    return fields, text[body_start:].removesuffix("\n")


#: How many `---` lines from the top `misplaced_fields` looks between.
MISPLACED_FENCES = 3


def misplaced_fields(text: str, names: frozenset[str]) -> bool:
    """Whether `text`, which `split` finds no frontmatter in, holds a header that
    lost its place: a mapping with one of the field `names` before a `---` line or
    between two (its first `---` line deleted, or lines put before it). An edit that
    does this to a message file makes its fields its text."""
    lines = text.split("\n")
    fences = [i for i, line in enumerate(lines) if line.rstrip("\r") == "---"][:MISPLACED_FENCES]
    for start, end in zip([-1, *fences], fences, strict=False):
        try:
            fields = _load("\n".join(lines[start + 1:end]))
        except FrontmatterError:
            continue
        if not names.isdisjoint(fields):
            return True
    return False


def replace_body(text: str, body: str) -> str:
    """`text` with its body replaced by `body`: the frontmatter lines, if any, kept
    byte for byte (as an editor changing only the body keeps them); the body ends
    with one newline, as `render` writes it.

    Raises:
        FrontmatterError: the header is not closed.
    """
    fence = _fence(text)
    return f"{body}\n" if fence is None else f"{text[:fence[2]]}{body}\n"


def render(fields: Mapping[str, Any], body: str) -> str:
    """The Markdown text for these fields and body: the canonical form `split` reads back.

    Raises:
        FrontmatterError: the fields are nested deeper than `MAX_DEPTH` or make
            a header over `MAX_HEADER_BYTES`.
    """
    data = dict(fields)
    check_depth(data)
    header = yaml.dump(
        data,
        Dumper=_Dumper,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=1_000_000,
    )
    _check_size(header)
    return f"---\n{header}---\n{body}\n"


def check_depth(data: Any) -> None:
    """Refuse data nested deeper than `MAX_DEPTH`, counted as the reader counts it.

    Walks with an explicit stack, so deep or cyclic data fails cleanly.

    Raises:
        FrontmatterError: with kind `Problem.TOO_DEEP`.
    """
    stack = [(data, 1)] if isinstance(data, _CONTAINERS) else []
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise _too_deep(None, "data")
        children = (*value.keys(), *value.values()) if isinstance(value, dict) else value
        stack.extend((child, depth + 1) for child in children if isinstance(child, _CONTAINERS))


def _fence(text: str) -> tuple[int, int, int] | None:
    """(start of header, end of header, start of body), or None without frontmatter.

    Raises:
        FrontmatterError: the header is not closed.
    """
    bom = "\ufeff" if text.startswith("\ufeff") else ""
    if not text.startswith((f"{bom}---\n", f"{bom}---\r\n")):
        return None
    first_break = text.index("\n") + 1
    end = _closing_fence(text, first_break)
    if end is None:
        raise FrontmatterError(
            Problem.UNCLOSED,
            "frontmatter starts with '---' but has no closing '---' line",
            hint="add a line '---' after the fields, or remove the first line",
        )
    return first_break, *end


def _closing_fence(text: str, start: int) -> tuple[int, int] | None:
    """(end of header, start of body) for the `---` line closing the frontmatter."""
    pos = start
    while pos <= len(text):
        line_end = text.find("\n", pos)
        line = text[pos:] if line_end == -1 else text[pos:line_end]
        if line.rstrip("\r") == "---":
            return pos, (len(text) if line_end == -1 else line_end + 1)
        if line_end == -1:
            return None
        pos = line_end + 1
    return None


def _check_size(header: str) -> None:
    size = len(header)
    if size * 4 > MAX_HEADER_BYTES:  # a character is at most 4 bytes: encode only if it matters
        size = len(header.encode("utf-8", "surrogatepass"))
    if size > MAX_HEADER_BYTES:
        raise FrontmatterError(
            Problem.TOO_LARGE,
            f"frontmatter is {size:,} bytes, over the {MAX_HEADER_BYTES:,}-byte limit",
            hint="put long text in the body or in a workspace file",
        )


def _too_deep(line: int | None, what: str = "frontmatter") -> FrontmatterError:
    return FrontmatterError(
        Problem.TOO_DEEP,
        f"{what} is nested more than {MAX_DEPTH} levels deep",
        line=line,
        hint="flatten the data",
    )


def _load(header: str) -> dict[str, Any]:
    """The fields of a header (the text between the fences)."""
    _check_size(header)
    fields = load_yaml(header, first_line=_FIRST_LINE)
    if fields is None:
        return {}
    if not isinstance(fields, dict):
        raise FrontmatterError(
            Problem.NOT_MAPPING, "frontmatter must be a mapping of 'key: value' lines"
        )
    return fields


def load_yaml(text: str, *, first_line: int = 1) -> Any:
    """The value of a YAML document read with the frontmatter's limits: no anchors or
    aliases, no nesting past `MAX_DEPTH`, no recursion (a file from a clone cannot
    expand into billions of values). `first_line`: what line 0 of `text` is called
    in errors.

    Raises:
        FrontmatterError: it is not valid YAML, or breaks a limit.
    """
    loader = _Loader(text)
    try:
        fields = loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = mark.line + first_line if mark is not None else None
        problem = exc.problem or str(exc)
        if "maximum nesting depth" in problem:  # libyaml's own limit, met while scanning ahead
            raise _too_deep(line) from None
        raise FrontmatterError(Problem.SYNTAX, problem, line=line) from None
    except (yaml.YAMLError, ValueError, TypeError, OverflowError) as exc:
        # e.g. `2024-13-45` looks like a date and fails as one
        raise FrontmatterError(Problem.SYNTAX, str(exc) or type(exc).__name__) from None
    except RecursionError:  # a merge-key chain or a future PyYAML that recurses
        raise _too_deep(None) from None
    finally:
        loader.dispose()
    return fields


class _LimitedComposer:
    """Builds the node tree from parser events in a loop, refusing aliases and deep nesting.

    It replaces PyYAML's recursive composer (libyaml's too, in the C loader);
    the events come from the parser, the values from the safe constructor.
    """

    get_event: Any
    check_event: Any
    resolve: Any

    def get_single_node(self) -> Node | None:
        self.get_event()  # stream start
        node = None
        if not self.check_event(StreamEndEvent):
            self.get_event()  # document start
            node = self._compose()
            self.get_event()  # document end
        if not self.check_event(StreamEndEvent):
            event = self.get_event()
            raise ComposerError(
                "expected a single document in the stream",
                None,
                "but found another document",
                event.start_mark,
            )
        self.get_event()
        return node

    def _compose(self) -> Node:
        get_event, resolve = self.get_event, self.resolve
        open_nodes: list[Node] = []
        keys: list[Node | None] = []  # per open node: a mapping's key waiting for its value
        node: Node
        while True:
            event = get_event()
            kind = type(event)
            if kind is ScalarEvent and event.anchor is None:
                tag = event.tag
                if tag is None or tag == "!":
                    tag = resolve(ScalarNode, event.value, event.implicit)
                node = ScalarNode(
                    tag, event.value, event.start_mark, event.end_mark, style=event.style
                )
            elif kind is SequenceEndEvent or kind is MappingEndEvent:
                node = open_nodes.pop()
                keys.pop()
                node.end_mark = event.end_mark
            elif kind is AliasEvent or getattr(event, "anchor", None) is not None:
                raise _alias(event)
            elif kind is SequenceStartEvent or kind is MappingStartEvent:
                if len(open_nodes) >= MAX_DEPTH:
                    raise _too_deep(event.start_mark.line + _FIRST_LINE)
                node_class = SequenceNode if kind is SequenceStartEvent else MappingNode
                tag = event.tag
                if tag is None or tag == "!":
                    tag = resolve(node_class, None, event.implicit)
                open_nodes.append(
                    node_class(tag, [], event.start_mark, None, flow_style=event.flow_style)
                )
                keys.append(None)
                continue
            else:  # pragma: no cover - the parser sends no other events inside a document
                raise ComposerError(None, None, "unexpected event", event.start_mark)
            if not open_nodes:
                return node
            parent = open_nodes[-1]
            if type(parent) is SequenceNode:
                parent.value.append(node)
            elif keys[-1] is None:
                keys[-1] = node
            else:
                parent.value.append((keys[-1], node))
                keys[-1] = None


def _alias(event: Any) -> FrontmatterError:
    what = f"alias *{event.anchor}" if type(event) is AliasEvent else f"anchor &{event.anchor}"
    return FrontmatterError(
        Problem.ALIAS,
        f"frontmatter uses a YAML {what}",
        line=event.start_mark.line + _FIRST_LINE,
        hint="agentfs does not read YAML anchors and aliases; write the value out in full",
    )


_LOADER_BASE: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DUMPER_BASE: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _Loader(_LimitedComposer, _LOADER_BASE):
    """The safe loader (libyaml's parser when available) with the limited composer."""


class _Dumper(_DUMPER_BASE):
    """The safe dumper, never writing anchors: a value used twice is written twice."""

    def ignore_aliases(self, data: Any) -> bool:
        return True
