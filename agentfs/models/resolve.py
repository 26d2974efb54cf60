"""Model names (`PROVIDER:REST`, e.g. `replay:PATH`, `anthropic:MODEL-ID`) → model objects,
through the provider registry (`agentfs/models/providers.py`)."""

from __future__ import annotations

from pathlib import Path

from agentfs.errors import ConfigError
from agentfs.models.base import Model
from agentfs.models.providers import ModelSpec, ProviderSettings, find_provider

__all__ = ["ProviderSettings", "resolve_model"]


def resolve_model(name: str, *, base_dir: Path, settings: ProviderSettings) -> Model:
    """The model called `name`; relative paths in it are taken from `base_dir`.

    Raises:
      ConfigError: the name is not `PROVIDER:REST`, or names no known provider.
      ModelError: the provider needs a setting that is missing (an API key).
    """
    provider, sep, rest = name.partition(":")
    if not sep or not rest:
        raise ConfigError(f"model {name!r} is not PROVIDER:NAME",
                          hint="use replay:PATH or anthropic:MODEL-ID")
    found = find_provider(provider)
    return found.create(ModelSpec(provider, rest, settings.of(provider), base_dir))
