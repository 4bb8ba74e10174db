"""`delta-eos`: the exactly-once Delta Lake sink, one module per concern.

    data_source.py      DeltaEosDataSource: the format Spark registers; options checked at start
    options.py          DeltaOptions: every option and table property, parsed once
    storage.py          S3 commit configurations unsafe for concurrent writers, refused
    ids.py              the app ids keying the txn actions and naming the files: built here only
    handles.py          the handles: data files (append mode), staged changes (upsert mode)
    kind.py             the sink kind: how inspect shows the handles and resolve settles them
    sink.py             DeltaSink: append mode on the two-phase-commit template (tasks write
                        Parquet files, the driver adds them in one Delta commit with a txn action)
    protocol_checks.py  which tables the sink may write to (table features), NOT NULL columns
    data_files.py       the tasks' Parquet files (append mode): rolled at the size caps, their add
                        actions with statistics
    table_cache.py      the table kept per process, brought up to date rather than reloaded
    housekeeping.py     compaction (compactEvery) and the orphan sweep (orphanFileRetention)
    file_stats.py       add-action statistics read from the Parquet footers tasks wrote
    referenced_files.py which files a table's readable versions still reference (orphan sweep)
    upsert.py           DeltaUpsertSink: upsert mode (mergeKeys): tasks stage changes as Parquet,
                        the driver applies each batch as one MERGE with the batch's txn action
    fold.py             the fold of a batch of changes: per key the winner; tombstones applied
    tombstones.py       deleted keys' (key, sequence), kept for tombstoneRetention
    delete_predicate.py applyAsDeletes: a small SQL predicate, parsed at start, run with pyarrow
    errors.py           what the sink raises beyond the template's errors (NOT NULL, null keys)

`from sinks.delta import DeltaEosDataSource` (and DeltaSink, DeltaOptions, FORMAT_NAME) keeps
working: the names are resolved on first use, so registering the format (every Spark Python
worker imports `pyspark_delta_eos`) costs neither deltalake nor the sink's own imports.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sinks.delta.data_source import DeltaEosDataSource
    from sinks.delta.options import FORMAT_NAME
    from sinks.delta.options import DeltaOptions
    from sinks.delta.sink import DeltaSink

#: Public name -> the module that defines it.
_EXPORTS = {
    "DeltaEosDataSource": "sinks.delta.data_source",
    "FORMAT_NAME": "sinks.delta.options",
    "DeltaOptions": "sinks.delta.options",
    "DeltaSink": "sinks.delta.sink",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sinks.delta' has no attribute {name!r}")
    return getattr(import_module(module), name)
