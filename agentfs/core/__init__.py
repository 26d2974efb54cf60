"""The agent: runner loop, system prompt, workspace operations."""
