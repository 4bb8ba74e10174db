"""Every format this package registers. Only this module knows both the source and the sinks:
`kafka-eos` is one format name for reading and writing, so its DataSource joins the two."""

from __future__ import annotations

from connectors import pyspark_version

pyspark_version.require()  # before any PySpark API: an old PySpark gets the versions needed

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter
from pyspark.sql.types import StructType

from sinks.delta import DeltaEosDataSource
from sinks.postgres_data_source import PostgresEosDataSource
from sources.kafka_source import KafkaEosDataSource as _KafkaSource


class KafkaEosDataSource(_KafkaSource):
    """`kafka-eos`: the replayable source (sources/) and the exactly-once sink (sinks/)."""

    # The sink is imported when a query writes: the workers that only look formats up, create
    # the source or read never pay for it.
    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from sinks.kafka import kafka_stream_writer

        return kafka_stream_writer(self._raw, schema, overwrite)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from sinks.kafka import kafka_batch_writer

        return kafka_batch_writer(self._raw, schema, overwrite)


ALL = [KafkaEosDataSource, DeltaEosDataSource, PostgresEosDataSource]
