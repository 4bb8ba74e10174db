"""Every format this package registers. Only this module knows both the source and the sinks:
`kafka-eos` is one format name for reading and writing, so its DataSource joins the two."""

from __future__ import annotations

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter
from pyspark.sql.types import StructType

from sinks.delta import DeltaEosDataSource
from sinks.kafka import kafka_batch_writer, kafka_stream_writer
from sinks.postgres import PostgresEosDataSource
from sources.kafka_source import KafkaEosDataSource as _KafkaSource


class KafkaEosDataSource(_KafkaSource):
    """`kafka-eos`: the replayable source (sources/) and the exactly-once sink (sinks/)."""

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return kafka_stream_writer(self._raw, schema, overwrite)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return kafka_batch_writer(self._raw, schema, overwrite)


ALL = [KafkaEosDataSource, DeltaEosDataSource, PostgresEosDataSource]
