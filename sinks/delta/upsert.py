"""`delta-eos` in upsert mode (`mergeKeys`): change data applied to a keyed table, exactly once.

Each micro-batch of changes (an update or insert of a key's row, or, where `applyAsDeletes`
holds, its delete) goes through the template's two phases:

* tasks (phase one) stage their rows as one Parquet file per task and attempt under
  `<table>/_eos_staging/<writer tag>/`: durable, and invisible, since no Delta log entry names
  it and readers and VACUUM leave `_` directories alone. The file holds the columns written to
  the table plus a boolean `__eos_delete` (the predicate, evaluated by the task), never nulls
  in a key or the sequence (the task fails naming the batch and the column);
* the driver (phase two) reads the batch's staged files, folds them (sinks/delta/fold.py: per
  key the change with the highest sequence, a delete winning a tie), records the winning
  deletes as tombstones (sinks/delta/tombstones.py), drops updates a tombstone outdates, and
  applies the rest as ONE Delta MERGE, whose commit carries `Transaction(appId, batchId)`:
  a replayed or recovered batch finds its txn version and is never applied twice, and readers
  see the batch's changes all at once, in one table version.

The MERGE replaces a stored row when the change's sequence is at least the row's, deletes it
under the same condition, and inserts a key it does not find unless the change is a delete.
The staged files of a batch go once it is committed, or when it is aborted; what a killed task
left is swept before a later batch (cleanupAbandoned), as the append mode sweeps its orphans.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from connectors.core.options import OptionError
from sinks.delta import protocol_checks
from sinks.delta.delete_predicate import DeletePredicate, parse
from sinks.delta.errors import NullKeyOrSequence
from sinks.delta.fold import DELETE_COLUMN, drop_tombstoned, latest_per_key, tombstones_of
from sinks.delta.handles import StagedChanges, UpsertHandle, upsert_handle
from sinks.delta.options import DeltaOptions, UpsertOptions
from sinks.delta.sink import DeltaSink, creation_configuration, post_commit_hooks
from sinks.delta.tombstones import Tombstones, location, quote
from sinks.two_phase_commit import SinkSettings, TaskInfo, TransactionLost
from sinks.txn_log import Handle

if TYPE_CHECKING:
    from deltalake import DeltaTable

log = logging.getLogger("kafka_eos.sink.delta")

STAGING_DIRECTORY = "_eos_staging"
#: The driver folds a batch's staged changes each time this many have been read (memory: the
#: batch's keys plus this many changes).
FOLD_EVERY_ROWS = 262_144
#: A sequenceBy column must order its values: numbers, timestamps, dates.
_SEQUENCE_TYPES = (pa.types.is_integer, pa.types.is_floating, pa.types.is_decimal,
                   pa.types.is_timestamp, pa.types.is_date)


@dataclass
class StagedFile:
    """A task's staged changes, open until preCommit."""

    writer: pq.ParquetWriter
    stream: pa.NativeFile
    relative_path: str
    rows: int = 0
    deletes: int = 0


@dataclass
class UpsertTxn:
    info: TaskInfo
    staged: StagedFile | None = None


def written_schema(schema: pa.Schema, upsert: UpsertOptions) -> pa.Schema:
    """The table's columns: the stream's, but exceptColumns."""
    dropped = set(upsert.except_columns)
    return pa.schema([f for f in schema if f.name not in dropped])


def check_upsert_schema(schema: pa.Schema, upsert: UpsertOptions,
                        partition_by: Sequence[str]) -> None:
    """At query start, against the stream's columns: the keys and the sequence exist (the
    sequence orders: a number, a timestamp or a date), exceptColumns names columns the stream
    has and keeps the keys, the sequence and the partition columns, applyAsDeletes reads
    columns the stream has with types it can compare."""
    names = schema.names

    def missing(option: str, columns: Sequence[str]) -> None:
        absent = [c for c in columns if c not in names]
        if absent:
            raise OptionError(option, f"column(s) {', '.join(absent)} are not in the stream's "
                                      f"columns ({', '.join(names)})")

    missing("mergeKeys", upsert.keys)
    for key in upsert.keys:
        kind = schema.field(key).type
        if pa.types.is_nested(kind) or pa.types.is_floating(kind):
            raise OptionError("mergeKeys", f"column '{key}' is of type {kind}: a key column must "
                                           "be a string, a number (not a float), a date, a "
                                           "timestamp, a boolean or binary")
    missing("sequenceBy", [upsert.sequence])
    kind = schema.field(upsert.sequence).type
    if not any(test(kind) for test in _SEQUENCE_TYPES):
        raise OptionError("sequenceBy", f"column '{upsert.sequence}' is of type {kind}: the "
                                        "sequence must be a number or a timestamp (or a date)")
    if upsert.sequence in upsert.keys:
        raise OptionError("sequenceBy", f"column '{upsert.sequence}' is also a mergeKeys "
                                        "column: the sequence orders the changes of one key")
    missing("exceptColumns", upsert.except_columns)
    kept = [c for c in upsert.except_columns
            if c in (*upsert.keys, upsert.sequence, *partition_by)]
    if kept:
        raise OptionError("exceptColumns", f"column(s) {', '.join(kept)} must be written: the "
                                           "table keeps the keys, the sequence (to order late "
                                           "changes against the stored row) and the partition "
                                           "columns")
    if upsert.deletes is not None:
        parse(upsert.deletes).check(schema)


class DeltaUpsertSink(DeltaSink):
    """Upsert mode: staged Parquet per task, one MERGE per batch (see the module docstring).
    The table, its checks, compaction and `isCommitted` (the txn version of the appId) are the
    append mode's."""

    def __init__(self, settings: SinkSettings, options: DeltaOptions, schema: pa.Schema) -> None:
        upsert = options.upsert
        assert upsert is not None, "upsert mode needs mergeKeys"
        check_upsert_schema(schema, upsert, options.partition_by)
        super().__init__(settings, options, written_schema(schema, upsert))
        self.upsert = upsert
        self.input_schema = schema
        self.staged_schema = self.schema.append(pa.field(DELETE_COLUMN, pa.bool_(), False))

    def describe(self) -> str:
        return f"delta-eos[{self.options.path}, upsert on {','.join(self.upsert.keys)}]"

    # -- places -----------------------------------------------------------------------------

    def _staging_dir(self) -> str:
        return f"{STAGING_DIRECTORY}/{self.options.file_tag}"

    def tombstones(self) -> Tombstones:
        return Tombstones(location(self.options.path, self.options.file_tag), self.upsert.keys,
                          self.options.app_id, dict(self.options.storage_options))

    def _predicate(self) -> DeletePredicate | None:
        if self.upsert.deletes is None:
            return None
        cached = getattr(self, "_parsed_predicate", None)
        if cached is None:
            cached = self._parsed_predicate = parse(self.upsert.deletes)
        return cached

    # -- driver side, before the tasks ------------------------------------------------------

    def _open(self) -> None:
        """The append mode's checks, and what a MERGE needs of an existing table: it takes
        updates and deletes (not delta.appendOnly), and it has the key and sequence columns
        to match and compare. Expired tombstones are cleaned up here, at most once per tenth
        of the retention per process. (DeltaSink.open retries it all while the store fails
        transiently.)"""
        super()._open()
        table = self._table()
        if table is not None:
            config = {k.lower(): v for k, v in table.metadata().configuration.items()}
            if str(config.get("delta.appendonly", "")).lower() == "true":
                raise OptionError("mergeKeys", f"the table at {self.options.path} is append-only "
                                               "(delta.appendOnly=true): upsert mode updates and "
                                               "deletes rows")
            columns = set(pa.schema(table.schema().to_arrow()).names)
            absent = [c for c in (*self.upsert.keys, self.upsert.sequence) if c not in columns]
            if absent:
                raise OptionError("mergeKeys" if absent[0] in self.upsert.keys else "sequenceBy",
                                  f"the table at {self.options.path} has no column(s) "
                                  f"{', '.join(absent)} to match and order changes by")
        self._maybe_expire_tombstones()

    def _maybe_expire_tombstones(self) -> None:
        now_ms = int(time.time() * 1000)
        retention = self.upsert.tombstone_retention_ms
        key = (self.options.path, self.options.app_id)
        last = _LAST_EXPIRY.get(key)
        if last is not None and now_ms - last < retention / 10:
            return
        _LAST_EXPIRY[key] = now_ms
        try:
            self.tombstones().expire(now_ms, retention)
        except Exception as e:  # clean-up only: a later batch tries again
            log.warning("%s: expiring tombstones failed, tried again later: %s",
                        self.describe(), e)

    # -- task side --------------------------------------------------------------------------

    def beginTransaction(self, context: TaskInfo) -> UpsertTxn:  # type: ignore[override]
        return UpsertTxn(context)

    def invoke(self, txn: UpsertTxn, batch: pa.RecordBatch) -> None:  # type: ignore[override]
        info = txn.info
        for option, column in [*(("mergeKeys", k) for k in self.upsert.keys),
                               ("sequenceBy", self.upsert.sequence)]:
            nulls = batch.column(column).null_count
            if nulls:
                raise NullKeyOrSequence(option, column, nulls, info.batch_id, info.partition_id)
        if self.not_null:
            protocol_checks.check_not_null(batch, self.not_null, info.batch_id, info.partition_id)
        predicate = self._predicate()
        if predicate is None:
            deletes: Any = pa.repeat(pa.scalar(False), batch.num_rows)
        else:
            deletes = predicate.mask(batch)
        columns = [batch.column(f.name).cast(f.type) for f in self.schema]
        staged = pa.RecordBatch.from_arrays([*columns, deletes], schema=self.staged_schema)
        f = txn.staged or self._open_staged(txn)
        f.writer.write_batch(staged)
        f.rows += staged.num_rows
        f.deletes += deletes.true_count

    def _open_staged(self, txn: UpsertTxn) -> StagedFile:
        i = txn.info
        relative = (f"{self._staging_dir()}/b{i.batch_id}-p{i.partition_id}-a{i.attempt}-"
                    f"{uuid.uuid4().hex[:12]}.parquet")
        fs, root = self._fs()
        if isinstance(fs, pafs.LocalFileSystem):  # object stores have no directories
            fs.create_dir(f"{root}/{self._staging_dir()}", recursive=True)
        stream = fs.open_output_stream(f"{root}/{relative}")
        txn.staged = StagedFile(pq.ParquetWriter(stream, self.staged_schema), stream, relative)
        return txn.staged

    def preCommit(self, txn: UpsertTxn) -> UpsertHandle:  # type: ignore[override]
        """Close (so flush) the staged file: durable, and invisible. The handle names it and
        what the driver's MERGE needs besides (keys, sequence), so that `resolve` can commit
        it without the query's options."""
        staged: list[StagedChanges] = []
        f = txn.staged
        if f is not None:
            f.writer.close()
            size = f.stream.tell()
            f.stream.close()
            staged.append({"file": f.relative_path, "rows": f.rows, "deletes": f.deletes,
                           "size": size})
        return upsert_handle(list(self.upsert.keys), self.upsert.sequence, staged)

    def abortTransaction(self, txn: UpsertTxn) -> None:  # type: ignore[override]
        f = txn.staged
        if f is None:
            return
        try:
            f.writer.close()
            f.stream.close()
        except Exception:
            pass
        fs, root = self._fs()
        _delete(fs, f"{root}/{f.relative_path}")

    # -- driver side ------------------------------------------------------------------------

    def commit(self, batchId: int, handles: dict[int, Handle]) -> None:
        """Fold the batch, record its tombstones, apply it as one MERGE carrying
        Transaction(appId, batchId); then delete its staged files. Every step is safe to
        repeat: the tombstones and the MERGE are skipped once their txn version is in."""
        if self.isCommitted(batchId):
            self.abort(list(handles.values()))  # a retry or a recovery: only the clean-up left
            return
        keys, sequence = self.upsert.keys, self.upsert.sequence
        changes, winners = self._fold_staged(handles)
        metadata = self._commit_metadata(batchId)
        tombstones = self.tombstones()
        deletes = tombstones_of(winners, keys, sequence)
        tombstones.record(batchId, deletes, int(time.time() * 1000), metadata)
        applied = drop_tombstoned(winners, tombstones.read_for(winners), keys, sequence)
        started = time.perf_counter()
        metrics = self._merge(batchId, applied, metadata)
        log.info("%s: batch %d: %d change(s), %d key(s), %d tombstone(s), %d applied: %s "
                 "(%.0f ms)", self.describe(), batchId, changes, winners.num_rows,
                 deletes.num_rows, applied.num_rows, metrics,
                 (time.perf_counter() - started) * 1000)
        self.abort(list(handles.values()))

    def _commit_metadata(self, batch_id: int) -> dict[str, str]:
        return {"kafka_eos.batch": str(batch_id),
                **({"userMetadata": self.options.user_metadata}
                   if self.options.user_metadata is not None else {})}

    def _fold_staged(self, handles: dict[int, Handle]) -> tuple[int, pa.Table]:
        """(changes read, winners): the staged files are read a row group at a time and
        folded whenever FOLD_EVERY_ROWS have gathered, so the driver holds about one row per
        key of the batch, not every change of it."""
        fs, root = self._fs()
        keys, sequence = self.upsert.keys, self.upsert.sequence
        winners = self.staged_schema.empty_table()
        pending: list[pa.Table] = []
        gathered = changes = 0
        for p in sorted(handles):
            for s in handles[p].get("staged", []):
                staged = pq.ParquetFile(f"{root}/{s['file']}", filesystem=fs)
                for group in range(staged.num_row_groups):
                    part = staged.read_row_group(group)
                    part = part.select(self.staged_schema.names).cast(self.staged_schema)
                    pending.append(part)
                    gathered += part.num_rows
                    changes += part.num_rows
                    if gathered >= FOLD_EVERY_ROWS:
                        winners = latest_per_key(pa.concat_tables([winners, *pending]), keys,
                                                 sequence)
                        pending, gathered = [], 0
        if pending:
            winners = latest_per_key(pa.concat_tables([winners, *pending]), keys, sequence)
        return changes, winners

    def _merge(self, batch_id: int, applied: pa.Table, metadata: dict[str, str]) -> dict[str, Any]:
        """One MERGE of the batch's winning changes, carrying the batch's txn action. A MERGE
        that changes nothing makes no commit in delta-rs: the txn action then goes in an empty
        commit of its own, so the table still records the batch (isCommitted)."""
        from deltalake import CommitProperties, DeltaTable, Schema, Transaction

        props = CommitProperties(app_transactions=[Transaction(self.options.app_id, batch_id)],
                                 custom_metadata=metadata)
        table = self._table()
        if table is None:
            DeltaTable.create(
                self.options.path, Schema.from_arrow(self.schema), mode="ignore",
                partition_by=list(self.options.partition_by) or None,
                configuration=creation_configuration(self.options.table_properties,
                                                     self.schema),
                storage_options=self.options.storage_options or None,
                commit_properties=None if applied.num_rows else props,
            )
            target = self._target()
            table = self._table()
            if target is not None and table is not None:
                target.record(self.options.path, table.metadata().id)
            assert table is not None, f"no table at {self.options.path} after creating it"
            if not applied.num_rows:
                return {}
        else:
            self._add_new_columns(table)
        metrics: dict[str, Any] = {}
        if applied.num_rows:
            q = quote
            on = " AND ".join(f"target.{q(k)} = source.{q(k)}" for k in self.upsert.keys)
            newer = f"source.{q(self.upsert.sequence)} >= target.{q(self.upsert.sequence)}"
            delete = f"source.{q(DELETE_COLUMN)}"
            columns = {q(c): f"source.{q(c)}" for c in self.schema.names}
            # streamed_exec=False: the source is an Arrow table in memory already, so
            # delta-rs's streamed execution (its default) saves nothing, and it would cost the
            # early pruning delta-rs derives from the source: files whose key range, and
            # partitions (a table partitioned by a key column) that no change of the batch can
            # match are then not read (tests/test_delta_upsert_pruning.py).
            metrics = (
                table.merge(applied, on, source_alias="source", target_alias="target",
                            streamed_exec=False, commit_properties=props,
                            post_commithook_properties=post_commit_hooks(table))
                .when_matched_delete(f"{delete} AND {newer}")
                .when_matched_update(columns, f"NOT {delete} AND {newer}")
                .when_not_matched_insert(columns, f"NOT {delete}")
                .execute()
            )
            table = self._table()
            assert table is not None
        version = table.transaction_version(self.options.app_id)
        if version is None or version < batch_id:
            table.create_write_transaction([], mode="append", schema=table.schema(),
                                           partition_by=list(self.options.partition_by) or None,
                                           commit_properties=props)
        return {k: v for k, v in metrics.items() if k.startswith(("num_target_rows",
                                                                     "num_target_files"))}

    def recoverAndCommit(self, batchId: int, handles: dict[int, Handle]) -> None:
        """A decided batch after a restart: committed unless its txn version is in; lost (the
        replay writes it again) if a staged file went missing while the query was down.
        (Called inside the template's commit retries: no retries of its own.)"""
        if self._is_committed(batchId):
            self.abort(list(handles.values()))
            return
        fs, root = self._fs()
        paths = [f"{root}/{s['file']}" for h in handles.values() for s in h.get("staged", [])]
        missing = ([i.path for i in fs.get_file_info(paths) if i.type == pafs.FileType.NotFound]
                   if paths else [])
        if missing:
            raise TransactionLost(
                list(handles),
                f"{len(missing)} of the {len(paths)} staged file(s) of decided batch {batchId} "
                f"are gone (e.g. {missing[0]}); the replay writes the batch again",
            )
        self.commit(batchId, handles)

    def abort(self, handles: list[Handle]) -> None:
        fs, root = self._fs()
        for h in handles:
            for s in h.get("staged", []):
                self._delete(fs, f"{root}/{s['file']}")

    def cleanupAbandoned(self) -> None:
        """Staged files that no batch will commit: written by tasks killed before their handle
        was logged, by attempts that lost to another, or left by a crash after their batch's
        MERGE. Recovery has committed or aborted every logged batch before this runs, so a
        staged file of a batch the table already holds (its name says which) goes now, and
        any other of this writer once older than orphanFileRetention. At most once per half
        retention per process (the first batch after a start always sweeps)."""
        now_ms = time.time() * 1000
        key = (self.options.path, self.options.app_id, "staging")
        last = _LAST_STAGING_SWEEP.get(key)
        retention = self.options.orphan_retention_ms
        if last is not None and now_ms - last < retention / 2:
            return
        fs, root = self._fs()
        selector = pafs.FileSelector(f"{root}/{self._staging_dir()}", allow_not_found=True)
        files = [i for i in self._retried("listing the staged files", lambda: fs.get_file_info(selector))
                 if i.type == pafs.FileType.File]
        if files:
            def committed_version() -> int | None:
                table = self._table()
                return None if table is None else table.transaction_version(self.options.app_id)

            version = self._retried("reading the table's last batch", committed_version)
            for info in files:
                age = now_ms - (info.mtime_ns / 1e6 if info.mtime_ns is not None else now_ms)
                batch = _staged_batch(info.base_name)
                committed = version is not None and batch is not None and batch <= version
                if committed or age >= retention:
                    log.info("%s: removing abandoned staged file %s", self.describe(), info.path)
                    self._delete(fs, info.path)
        # Only once the sweep is through: one that failed is not skipped for half a retention.
        _LAST_STAGING_SWEEP[key] = now_ms


def _staged_batch(name: str) -> int | None:
    """The batch a staged file belongs to, from its name (b<batch>-p<partition>-a<attempt>-...)."""
    head = name.split("-", 1)[0]
    return int(head[1:]) if head.startswith("b") and head[1:].isdigit() else None


def _delete(fs: pafs.FileSystem, path: str) -> None:
    try:
        fs.delete_file(path)
    except FileNotFoundError:
        pass


#: When this process last expired each writer's tombstones, and swept its staged files.
_LAST_EXPIRY: dict[tuple, int] = {}
_LAST_STAGING_SWEEP: dict[tuple, float] = {}

