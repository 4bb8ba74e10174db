"""Zero-config registration of `delta-eos` (see pyspark_kafka_eos.py)."""

from sinks.delta import DeltaEosDataSource as DefaultSource

__all__ = ["DefaultSource"]
