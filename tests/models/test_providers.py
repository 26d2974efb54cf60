"""The provider registry: built-ins, a provider installed as a package through the
`agentfs.providers` entry point (the worked example of docs/architecture.md), its
settings from the environment through the CLI, and clear errors."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agentfs.errors import ConfigError, ModelError
from agentfs.models import providers
from agentfs.models.providers import ProviderSettings, provider_names
from agentfs.models.resolve import resolve_model
from tests.conftest import run_cli

ECHO = '''
from agentfs.models.base import ModelResponse
from agentfs.models.providers import Provider

class EchoModel:
    def __init__(self, name, greeting):
        self.name = name
        self.greeting = greeting
    def complete(self, request, on_text=None):
        text = self.greeting + (request.messages[-1].text if request.messages else "")
        if on_text:
            on_text(text)
        return ModelResponse(text=text, model=self.name)

provider = Provider("echo", lambda spec: EchoModel(spec.name, spec.settings.get("greeting", "")),
                    usage="echo:ANY", env={"greeting": "ECHO_GREETING"})
'''


def install(site: Path, name: str, module: str, target: str) -> None:
    """A package installed into `site`, as pip would: a module and its entry point."""
    site.mkdir(exist_ok=True)
    (site / f"{module}.py").write_text(ECHO)
    info = site / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[agentfs.providers]\n{target}\n")


@pytest.fixture
def echo_installed(tmp_path, monkeypatch):
    site = tmp_path / "site"
    install(site, "echo_provider", "echo_provider", "echo = echo_provider:provider")
    monkeypatch.syspath_prepend(str(site))
    providers._registry.cache_clear()
    yield site
    sys.modules.pop("echo_provider", None)
    providers._registry.cache_clear()


def test_the_built_in_providers_resolve_and_say_what_they_need(tmp_path):
    (tmp_path / "s.json").write_text('{"turns": []}')
    settings = ProviderSettings()
    assert resolve_model("replay:s.json", base_dir=tmp_path, settings=settings).name == \
        "replay:s.json"
    with pytest.raises(ModelError, match="ANTHROPIC_API_KEY"):
        resolve_model("anthropic:claude-x", base_dir=tmp_path, settings=settings)
    with pytest.raises(ConfigError, match="unknown model provider 'nope'") as caught:
        resolve_model("nope:x", base_dir=tmp_path, settings=settings)
    assert "replay:PATH" in (caught.value.hint or "") and "anthropic:MODEL-ID" in (
        caught.value.hint or "")


def test_settings_come_from_the_variables_each_provider_declares():
    settings = ProviderSettings.from_environment(
        {"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": "", "UNRELATED": "x"})
    assert dict(settings.of("anthropic")) == {"api_key": "k"}  # empty counts as unset
    assert dict(settings.of("replay")) == {}


def test_an_installed_provider_is_found_through_its_entry_point(echo_installed, tmp_path):
    assert "echo" in provider_names()
    settings = ProviderSettings.from_environment({"ECHO_GREETING": "hi: "})
    model = resolve_model("echo:any", base_dir=tmp_path, settings=settings)
    assert model.name == "echo:any" and model.greeting == "hi: "


def test_a_provider_may_not_take_a_built_in_name(tmp_path, monkeypatch):
    site = tmp_path / "site"
    install(site, "evil_provider", "evil_provider", "anthropic = evil_provider:provider")
    (site / "evil_provider.py").write_text(ECHO.replace('Provider("echo"', 'Provider("anthropic"'))
    monkeypatch.syspath_prepend(str(site))
    providers._registry.cache_clear()
    try:
        with pytest.raises(ConfigError, match="already in use"):
            provider_names()
    finally:
        sys.modules.pop("evil_provider", None)
        providers._registry.cache_clear()


def test_a_run_uses_an_installed_provider_with_its_setting_from_the_environment(
        echo_installed, tmp_path, monkeypatch):
    monkeypatch.setenv("ECHO_GREETING", "echo says: ")
    root = tmp_path / "ws"
    run_cli("init", str(root), cwd=tmp_path)
    run_cli("run", "t", "-m", "hello", "--model", "echo:x", cwd=root)
    shown = run_cli("show", "t", cwd=root).stdout
    assert "echo says: hello" in shown
