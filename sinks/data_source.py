"""`TwoPhaseCommitDataSource`: a two-phase-commit sink's format as Spark sees it.

Every sink's format takes the same steps from options to a writer, at query (or job) start, so
that a mistake fails before any task runs:

    1. refuse an output mode the sink cannot honour (it appends);
    2. check that the libraries the sink needs are installed (its pip extra);
    3. refuse options no part of the sink reads, pointing at the sink's own docs page;
    4. parse the template's settings (SinkSettings: deliveryGuarantee, checkpointLocation, ...);
    5. build the sink (`build_sink`: the store's own options, parsed there) and hand Spark its
       streaming writer, or its batch writer for `df.write`.

A sink fills in `format_name`, `docs`, its option names and `build_sink`. This module imports
neither the template nor any store at import time: Spark imports a format's DataSource in every
Python worker that merely looks formats up, and those should not pay for a sink's libraries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamWriter,
)
from pyspark.sql.types import StructType

from connectors.core.options import OptionError, Options

if TYPE_CHECKING:
    import pyarrow as pa

    from sinks.two_phase_commit import SinkSettings, TwoPhaseCommitSink


class TwoPhaseCommitDataSource(DataSource):
    """Subclass for a sink's format; `DataSource.name()` is `format_name`."""

    #: The format's name, as in `writeStream.format(...)`.
    format_name: ClassVar[str]
    #: The page listing every option of the sink (named when an option is unknown), or None.
    docs: ClassVar[str | None] = None
    #: The sink's own option names, besides the template's; anything else is refused.
    #: (Not `options`: PySpark's DataSource keeps the options it was given under that name.)
    sink_options: ClassVar[tuple[str, ...]] = ()
    #: Option families the sink passes on (e.g. `kafka.`): accepted whatever follows.
    option_prefixes: ClassVar[tuple[str, ...]] = ()
    #: The sink's own options a batch write (`df.write`) takes; None: no batch writes.
    batch_sink_options: ClassVar[tuple[str, ...] | None] = None
    #: The pip extra holding the sink's libraries (connectors/core/extras.py), if it has one.
    extra: ClassVar[str | None] = None

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self._raw = dict(options)

    @classmethod
    def name(cls) -> str:
        return cls.format_name

    # -- what a sink fills in ---------------------------------------------------------------

    def build_sink(self, opts: Options, settings: SinkSettings, schema: StructType) -> TwoPhaseCommitSink:
        """The sink for these options: parse the store's own options here (an error names the
        option) and import the store's modules here, not at module level."""
        raise NotImplementedError

    def check_options(self, opts: Options, *, batch: bool) -> None:
        """Refusals clearer than "unknown option" (e.g. a streaming-only option in a batch
        write); runs before the unknown-option check. Nothing by default."""

    def append_only(self, *, batch: bool) -> str:
        """Why an overwrite (complete output mode, `mode("overwrite")`) is refused."""
        if batch:
            return (f"{self.format_name} batch writes append: mode 'overwrite' is refused; use "
                    '.mode("append")')
        return f"{self.format_name} supports the append output mode only"

    # -- the steps, once --------------------------------------------------------------------

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return self._sink(schema, overwrite, batch=False).streamWriter()

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        """`df.write.format(...).mode("append").save()`: the same protocol with the job in
        place of the micro-batch (sinks/two_phase_commit.py, TwoPhaseCommitBatchWriter)."""
        if self.batch_sink_options is None:
            return super().writer(schema, overwrite)  # PySpark's "not implemented"
        return self._sink(schema, overwrite, batch=True).batchWriter()

    def _sink(self, schema: StructType, overwrite: bool, *, batch: bool) -> TwoPhaseCommitSink:
        from connectors.core import extras
        from sinks.two_phase_commit import SinkSettings, reject_unknown_options

        if overwrite:
            raise OptionError("mode" if batch else "outputMode", self.append_only(batch=batch))
        if self.extra is not None:
            extras.require(self.extra)
        opts = Options(self._raw)
        self.check_options(opts, batch=batch)
        known = self.batch_sink_options if batch else self.sink_options
        reject_unknown_options(opts, known or (), prefixes=self.option_prefixes,
                               format_name=self.format_name, docs=self.docs, batch=batch)
        settings = (SinkSettings.for_batch_job(self.format_name, opts) if batch
                    else SinkSettings.from_options(self.format_name, opts))
        return self.build_sink(opts, settings, schema)


def arrow_schema(schema: StructType) -> pa.Schema:
    """The stream's schema as the tasks' Arrow batches carry it (timestamps in UTC)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")
