"""`PostgresEosDataSource`: the `postgres-eos` format as Spark sees it (streaming writes only).
The sink (sinks/postgres/sink.py, with psycopg) is imported only when a query starts: Spark
imports this class in every Python worker that merely looks formats up, and those should not
pay for psycopg, which the `[postgres]` extra installs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.types import StructType

from connectors.core.options import Options
from sinks.data_source import TwoPhaseCommitDataSource, arrow_schema
from sinks.postgres.options import DOCS, FORMAT_NAME, OPTIONS

if TYPE_CHECKING:
    from sinks.postgres.sink import PostgresSink
    from sinks.two_phase_commit import SinkSettings


class PostgresEosDataSource(TwoPhaseCommitDataSource):
    """`writeStream.format("postgres-eos")`: options are checked when the query starts."""

    format_name = FORMAT_NAME
    docs = DOCS
    sink_options = OPTIONS
    extra = "postgres"

    def build_sink(self, opts: Options, settings: SinkSettings, schema: StructType) -> PostgresSink:
        from sinks.postgres.encoding import check_columns
        from sinks.postgres.options import PostgresOptions
        from sinks.postgres.sink import PostgresSink

        pg_options = PostgresOptions.parse(opts, settings)
        arrow = arrow_schema(schema)
        check_columns(arrow, {f.name: f.dataType.simpleString() for f in schema.fields})
        return PostgresSink(settings, pg_options, arrow)
