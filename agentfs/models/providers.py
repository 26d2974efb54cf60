"""The provider registry: what the part before the colon of a model name means.

A provider turns `PROVIDER:REST` into a `Model`. Each declares the settings it
takes and the environment variables that hold them, so that the CLI (the only
layer reading the environment) can gather them without knowing any provider
(`agentfs/models/providers.py:Provider`). The built-in providers are `replay`,
`anthropic` and `openai` (any OpenAI-compatible server); installed packages add others through the `agentfs.providers`
entry-point group, as tools come through `agentfs.tools`. See
docs/architecture.md, "Adding a model provider".
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from types import MappingProxyType
from urllib.parse import urlsplit

from agentfs.errors import ConfigError
from agentfs.models.base import Model

__all__ = ["GROUP", "ModelSpec", "Provider", "ProviderSettings", "find_provider",
           "is_local_url", "provider_names"]

GROUP = "agentfs.providers"


@dataclass(frozen=True)
class ModelSpec:
    """What a provider is given to make one model."""

    provider: str  # the name before the colon
    rest: str  # what follows it: a model id, a script's path, ...
    settings: Mapping[str, str]  # this provider's settings (see `Provider.env`)
    base_dir: Path  # relative paths in `rest` are taken from here
    timeout: float = 600.0  # seconds one request may take (`request_timeout` in agentfs.toml)

    @property
    def name(self) -> str:
        return f"{self.provider}:{self.rest}"


@dataclass(frozen=True)
class Provider:
    """A model provider.

    `env` maps each setting the provider takes to the environment variable the CLI
    reads it from (secrets and endpoints: never from workspace files). `create`
    makes the model, raising `ModelError` for what the user must supply (a key) and
    `ConfigError` for a bad name. `usage` is the form of its model names, for errors
    and help texts.
    """

    name: str
    create: Callable[[ModelSpec], Model]
    usage: str
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ProviderSettings:
    """Each provider's settings by provider name, gathered by the CLI from the
    variables the providers declare (`Provider.env`) and passed down."""

    values: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    #: Seconds one request may take, for every provider (`request_timeout` in agentfs.toml).
    request_timeout: float = 600.0

    def of(self, provider: str) -> Mapping[str, str]:
        return MappingProxyType(dict(self.values.get(provider, {})))

    @classmethod
    def from_environment(cls, environ: Mapping[str, str], *,
                         request_timeout: float = 600.0) -> ProviderSettings:
        """The settings every known provider declares, from `environ` (the CLI passes
        `os.environ`; empty values count as unset)."""
        return cls({provider.name: {key: environ[var] for key, var in provider.env.items()
                                    if environ.get(var)}
                    for provider in _registry().values()}, request_timeout)


def _replay(spec: ModelSpec) -> Model:
    from agentfs.models.replay import ReplayModel

    path = Path(spec.rest)
    return ReplayModel(path if path.is_absolute() else spec.base_dir / path)


def _anthropic(spec: ModelSpec) -> Model:
    from agentfs.errors import ModelError

    key = spec.settings.get("api_key")
    if not key:
        raise ModelError(
            f"model {spec.name} needs ANTHROPIC_API_KEY, which is not set",
            hint="export ANTHROPIC_API_KEY=..., or run offline with --model replay:SCRIPT "
            "(or set model = \"replay:...\" in agentfs.toml)",
            api_hint="start agentfs serve with ANTHROPIC_API_KEY set, or run offline: "
            "\"model\": \"replay:SCRIPT\" in the body (SCRIPT a file of the workspace)",
        )
    from agentfs.models.anthropic import AnthropicModel

    return AnthropicModel(spec.rest, api_key=key, base_url=spec.settings.get("base_url"),
                          timeout=spec.timeout)


def _openai(spec: ModelSpec) -> Model:
    from agentfs.errors import ModelError

    key = spec.settings.get("api_key")
    base_url = spec.settings.get("base_url")
    if not key and not is_local_url(base_url):
        raise ModelError(
            f"model {spec.name} needs OPENAI_API_KEY, which is not set"
            + (f" (OPENAI_BASE_URL is {base_url})" if base_url else ""),
            hint="export OPENAI_API_KEY=...; a server on this machine or the local "
            "network needs none: export OPENAI_BASE_URL=http://localhost:11434/v1 for Ollama",
        )
    try:
        from agentfs.models.openai import DEFAULT_BASE_URL, OpenAIModel
    except ImportError as exc:
        if exc.name != "openai":
            raise
        raise ModelError(f"model {spec.name} needs the openai package, which is not "
                         "installed",
                         hint="pip install 'agentfs-workspace[openai]'") from None
    return OpenAIModel(spec.rest, api_key=key or "none", base_url=base_url or DEFAULT_BASE_URL,
                       organization=spec.settings.get("organization"),
                       project=spec.settings.get("project"), timeout=spec.timeout)


def is_local_url(url: str | None) -> bool:
    """Whether `url` is on this machine or a private network (a server there, such as
    Ollama or vLLM, usually takes no key); None (the provider's default) is not."""
    host = urlsplit(url).hostname if url else None
    if not host:
        return False
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_link_local


BUILT_IN = (
    Provider("replay", _replay, "replay:PATH"),
    Provider("anthropic", _anthropic, "anthropic:MODEL-ID",
             env={"api_key": "ANTHROPIC_API_KEY", "base_url": "ANTHROPIC_BASE_URL"}),
    Provider("openai", _openai, "openai:MODEL-ID",
             env={"api_key": "OPENAI_API_KEY", "base_url": "OPENAI_BASE_URL",
                  "organization": "OPENAI_ORG_ID", "project": "OPENAI_PROJECT_ID"}),
)

@functools.cache
def _registry() -> dict[str, Provider]:
    """Built-in providers, then those of installed packages (loaded once a process;
    a package may not take a built-in's name)."""
    found = {p.name: p for p in BUILT_IN}
    for entry in entry_points(group=GROUP):
        try:
            value = entry.load()
            provider = value() if callable(value) and not isinstance(value, Provider) \
                else value
        except Exception as exc:  # noqa: BLE001 — report any failure of a plugin
            raise ConfigError(
                f"model provider {entry.name!r} ({entry.value}) failed to load: {exc}",
                hint="fix or uninstall the package that provides it") from None
        if not isinstance(provider, Provider):
            raise ConfigError(f"model provider {entry.name!r} gave "
                              f"{type(provider).__name__}, not a Provider")
        if provider.name in found:
            raise ConfigError(f"model provider {provider.name!r} from {entry.value} "
                              "takes a name already in use",
                              hint="uninstall one of the two packages")
        found[provider.name] = provider
    return found


def provider_names() -> list[str]:
    return sorted(_registry())


def find_provider(name: str) -> Provider:
    """The provider called `name`.

    Raises:
      ConfigError: no provider of that name is built in or installed.
    """
    found = _registry().get(name)
    if found is None:
        forms = ", ".join(p.usage for p in _registry().values())
        raise ConfigError(f"unknown model provider {name!r}", hint=f"use one of {forms}")
    return found
