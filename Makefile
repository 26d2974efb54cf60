# One command each: the demo, the tests, the benchmarks, lint, and the dependency checks.
.PHONY: demo test bench lint lock deps-latest deps-floor

# Versions from requirements/ci.lock, as in CI (docs/dependencies.md).
.venv/bin/agentfs:
	python3 -m venv .venv && .venv/bin/pip install -c requirements/ci.lock -e '.[serve,mcp,openai,test,bench]'

demo: .venv/bin/agentfs
	.venv/bin/agentfs demo

test: .venv/bin/agentfs
	.venv/bin/python -m pytest

bench: .venv/bin/agentfs
	.venv/bin/pip install -q -c requirements/ci.lock -e '.[bench]' && .venv/bin/python -m bench

lint: .venv/bin/agentfs
	.venv/bin/pip install -q -c requirements/ci.lock -e '.[lint]' \
		&& .venv/bin/ruff check agentfs tests scripts && .venv/bin/mypy agentfs

# requirements/ci.lock from the newest versions pyproject.toml allows.
lock:
	python3 scripts/deps.py lock

# The suite on the newest allowed versions, and on the lowest (PYTEST_ARGS: e.g. -m "not slow").
deps-latest:
	python3 scripts/deps.py latest $(PYTEST_ARGS)

deps-floor:
	python3 scripts/deps.py floor $(PYTEST_ARGS)
