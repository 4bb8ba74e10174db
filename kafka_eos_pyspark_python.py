"""Run at interpreter start (`kafka_eos_pyspark_python.pth`, installed with the package): Spark's
Python must be this interpreter, the one the package is installed in.

A script started as `/path/to/venv/bin/python job.py` (the venv not activated) launches Spark's
JVM with its own environment, and Spark picks the Python for the data-source lookup, planning
and tasks from that environment only: `PYSPARK_DRIVER_PYTHON`, else `PYSPARK_PYTHON`, else
`python3` on PATH (not the venv's); the `spark.pyspark.python` setting is read by spark-submit
alone. The lookup then finds no `kafka-eos` (`[DATA_SOURCE_NOT_FOUND]`) and a registered format
fails in its workers (`No module named 'connectors'`). So, when `PYSPARK_PYTHON` is unset, it is
set here to `sys.executable`; a value the user set is kept. The value this hook set is marked
(`KAFKA_EOS_PYSPARK_PYTHON`), so a child started with another interpreter that has the package
corrects it to itself instead of taking it for the user's choice.

It also drops PySpark's bundled archives from the path when they lie inside the installed
PySpark package (`drop_bundled_pyspark_zips`). Spark starts every Python worker (the
data-source look-up, planning, each daemon, the streaming runners) with
`$SPARK_HOME/python/lib/pyspark.zip`, its py4j zip and spark-core's jar first on PYTHONPATH.
For a pip-installed PySpark, SPARK_HOME is the package itself, so the zip is the same code as
the package; but zipimport keeps no bytecode, so every worker compiled PySpark from source:
measured here, 1.3-1.8 s of CPU per Python process instead of 0.3-0.4 s, and about a third of a
short streaming query's CPU. A cluster's own SPARK_HOME (no installed package around the zip)
keeps its zips. Both steps use only os and sys, loaded already, and stat a file or two: the
cost at start-up is nil.
"""

import os
import sys

MARK = "KAFKA_EOS_PYSPARK_PYTHON"


def set_pyspark_python(environ=os.environ, executable=sys.executable) -> None:
    current = environ.get("PYSPARK_PYTHON")
    if current and current != environ.get(MARK):
        return  # the user's choice
    # An embedding program (uwsgi, a GUI) is no Python to start workers with.
    if not executable or not os.path.basename(executable).startswith("python"):
        return
    environ["PYSPARK_PYTHON"] = executable
    environ[MARK] = executable


def drop_bundled_pyspark_zips(path: list = sys.path, cache: dict = sys.path_importer_cache) -> None:
    """Remove from `path`, and their importers from `cache` (importlib.invalidate_caches(),
    which Spark's workers call when they add a path, re-reads each archive's directory: 38 ms
    for spark-core's jar), the archives inside an installed PySpark package `<site>/pyspark`
    that the installed packages stand for: `python/lib/pyspark.zip` and the `jars/*.jar` Spark
    adds (no Python in them) when `<site>/pyspark/__init__.py` exists, `python/lib/py4j-*.zip`
    when `<site>/py4j/__init__.py` does (pip installs PySpark's py4j dependency there)."""
    for entry in list(path):
        if not isinstance(entry, str) or not entry.endswith((".zip", ".jar")):
            continue
        folder, name = os.path.split(os.path.normpath(entry))
        parent, leaf = os.path.split(folder)
        if leaf == "jars":
            package = parent
        elif leaf == "lib" and os.path.basename(parent) == "python":
            package = os.path.dirname(parent)
        else:
            continue
        if os.path.basename(package) != "pyspark":
            continue
        if name == "pyspark.zip" or name.endswith(".jar"):
            installed = os.path.join(package, "__init__.py")
        elif name.startswith("py4j-") and name.endswith(".zip"):
            installed = os.path.join(os.path.dirname(package), "py4j", "__init__.py")
        else:
            continue
        if os.path.isfile(installed):
            path.remove(entry)
            cache.pop(entry, None)


set_pyspark_python()
drop_bundled_pyspark_zips()
