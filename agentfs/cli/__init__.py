"""The `agentfs` command: thin click commands over the core.

This is the only layer that reads environment variables (the Anthropic key
and base URL) and passes them down as settings.
"""

from __future__ import annotations

import errno
import sys

import click

from agentfs.errors import AgentfsError


def main() -> None:
    """Entry point: expected failures print one line and exit 1; usage errors exit 2."""
    from agentfs.cli.commands import cli
    from agentfs.cli.context import interrupted, printable

    try:
        code = cli.main(standalone_mode=False)
    except (click.exceptions.Abort, KeyboardInterrupt):  # click turns Ctrl-C into Abort
        interrupted()
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except AgentfsError as exc:  # it may name a file someone else named
        click.echo(f"agentfs: error: {printable(str(exc))}", err=True)
        sys.exit(1)
    except OSError as exc:  # disk full, permissions, ...: say which file, no traceback
        where = f" ({exc.filename})" if exc.filename else ""
        click.echo(f"agentfs: error: {printable(f'{exc.strerror or exc}{where}')}", err=True)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            click.echo("agentfs: free some disk space, then run the command again; "
                       "what was committed before is unchanged", err=True)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
