"""`connectors.register(spark)` registers only the formats the session does not know yet (a
format PySpark's static lookup found, registered again, is "replaced", a WARN per format and
session), and refuses, in one line naming what to set, a local session whose Python workers
cannot import the package. The session here is a stand-in for the few attributes
register() reads: the end-to-end checks are integration_tests/demo/test_registration.py's."""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace

import pytest

import connectors


class _Manager:
    def __init__(self, known: set[str]) -> None:
        self.known = known

    def dataSourceExists(self, name: str) -> bool:  # noqa: N802 (the JVM method's name)
        return name in self.known


def session(known: set[str], python: str = sys.executable, master: str = "local[2]"):
    registered: list[str] = []
    manager = _Manager(known)
    return SimpleNamespace(
        _jsparkSession=SimpleNamespace(sessionState=lambda: SimpleNamespace(
            dataSourceManager=lambda: manager)),
        dataSource=SimpleNamespace(register=lambda source: registered.append(source.name())),
        sparkContext=SimpleNamespace(pythonExec=python, master=master),
        registered=registered,
    )


def test_formats_the_static_lookup_found_are_not_registered_again():
    spark = session({"kafka-eos", "delta-eos", "postgres-eos"})
    connectors.register(spark)
    assert spark.registered == []


def test_formats_the_session_lacks_are_registered():
    spark = session({"kafka-eos"})
    connectors.register(spark)
    assert spark.registered == ["delta-eos", "postgres-eos"]


def test_without_a_reachable_manager_every_format_is_registered():
    spark = session(set())
    spark._jsparkSession = None  # Spark Connect: no JVM session here
    connectors.register(spark)
    assert spark.registered == ["kafka-eos", "delta-eos", "postgres-eos"]


def test_a_local_session_whose_workers_run_a_python_without_the_package_is_refused_in_one_line(
        tmp_path, monkeypatch):
    """The workers' Python is a fresh virtual environment's: the same interpreter binary (its
    `python` links to this one) with site-packages of its own, which lack the package, as a
    user's venv is beside the base Python."""
    import subprocess

    monkeypatch.chdir(tmp_path)  # not the checkout: its packages would be importable from there
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")],
                   check=True)
    other = str(tmp_path / "venv" / "bin" / "python")
    spark = session(set(), python=other)
    with pytest.raises(connectors.WorkerPythonMismatch) as e:
        connectors.register(spark)
    assert str(e.value) == (
        f"Spark starts its Python workers with '{other}' ({other}), which "
        f"cannot import kafka-eos (installed for {sys.executable}): set PYSPARK_PYTHON=python3 "
        f"and put {os.path.dirname(sys.executable)} first on PATH (or set "
        f"PYSPARK_PYTHON={sys.executable}, which a cluster's nodes do not have) in the "
        "environment before the SparkSession starts (the spark.pyspark.python setting is read "
        "by spark-submit only)")
    assert spark.registered == []
    # a cluster's workers run its nodes' Python: nothing to check from here
    connectors.register(session(set(), python=other, master="yarn"))


def test_python3_beside_this_interpreter_is_taken_for_it_without_a_probe(monkeypatch):
    """The name the start-up hook sets (`python3`, this interpreter's folder first on PATH):
    the same interpreter, so no subprocess probes it (a second of every session's start)."""
    import shutil
    import subprocess

    folder = os.path.dirname(sys.executable)
    if not os.path.exists(os.path.join(folder, "python3")) or not os.path.samefile(
            os.path.join(folder, "python3"), sys.executable):
        pytest.skip(f"{folder} has no python3 that is {sys.executable}")
    monkeypatch.setenv("PATH", os.pathsep.join([folder, os.environ.get("PATH", "")]))
    assert os.path.dirname(shutil.which("python3")) == folder

    def no_probe(*args, **kwargs):
        raise AssertionError(f"probed {args}")

    monkeypatch.setattr(subprocess, "run", no_probe)
    connectors.register(session(set(), python="python3"))


def test_a_worker_python_not_on_path_is_refused_too():
    spark = session(set(), python="python3-that-does-not-exist")
    with pytest.raises(connectors.WorkerPythonMismatch, match="not found on PATH"):
        connectors.register(spark)
