"""`kafka-eos` (writeStream): the exactly-once Kafka sink, one module per concern.

    data_source.py    KafkaSinkDataSource: the writing side of the format; options checked at
                      start (connectors/formats.py joins it with the source's reading side)
    options.py        KafkaSinkOptions: every option, parsed once; the commit's retry budget
    ids.py            the transactional ids (streaming and batch-job prefixes): built and
                      parsed here only
    handles.py        the handles: one prepared (open) Kafka transaction each
    kind.py           the sink kind: how inspect shows the handles and resolve settles them
    producer.py       the tasks' producers: callbacks, init_transactions under the transaction
                      timeout the broker accepts, the shared at-least-once producer
    attempts.py       the notes of task attempts beyond the first, fenced by the driver
    commit_client.py  the driver's commit client (kafka-python): FindCoordinator, EndTxn,
                      InitProducerId
    outcome.py        the output read (Metadata, ListOffsets, Fetch) to settle a commit the
                      coordinator refused: committed, aborted or still open
    connection_logs.py  kafka-python's connection errors logged at DEBUG during the commit
                      client's own calls, and nothing changed at import
    errors.py         what the sink raises beyond the template's errors: RecordTooLarge
    sink.py           KafkaSink: tasks prepare transactions, the driver ends them (EndTxn)

`from sinks.kafka import KafkaSink` (and the other names below) keeps working: the names are
resolved on first use, so registering the format (every Spark Python worker imports
`pyspark_kafka_eos`) costs neither kafka-python nor the sink's own imports.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sinks.kafka.data_source import KafkaSinkDataSource
    from sinks.kafka.errors import RecordTooLarge
    from sinks.kafka.ids import BATCH_PREFIX, default_prefix, parse_transactional_id, transactional_id
    from sinks.kafka.options import (
        FORMAT_NAME,
        OPTION_PREFIXES,
        OPTIONS,
        KafkaSinkOptions,
        commit_budget,
    )
    from sinks.kafka.producer import (
        DEFAULT_TRANSACTION_TIMEOUT_MS,
        choose_transaction_timeout,
        lower_transaction_timeout,
        timeout_warning,
    )
    from sinks.kafka.sink import KafkaSink

#: Public name -> the module that defines it.
_EXPORTS = {
    "KafkaSinkDataSource": "sinks.kafka.data_source",
    "RecordTooLarge": "sinks.kafka.errors",
    **dict.fromkeys(("BATCH_PREFIX", "default_prefix", "parse_transactional_id",
                     "transactional_id"), "sinks.kafka.ids"),
    **dict.fromkeys(("FORMAT_NAME", "OPTIONS", "OPTION_PREFIXES", "KafkaSinkOptions",
                     "commit_budget"), "sinks.kafka.options"),
    **dict.fromkeys(("DEFAULT_TRANSACTION_TIMEOUT_MS", "choose_transaction_timeout",
                     "lower_transaction_timeout", "timeout_warning"), "sinks.kafka.producer"),
    "KafkaSink": "sinks.kafka.sink",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sinks.kafka' has no attribute {name!r}")
    return getattr(import_module(module), name)
