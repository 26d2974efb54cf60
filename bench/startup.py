"""Start: `agentfs --help` against a bare interpreter, `agentfs status` against `git status`.

Each command runs as a new process, many times, round-robin (one run of each
in turn, so they all see the same machine), and the median wall time of each
is reported, with the two ratios the design budgets. `git status` and
`agentfs status` run in the same workspace of one 10,000-message trace (the
one `bench/load.py` uses).

- *bare Python*: `python -c pass` with the interpreter agentfs runs on
  (`sys.executable`). On a machine with pyenv, `python3` on the PATH is a shell
  shim that takes several times as long; it is reported beside, not used.
- *agentfs*: the `agentfs` script installed beside that interpreter (what a
  user types), else `python -m agentfs`.

agentfs' own modules are byte-compiled first (`compileall`), as pip does when
it installs a wheel: with an editable install and `PYTHONDONTWRITEBYTECODE`
set, every start would compile them again, which no installed user pays.
"""

from __future__ import annotations

import compileall
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import agentfs
from bench.fixtures import shared_long_trace
from bench.load import KEPT, SIZE
from bench.report import Results, median


def run(results: Results, quick: bool, scratch: Path) -> None:
    root = shared_long_trace(scratch, SIZE, kept=KEPT)
    byte_compile()
    agentfs_cmd = command_line()
    commands = {
        "bare Python (python -c pass)": [sys.executable, "-c", "pass"],
        "agentfs --help": [*agentfs_cmd, "--help"],
        "git status": ["git", "status"],
        "agentfs status": [*agentfs_cmd, "status"],
    }
    shim = shutil.which("python3")
    if shim and Path(shim).resolve() != Path(sys.executable).resolve():
        commands["python3 -c pass (python3 on the PATH)"] = [shim, "-c", "pass"]
    times = round_robin(commands, root, rounds=7 if quick else 25)
    label = f"{SIZE:,}-message workspace"
    for name, samples in times.items():
        results.add("startup", name, median(samples), "ms",
                    f"median of {len(samples)}" + (f", in a {label}" if "status" in name else ""))
    bare = median(times["bare Python (python -c pass)"])
    results.add("startup", "agentfs --help / bare Python",
                median(times["agentfs --help"]) / bare, "x", "budget <= 6")
    results.add("startup", "agentfs status / git status",
                median(times["agentfs status"]) / median(times["git status"]), "x",
                f"budget <= 4; {label}")


def byte_compile() -> None:
    """Byte-compile agentfs' modules, as installing a wheel does (see above)."""
    compileall.compile_dir(Path(agentfs.__file__).parent, quiet=1)


def command_line() -> list[str]:
    """How a user starts agentfs with this interpreter."""
    script = Path(sys.executable).with_name("agentfs")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "agentfs"]


def round_robin(commands: dict[str, list[str]], cwd: Path | Mapping[str, Path], rounds: int,
                ) -> dict[str, list[float]]:
    """Wall time in ms of each command, one run of each in turn, `rounds` times, after one
    untimed run of each (which must succeed); `cwd` is where they run, or where each
    runs by name."""
    where = cwd if isinstance(cwd, Mapping) else dict.fromkeys(commands, cwd)
    for name, argv in commands.items():
        subprocess.run(argv, cwd=where[name], capture_output=True, check=True)
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(rounds):
        for name, argv in commands.items():
            began = time.perf_counter()
            subprocess.run(argv, cwd=where[name], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=False)
            times[name].append((time.perf_counter() - began) * 1000)
    return times
