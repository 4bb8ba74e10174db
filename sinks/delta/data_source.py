"""`DeltaEosDataSource`: the `delta-eos` format as Spark sees it (`writeStream.format(...)` and
`df.write.format(...)`). Options are parsed and checked when the query or job starts, so a
mistake fails before any task runs; the sink itself (sinks/delta/sink.py) is imported only
then, which keeps this module cheap for the Python workers that merely register formats.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.types import StructType

from connectors.core.options import OptionError, Options
from sinks.data_source import TwoPhaseCommitDataSource, arrow_schema
from sinks.delta.options import (
    BATCH_OPTIONS,
    FORMAT_NAME,
    OPTION_PREFIXES,
    OPTIONS,
    UPSERT_OPTIONS,
    DeltaOptions,
)

if TYPE_CHECKING:
    from sinks.delta.sink import DeltaSink
    from sinks.two_phase_commit import SinkSettings


class DeltaEosDataSource(TwoPhaseCommitDataSource):
    """`writeStream.format("delta-eos")`: options are checked when the query starts."""

    format_name = FORMAT_NAME
    docs = "docs/delta-sink.md#options"
    sink_options = OPTIONS
    option_prefixes = OPTION_PREFIXES
    batch_sink_options = BATCH_OPTIONS

    def append_only(self, *, batch: bool) -> str:
        if batch:
            return (f"{FORMAT_NAME} batch writes append: mode 'overwrite' is refused; use "
                    '.mode("append") (Spark itself refuses errorifexists and ignore for Python '
                    "data sources)")
        return (f"{FORMAT_NAME} supports the append output mode only; complete mode would "
                "rewrite the table each batch and is not offered")

    def check_options(self, opts: Options, *, batch: bool) -> None:
        upsert = [o for o in UPSERT_OPTIONS if opts.get(o) is not None]
        if batch and upsert:
            raise OptionError(upsert[0], "upsert mode (mergeKeys) is for streaming queries "
                                         f"(writeStream); a {FORMAT_NAME} batch write appends")

    def build_sink(self, opts: Options, settings: SinkSettings, schema: StructType) -> DeltaSink:
        """Upsert mode with mergeKeys, else append (imported here: see the module's docstring)."""
        options = DeltaOptions.parse(opts, settings)
        if options.upsert is not None:
            from sinks.delta.upsert import DeltaUpsertSink

            return DeltaUpsertSink(settings, options, arrow_schema(schema))
        from sinks.delta.sink import DeltaSink

        return DeltaSink(settings, options, arrow_schema(schema))
