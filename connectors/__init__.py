"""Exactly-once Kafka and Delta Lake connectors for Spark Structured Streaming.

`register(spark)` registers every format with a session. After `pip install` the formats are
also registered without it, through the `pyspark_*` shim modules PySpark discovers itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__version__ = "0.1.0"


def data_sources() -> list[type]:
    """Every DataSource class this package provides (imported lazily: they import PySpark)."""
    from connectors.formats import ALL

    return list(ALL)


def register(spark: "SparkSession") -> None:
    """Register `kafka-eos` and `delta-eos` with `spark`; safe to call more than once."""
    for source in data_sources():
        spark.dataSource.register(source)
