"""Workspace trust end to end: a cloned workspace's context hooks and sandbox settings
apply only after `agentfs trust`, for that exact configuration."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentfs.core.trust import SKIPPED_HOOK_TEXT
from agentfs.tools.sandbox import choose_sandbox
from tests.conftest import assert_git_clean, git, replay_workspace, run_cli

NOTICE = "they are skipped:"
#: Each run: a tool call (the context is injected at once), then an answer.
SCRIPT = {"turns": [t for n in range(1, 20) for t in (
    {"tool_calls": [{"name": "list_files", "input": {}}]}, {"text": f"Answer {n}."})]}


def hooked_origin(tmp_path: Path) -> tuple[Path, Path]:
    """A workspace whose agentfs.toml has a hook that appends to a marker file outside
    it, and that path."""
    marker = tmp_path / "marker"
    hook = (f'context_injection_interval = 1\n[[context_hooks]]\nname = "Marker"\n'
            f'command = "echo ran >> {marker}; echo hook output"\n')
    root = tmp_path / "origin"
    root.mkdir()
    replay_workspace(root, SCRIPT, config={"max_iterations = 50": "max_iterations = 50\n" + hook})
    return root, marker


@pytest.fixture
def clone(tmp_path: Path) -> tuple[Path, Path]:
    """`git clone` of a workspace with a hook: what someone else's workspace looks like."""
    origin, marker = hooked_origin(tmp_path)
    subprocess.run(["git", "clone", "-q", str(origin), str(tmp_path / "clone")], check=True)
    return tmp_path / "clone", marker


def context_texts(root: Path, trace: str) -> list[str]:
    shown = json.loads(run_cli("show", trace, "--json", cwd=root).stdout)["messages"]
    return [m["text"] for m in shown if m.get("synthetic") == "context"]


def test_a_cloned_workspace_runs_without_its_hook_says_so_once_and_runs_it_once_trusted(clone):
    root, marker = clone
    done = run_cli("run", "t", "-m", "go", cwd=root)
    assert not marker.exists()
    assert done.stderr.count(NOTICE) == 1
    assert f"context hook 'Marker': echo ran >> {marker}" in done.stderr
    assert f"agentfs trust {root.resolve()}" in done.stderr
    assert f"## Marker\n{SKIPPED_HOOK_TEXT}" in context_texts(root, "t")[0]

    trusted = run_cli("trust", cwd=root)
    assert f"context hook 'Marker': echo ran >> {marker}" in trusted.stdout
    done = run_cli("run", "t", "-m", "again", cwd=root)
    assert NOTICE not in done.stderr
    assert marker.read_text() == "ran\n"
    assert "## Marker\nhook output" in context_texts(root, "t")[-1]
    assert_git_clean(root)


def test_editing_the_hook_revokes_trust_and_an_unrelated_edit_does_not(clone):
    root, marker = clone
    run_cli("trust", str(root), cwd=root.parent)
    config = root / "agentfs.toml"
    config.write_text(config.read_text().replace("max_iterations = 50", "max_iterations = 40"))
    git(root, "commit", "-qam", "fewer iterations")
    assert "trusted (trust file" in run_cli("trust", "--show", cwd=root).stdout
    run_cli("run", "t", "-m", "go", cwd=root)
    assert marker.read_text() == "ran\n"

    config.write_text(config.read_text().replace("echo ran", "echo edited"))
    git(root, "commit", "-qam", "another hook command")
    assert "changed since it was trusted: skipped" in run_cli("trust", "--show", cwd=root).stdout
    done = run_cli("run", "t", "-m", "again", cwd=root)
    assert done.stderr.count(NOTICE) == 1 and "changed since you trusted it" in done.stderr
    assert marker.read_text() == "ran\n"  # the edited command did not run

    run_cli("trust", cwd=root)
    run_cli("trust", "--revoke", cwd=root)
    assert "not trusted: skipped" in run_cli("trust", "--show", cwd=root).stdout
    assert_git_clean(root)


def test_watch_once_in_a_cloned_workspace_skips_the_hook_and_says_so_once(clone):
    root, marker = clone
    (root / "inbox" / "first.md").write_text("go\n")
    (root / "inbox" / "second.md").write_text("go too\n")
    done = run_cli("watch", "--once", "--settle", "0", cwd=root)
    traces = json.loads(run_cli("status", "--json", cwd=root).stdout)["traces"]
    assert {t["trace"] for t in traces} == {"first", "second"}
    assert not marker.exists()
    assert (done.stdout + done.stderr).count(NOTICE) == 1
    assert f"## Marker\n{SKIPPED_HOOK_TEXT}" in context_texts(root, "first")[0]


def test_chat_in_a_cloned_workspace_skips_the_hook_and_says_so_once(clone):
    root, marker = clone
    done = subprocess.run([sys.executable, "-m", "agentfs", "chat", "t"], cwd=root,
                          input=b"hello\nand again\n", capture_output=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr.decode()
    assert "Answer 2." in done.stdout.decode()
    assert not marker.exists()
    assert done.stderr.decode().count(NOTICE) == 1


def test_serve_in_a_cloned_workspace_skips_the_hook_and_says_so_at_start(clone, tmp_path):
    pytest.importorskip("fastapi")
    from tests.server.conftest import start_server, stop_server

    root, marker = clone
    run_cli("new", "t", "-m", "go", cwd=root)
    served = start_server(root, log=tmp_path / "serve.log")
    try:
        with served.client() as client:
            assert client.post("/api/traces/t/run", json={}).status_code in (200, 202)
            client.post("/api/traces/t/messages", json={"text": "again", "run": True})
    finally:
        assert stop_server(served) == 0
    assert not marker.exists()
    assert (tmp_path / "serve.log").read_text().count(NOTICE) == 1
    assert f"## Marker\n{SKIPPED_HOOK_TEXT}" in context_texts(root, "t")[0]


def test_side_work_in_a_cloned_workspace_says_once_that_hooks_are_skipped(clone):
    root, marker = clone
    run_cli("run", "t", "-m", "go", cwd=root)
    for args in (["compress", "t"], ["reflect", "t"]):
        done = run_cli(*args, cwd=root, check=False)
        assert done.stderr.count(NOTICE) == 1, (args, done.stderr)
    assert not marker.exists()


def test_the_trust_file_is_outside_the_workspace_and_its_git(clone, trust_file_per_test):
    root, _ = clone
    run_cli("trust", cwd=root)
    store = trust_file_per_test / "trust.json"
    fingerprint = json.loads(store.read_text())["workspaces"][str(root.resolve())]["fingerprint"]
    found = subprocess.run(["grep", "-rl", fingerprint.split(":")[1], str(root)],
                           capture_output=True, text=True, check=False)
    assert found.stdout == ""  # neither in the work tree nor in .git
    assert_git_clean(root)

    inside = {"AGENTFS_CONFIG_DIR": str(root / "notes")}
    refused = run_cli("trust", cwd=root, env=inside, check=False)
    assert refused.returncode == 1
    assert f"the trust file {root / 'notes' / 'trust.json'} is inside the workspace" in \
        refused.stderr and "AGENTFS_CONFIG_DIR" in refused.stderr
    assert run_cli("run", "t", "-m", "go", cwd=root, env=inside, check=False).returncode == 1
    assert not (root / "notes").exists()


def test_trust_is_kept_per_workspace_path(clone, tmp_path):
    root, _ = clone
    run_cli("trust", cwd=root)
    other = tmp_path / "other"
    subprocess.run(["git", "clone", "-q", str(root), str(other)], check=True)
    assert "not trusted: skipped" in run_cli("trust", "--show", cwd=other).stdout
    link = tmp_path / "link"
    link.symlink_to(root)
    assert "trusted (trust file" in run_cli("trust", "--show", cwd=link).stdout


def test_init_trusts_the_configuration_it_writes_and_never_a_clones(clone, tmp_path):
    root, _ = clone
    assert "already a workspace" in run_cli("init", str(root), cwd=tmp_path).stdout
    assert "not trusted: skipped" in run_cli("trust", "--show", cwd=root).stdout
    fresh = tmp_path / "fresh"
    run_cli("init", str(fresh), cwd=tmp_path)
    assert "runs no commands; there is nothing to trust" in \
        run_cli("trust", "--show", cwd=fresh).stdout
    done = run_cli("demo", str(tmp_path / "demo"), cwd=tmp_path)
    assert NOTICE not in done.stderr


def test_an_untrusted_bash_sandbox_none_runs_bash_as_auto(clone):
    root, _ = clone
    config = root / "agentfs.toml"
    config.write_text(config.read_text() + '\n[tools]\nbash = true\nbash_sandbox = "none"\n')
    git(root, "commit", "-qam", "bash, unsandboxed")
    unsandboxed, = choose_sandbox("none").notices()
    done = run_cli("run", "t", "-m", "go", cwd=root)
    assert "bash without a sandbox: the model's bash commands run unsandboxed" in done.stderr
    assert unsandboxed not in done.stderr
    run_cli("trust", cwd=root)
    done = run_cli("run", "t", "-m", "again", cwd=root)
    assert NOTICE not in done.stderr and unsandboxed in done.stderr


def test_bash_in_the_sandbox_can_neither_read_nor_change_the_trust_file(tmp_path):
    import shutil
    import tempfile

    from tests.tools.test_sandbox import needs_bwrap, run_as_agent

    if needs_bwrap.args[0]:
        pytest.skip(needs_bwrap.kwargs["reason"])
    parent = "/var/tmp" if Path("/var/tmp").is_dir() else None  # not /tmp: the sandbox hides it
    home = Path(tempfile.mkdtemp(prefix="agentfs-home-", dir=parent))
    elsewhere = Path(tempfile.mkdtemp(prefix="agentfs-config-", dir=parent))
    try:
        in_home, outside = home / ".config" / "agentfs" / "trust.json", elsewhere / "trust.json"
        for store in (in_home, outside):
            store.parent.mkdir(parents=True, exist_ok=True)
            store.write_text('{"format": 1, "workspaces": {"SECRET-PATH": {}}}\n')
        root = tmp_path / "ws"
        run_cli("init", str(root), cwd=tmp_path)
        answers = run_as_agent(root, home, "auto", [
            "cat ~/.config/agentfs/trust.json", "echo x > ~/.config/agentfs/trust.json",
            f"echo x > {outside}", f"rm -f {outside}",
        ])
        assert "SECRET-PATH" not in answers[0]["content"]
        assert all("[exit status 0]" not in a["content"] for a in answers[2:])
        for store in (in_home, outside):
            assert "SECRET-PATH" in store.read_text()
    finally:
        shutil.rmtree(home)
        shutil.rmtree(elsewhere)
