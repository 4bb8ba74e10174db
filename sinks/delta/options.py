"""`delta-eos` options: parsed and checked once, at query start.

`mergeKeys` turns the sink from appending into upserting (sinks/delta/upsert.py): the options
of that mode (UPSERT_OPTIONS) are parsed into `UpsertOptions`, and the ones that make no sense
without it, or with it, are refused here, naming the option. What needs the stream's schema
(the key and sequence columns exist and have usable types) is checked when the sink is built.

Two families are kept apart by their prefix: `storage.<KEY>` are storage options (credentials,
endpoints) handed to delta-rs and to the sink's own Parquet writes alike; `delta.<property>`
are Delta table properties, set when the sink creates the table, named as delta-spark names
them (`delta.appendOnly`, `delta.logRetentionDuration`, ...).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from connectors.core.options import OptionError, Options
from connectors.core.paths import normalise
from sinks.delta.storage import check_delta_storage
from sinks.query_identity import writer_identity
from sinks.delta.ids import batch_app_id, file_tag, legacy_identity, streaming_app_id
from sinks.settings import EXACTLY_ONCE, SinkSettings

#: The format's name, said here once: its DataSource, its handles' kind and its messages.
FORMAT_NAME = "delta-eos"
#: Upsert (change data) mode: `mergeKeys` turns it on; the others need it.
UPSERT_OPTIONS = ("mergeKeys", "sequenceBy", "applyAsDeletes", "exceptColumns",
                  "tombstoneRetention")
#: The sink's own options (besides the template's, `storage.*` and `delta.*`).
OPTIONS = (
    "path", "partitionBy", "mergeSchema", "appId", "orphanFileRetention", "userMetadata",
    "maxRecordsPerFile", "maxBytesPerFile", "compactEvery", "allowNewTable", *UPSERT_OPTIONS,
)
OPTION_PREFIXES = ("storage.", "delta.")
#: A batch write's: appId names a streaming writer's batches, the orphan sweep and compaction
#: belong to the streaming sink (a job deletes its own files when it fails).
BATCH_OPTIONS = ("path", "partitionBy", "mergeSchema", "userMetadata", "maxRecordsPerFile",
                 "maxBytesPerFile")

#: Orphan files younger than this are left alone: a task may still be writing them.
DEFAULT_ORPHAN_RETENTION_MS = 3_600_000
#: How long a deleted key's tombstone keeps older changes of it out (tombstoneRetention).
DEFAULT_TOMBSTONE_RETENTION_MS = 86_400_000
#: Append-mode options that have no meaning for a MERGE, which delta-rs writes itself.
APPEND_ONLY_OPTIONS = ("maxRecordsPerFile", "maxBytesPerFile")


@dataclass(frozen=True)
class UpsertOptions:
    """Upsert mode: apply each batch's changes to the rows of their keys with one MERGE.

    `keys`: the columns that identify a row (mergeKeys); `sequence`: the column that orders the
    changes of one key (sequenceBy; the table keeps it, so a late change can be compared with
    the row it would replace); `deletes`: the applyAsDeletes predicate as written (None: no
    change is a delete); `except_columns`: input columns not written to the table."""

    keys: tuple[str, ...]
    sequence: str
    deletes: str | None = None
    except_columns: tuple[str, ...] = ()
    tombstone_retention_ms: int = DEFAULT_TOMBSTONE_RETENTION_MS

    @classmethod
    def parse(cls, opts: Options, settings: SinkSettings) -> "UpsertOptions | None":
        """None without mergeKeys (append mode), where the other upsert options are refused."""
        keys = _column_list(opts.get("mergeKeys"))
        if not keys:
            if opts.get("mergeKeys") is not None:
                raise OptionError("mergeKeys", "is empty: give the key columns, comma-separated "
                                               '(e.g. "id" or "tenant,id"), or leave it unset to append')
            given = [o for o in UPSERT_OPTIONS[1:] if opts.get(o) is not None]
            if given:
                raise OptionError(given[0], "belongs to upsert mode, which mergeKeys turns on; "
                                            "set mergeKeys, or leave this option out to append")
            return None
        sequence = (opts.get("sequenceBy") or "").strip()
        if not sequence:
            raise OptionError("sequenceBy", "is required with mergeKeys: the column (a number or a "
                                            "timestamp) that orders the changes of one key, so "
                                            "that a late change never overwrites a newer one")
        if settings.guarantee != EXACTLY_ONCE or settings.batch_job:
            raise OptionError("deliveryGuarantee", "upsert mode (mergeKeys) runs exactly-once "
                                                   f"only; {settings.guarantee!r} is refused")
        for name in APPEND_ONLY_OPTIONS:
            if opts.get(name) is not None:
                raise OptionError(name, "applies to appends only: in upsert mode (mergeKeys) "
                                        "delta-rs's MERGE writes the files (their size follows "
                                        "the table's delta.targetFileSize)")
        deletes = opts.get("applyAsDeletes")
        if deletes is not None:
            from sinks.delta.delete_predicate import parse

            parse(deletes)  # a predicate that does not parse fails now, naming the option
        return cls(
            keys=keys,
            sequence=sequence,
            deletes=deletes,
            except_columns=_column_list(opts.get("exceptColumns")),
            tombstone_retention_ms=opts.get_duration_ms("tombstoneRetention",
                                                        DEFAULT_TOMBSTONE_RETENTION_MS),
        )


def _column_list(value: str | None) -> tuple[str, ...]:
    return tuple(dict.fromkeys(c.strip() for c in (value or "").split(",") if c.strip()))

#: Table properties the sink sets at creation, honoured by what it writes or by delta-rs.
TABLE_PROPERTIES = (
    "delta.appendOnly",
    "delta.checkpointInterval",
    "delta.checkpoint.writeStatsAsJson",
    "delta.checkpoint.writeStatsAsStruct",
    "delta.dataSkippingNumIndexedCols",
    "delta.dataSkippingStatsColumns",
    "delta.deletedFileRetentionDuration",
    "delta.enableChangeDataFeed",
    "delta.enableDeletionVectors",
    "delta.enableExpiredLogCleanup",
    "delta.isolationLevel",
    "delta.logRetentionDuration",
    "delta.targetFileSize",
    "delta.tuneFileSizesForRewrites",
)
#: Table properties refused, and why: each asks something of every writer that this sink's
#: own Parquet files and add actions do not do.
REFUSED_TABLE_PROPERTIES = {
    "delta.columnMapping.mode": "column mapping renames the Parquet columns of every data "
                                "file, and delta-eos writes them by their logical names",
    "delta.enableRowTracking": "row tracking needs row ids assigned in every add action",
    "delta.setTransactionRetentionDuration": "an expired txn action would let a restarted "
                                             "query commit an already-written batch again",
    "delta.enableInCommitTimestamps": "in-commit timestamps are not written by delta-eos",
    "delta.enableIcebergCompatV1": "Iceberg compatibility constrains the data files written",
    "delta.enableIcebergCompatV2": "Iceberg compatibility constrains the data files written",
    "delta.universalFormat.enabledFormats": "UniForm needs Iceberg metadata at each commit",
    "delta.randomizeFilePrefixes": "delta-eos names its own files (for its orphan clean-up)",
    "delta.autoOptimize.optimizeWrite": "use maxRecordsPerFile / maxBytesPerFile",
    "delta.autoOptimize.autoCompact": "use the compactEvery option",
}


@dataclass(frozen=True)
class DeltaOptions:
    path: str  # a URI delta-rs and pyarrow.fs read alike (connectors/core/paths.py)
    partition_by: tuple[str, ...]
    merge_schema: bool
    app_id: str
    app_id_explicit: bool
    orphan_retention_ms: int
    storage_options: dict[str, str] = field(repr=False)  # may hold keys: never in a repr
    table_properties: dict[str, str] = field(default_factory=dict)
    user_metadata: str | None = None
    max_records_per_file: int = 0  # 0: no cap
    max_bytes_per_file: int = 0  # 0: no cap
    compact_every: int = 0  # 0: never
    #: Start a new table where the checkpoint's table was deleted or replaced (target_identity)
    allow_new_table: bool = False
    #: Upsert mode (mergeKeys); None: append mode
    upsert: UpsertOptions | None = None

    @property
    def file_tag(self) -> str:
        """In every data file's name: whose files they are, for the orphan clean-up."""
        return file_tag(self.app_id)

    @classmethod
    def parse(cls, opts: Options, settings: SinkSettings) -> "DeltaOptions":
        path = normalise(
            "path", opts.require("path", 'the Delta table\'s location, e.g. .option("path", "/data/t")')
        )
        partition_by = tuple(
            c.strip() for c in (opts.get("partitionBy") or "").split(",") if c.strip()
        )
        storage_options = opts.with_prefix("storage.")
        check_delta_storage("path", path, storage_options)  # before anything is written
        app_id = opts.get("appId")
        explicit = bool(app_id)
        if settings.batch_job:
            app_id = batch_app_id(settings.job_id)  # names the job's files only
        elif not app_id:
            app_id = streaming_app_id(_default_identity(settings, path))
        upsert = UpsertOptions.parse(opts, settings)
        properties = table_properties(opts)
        if upsert is not None and properties.get("delta.appendOnly", "").lower() == "true":
            raise OptionError("mergeKeys", "upsert mode updates and deletes rows, and the option "
                                           "delta.appendOnly=true would make the table refuse that")
        return cls(
            path=path,
            partition_by=partition_by,
            merge_schema=opts.get_bool("mergeSchema", False),
            app_id=app_id,
            app_id_explicit=explicit,
            orphan_retention_ms=opts.get_duration_ms("orphanFileRetention", DEFAULT_ORPHAN_RETENTION_MS),
            storage_options=storage_options,
            table_properties=properties,
            user_metadata=opts.get("userMetadata"),
            max_records_per_file=opts.get_int("maxRecordsPerFile", 0, minimum=0) or 0,
            max_bytes_per_file=opts.get_size_bytes("maxBytesPerFile", 0),
            compact_every=opts.get_int("compactEvery", 0, minimum=0) or 0,
            allow_new_table=opts.get_bool("allowNewTable", False),
            upsert=upsert,
        )


def table_properties(opts: Options) -> dict[str, str]:
    """`delta.*` options as Delta table properties, in Delta's own spelling (Spark hands
    option names over case-insensitively; delta-rs reads properties case-sensitively)."""
    known = {p.lower(): p for p in TABLE_PROPERTIES}
    refused = {p.lower(): p for p in REFUSED_TABLE_PROPERTIES}
    result: dict[str, str] = {}
    for key, value in sorted(opts.with_prefix("delta.").items()):
        name = f"delta.{key}"
        if name in refused:
            prop = refused[name]
            raise OptionError(
                prop, f"is a Delta table property delta-eos cannot honour: "
                f"{REFUSED_TABLE_PROPERTIES[prop]}",
            )
        if name not in known:
            storage_hint = (
                f"; storage options are `storage.*` options now (they were `delta.*`): "
                f"use storage.{key}" if "_" in key else ""
            )
            raise OptionError(
                name,
                f"is not a Delta table property delta-eos sets (known: "
                f"{', '.join(TABLE_PROPERTIES)}){storage_hint}",
            )
        result[known[name]] = str(value)
    return result


def _default_identity(settings: SinkSettings, path: str) -> str:
    """The query's own id (so a reset checkpoint is a new writer), fixed in the transaction
    log at the first exactly-once start; checkpoints of earlier versions keep the id they had,
    derived from the checkpoint path."""
    origin = settings.checkpoint_location or path
    legacy = legacy_identity(origin)
    if settings.guarantee != EXACTLY_ONCE or not settings.checkpoint_location:
        return legacy  # no txn action is written: the id only names files
    return writer_identity(settings.checkpoint_location, legacy=legacy)
