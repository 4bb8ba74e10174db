"""`PostgresEosDataSource`: the `postgres-eos` format as Spark sees it. Options are checked when
the query starts, so a mistake fails before any task runs. The sink (sinks/postgres.py, with
psycopg and pyarrow) is imported only then: Spark imports this class in every Python worker
that merely looks formats up or creates the source, and those should not pay for psycopg.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceStreamWriter
from pyspark.sql.types import StructType

FORMAT_NAME = "postgres-eos"


class PostgresEosDataSource(DataSource):
    """`writeStream.format("postgres-eos")`: options are checked when the query starts."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self._raw = dict(options)

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from pyspark.sql.pandas.types import to_arrow_schema

        from connectors.options import OptionError, Options
        from sinks.postgres import OPTIONS, PostgresOptions, PostgresSink, check_columns
        from sinks.two_phase_commit import SinkSettings, reject_unknown_options

        if overwrite:
            raise OptionError("outputMode", "postgres-eos supports the append output mode only")
        opts = Options(self._raw)
        reject_unknown_options(opts, OPTIONS, format_name=FORMAT_NAME)
        settings = SinkSettings.from_options(FORMAT_NAME, opts)
        pg_options = PostgresOptions.parse(opts, settings)
        arrow_schema = to_arrow_schema(schema, timezone="UTC")
        check_columns(arrow_schema, {f.name: f.dataType.simpleString() for f in schema.fields})
        return PostgresSink(settings, pg_options, arrow_schema).streamWriter()
