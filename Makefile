# One command each: the demo, the tests, the benchmarks, lint.
.PHONY: demo test bench lint

.venv/bin/agentfs:
	python3 -m venv .venv && .venv/bin/pip install -e '.[test]'

demo: .venv/bin/agentfs
	.venv/bin/agentfs demo

test: .venv/bin/agentfs
	.venv/bin/python -m pytest

bench: .venv/bin/agentfs
	.venv/bin/pip install -q -e '.[bench]' && .venv/bin/python -m bench

lint: .venv/bin/agentfs
	.venv/bin/pip install -q ruff mypy && .venv/bin/ruff check agentfs tests && .venv/bin/mypy agentfs
