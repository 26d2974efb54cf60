"""`python -m agentfs` is the `agentfs` command."""

from agentfs.cli import main

main()
