"""`KafkaSinkDataSource`: the writing side of the `kafka-eos` format, streaming and batch.

`kafka-eos` is one format name for reading and writing, so the class Spark registers
(connectors/formats.py) joins this one with the source's. The sink (sinks/kafka/sink.py, with its
commit client) is imported only when a query writes: the Python workers that only look formats
up, create the source or read never pay for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.types import StructType

from connectors.core.kafka.format import FORMAT_NAME
from connectors.core.options import Options
from sinks.data_source import TwoPhaseCommitDataSource

if TYPE_CHECKING:
    from sinks.kafka.sink import KafkaSink
    from sinks.two_phase_commit import SinkSettings


class KafkaSinkDataSource(TwoPhaseCommitDataSource):
    """`writeStream.format("kafka-eos")` and `df.write.format("kafka-eos")`."""

    format_name = FORMAT_NAME
    docs = "docs/kafka-sink.md#options"

    # The option names live in sinks/kafka/options.py, which this module imports only
    # when a query writes: read them from there then.
    @property
    def sink_options(self) -> tuple[str, ...]:  # type: ignore[override]
        from sinks.kafka.options import OPTIONS

        return OPTIONS

    @property
    def batch_sink_options(self) -> tuple[str, ...]:  # type: ignore[override]
        return self.sink_options

    @property
    def option_prefixes(self) -> tuple[str, ...]:  # type: ignore[override]
        from sinks.kafka.options import OPTION_PREFIXES

        return OPTION_PREFIXES

    def append_only(self, *, batch: bool) -> str:
        if batch:
            return (f"{FORMAT_NAME} batch writes append to the topic: mode 'overwrite' is "
                    'refused; use .mode("append")')
        return super().append_only(batch=batch)

    def build_sink(self, opts: Options, settings: SinkSettings, schema: StructType) -> KafkaSink:
        """The driver's commit retries follow kafkaRetryTimeout unless commitTimeout or
        commitRetries say otherwise (sinks/kafka/options.py, commit_budget)."""
        from sinks.kafka.options import KafkaSinkOptions, commit_budget
        from sinks.kafka.sink import KafkaSink

        options = KafkaSinkOptions.parse(opts, settings, schema)
        return KafkaSink(commit_budget(settings, opts, options.retry), options)
