"""Zero-config registration of `postgres-eos` (see pyspark_kafka_eos.py)."""

from sinks.postgres import PostgresEosDataSource as DefaultSource

__all__ = ["DefaultSource"]
