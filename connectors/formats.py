"""Every format this package registers. Only this module knows both the source and the sinks:
`kafka-eos` is one format name for reading and writing, so its DataSource joins the two."""

from __future__ import annotations

from connectors import pyspark_version

pyspark_version.require()  # before any PySpark API: an old PySpark gets the versions needed

from sinks.delta import DeltaEosDataSource
from sinks.kafka.data_source import KafkaSinkDataSource
from sinks.postgres.data_source import PostgresEosDataSource
from sources.data_source import KafkaEosDataSource as _KafkaSource


class KafkaEosDataSource(_KafkaSource, KafkaSinkDataSource):
    """`kafka-eos`: the replayable source (sources/) and the exactly-once sink (sinks/); the
    sink is imported when a query writes (sinks/kafka/data_source.py)."""


ALL = [KafkaEosDataSource, DeltaEosDataSource, PostgresEosDataSource]
