"""What the commands share: the workspace a command works in, the model it runs,
the trust it runs with.

Module level: the standard library and click only, as in every command module
(`agentfs --help` loads neither pydantic nor dulwich; tests/cli/test_startup.py).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

if TYPE_CHECKING:
    from agentfs.config import WorkspaceConfig
    from agentfs.core.project import Project
    from agentfs.core.trust import TrustStore
    from agentfs.models.base import Model
    from agentfs.models.resolve import ProviderSettings
    from agentfs.store.trace import Trace

__all__ = [
    "LiveOptions",
    "choose_model",
    "echo_json",
    "for_stdout",
    "interrupted",
    "mcp_environment",
    "model_to_record",
    "open_project",
    "printable",
    "provider_settings",
    "registered_command",
    "start_notices",
    "thinking_options",
    "trace_id_for",
    "trace_settings",
    "trust_store",
]


#: What a terminal would act on rather than show, each written as `\\xNN`: control
#: characters but a line break, a tab and a carriage return before a line break (an
#: escape starts a sequence that can move the cursor, set the window's title or, on
#: some terminals, write the clipboard; a lone carriage return can overwrite a line),
#: DEL and the C1 controls. A table, so `str.translate` writes megabytes out in C.
_WRITTEN_OUT = {n: f"\\x{n:02x}" for n in (*range(0x20), *range(0x7f, 0xa0))
                if n not in (0x09, 0x0a, 0x0d)}
#: The same with line breaks, tabs and carriage returns: for what must stay on one line.
_WRITTEN_OUT_IN_A_LINE = {**_WRITTEN_OUT, **{n: f"\\x{n:02x}" for n in (0x09, 0x0a, 0x0d)}}
_LONE_CR = re.compile(r"\r(?!\n)")


def printable(text: str, *, one_line: bool = False) -> str:
    """`text` with each control character a terminal would act on written as `\\xNN`
    (with `one_line`, line breaks and tabs too): for what reaches a person's terminal
    or a log from a file name or the model's text, which someone else may have
    written."""
    if one_line:
        return text.translate(_WRITTEN_OUT_IN_A_LINE)
    text = text.translate(_WRITTEN_OUT)
    return _LONE_CR.sub(r"\\x0d", text) if "\r" in text else text


def interrupted(trace_id: str = "TRACE") -> NoReturn:
    """Ctrl-C: say that what was committed is kept and how to go on; exit 130."""
    click.echo(f"\nagentfs: interrupted; everything committed so far is kept (`agentfs run "
               f"{trace_id}` goes on from there)", err=True)
    sys.exit(130)


def for_stdout(text: str) -> str:
    """`text` as stdout should get it: `printable` at a terminal, as it is when piped
    (a script or a redirect gets what was written)."""
    return printable(text) if sys.stdout.isatty() else text


def echo_json(value: Any) -> None:
    """Print a `--json` output: indented for a person at a terminal, one line when
    piped (to `jq`, a script), as `gh` does; one line is also what the standard
    library encodes in C (indenting takes its pure-Python encoder: 34 ms for the
    list of 1,000 traces, docs/performance.md). A `str` is JSON text already."""
    import json

    if isinstance(value, str):
        if not sys.stdout.isatty():
            click.echo(value)
            return
        value = json.loads(value)
    indent = 2 if sys.stdout.isatty() else None
    click.echo(json.dumps(value, indent=indent, ensure_ascii=False))


def provider_settings(project: Project) -> ProviderSettings:
    """Provider secrets and endpoints from the environment, the variables each provider
    declares (`agentfs/models/providers.py:Provider`; nothing else reads it), and the
    workspace's request timeout."""
    from agentfs.models.resolve import ProviderSettings

    return ProviderSettings.from_environment(
        os.environ, request_timeout=project.config.request_timeout)


def trust_store() -> TrustStore:
    """The trust file (`agentfs trust`), outside every workspace: in $AGENTFS_CONFIG_DIR,
    else $XDG_CONFIG_HOME/agentfs, else ~/.config/agentfs."""
    from agentfs.core.trust import TRUST_FILE, TrustStore

    folder = os.environ.get("AGENTFS_CONFIG_DIR") or os.path.join(
        os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config"),
        "agentfs")
    return TrustStore(Path(folder) / TRUST_FILE)


def start_notices(project: Project) -> dict[str, Any]:
    """Say once, on stderr, which commands of agentfs.toml are skipped as untrusted and
    whether bash runs unsandboxed; returns the `RunnerOptions` fields of the trust, and
    the values of the environment variables the trusted MCP servers name (`mcp_env`)."""
    from agentfs.core.trust import judge, untrusted_notice, workspace_commands
    from agentfs.tools.sandbox import choose_sandbox

    trusted = None
    if workspace_commands(project.config):  # the trust file is read only when it matters
        trusted = trust_store().trusted(project.workspace.root)
    verdict = judge(project.config, trusted)
    for notice in (
        untrusted_notice(verdict, project.workspace.root, changed=trusted is not None),
        *(choose_sandbox(verdict.config.tools.bash_sandbox, verdict.config.tools.bash_network,
                         project.workspace.root).notices()
          if verdict.config.tools.bash else []),
    ):
        if notice:  # it names commands a clone's agentfs.toml wrote
            click.echo(printable(notice), err=True)
    return {"trusted": trusted, "mcp_env": mcp_environment(verdict.config)}


class LiveOptions:
    """The `RunnerOptions` fields of each run of a long-lived command (`serve`, `watch`):
    agentfs.toml and its trust are read again when their bytes changed since the last
    run, so a change (approval turned on, a tool, an MCP server trusted) applies from
    the next run, as for `agentfs run`. Called from the runs' threads."""

    def __init__(self, project: Project, fixed: dict[str, Any], *,
                 thinking: tuple[int | None, bool] = (None, False)) -> None:
        import threading

        self.project = project
        self.fixed = fixed  # fields of the command's own flags
        self.thinking = thinking  # --thinking BUDGET, --no-thinking
        self.trust_file = trust_store().path
        self.trust_seen = _read_or_none(self.trust_file)
        self.fields = self._read()
        self.generation = 0  # how many times they were read again
        self.stale = False  # a change was seen but could not be read: every run refused
        self.lock = threading.Lock()

    def __call__(self) -> dict[str, Any]:
        """The fields for a run starting now.

        Raises:
            ConfigError: agentfs.toml changed and is invalid (or no longer goes with
                --thinking): no run starts until it is fixed.
        """
        with self.lock:
            trust = _read_or_none(self.trust_file)
            if self.project.refresh_config() or trust != self.trust_seen or self.stale:
                self.stale = True  # until read whole: a refusal must not leave the old
                self.fields = self._read()
                self.trust_seen, self.stale = trust, False
                self.generation += 1
                click.echo("agentfs: agentfs.toml or its trust changed; runs from now on "
                           "use them", err=True)
            return {**self.fixed, **self.fields}

    def _read(self) -> dict[str, Any]:
        from agentfs.errors import ConfigError

        try:
            thinking = thinking_options(self.project, *self.thinking)
        except click.UsageError as exc:
            raise ConfigError(f"{self.project.workspace.config_path}: {exc.message}",
                              hint="change [thinking] or max_tokens, or restart without "
                              "--thinking") from None
        return {**start_notices(self.project), **thinking}


def _read_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def mcp_environment(config: WorkspaceConfig) -> dict[str, str]:
    """The values of the environment variables `config`'s MCP servers name (`env`,
    `headers`), and of no other."""
    wanted = {v for server in config.mcp_servers.values() for v in server.variables()}
    return {v: os.environ[v] for v in sorted(wanted) if os.environ.get(v)}


def open_project(trace_ref: str | None = None) -> Project:
    """The workspace around the current directory, or around a trace path."""
    from agentfs.core.project import Project

    start = Path(trace_ref) if trace_ref and os.path.exists(trace_ref) else None
    return Project.open(start)


def trace_settings(trace: Trace | None, preset: str | None, inject_skills: tuple[str, ...],
                    ) -> tuple[str | None, str | None, list[str]]:
    """(model, preset, declared skills) of a run of `trace` (None: a trace the run
    creates): --preset must be the existing trace's, and the skills the trace declared
    when it was created are declared beside --inject-skill."""
    declared = list(inject_skills)
    if trace is None:
        return None, None, declared
    if preset and preset != trace.meta.preset:
        had = f"preset {trace.meta.preset!r}" if trace.meta.preset else "no preset"
        raise click.UsageError(
            f"trace {trace.id} exists ({had}); presets apply when a trace is created"
        )
    declared += [s for s in trace.meta.context.inject_skills if s not in declared]
    return trace.meta.model, trace.meta.preset, declared


def thinking_options(project: Project, budget: int | None, off: bool) -> dict[str, Any]:
    """`RunnerOptions` fields for --thinking BUDGET / --no-thinking: the workspace's
    configuration with `[thinking]` replaced, checked as agentfs.toml is."""
    from agentfs.errors import ConfigError

    if budget is not None and off:
        raise click.UsageError("--thinking and --no-thinking do not go together")
    if budget is None and not off:
        return {}
    try:
        return {"config": project.config.with_thinking(budget)}
    except ConfigError as exc:
        raise click.UsageError(f"--thinking {budget}: {exc.message}") from None


def trace_id_for(project: Project, ref: str, *, creating: bool) -> str:
    """The id of an existing trace, or of a new one when `creating`."""
    from agentfs.store.workspace import check_trace_id

    if creating and "/" not in ref and ref not in project.workspace.trace_ids():
        return check_trace_id(ref)
    return project.workspace.resolve_trace(ref)


def choose_model(project: Project, trace_model: str | None, preset: str | None,
                  flag: str | None) -> Model:
    """The model by `Project.model_name`'s precedence; a --model path is relative to
    the current directory, others to the workspace."""
    from agentfs.models.resolve import resolve_model

    name = project.model_name(trace_model, preset, flag)
    base = Path.cwd() if flag else project.workspace.root
    return resolve_model(name, base_dir=base, settings=provider_settings(project))


def model_to_record(project: Project, flag: str | None) -> str | None:
    """`run --model` as a trace the run creates records it: a replay path taken from
    the current directory, rewritten for the workspace root that recorded names are
    read from."""
    from agentfs.models.resolve import rebase_model_name

    if flag is None:
        return None
    return rebase_model_name(flag, base_dir=Path.cwd(), root=project.workspace.root)


def registered_command(name: str) -> click.Command:
    """The `agentfs` command `name`, looked up where commands are registered
    (`agentfs/cli/commands.py`), not imported from its module (a chat's slash
    commands, `agentfs approve` continuing with `run`)."""
    context = click.get_current_context()
    group = context.find_root().command
    command = group.get_command(context, name) if isinstance(group, click.Group) else None
    if command is None:
        raise click.ClickException(f"{name} needs the agentfs command group")
    return command
