"""Zero-config registration of `postgres-eos` (see pyspark_kafka_eos.py)."""

from sinks.postgres_data_source import PostgresEosDataSource as DefaultSource

__all__ = ["DefaultSource"]
