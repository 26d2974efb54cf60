"""What needs trust in agentfs.toml, its fingerprint, and the trust file."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentfs.config import WorkspaceConfig
from agentfs.core.trust import (
    TrustStore,
    config_fingerprint,
    judge,
    untrusted_notice,
    workspace_commands,
)
from agentfs.errors import ConfigError

HOOK = {"name": "Issues", "command": "cat notes/issues.md"}


def config(**data) -> WorkspaceConfig:
    return WorkspaceConfig.model_validate(data)


def test_hooks_and_unsandboxed_bash_need_trust_and_nothing_else_does():
    assert workspace_commands(config(max_iterations=3, tools={"bash": True})) == []
    assert workspace_commands(config(tools={"bash": False, "bash_sandbox": "none"})) == []
    found = workspace_commands(config(context_hooks=[HOOK],
                                      tools={"bash": True, "bash_sandbox": "none"}))
    assert [c.line() for c in found] == [
        "context hook 'Issues': cat notes/issues.md",
        ('bash without a sandbox: the model\'s bash commands run unsandboxed '
         '(tools.bash_sandbox = "none")'),
    ]


def test_the_fingerprint_covers_the_commands_and_nothing_else():
    base = config_fingerprint(config(context_hooks=[HOOK]))
    assert config_fingerprint(config(context_hooks=[HOOK], max_iterations=3, model="replay:x",
                                     tools={"bash": True})) == base
    for changed in ({**HOOK, "command": "cat notes/other.md"}, {**HOOK, "name": "Other"},
                    {**HOOK, "timeout": 30}):
        assert config_fingerprint(config(context_hooks=[changed])) != base
    assert config_fingerprint(config(context_hooks=[HOOK, HOOK])) != base
    assert config_fingerprint(config(context_hooks=[HOOK],
                                     tools={"bash": True, "bash_sandbox": "none"})) != base


def test_an_untrusted_configuration_runs_without_hooks_and_with_the_default_sandbox():
    risky = config(context_hooks=[HOOK], tools={"bash": True, "bash_sandbox": "none"})
    verdict = judge(risky, None)
    assert verdict.config.context_hooks == [] and verdict.config.tools.bash_sandbox == "auto"
    assert verdict.config.tools.bash and len(verdict.skipped) == 2
    assert judge(risky, config_fingerprint(config(context_hooks=[HOOK]))).skipped  # another one
    trusted = judge(risky, config_fingerprint(risky))
    assert trusted.config is risky and trusted.skipped == ()
    assert untrusted_notice(trusted, Path("/ws"), changed=False) is None
    notice = untrusted_notice(verdict, Path("/ws"), changed=True) or ""
    assert "/ws/agentfs.toml changed since you trusted it" in notice
    assert notice.endswith("agentfs trust /ws")


def test_the_trust_file_records_and_revokes_per_real_path(tmp_path):
    store = TrustStore(tmp_path / "config" / "trust.json")
    root = tmp_path / "ws"
    root.mkdir()
    hooked = config(context_hooks=[HOOK])
    assert store.trusted(root) is None
    assert store.trust(root, config()) == [] and not store.path.exists()  # nothing to trust
    store.trust(root, hooked)
    assert store.trusted(tmp_path / "ws" / ".." / "ws") == config_fingerprint(hooked)
    assert store.revoke(root) and not store.revoke(root)
    assert store.trusted(root) is None


def test_a_trust_file_inside_the_workspace_or_unreadable_is_refused_with_a_fix(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    with pytest.raises(ConfigError, match="is inside the workspace") as raised:
        TrustStore(root / ".config" / "trust.json").trusted(root)
    assert "AGENTFS_CONFIG_DIR" in str(raised.value)
    broken = tmp_path / "trust.json"
    for text in ("{not json", '{"format": 9, "workspaces": {}}'):
        broken.write_text(text)
        with pytest.raises(ConfigError, match=f"{broken}: not a trust file") as raised:
            TrustStore(broken).trusted(root)
        assert "`agentfs trust` writes a new one" in str(raised.value)
