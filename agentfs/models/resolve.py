"""Model names (`replay:PATH`, `anthropic:MODEL-ID`) → model objects."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from agentfs.errors import ConfigError, ModelError
from agentfs.models.base import Model


@dataclass(frozen=True)
class ProviderSettings:
    """Secrets and endpoints, passed down from the CLI (the only layer reading the environment)."""

    anthropic_api_key: str | None = None
    anthropic_base_url: str | None = None
    #: Seconds a request may take (`request_timeout` in agentfs.toml).
    request_timeout: float = 600.0


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


def resolve_model(name: str, *, base_dir: Path, settings: ProviderSettings) -> Model:
    """The model called `name`; relative replay paths are taken from `base_dir`."""
    provider, sep, rest = name.partition(":")
    if not sep or not rest:
        raise ConfigError(
            f"model {name!r} is not PROVIDER:NAME",
            hint="use replay:PATH or anthropic:MODEL-ID",
        )
    if provider == "replay":
        from agentfs.models.replay import ReplayModel

        path = Path(rest)
        return ReplayModel(path if path.is_absolute() else base_dir / path)
    if provider == "anthropic":
        if not settings.anthropic_api_key:
            raise ModelError(
                f"model {name} needs ANTHROPIC_API_KEY, which is not set",
                hint="export ANTHROPIC_API_KEY=..., or run offline with --model replay:SCRIPT "
                "(or set model = \"replay:...\" in agentfs.toml)",
            )
        from agentfs.models.anthropic import AnthropicModel

        return AnthropicModel(
            rest, api_key=settings.anthropic_api_key, base_url=settings.anthropic_base_url,
            timeout=settings.request_timeout,
        )
    raise ConfigError(f"unknown model provider {provider!r} in {name!r}", hint="use replay or anthropic")
