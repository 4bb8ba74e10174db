"""Compiles the checkout's Python files once, before any test starts a process (pyproject.toml's
addopts load this plugin).

An editable install leaves the package's bytecode to the interpreter, and an interpreter run
with PYTHONDONTWRITEBYTECODE=1 (as this project's machines and CI are) never writes it: every
Python process of the run, each of some 1,900 Spark workers, source runners and pipelines,
compiled the modules it imported from source again, about 0.3 s of CPU a process for the
package's worker-side modules. Compiled once here, they are read from `__pycache__`, which the
interpreter reads whatever that variable says. On a checkout whose bytecode is already fresh
this costs a `stat` a file.
"""

from __future__ import annotations

import compileall
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: What the run's processes import: the package, the test support its pipelines run, the
#: benchmarks the smoke tests start, and the start-up hook every interpreter imports.
PACKAGES = ("connectors", "sources", "sinks", "integration_tests", "benchmarks", "tests")
HOOK = "kafka_eos_pyspark_python.py"
#: Nothing below these is imported by the run.
SKIP = re.compile(r"[\\/](\.git|__pycache__|spark-warehouse)[\\/]")


def compile_checkout(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> int:
    """Writes missing or stale bytecode under `root`; the number of files looked at."""
    files = 0
    for name in packages:
        folder = root / name
        if folder.is_dir():
            files += sum(1 for _ in folder.rglob("*.py"))
            compileall.compile_dir(str(folder), quiet=1, rx=SKIP, workers=1)
    hook = root / HOOK
    if hook.is_file():
        files += 1
        compileall.compile_file(str(hook), quiet=1)
    return files


def pytest_configure(config: pytest.Config) -> None:
    # Once per run: in the xdist controller (or the only process with -n 0), before any
    # worker starts.
    if hasattr(config, "workerinput"):
        return
    compile_checkout()
