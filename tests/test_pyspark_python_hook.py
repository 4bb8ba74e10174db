"""The interpreter-start hook that makes Spark's Python the one the package is installed in
(kafka_eos_pyspark_python.py, run by kafka_eos_pyspark_python.pth). Spark takes its Python from
the environment only (PYSPARK_PYTHON, else `python3` on PATH), so a venv's Python started by
its path, the venv not activated, found no `kafka-eos` (issue 24)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import kafka_eos_pyspark_python as hook

ROOT = Path(__file__).resolve().parents[1]
PY = "/venv/bin/python3.11"


def test_unset_it_becomes_this_interpreter_and_is_marked_as_set_here():
    env: dict[str, str] = {}
    hook.set_pyspark_python(env, PY)
    assert env == {"PYSPARK_PYTHON": PY, hook.MARK: PY}


def test_a_value_the_user_set_is_kept():
    env = {"PYSPARK_PYTHON": "/opt/python/bin/python3"}
    hook.set_pyspark_python(env, PY)
    assert env == {"PYSPARK_PYTHON": "/opt/python/bin/python3"}


def test_a_value_inherited_from_this_hook_follows_the_interpreter():
    """A child started with another interpreter that has the package: its own Python, not the
    parent's, which the mark shows was not the user's choice."""
    env = {"PYSPARK_PYTHON": "/other/venv/bin/python", hook.MARK: "/other/venv/bin/python"}
    hook.set_pyspark_python(env, PY)
    assert env == {"PYSPARK_PYTHON": PY, hook.MARK: PY}


def test_an_embedding_program_is_no_python_for_workers():
    env: dict[str, str] = {}
    hook.set_pyspark_python(env, "/usr/sbin/uwsgi")
    hook.set_pyspark_python(env, "")
    assert env == {}


def test_the_wheel_installs_the_hook_in_editable_installs_too():
    build = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]
    wheel = build["targets"]["wheel"]
    assert "kafka_eos_pyspark_python.py" in wheel["only-include"]
    assert wheel["force-include"] == {"kafka_eos_pyspark_python.pth":
                                      "kafka_eos_pyspark_python.pth"}
    assert (ROOT / "kafka_eos_pyspark_python.pth").read_text() == "import kafka_eos_pyspark_python\n"


def test_the_installed_package_sets_it_in_a_fresh_interpreter():
    """As installed here (`pip install -e .` puts the .pth in site-packages): a Python started by
    its path with PYSPARK_PYTHON unset has it set to itself."""
    pth = Path(sysconfig.get_paths()["purelib"]) / "kafka_eos_pyspark_python.pth"
    assert pth.exists(), f"{pth} missing: reinstall the package (pip install -e .)"
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", hook.MARK)}
    out = subprocess.run([sys.executable, "-c", "import os; print(os.environ['PYSPARK_PYTHON'])"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == sys.executable, out.stderr
