"""The dependency bounds and the CI lock agree (docs/dependencies.md): every
requirement has a tested floor and a major bound, and the lock pins each one
inside its bounds, so CI installs a set pyproject.toml allows."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
Version = tuple[int, ...]


def _version(text: str) -> Version:
    """A plain release number (`2.17.0`) as a tuple; the direct dependencies use no other."""
    assert re.fullmatch(r"[0-9]+(\.[0-9]+)*", text), f"not a plain release number: {text}"
    return tuple(int(part) for part in text.split("."))


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def _deps_script():
    spec = importlib.util.spec_from_file_location("deps", ROOT / "scripts" / "deps.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


deps = _deps_script()


def _bounds() -> dict[str, tuple[Version, Version]]:
    """name -> (floor, next major) of every requirement, runtime and extras."""
    found = {}
    for requirement in deps.requirements():
        match = deps.BOUNDED.match(requirement.replace(" ", ""))
        assert match is not None, f"pyproject.toml: {requirement!r} is not `name>=floor,<next`"
        found[_name(match["name"])] = (_version(match["floor"]), _version(match["next"]))
    return found


def _locked() -> dict[str, str]:
    pins = {}
    for line in deps.LOCK.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        match = re.fullmatch(r"([A-Za-z0-9._-]+)==(\S+)", line)
        assert match is not None, f"requirements/ci.lock: {line!r} is not `name==version`"
        pins[_name(match[1])] = match[2]
    return pins


def test_every_requirement_has_a_floor_and_an_upper_bound_above_it():
    bounds = _bounds()
    assert "anthropic" in bounds and "pytest" in bounds and "ruff" in bounds
    for name, (floor, upper) in bounds.items():
        assert floor < upper, f"pyproject.toml: {name}'s floor {floor} is not below {upper}"


def test_the_floor_check_pins_each_requirement_at_its_floor():
    floor = ".".join(map(str, _bounds()["dulwich"][0]))
    assert f"dulwich=={floor}" in deps.floors()
    assert len(deps.floors()) == len(deps.requirements())


def test_an_unbounded_requirement_is_refused_naming_the_fix(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\ndependencies = ["click>=8.1"]\n'
                         "[project.optional-dependencies]\n")
    with pytest.raises(SystemExit, match=r"'click>=8.1' is not written `name>=floor,<next`"):
        deps.floors(pyproject)


def test_the_lock_pins_every_requirement_inside_its_bounds():
    locked = _locked()
    for name, (floor, upper) in _bounds().items():
        assert name in locked, f"requirements/ci.lock lacks {name}: run `make lock`"
        assert floor <= _version(locked[name]) < upper, (
            f"requirements/ci.lock pins {name}=={locked[name]}, outside >={floor},<{upper}")


def test_the_lock_does_not_pin_agentfs_itself():
    assert "agentfs-workspace" not in _locked()
