"""Zero-config registration of `kafka-eos`: PySpark registers every top-level `pyspark_*`
module that exposes `DefaultSource` (pyspark/sql/worker/lookup_data_sources.py)."""

from sources.kafka_source import KafkaEosDataSource as DefaultSource

__all__ = ["DefaultSource"]
