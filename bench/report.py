"""Collecting figures, printing them as a table and saving them as JSON."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class Figure:
    """One measured number: `group` is the benchmark, `name` what was measured."""

    group: str
    name: str
    value: float
    unit: str
    note: str = ""


@dataclass
class Results:
    quick: bool
    figures: list[Figure] = field(default_factory=list)

    def add(self, group: str, name: str, value: float, unit: str, note: str = "") -> None:
        figure = Figure(group, name, float(value), unit, note)
        self.figures.append(figure)
        print(f"  {group:<12} {name:<52} {_fmt(figure.value):>10} {unit:<6} {note}", flush=True)

    def table(self) -> str:
        lines = [f"{'group':<12} {'figure':<52} {'value':>10} unit"]
        lines.append("-" * len(lines[0]) + "-" * 6)
        for f in self.figures:
            note = f"  ({f.note})" if f.note else ""
            lines.append(f"{f.group:<12} {f.name:<52} {_fmt(f.value):>10} {f.unit}{note}")
        return "\n".join(lines)

    def save(self, path: Path, seconds: float, scratch: Path) -> None:
        data = {
            "quick": self.quick,
            "seconds": round(seconds, 1),
            "machine": {**machine(), "scratch": str(scratch.resolve())},
            "figures": [asdict(f) for f in self.figures],
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2) + "\n")


def _fmt(value: float) -> str:
    if value == 0 or abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def median(samples: list[float]) -> float:
    return statistics.median(samples)


def p95(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def machine() -> dict[str, object]:
    """What the figures were measured on."""
    try:
        git = subprocess.run(
            ["git", "--version"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        git = "absent"
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "git": git,
    }
