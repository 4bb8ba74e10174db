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
corrects it to itself instead of taking it for the user's choice. Nothing else: os and sys are
loaded already, so the cost at start-up is nil.
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


set_pyspark_python()
