"""agentfs benchmarks: figures measured side by side, printed and saved as JSON.

Run `python -m bench` (everything) or `python -m bench --quick` from the
repository root. These are measurements, not tests: nothing here fails on a
slow figure. See docs/performance.md for what each figure means.
"""
