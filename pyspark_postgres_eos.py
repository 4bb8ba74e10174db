"""Zero-config registration of `postgres-eos` (see pyspark_kafka_eos.py)."""

from connectors import pyspark_version

pyspark_version.require()  # before any PySpark API: an old PySpark gets the versions needed

from sinks.postgres.data_source import PostgresEosDataSource as DefaultSource

__all__ = ["DefaultSource"]
