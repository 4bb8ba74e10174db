"""A local SparkSession for tests, demos and benchmarks, with the settings that bite set.

Python workers start `spark.pyspark.python`, not the driver's interpreter: without it they
import none of this project's packages. The UI is off and logs are quiet.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


#: Names a class-data-sharing archive of Spark's driver classes (the test suite's, made by
#: integration_tests/support/class_sharing.py); Spark starts of the process and its children
#: map it. Unset for users: their sessions never see it.
SPARK_CDS_ENV = "KAFKA_EOS_SPARK_CDS_ARCHIVE"


def class_sharing_options() -> str:
    """The driver JVM's options for the archive named by `SPARK_CDS_ENV`, or "" without one.
    Class-data-sharing's own log lines are off: a JVM that cannot map the archive says so on
    stdout, which pipelines' logs do not need."""
    archive = os.environ.get(SPARK_CDS_ENV, "").strip()
    if not archive or not os.path.isfile(archive):
        return ""
    return f"-XX:SharedArchiveFile={archive} -Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"


#: JVM options for short-lived Spark drivers and executors (`local_spark(quick_start=True)`).
QUICK_START_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def local_spark(
    app_name: str = "kafka-eos",
    *,
    master: str = "local[2]",
    conf: dict[str, str] | None = None,
    register: bool = True,
    log_level: str = "WARN",
    quick_start: bool = True,
) -> "SparkSession":
    """A SparkSession whose workers run this interpreter; formats registered unless told not.

    `quick_start`: the JVMs compile with C1 only and collect with the serial collector
    (`QUICK_START_JAVA_OPTIONS`). A Spark start and its first query then cost about half the
    CPU (docs/design.md#a-short-spark-runs-jvm-cpu), which is what short runs (tests, the demo,
    a killed-and-restarted pipeline) spend most of their time on. The benchmarks turn it off: C2's compiled code is what a long-running job runs. With it, the
    driver also maps the test suite's class-data-sharing archive when `SPARK_CDS_ENV` names
    one (integration_tests/support/class_sharing.py makes it).
    """
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.pyspark.python", sys.executable)
        .config("spark.pyspark.driver.python", sys.executable)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
    )
    conf = dict(conf or {})
    if quick_start:
        for key in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"):
            # The test suite's class-data-sharing archive, when it names one: the driver's
            # class path only (integration_tests/support/class_sharing.py).
            sharing = class_sharing_options() if key == "spark.driver.extraJavaOptions" else ""
            conf[key] = " ".join(filter(None, (QUICK_START_JAVA_OPTIONS, sharing,
                                               conf.get(key))))
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    if register:
        import connectors

        connectors.register(spark)
    return spark
