"""Errors agentfs reports to users.

Every expected failure is an `AgentfsError`: it names what is wrong (usually a
file or a trace) and how to fix it, so the CLI can print one line and exit
without a traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported by its callers; errors.py stays cheap to import
    from pydantic import ValidationError


class AgentfsError(Exception):
    """An expected failure with a message fit for the user.

    `hint` says how to fix it; `api_hint`, given where that names what only the CLI
    can do (its flags), says it for a client of the HTTP API (`agentfs serve`).
    """

    def __init__(self, message: str, *, hint: str | None = None,
                 api_hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self._api_hint = api_hint

    @property
    def api_hint(self) -> str | None:
        """The hint an HTTP API client gets: `api_hint` if given, else `hint`."""
        return self._api_hint if self._api_hint is not None else self.hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message} ({self.hint})"
        return self.message


class WorkspaceNotFound(AgentfsError):
    """No `agentfs.toml` in the directory or any parent."""


class TraceNotFound(AgentfsError):
    """The named trace has no directory or no `trace.json`."""


class MessageFileError(AgentfsError):
    """A message file cannot be read: bad name, encoding, frontmatter or fields."""

    def __init__(self, path: Path | str, problem: str, *, hint: str | None = None) -> None:
        super().__init__(f"{path}: {problem}", hint=hint)
        self.path = Path(path)


class NoSuchMessage(AgentfsError):
    """A sequence that names no message of the trace, where one is needed."""


class TraceLocked(AgentfsError):
    """Another process is running the trace."""

    def __init__(self, message: str, *, hint: str | None = None,
                 trace_id: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.trace_id = trace_id  # the trace held, for a hint that fits the caller


class TraceExists(AgentfsError):
    """A trace with that id exists already (creating it again would overwrite it)."""


class NotDefined(AgentfsError):
    """A name the workspace does not define: a preset of agentfs.toml, a skill."""


class GitStateError(AgentfsError):
    """The repository is in a state agentfs cannot commit to (e.g. HEAD not on main)."""


class ConfigError(AgentfsError):
    """`agentfs.toml` or a script it points at is invalid."""


class ModelError(AgentfsError):
    """A model could not be set up or failed after its retries."""


class RemoteError(AgentfsError):
    """A git remote could not be reached, or refused what was pushed."""


class MergeConflict(AgentfsError):
    """The same file was changed two ways, on this clone and on the remote."""

    def __init__(self, message: str, paths: list[str], *, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.paths = paths


def validation_problems(
    exc: ValidationError, advice: Callable[[Any], str | None] | None = None
) -> str:
    """Pydantic's errors as one line: `field.sub: problem; other: problem`; `advice`
    may add a note to an error (e.g. the known key an unknown one resembles)."""
    parts = []
    for err in exc.errors():
        note = advice(err) if advice is not None else None
        text = f"{err['msg']} ({note})" if note else err["msg"]
        parts.append(f"{'.'.join(str(p) for p in err['loc']) or 'file'}: {text}")
    return "; ".join(parts)
