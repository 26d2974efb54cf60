"""The dependency checks and the CI lock; see docs/dependencies.md.

    python3 scripts/deps.py latest [PYTEST ARGS]   # the suite on the newest allowed versions
    python3 scripts/deps.py floor [PYTEST ARGS]    # the suite on every floor at once
    python3 scripts/deps.py lock                   # requirements/ci.lock from the newest

Each works in a scratch virtualenv under `.deps/`, never in the project's `.venv`.
Standard library only: it runs before any virtualenv exists.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements" / "ci.lock"
SCRATCH = ROOT / ".deps"
#: What the suite needs installed (the README's test command installs the same).
EXTRAS = "serve,mcp,openai,test,bench"
#: What `make lint` needs; the lock pins it too.
LOCKED_EXTRAS = "serve,mcp,openai,test,bench,lint"
BOUNDED = re.compile(r"^(?P<name>[A-Za-z0-9._-]+)>=(?P<floor>[0-9][0-9.]*),<(?P<next>[0-9][0-9.]*)$")
LOCK_HEADER = """\
# Every package `pip install -e '.[{extras}]'` installed, pinned: CI and the
# README's commands install with `-c requirements/ci.lock`. Written by
# `make lock` (scripts/deps.py) from the newest versions pyproject.toml allows;
# see docs/dependencies.md before changing it by hand.
"""


def requirements(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """The runtime requirements and those of every extra, as written in pyproject.toml."""
    project = tomllib.loads(pyproject.read_text())["project"]
    found = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        found.extend(extra)
    return found


def floors(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """`name==floor` for every requirement; each must be written `name>=floor,<next`."""
    pins = []
    for requirement in requirements(pyproject):
        match = BOUNDED.match(requirement.replace(" ", ""))
        if match is None:
            raise SystemExit(f"{pyproject}: {requirement!r} is not written `name>=floor,<next` "
                             "(docs/dependencies.md says how to bound it)")
        pins.append(f"{match['name']}=={match['floor']}")
    return pins


def scratch_venv(name: str) -> Path:
    """A new, empty virtualenv `.deps/<name>`; returns its python."""
    folder = SCRATCH / name
    shutil.rmtree(folder, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    return folder / "bin" / "python"


def install(python: Path, extras: str, *pip_args: str) -> None:
    subprocess.run([str(python), "-m", "pip", "install", "-q", *pip_args,
                    "-e", f"{ROOT}[{extras}]"], check=True, cwd=ROOT)


def run_suite(python: Path, pytest_args: list[str]) -> int:
    return subprocess.run([str(python), "-m", "pytest", *pytest_args], check=False,
                          cwd=ROOT).returncode


def latest(pytest_args: list[str]) -> int:
    python = scratch_venv("latest")
    install(python, EXTRAS, "--upgrade")
    return run_suite(python, pytest_args)


def floor(pytest_args: list[str]) -> int:
    constraints = SCRATCH / "floor.txt"
    python = scratch_venv("floor")
    constraints.write_text("\n".join(floors()) + "\n")
    install(python, EXTRAS, "-c", str(constraints))
    return run_suite(python, pytest_args)


def lock() -> int:
    python = scratch_venv("lock")
    install(python, LOCKED_EXTRAS, "--upgrade")
    frozen = subprocess.run([str(python), "-m", "pip", "freeze", "--exclude-editable"],
                            check=True, capture_output=True, text=True, cwd=ROOT).stdout
    pins = sorted((line for line in frozen.splitlines() if "==" in line), key=str.lower)
    LOCK.parent.mkdir(exist_ok=True)
    LOCK.write_text(LOCK_HEADER.format(extras=LOCKED_EXTRAS) + "\n".join(pins) + "\n")
    print(f"wrote {LOCK.relative_to(ROOT)}: {len(pins)} packages")
    return 0


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("latest", "floor", "lock"):
        print(__doc__, file=sys.stderr)
        return 2
    command, rest = argv[0], argv[1:]
    if command == "lock":
        return lock()
    return latest(rest) if command == "latest" else floor(rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
