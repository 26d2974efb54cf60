"""`agentfs trust`: let the commands a workspace's agentfs.toml declares run here."""

from __future__ import annotations

from pathlib import Path

import click

from agentfs.cli.context import printable, trust_store


@click.command()
@click.argument("workspace", type=click.Path(file_okay=False, path_type=Path), required=False)
@click.option("--show", is_flag=True,
              help="Print what would run and whether it is trusted; change nothing.")
@click.option("--revoke", is_flag=True,
              help="Forget this workspace's trust: its commands are skipped again.")
def trust(workspace: Path | None, show: bool, revoke: bool) -> None:
    """Let the commands in WORKSPACE's agentfs.toml run (default: the workspace here).

    Context hooks, MCP servers' commands, and bash without a sandbox
    (`tools.bash_sandbox = "none"`) come from the workspace's own files, which a
    clone or a pull can change: they run only once trusted. This prints them and records their
    fingerprint for this workspace in a trust file outside it
    ($AGENTFS_CONFIG_DIR, else $XDG_CONFIG_HOME/agentfs, else
    ~/.config/agentfs). Changing one of them asks for trust again; other
    edits of agentfs.toml do not. Until then run, watch, chat, serve and the
    side-work commands skip them and say so.
    """
    from agentfs.core.project import Project
    from agentfs.core.trust import config_fingerprint, workspace_commands

    if show and revoke:
        raise click.UsageError("--show and --revoke do not go together")
    project = Project.open(workspace)
    root, store = project.workspace.root, trust_store()
    commands = workspace_commands(project.config)
    if revoke:
        forgot = store.revoke(root)
        click.echo(f"{root}: trust revoked; its commands are skipped" if forgot
                   else f"{root} was not trusted; nothing to revoke")
        return
    if not commands:
        click.echo(f"{root}: agentfs.toml runs no commands; there is nothing to trust")
        return
    if show:
        trusted = store.trusted(root)
        state = ("trusted" if trusted == config_fingerprint(project.config)
                 else "changed since it was trusted: skipped" if trusted
                 else "not trusted: skipped")
        click.echo(f"{root}: {state} (trust file {store.path})")
    else:
        store.trust(root, project.config)
        click.echo(f"{root}: trusted; from now on agentfs runs")
    for command in commands:  # as a clone's agentfs.toml wrote them: shown, not obeyed
        click.echo(f"  {printable(command.line(), one_line=True)}")
    if not show:
        click.echo("A command that runs a file of the workspace runs that file as it is then; "
                   "changing any of the commands above asks for trust again.", err=True)
