"""Exactly-once Kafka and Delta Lake connectors for Spark Structured Streaming.

After `pip install` the formats are registered without any call, through the `pyspark_*` shim
modules PySpark's static lookup discovers. `register(spark)` registers whatever that lookup did
not find (the package on `sys.path` but not installed, or a lookup run by another Python).
`enable_structured_logs()` opts in to the package's per-batch log lines (connectors/core/logs.py):
the package itself configures no logging handlers.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from connectors.core.logs import enable_structured_logs

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["WorkerPythonMismatch", "check_worker_python", "data_sources",
           "enable_structured_logs", "register"]

__version__ = "0.1.0"


class WorkerPythonMismatch(RuntimeError):
    """Spark would start its Python workers with an interpreter that lacks this package."""


def data_sources() -> list[type]:
    """Every DataSource class this package provides (imported lazily: they import PySpark)."""
    from connectors.formats import ALL

    return list(ALL)


def register(spark: "SparkSession") -> None:
    """Register the formats `spark` does not know yet; safe to call more than once.

    A format PySpark's static lookup already found is left alone: registering it again
    replaces it, which Spark logs as a WARN once per format and session
    (docs/design.md#pyspark-facts-that-bite). Before registering, checks that Spark's Python workers can import this package
    (`WorkerPythonMismatch` says what to set if not), since a registered format runs there.
    An older PySpark than 4.2 is refused first (`pyspark_version.UnsupportedPySpark`, naming
    the versions needed)."""
    from connectors import pyspark_version

    pyspark_version.require()
    manager = _data_source_manager(spark)
    missing = [s for s in data_sources()
               if manager is None or not manager.dataSourceExists(s.name())]
    if not missing:
        return
    check_worker_python(spark)
    for source in missing:
        spark.dataSource.register(source)


def _data_source_manager(spark: "SparkSession") -> Any:
    """The session's JVM DataSourceManager (static and registered formats), or None where it
    cannot be reached (Spark Connect): then every format is registered, as before."""
    try:
        return spark._jsparkSession.sessionState().dataSourceManager()
    except Exception:
        return None


def check_worker_python(spark: "SparkSession") -> None:
    """Fail in one line when a local session's Python workers would run an interpreter that
    cannot import this package.

    Spark starts them with `SparkContext.pythonExec`: `PYSPARK_PYTHON` from the driver's
    environment when the session started, else `python3` on PATH; the `spark.pyspark.python`
    setting is read by spark-submit only. A virtual environment's Python started by its path
    (not activated) is then not the workers' Python, and the format fails in a worker with
    `ModuleNotFoundError: No module named 'connectors'`. The package's `.pth` hook sets
    `PYSPARK_PYTHON` for that case (kafka_eos_pyspark_python.py); this catches the rest (the
    hook skipped, a PYSPARK_PYTHON naming another interpreter). Only for local masters: a
    cluster's workers run the Python of its nodes, which this machine cannot check."""
    import shutil  # here, not at the top: every worker imports this package
    import subprocess

    try:
        context = spark.sparkContext
        python, master = context.pythonExec, context.master
    except Exception:  # Spark Connect: no SparkContext here
        return
    if not master.startswith("local"):
        return
    found = shutil.which(python)
    fix = (f"set PYSPARK_PYTHON=python3 and put {os.path.dirname(sys.executable)} first on PATH "
           f"(or set PYSPARK_PYTHON={sys.executable}, which a cluster's nodes do not have) in "
           "the environment before the SparkSession starts (the spark.pyspark.python setting is "
           "read by spark-submit only)")
    if found is None:
        raise WorkerPythonMismatch(
            f"Spark starts its Python workers with {python!r}, not found on PATH: {fix}")
    # The folders, not the links' targets: a virtual environment's python links to the base
    # interpreter, whose site-packages are not the venv's. `python3` beside this `python` (the
    # name kafka_eos_pyspark_python.py sets) is this interpreter.
    if (os.path.dirname(os.path.abspath(found)) == os.path.dirname(os.path.abspath(sys.executable))
            and os.path.samefile(found, sys.executable)):
        return
    # What a worker imports to run the formats, from the driver's working directory (a local
    # worker's too, and first on its sys.path)
    probe = subprocess.run([found, "-c", "import connectors, sources, sinks, pyarrow, "
                            "confluent_kafka"], capture_output=True, timeout=60)
    if probe.returncode != 0:
        raise WorkerPythonMismatch(
            f"Spark starts its Python workers with {python!r} ({found}), which cannot import "
            f"kafka-eos (installed for {sys.executable}): {fix}")
