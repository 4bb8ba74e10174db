"""The run's processes read the package's bytecode instead of compiling it each
(integration_tests/support/bytecode.py)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from integration_tests.support.bytecode import ROOT, compile_checkout


def _stale(root: Path, packages: tuple[str, ...]) -> list[str]:
    stale = []
    for name in packages:
        for source in (root / name).rglob("*.py"):
            cached = Path(importlib.util.cache_from_source(str(source)))
            if not cached.is_file() or cached.stat().st_mtime < source.stat().st_mtime:
                stale.append(str(source.relative_to(root)))
    return stale


def test_the_packages_a_spark_worker_imports_have_fresh_bytecode_in_this_run():
    # pytest_configure compiled them before any test ran; a fresh clone has none, and with
    # PYTHONDONTWRITEBYTECODE=1 no process of the run would write them.
    stale = _stale(ROOT, ("connectors", "sources", "sinks"))
    assert not stale, f"{len(stale)} module(s) without fresh bytecode, e.g. {stale[:3]}"


def test_a_process_that_may_not_write_bytecode_reads_what_was_compiled(tmp_path):
    package = tmp_path / "bytecode_probe"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "mod.py").write_text("VALUE = 1\n")
    files = compile_checkout(tmp_path, ("bytecode_probe",))
    assert files == 2
    assert not _stale(tmp_path, ("bytecode_probe",))
    cached = importlib.util.cache_from_source(str(package / "mod.py"))
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(tmp_path)}
    verbose = subprocess.run([sys.executable, "-v", "-c", "import bytecode_probe.mod"], env=env,
                             capture_output=True, text=True, check=True).stderr
    assert f"code object from '{cached}'" in verbose
