"""Run at interpreter start (`kafka_eos_pyspark_python.pth`, installed with the package): Spark's
Python must be this interpreter, the one the package is installed in.

A script started as `/path/to/venv/bin/python job.py` (the venv not activated) launches Spark's
JVM with its own environment, and Spark picks the Python for the data-source lookup, planning
and tasks from that environment only: `PYSPARK_DRIVER_PYTHON`, else `PYSPARK_PYTHON`, else
`python3` on PATH (not the venv's); the `spark.pyspark.python` setting is read by spark-submit
alone. The lookup then finds no `kafka-eos` (`[DATA_SOURCE_NOT_FOUND]`) and a registered format
fails in its workers (`No module named 'connectors'`).

The value must also hold on a cluster's nodes: Spark sends ONE command to run both the driver's
planning workers and every executor's Python workers (a format PySpark finds by itself gets
`PYSPARK_DRIVER_PYTHON` or `PYSPARK_PYTHON` as the JVM saw them, a registered one
`SparkContext.pythonExec`: DataSourceManager and UserDefinedPythonDataSource in Spark 4). An
absolute path to this interpreter is a path on the driver's host: on another host it is
missing (`Cannot run program ".../venv/bin/python": error=2`) or another Python without the
package (`No module named 'pyarrow'`), and every task failed (docs/deploying.md). So, when
`PYSPARK_PYTHON` is unset, it is set here to a command name, `python3` (the interpreter's own
name when its folder has no `python3` that is itself), and the interpreter's folder goes first
on PATH when that name would find another Python there: on this host the name is this
interpreter (what activating the venv does), on a node it is the node's own Python, which is
where a cluster installs the package. A value the user set is kept. The value this hook set is
marked (`KAFKA_EOS_PYSPARK_PYTHON`), so a child started with another interpreter that has the
package corrects it to itself instead of taking it for the user's choice.

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


def _found_on(path: str, name: str) -> str | None:
    """The folder whose `name` a command lookup on `path` (a PATH value) runs first."""
    for folder in path.split(os.pathsep):
        candidate = os.path.join(folder or ".", name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return folder
    return None


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def set_pyspark_python(environ=os.environ, executable=sys.executable) -> None:
    current = environ.get("PYSPARK_PYTHON")
    if current and current != environ.get(MARK):
        return  # the user's choice
    # An embedding program (uwsgi, a GUI) is no Python to start workers with.
    if not executable or not os.path.basename(executable).startswith("python"):
        return
    folder = os.path.dirname(os.path.abspath(executable))
    name = "python3"
    if not _same_file(os.path.join(folder, name), executable):
        name = os.path.basename(executable)
    path = environ.get("PATH", os.defpath)
    found = _found_on(path, name)
    if found is None or not _same_file(os.path.join(found, name), executable):
        environ["PATH"] = os.pathsep.join([folder, path]) if path else folder
    environ["PYSPARK_PYTHON"] = name
    environ[MARK] = name


def drop_bundled_pyspark_zips(path: list = sys.path, cache: dict = sys.path_importer_cache) -> None:
    """Remove from `path`, and their importers from `cache` (importlib.invalidate_caches(),
    which Spark's workers call when they add a path, re-reads each archive's directory: 38 ms
    for spark-core's jar), the archives inside an installed PySpark package `<site>/pyspark`
    that the installed packages stand for: `python/lib/pyspark.zip` and the `jars/*.jar` Spark
    adds (no Python in them) when `<site>/pyspark/__init__.py` exists, `python/lib/py4j-*.zip`
    when `<site>/py4j/__init__.py` does (pip installs PySpark's py4j dependency there); only
    when `<site>` is on `path`, so that the interpreter imports those packages instead."""
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
        # The installed package stands for the zip only where this interpreter imports it: a
        # packed environment shipped to the driver (spark.archives, `./environment/bin/python`)
        # has no PySpark of its own, and the zip is then the only copy it can import.
        site = os.path.dirname(package)
        if not any(isinstance(p, str) and os.path.normpath(p) == site for p in path):
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
