"""`DeltaEosDataSource`: the `delta-eos` format as Spark sees it (`writeStream.format(...)` and
`df.write.format(...)`). Options are parsed and checked here, when the query or job starts, so
a mistake fails before any task runs; the sink itself (sinks/delta/sink.py) is imported only
then, which keeps this module cheap for the Python workers that merely register formats.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, DataSourceStreamWriter
from pyspark.sql.types import StructType

from connectors.options import OptionError, Options
from sinks.delta.options import (
    BATCH_OPTIONS,
    OPTION_PREFIXES,
    OPTIONS,
    UPSERT_OPTIONS,
    DeltaOptions,
)
from sinks.two_phase_commit import SinkSettings, reject_unknown_options

if TYPE_CHECKING:
    import pyarrow as pa

    from sinks.delta.sink import DeltaSink

FORMAT_NAME = "delta-eos"


class DeltaEosDataSource(DataSource):
    """`writeStream.format("delta-eos")`: options are checked when the query starts."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self._raw = dict(options)

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from pyspark.sql.pandas.types import to_arrow_schema

        if overwrite:
            raise OptionError(
                "outputMode",
                "delta-eos supports the append output mode only; complete mode would rewrite "
                "the table each batch and is not offered",
            )
        opts = Options(self._raw)
        reject_unknown_options(opts, OPTIONS, prefixes=OPTION_PREFIXES, format_name=FORMAT_NAME)
        settings = SinkSettings.from_options(FORMAT_NAME, opts)
        delta_options = DeltaOptions.parse(opts, settings)
        arrow_schema = to_arrow_schema(schema, timezone="UTC")
        return _sink(settings, delta_options, arrow_schema).streamWriter()

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        """`df.write.format("delta-eos").mode("append").save(path)`: the tasks write Parquet
        files, the job's commit adds them all in one Delta commit (sinks/two_phase_commit.py,
        TwoPhaseCommitBatchWriter)."""
        from pyspark.sql.pandas.types import to_arrow_schema

        if overwrite:
            raise OptionError(
                "mode",
                "delta-eos batch writes append: mode 'overwrite' is refused; use "
                '.mode("append") (Spark itself refuses errorifexists and ignore for Python '
                "data sources)",
            )
        opts = Options(self._raw)
        upsert = [o for o in UPSERT_OPTIONS if opts.get(o) is not None]
        if upsert:
            raise OptionError(upsert[0], "upsert mode (mergeKeys) is for streaming queries "
                                         "(writeStream); a delta-eos batch write appends")
        reject_unknown_options(opts, BATCH_OPTIONS, prefixes=OPTION_PREFIXES,
                               format_name=FORMAT_NAME, batch=True)
        settings = SinkSettings.for_batch_job(FORMAT_NAME, opts)
        delta_options = DeltaOptions.parse(opts, settings)
        arrow_schema = to_arrow_schema(schema, timezone="UTC")
        return _sink(settings, delta_options, arrow_schema).batchWriter()


def _sink(settings: SinkSettings, options: DeltaOptions, schema: pa.Schema) -> DeltaSink:
    """The sink for these options: upsert mode with mergeKeys, else append (imported here:
    see the module's docstring)."""
    if options.upsert is not None:
        from sinks.delta.upsert import DeltaUpsertSink

        return DeltaUpsertSink(settings, options, schema)
    from sinks.delta.sink import DeltaSink

    return DeltaSink(settings, options, schema)
