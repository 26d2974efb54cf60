"""`agentfs tools`: the MCP servers of agentfs.toml and what each offers."""

from __future__ import annotations

import os
from typing import Any

import click

from agentfs.cli.context import echo_json, mcp_environment, open_project, printable, trust_store


@click.command()
@click.option("--mcp", "everything", is_flag=True,
              help="Also list each MCP server's resources, resource templates and prompts.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def tools(everything: bool, as_json: bool) -> None:
    """List the MCP servers of agentfs.toml and the tools each offers.

    Each trusted server is started (`agentfs trust`) and asked for its tools,
    which runs offer as SERVER__TOOL; an untrusted one is listed as skipped.
    Exits 1 if a trusted server cannot be asked.
    """
    from agentfs.core.mcp import list_servers
    from agentfs.core.trust import workspace_commands
    from agentfs.tools.mcp_client import shutdown_mcp
    from agentfs.tools.subprocesses import safe_environment

    project = open_project()
    config = project.config
    trusted = trust_store().trusted(project.workspace.root) if workspace_commands(config) else None
    try:
        listings = list_servers(config, trusted, mcp_environment(config), project.workspace.root,
                                base_env=safe_environment(os.environ), everything=everything)
    finally:
        shutdown_mcp()
    if as_json:
        echo_json({"mcp_servers": [_as_json(s) for s in listings]})
    elif not listings:
        click.echo("no MCP servers: declare them in agentfs.toml as [mcp_servers.NAME]")
    for listing in listings if not as_json else []:
        click.echo(f"{listing.name}: {listing.runs}")
        for line in (listing.problem or "").splitlines():  # a traceback keeps its lines
            click.echo(f"  {printable(line, one_line=True)}")
        for offered, record in listing.tools:  # what the server says: shown, not obeyed
            note = " (read-only)" if record["read_only"] else ""
            click.echo(printable(f"  {offered}{note}: {_first_line(record['description'])}",
                                 one_line=True))
        _echo_section("resources", [f"{r.uri} ({r.name}){_about(r)}"
                                    for r in listing.resources])
        _echo_section("resource templates", [f"{t.uri_template} ({t.name}){_about(t)}"
                                             for t in listing.resource_templates])
        _echo_section("prompts", [f"{p.name}({', '.join(a.name for a in p.arguments or [])})"
                                  f"{_about(p)}" for p in listing.prompts])
    if any(s.problem and not s.problem.startswith("skipped") for s in listings):
        raise click.exceptions.Exit(1)


def _echo_section(title: str, lines: list[str]) -> None:
    if lines:
        click.echo(f"  {title}:")
        for line in lines:
            click.echo(f"    {printable(line, one_line=True)}")


def _about(item: Any) -> str:
    return f": {_first_line(item.description)}" if item.description else ""


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _as_json(listing: Any) -> dict[str, Any]:
    return {
        "name": listing.name,
        "runs": listing.runs,
        "problem": listing.problem,
        "tools": [{"offered_as": offered, **record} for offered, record in listing.tools],
        "resources": [r.model_dump(mode="json", exclude_none=True) for r in listing.resources],
        "resource_templates": [t.model_dump(mode="json", exclude_none=True)
                               for t in listing.resource_templates],
        "prompts": [p.model_dump(mode="json", exclude_none=True) for p in listing.prompts],
    }
