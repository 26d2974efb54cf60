"""Storage: workspace layout, message files, traces, Git commits and locks.

This layer knows nothing about LLMs; the agent core uses it through `Trace`,
`GitRepo` and `Workspace`.
"""
