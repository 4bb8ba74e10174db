"""Zero-config registration of `kafka-eos`: PySpark registers every top-level `pyspark_*`
module that exposes `DefaultSource` (pyspark/sql/worker/lookup_data_sources.py)."""

from connectors import pyspark_version

pyspark_version.require()  # before any PySpark API: an old PySpark gets the versions needed

from connectors.formats import KafkaEosDataSource as DefaultSource

__all__ = ["DefaultSource"]
