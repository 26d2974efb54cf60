"""Model names (`PROVIDER:REST`, e.g. `replay:PATH`, `anthropic:MODEL-ID`, `openai:MODEL-ID`)
→ model objects,
through the provider registry (`agentfs/models/providers.py`)."""

from __future__ import annotations

from pathlib import Path

from agentfs.errors import ConfigError
from agentfs.models.base import Model
from agentfs.models.providers import ModelSpec, ProviderSettings, find_provider
from agentfs.store.unicode import LONE_SURROGATE

__all__ = ["ProviderSettings", "check_model_name", "check_untrusted_model", "rebase_model_name",
           "resolve_model"]


def rebase_model_name(name: str, *, base_dir: Path, root: Path) -> str:
    """`name` with a relative replay path taken from `base_dir` rewritten relative to
    `root` (absolute if outside it), as a trace records it: a recorded name is
    resolved from the workspace's root."""
    provider, sep, rest = name.partition(":")
    if provider != "replay" or not sep or not rest or Path(rest).is_absolute():
        return name
    path = (base_dir / rest).resolve()
    try:
        return f"replay:{path.relative_to(root.resolve()).as_posix()}"
    except ValueError:
        return f"replay:{path}"


def check_model_name(name: str) -> tuple[str, str]:
    """(provider, rest) of a model name: `PROVIDER:REST`, in UTF-8. Whether the provider
    is known is for the machine that calls it (`find_provider`): a plugin may be
    installed on a worker and not here.

    Raises:
      ConfigError: it is not.
    """
    provider, sep, rest = name.partition(":")
    if not sep or not rest:
        raise ConfigError(f"model {name!r} is not PROVIDER:NAME",
                          hint="use replay:PATH, anthropic:MODEL-ID or openai:MODEL-ID")
    if LONE_SURROGATE.search(name):  # bytes of an argument that are not UTF-8
        raise ConfigError(f"model {name!r} is not valid UTF-8",
                          hint="type the model's name again, in UTF-8")
    return provider, rest


def check_untrusted_model(name: str, *, root: Path) -> Path | None:
    """Check a model name the person did not give themselves (a dropped file's
    frontmatter, a request to the API): a known provider, and a replay script that
    is a file of the workspace `root` (a relative path is taken from it), never one
    elsewhere on the machine, whose text the run would write into the trace.
    Returns the replay script's resolved path (None for other providers).

    Raises:
      ConfigError: the name is not `PROVIDER:REST`, names no known provider, or a
        replay script outside the workspace.
    """
    provider, rest = check_model_name(name)
    find_provider(provider)
    if provider != "replay":
        return None
    workspace = root.resolve()
    try:
        target = (workspace / rest).resolve()
    except (ValueError, OSError) as exc:  # a NUL, a loop of links
        raise ConfigError(f"model {name!r}: not a path to a replay script ({exc})",
                          hint="give its path relative to the workspace, e.g. "
                          "replay:scripts/x.json") from None
    if not target.is_relative_to(workspace):
        relative = "give its path relative to the workspace, e.g. replay:scripts/x.json"
        raise ConfigError(f"model {name!r}: a replay script named here must be a file of the "
                          "workspace", hint=f"{relative}, or name one elsewhere with --model",
                          api_hint=relative)
    return target


def resolve_model(name: str, *, base_dir: Path, settings: ProviderSettings) -> Model:
    """The model called `name`; relative paths in it are taken from `base_dir`.

    Raises:
      ConfigError: the name is not `PROVIDER:REST`, or names no known provider.
      ModelError: the provider needs a setting that is missing (an API key).
    """
    provider, rest = check_model_name(name)
    found = find_provider(provider)
    return found.create(ModelSpec(provider, rest, settings.of(provider), base_dir,
                                  timeout=settings.request_timeout))
