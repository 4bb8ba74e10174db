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


def local_spark(
    app_name: str = "kafka-eos",
    *,
    master: str = "local[2]",
    conf: dict[str, str] | None = None,
    register: bool = True,
    log_level: str = "WARN",
) -> "SparkSession":
    """A SparkSession whose workers run this interpreter; formats registered unless told not."""
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
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    if register:
        import connectors

        connectors.register(spark)
    return spark
