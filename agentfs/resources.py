"""Files shipped with agentfs: built-in skills and the example workspace.

In a wheel they live in `agentfs/_bundled/`; in a source checkout (editable
install) they are the repository's top-level `skills/` and `example-workspace/`.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def _bundled(name: str) -> Path:
    inside = _PACKAGE / "_bundled" / name
    return inside if inside.is_dir() else _PACKAGE.parent / name


def builtin_skills_dir() -> Path:
    """Directory of the skills that ship with agentfs."""
    return _bundled("skills")


def example_workspace_dir() -> Path:
    """Directory of the example workspace (`agentfs demo` copies it)."""
    return _bundled("example-workspace")
