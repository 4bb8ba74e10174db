"""`kafka-eos`'s reading side as a PySpark data source: options checked at `.load()`, the
reader schemas looked up once per query start, and a reader per mode (streaming, batch,
`readMode=driver`).

Every Python process Spark starts for a data-source role (the format look-up, a sink's writer
and commit, each planner) unpickles this class and so imports this module. The readers, the
options and their Kafka client (confluent-kafka, which imports asyncio) are imported by the
methods that use them: a process of a sink's role or a look-up does not pay them
(tests/test_worker_imports.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource

from connectors.core.kafka.format import FORMAT_NAME

if TYPE_CHECKING:
    from pyspark.sql.datasource import (
        DataSourceReader,
        DataSourceStreamReader,
        SimpleDataSourceStreamReader,
    )
    from pyspark.sql.types import StructType

    from sources.kafka_options import KafkaSourceOptions
    from sources.registry_columns import RegistryColumns


class KafkaEosDataSource(DataSource):
    """The reading side of `kafka-eos`. Options are validated in `schema()`, which Spark calls
    at `.load()`, so a bad one fails before any batch runs (and writes, which share the format
    name, are not held to the source's options)."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self._raw = dict(options)
        self._columns: RegistryColumns | None = None

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def _options(self, *, batch: bool | None) -> KafkaSourceOptions:
        """The options parsed (and checked) for a batch read, a stream, or either (None)."""
        from sources.kafka_options import parse_source_options

        return parse_source_options(self._raw, batch=batch)

    def schema(self) -> str | StructType:
        from sources.range_reader import HEADERS_DDL, SPARK_SCHEMA_DDL, arrow_schema

        # Streaming or batch is not known yet: the checks common to both run now, the rest
        # when Spark asks for a reader.
        options = self._options(batch=None)
        columns = self._registry_columns(options)
        if columns.active:
            from pyspark.sql.pandas.types import from_arrow_schema

            base = from_arrow_schema(arrow_schema(options.include_headers),
                                     prefer_timestamp_ntz=True)
            return columns.spark_schema(base)
        include = str(self._raw.get("includeheaders", "false")).strip().lower() == "true"
        return SPARK_SCHEMA_DDL + (HEADERS_DDL if include else "")

    def _registry_columns(self, options: KafkaSourceOptions) -> RegistryColumns:
        """The value/key reader schemas, looked up once per query start (in schema(), whose
        result Spark pickles with this object to the reader's process)."""
        if self._columns is None:
            from sources.registry_columns import resolve_columns

            sub = options.subscription
            topics = sub.topics or tuple(t for t, _ in sub.assignment)
            self._columns = resolve_columns(options.value_registry, options.key_registry,
                                            sub.kind, topics)
        return self._columns

    def reader(self, schema: StructType) -> DataSourceReader:
        from sources.kafka_source import KafkaBatchReader

        options = self._options(batch=True)
        return KafkaBatchReader(options, self._registry_columns(options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from pyspark.errors import PySparkNotImplementedError

        from sources.kafka_source import KafkaStreamReader

        options = self._options(batch=False)
        if options.read_mode == "driver":
            # PySpark then asks for simpleStreamReader (pyspark/sql/datasource_internal.py).
            raise PySparkNotImplementedError(
                errorClass="NOT_IMPLEMENTED",
                messageParameters={"feature": "streamReader with readMode=driver"},
            )
        return KafkaStreamReader(options, self._registry_columns(options))

    def simpleStreamReader(self, schema: StructType) -> SimpleDataSourceStreamReader:
        from sources.driver_reader import KafkaDriverStreamReader

        options = self._options(batch=False)
        return KafkaDriverStreamReader(options, self._registry_columns(options))
