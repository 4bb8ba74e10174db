"""`delta-eos` in append mode: `DeltaSink`, the exactly-once Delta Lake sink on the template,
written with pyarrow (data files) and deltalake (delta-rs, the commit).

Phase one (tasks): Parquet files are written into the table directory; no Delta log entry
names them, so no reader sees them. Phase two (driver): all of the batch's add actions go into
one Delta commit carrying `Transaction(appId, version=batchId)`, so the table itself records
atomically whether batch N is in (`isCommitted`). The commit protocol is the template's.

The sink holds the protocol's steps; each concern they use has a module of its own: the tasks'
Parquet files (data_files.py), the table kept per process (table_cache.py), compaction and the
orphan sweep (housekeeping.py), which tables it may write to (protocol_checks.py). What the
upsert mode shares with it (`open()`'s checks, `isCommitted`, the housekeeping) is reached
through this class; sinks/delta/upsert.py overrides the task side and the commit. deltalake is
imported inside the functions that read or commit the table: Spark's Python workers import
this module for every task, and most of them only write Parquet.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.fs as pafs

from connectors.core.options import OptionError
from sinks.delta import protocol_checks
from sinks.delta.data_files import DeltaTxn, ParquetFiles
from sinks.delta.handles import AppendHandle, append_handle
from sinks.delta.housekeeping import data_files, maybe_compact, sweep_orphans
from sinks.delta.options import DeltaOptions
from sinks.delta.table_cache import cached_table, table_location
from sinks.query_identity import last_committed_batch
from sinks.storage_retries import with_storage_retries
from sinks.target_identity import TargetIdentity
from sinks.two_phase_commit import (
    EXACTLY_ONCE,
    JOB_BATCH_ID,
    SinkSettings,
    TaskInfo,
    TransactionLost,
    TwoPhaseCommitSink,
)
from sinks.txn_log import Handle

if TYPE_CHECKING:  # deltalake is imported where a table is read or committed: the driver's
    # work (and a batch job's); a task that only writes Parquet files never pays for it.
    from deltalake import DeltaTable, PostCommitHookProperties

log = logging.getLogger("kafka_eos.sink.delta")

#: In a batch job's commit info: the job's id, by which a retried commit finds it landed.
JOB_METADATA_KEY = "kafka_eos.job"
#: delta-rs's checkpoint interval when the table sets none (delta-spark's is 10).
DELTA_RS_CHECKPOINT_INTERVAL = 100


class DeltaSink(TwoPhaseCommitSink[DeltaTxn]):
    commits_per_partition = False
    commit_empty_batches = True  # txn version == Spark's last batch, rows or not

    def __init__(self, settings: SinkSettings, options: DeltaOptions, schema: pa.Schema) -> None:
        super().__init__(settings)
        self.options = options
        self.schema = schema
        self.job_base_version = -1  # set by open()
        missing = [c for c in options.partition_by if c not in schema.names]
        if missing:
            raise OptionError(
                "partitionBy",
                f"column(s) {', '.join(missing)} are not in the stream's columns "
                f"({', '.join(schema.names)})",
            )
        #: How the tasks write their rows (sinks/delta/data_files.py).
        self.files = ParquetFiles(
            options, pa.schema([f for f in schema if f.name not in options.partition_by]),
            self._fs)
        # What the tasks need of the table, read by open() on the driver: a table not yet
        # created will have the stream's schema and the sink's table properties.
        self.table_schema: pa.Schema = schema
        self.table_configuration: dict[str, str] = dict(options.table_properties)
        self.not_null: tuple[str, ...] = ()

    def describe(self) -> str:
        return f"delta-eos[{self.options.path}]"

    # -- helpers ----------------------------------------------------------------------------

    def _retried(self, what: str, fn):
        """The driver's reads of the table and its sweeps, retried while object storage
        fails transiently (sinks.storage_retries.with_storage_retries); a local table's errors
        are not transient. Not inside commit(): the template retries the whole commit within
        commitTimeout."""
        if self.options.path.startswith("/"):  # normalised: local paths are absolute
            return fn()
        return with_storage_retries(fn, f"{self.describe()}: {what}", log=log)

    def _fs(self) -> tuple[pafs.FileSystem, str]:
        return table_location(self.options)

    def _table(self) -> DeltaTable | None:
        """The table as of now (sinks/delta/table_cache.py: kept per process, brought up to
        date; None while it does not exist)."""
        return cached_table(self.options, self.describe())

    def open(self) -> None:
        """At each batch's planning: the table, if it exists, must accept this stream. Its
        reads are retried while the store fails transiently: a storage hiccup at planning
        failed the query otherwise (QueryStartFailed)."""
        self._retried("reading the table before the batch", self._open)

    def _open(self) -> None:
        table = self._table()
        self._check_same_table(table)
        #: A batch job's commit is looked for in the versions after this one (isCommitted).
        self.job_base_version = -1 if table is None else table.version()
        if table is None:
            return
        protocol_checks.check_writable(table, self.options.path)
        self._check_checkpoint_not_behind(table)
        existing = pa.schema(table.schema().to_arrow())
        self.table_schema = pa.schema(
            [*existing, *(f for f in self.schema if f.name not in existing.names)]
        )
        self.table_configuration = dict(table.metadata().configuration)
        self.not_null = protocol_checks.not_null_columns(table)
        self._warn_on_other_properties()
        partitions = tuple(table.metadata().partition_columns)
        if self.options.partition_by and partitions != self.options.partition_by:
            raise OptionError(
                "partitionBy",
                f"the table at {self.options.path} is partitioned by {list(partitions)}, "
                f"not {list(self.options.partition_by)}",
            )
        theirs = {f.name: f.type for f in existing}
        ours = {f.name: f.type for f in self.schema}
        added = [n for n in ours if n not in theirs]
        changed = [n for n in ours if n in theirs and not _compatible(theirs[n], ours[n])]
        if changed:
            raise OptionError(
                "mergeSchema",
                f"column(s) {', '.join(changed)} have a different type in the table at "
                f"{self.options.path} ({', '.join(f'{n}: {theirs[n]} vs {ours[n]}' for n in changed)}); "
                "a type change is not a schema merge",
            )
        if added and not self.options.merge_schema:
            raise OptionError(
                "mergeSchema",
                f"the stream has column(s) {', '.join(added)} that the table at "
                f"{self.options.path} lacks; set mergeSchema=true to add them",
            )
        self._maybe_compact(table)

    def _warn_on_other_properties(self) -> None:
        """Table properties are the sink's to set when it creates the table; afterwards they
        are the table's (ALTER TABLE ... SET TBLPROPERTIES): a different value is reported,
        never applied behind the owner's back."""
        differ = {k: v for k, v in self.options.table_properties.items()
                  if self.table_configuration.get(k) != v}
        if differ and _WARNED_PROPERTIES.get(self.options.path) != differ:
            _WARNED_PROPERTIES[self.options.path] = differ
            log.warning(
                "%s: the table exists, and its properties differ from the options %s (the table "
                "has %s); table properties are set only when delta-eos creates the table",
                self.describe(), differ, {k: self.table_configuration.get(k) for k in differ},
            )

    def _maybe_compact(self, table: DeltaTable) -> None:
        """compactEvery (sinks/delta/housekeeping.py); never in a batch job."""
        if not self.settings.batch_job:
            maybe_compact(table, self.options, self.describe())

    def _target(self) -> TargetIdentity | None:
        if not self.settings.checkpoint_location or self.settings.batch_job:
            return None
        return TargetIdentity(self.settings.checkpoint_location)

    def _check_same_table(self, table: DeltaTable | None) -> None:
        """The table this checkpoint committed into is still there, and still that table (its
        metadata id): never re-created silently after a deletion (sinks/target_identity.py)."""
        target = self._target()
        if target is not None:
            target.check(self.options.path, None if table is None else table.metadata().id,
                         allow_new=self.options.allow_new_table,
                         what=f"the Delta table at {self.options.path}", sink=self.describe())

    def _check_checkpoint_not_behind(self, table: DeltaTable) -> None:
        """The table holds batches of this appId that the checkpoint never committed: a reset
        checkpoint with an explicit appId, or two queries sharing one. Every batch up to the
        table's version would be skipped as 'already in': refuse instead."""
        if self.settings.guarantee != EXACTLY_ONCE or not self.settings.checkpoint_location:
            return
        version = table.transaction_version(self.options.app_id)
        if version is None:
            return
        spark_last = last_committed_batch(self.settings.checkpoint_location)
        if version > spark_last + 1:  # +1: committed to the table, not yet in Spark's log
            raise OptionError(
                "appId",
                f"the table at {self.options.path} already holds batch {version} of appId "
                f"{self.options.app_id!r}, but this query's checkpoint has committed only up to "
                f"batch {spark_last}: the checkpoint was reset, or another query writes with the "
                "same appId. Its batches would be skipped as already written; give this query "
                "an appId of its own (or leave appId unset: the default follows the query's id)",
            )

    # -- task side --------------------------------------------------------------------------

    def beginTransaction(self, context: TaskInfo) -> DeltaTxn:
        return DeltaTxn(context)

    def invoke(self, txn: DeltaTxn, batch: pa.RecordBatch) -> None:
        if self.not_null:
            protocol_checks.check_not_null(batch, self.not_null, txn.info.batch_id,
                                           txn.info.partition_id)
        self.files.write(txn, batch)

    def preCommit(self, txn: DeltaTxn) -> AppendHandle:
        """Every file closed (so flushed): durable, and still invisible to readers."""
        return append_handle(self.files.prepared(txn, self.table_schema,
                                                 self.table_configuration))

    def abortTransaction(self, txn: DeltaTxn) -> None:
        self.files.discard(txn)

    # -- driver side ------------------------------------------------------------------------

    def isCommitted(self, batchId: int) -> bool | None:
        return self._retried(f"reading whether batch {batchId} is in the table",
                             lambda: self._is_committed(batchId))

    def _is_committed(self, batchId: int) -> bool | None:
        table = self._table()
        return table is not None and self._committed_in(table, batchId)

    def _committed_in(self, table: DeltaTable, batchId: int) -> bool:
        """Whether `table`, as of now, holds the batch."""
        if self.settings.batch_job:
            return self._job_committed(table)
        version = table.transaction_version(self.options.app_id)
        return version is not None and version >= batchId

    def _job_committed(self, table: DeltaTable) -> bool:
        """A batch job's commit carries no txn action (one per job would pile up in every
        snapshot for good): it is found by the job id in the commit info of the versions
        written since the job started."""
        newer = table.version() - self.job_base_version
        if newer <= 0:
            return False
        return any(c.get(JOB_METADATA_KEY) == self.settings.job_id
                   for c in table.history(limit=newer))

    def abortJob(self, handles: list[Handle], partitions: int) -> None:
        """A failed batch job: unless its commit landed (Spark aborts a job whose commit
        raised, too), delete every file it wrote: those the reported handles name, and those
        of tasks Spark did not report, found by the job's tag in their names. Nothing of the
        job is referenced by the table either way; this leaves no garbage behind."""
        if self.isCommitted(JOB_BATCH_ID):
            log.warning("%s: batch job %s was committed before it failed; its rows stay",
                        self.describe(), self.settings.job_id)
            return
        self.abort(handles)
        fs, root = self._fs()
        prefix = f"part-eos-{self.options.file_tag}-"
        for info in self._retried("listing the table's files", lambda: list(data_files(fs, root))):
            if info.base_name.startswith(prefix):
                self._delete(fs, info.path)

    def cleanupAbandoned(self) -> None:
        """The orphan sweep (sinks/delta/housekeeping.py), each step retried while the store
        fails transiently."""
        sweep_orphans(self.options, self._fs(), self._table, self._retried, self._delete,
                      self.describe())

    def recoverAndCommit(self, batchId: int, handles: dict[int, Handle]) -> None:
        """A decided batch committed after a restart: its files may have gone while the query
        was down (a VACUUM removes unreferenced files). Adding actions for missing files would
        commit a batch nobody can read and make the replay skip it; it is lost instead.
        (Called inside the template's commit retries: no retries of its own.)"""
        if self._is_committed(batchId):
            return
        fs, root = self._fs()
        paths = [f"{root}/{a['file']}" for h in handles.values() for a in h["adds"]]
        missing = [i.path for i in fs.get_file_info(paths) if i.type == pafs.FileType.NotFound] if paths else []
        if missing:
            raise TransactionLost(
                list(handles),
                f"{len(missing)} of the {len(paths)} data file(s) of decided batch {batchId} are "
                f"gone (e.g. {missing[0]}), removed while the query was down (a VACUUM?); the "
                "replay writes the batch again",
            )
        self.commit(batchId, handles)

    def commit(self, batchId: int, handles: dict[int, Handle]) -> None:
        """One Delta commit for the whole batch, carrying Transaction(appId, batchId).

        In at-least-once mode every task commits its own files, without the txn action: the
        batch id no longer names one commit, so it cannot serve as an idempotency key.
        """
        from deltalake import CommitProperties, Schema, Transaction
        from deltalake.transaction import AddAction, create_table_with_add_actions

        exactly_once = self.settings.guarantee == EXACTLY_ONCE
        job = self.settings.job_id
        # Brought up to date once for the check and the commit: each update lists the log
        # (about 30 ms a batch here, twice before).
        table = self._table()
        if exactly_once and table is not None and self._committed_in(table, batchId):
            return  # a retry after an ambiguous failure, or a recovery: already in
        adds = [
            AddAction(
                a["path"], a["size"], a["partition_values"], a["modification_time"], True,
                a.get("stats") or f'{{"numRecords":{a["rows"]}}}',  # older handles: no stats
            )
            for p in sorted(handles)
            for a in handles[p]["adds"]
        ]
        props = CommitProperties(
            app_transactions=(
                [Transaction(self.options.app_id, batchId)] if exactly_once and not job else None
            ),
            custom_metadata={
                **({JOB_METADATA_KEY: job} if job else {"kafka_eos.batch": str(batchId)}),
                **({"userMetadata": self.options.user_metadata}
                   if self.options.user_metadata is not None else {}),
            },
        )
        if job and not adds and table is not None:
            return  # an empty batch job: nothing to add (a missing table is still created)
        hooks = post_commit_hooks(table)
        if table is None:
            create_table_with_add_actions(
                self.options.path,
                Schema.from_arrow(self.schema),
                adds,
                mode="append",
                partition_by=list(self.options.partition_by) or None,
                configuration=creation_configuration(self.options.table_properties, self.schema),
                storage_options=self.options.storage_options or None,
                commit_properties=props,
                post_commithook_properties=hooks,
            )
            target = self._target()
            if target is not None:  # the table this checkpoint commits into from now on
                created = self._table()
                if created is not None:
                    target.record(self.options.path, created.metadata().id)
        else:
            self._add_new_columns(table)
            table.create_write_transaction(
                adds,
                mode="append",
                schema=table.schema(),
                partition_by=list(self.options.partition_by) or None,
                commit_properties=props,
                post_commithook_properties=hooks,
            )

    def _add_new_columns(self, table: DeltaTable) -> None:
        """mergeSchema: columns the stream has and the table lacks are added first (their own
        commit; repeating it after a crash finds them there and adds nothing)."""
        if not self.options.merge_schema:
            return
        from deltalake import Field

        existing = set(pa.schema(table.schema().to_arrow()).names)
        new = [Field.from_arrow(f) for f in self.schema if f.name not in existing]
        if new:
            log.info("%s: adding column(s) %s", self.describe(), [f.name for f in new])
            table.alter.add_columns(new)
            table.update_incremental()

    def abort(self, handles: list[Handle]) -> None:
        fs, root = self._fs()
        for h in handles:
            for a in h.get("adds", []):
                self._delete(fs, f"{root}/{a['file']}")

    def _delete(self, fs: pafs.FileSystem, path: str) -> None:
        """A driver-side delete, retried while the store fails transiently. (A failed task's
        own clean-up, abortTransaction, is not: what it leaves is an orphan the sweep removes,
        and a task must not hold up Spark's retry of it.)"""
        self._retried(f"deleting {path}", lambda: _delete(fs, path))


#: Table-property differences already reported, per table.
_WARNED_PROPERTIES: dict[str, dict[str, str]] = {}


def creation_configuration(properties: dict[str, str], schema: pa.Schema) -> dict[str, str] | None:
    """The configuration the sink (or upsert mode) creates a table with: its table properties,
    and `delta.minWriterVersion=7` where a timestamp_ntz column and a NOT NULL column meet.
    delta-rs then lists `invariants` (and `appendOnly`) among the writer features, as
    delta-spark does; without it delta-rs lists `timestampNtz` alone, and delta-spark, which
    counts NOT NULL as a column invariant, refuses to read or write the table
    (DELTA_FEATURES_PROTOCOL_METADATA_MISMATCH; integration_tests/peers/test_peers_delta.py)."""
    configuration = dict(properties)
    if protocol_checks.needs_listed_invariants(schema):
        configuration.setdefault("delta.minWriterVersion", "7")
    return configuration or None


def post_commit_hooks(table: DeltaTable | None) -> PostCommitHookProperties:
    """delta-rs lists the whole Delta log after every commit to clean up expired log files
    (none expire for delta.logRetentionDuration, 30 days: at a 1 s trigger, a listing of
    millions of files per commit). As delta-spark does, the clean-up runs with the log
    checkpoint only (its commit is the one that reaches delta.checkpointInterval), and the
    table's delta.enableExpiredLogCleanup still decides whether it runs at all."""
    from deltalake import PostCommitHookProperties

    if table is None:
        return PostCommitHookProperties(create_checkpoint=True, cleanup_expired_logs=False)
    interval = int(table.metadata().configuration.get("delta.checkpointInterval")
                   or DELTA_RS_CHECKPOINT_INTERVAL)
    checkpointing = (table.version() + 2) % interval == 0  # the next version's checkpoint
    return PostCommitHookProperties(create_checkpoint=True,
                                    cleanup_expired_logs=None if checkpointing else False)


def _delete(fs: pafs.FileSystem, path: str) -> None:
    try:
        fs.delete_file(path)
    except FileNotFoundError:
        pass


def _compatible(table_type: pa.DataType, stream_type: pa.DataType) -> bool:
    def norm(t: pa.DataType) -> pa.DataType:
        if pa.types.is_large_string(t):
            return pa.string()
        if pa.types.is_large_binary(t):
            return pa.binary()
        if pa.types.is_timestamp(t):
            return pa.timestamp("us", tz="UTC" if t.tz else None)
        return t

    return norm(table_type) == norm(stream_type)
