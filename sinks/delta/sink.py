"""`delta-eos` in append mode: `DeltaSink`, the exactly-once Delta Lake sink on the template,
written with pyarrow (data files) and deltalake (delta-rs, the commit).

Phase one (tasks): Parquet files are written into the table directory; no Delta log entry
names them, so no reader sees them. Phase two (driver): all of the batch's add actions go into
one Delta commit carrying `Transaction(appId, version=batchId)`, so the table itself records
atomically whether batch N is in (`isCommitted`). The commit protocol is the template's.

What the upsert mode shares with it (the table cache, `open()`'s checks, compaction, the
orphan sweep, `isCommitted`) lives here too; sinks/delta/upsert.py overrides the task side and
the commit. deltalake is imported inside the methods that read or commit the table: Spark's
Python workers import this module for every task, and most of them only write Parquet.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from connectors.core.options import OptionError
from connectors.core.paths import resolve_location
from sinks.storage_retries import with_storage_retries
from sinks.query_identity import last_committed_batch
from sinks.delta import protocol_checks
from sinks.delta.file_stats import file_stats
from sinks.delta.handles import AppendHandle, DataFile, append_handle
from sinks.delta.options import DeltaOptions
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

NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
#: In a batch job's commit info: the job's id, by which a retried commit finds it landed.
JOB_METADATA_KEY = "kafka_eos.job"
#: delta-rs's checkpoint interval when the table sets none (delta-spark's is 10).
DELTA_RS_CHECKPOINT_INTERVAL = 100
#: Longer string values than this may cost a write its footer min/max (pyarrow: 4 KiB).
LONG_VALUE_BYTES = 4000
#: In a compaction's commit info: the appId of the sink that compacted.
COMPACTION_METADATA_KEY = "kafka_eos.compaction"


@dataclass
class _OpenFile:
    writer: pq.ParquetWriter
    stream: pa.NativeFile  # its position is the file's size so far (maxBytesPerFile)
    relative_path: str  # as on disk, relative to the table root
    partition_values: dict[str, str | None]
    rows: int = 0
    size: int = 0  # set when closed
    #: (min, max) of each string column over the writes with values too long for the footer
    long_value_bounds: dict[str, tuple[str, str]] = field(default_factory=dict)


@dataclass
class DeltaTxn:
    info: TaskInfo
    files: dict[tuple, _OpenFile] = field(default_factory=dict)  # open: one per partition value
    closed: list[_OpenFile] = field(default_factory=list)  # full (size caps) or prepared


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
        self.data_schema = pa.schema(
            [f for f in schema if f.name not in options.partition_by]
        )
        # What the tasks need of the table, read by open() on the driver: a table not yet
        # created will have the stream's schema and the sink's table properties.
        self.table_schema: pa.Schema = schema
        self.table_configuration: dict[str, str] = dict(options.table_properties)
        self.not_null: tuple[str, ...] = ()
        self.string_columns = [f.name for f in self.data_schema
                               if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]

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
        loc = resolve_location("path", self.options.path, self.options.storage_options)
        return loc.fs, loc.path

    def _table(self) -> DeltaTable | None:
        """The table as of now. Each process keeps the table it loaded and brings it up to
        date with the commits since (`update_incremental`: a listing after the version it
        holds), instead of loading it from its checkpoint at each step of each batch (open,
        isCommitted, commit: three loads a batch, each reading a checkpoint that grows with
        the table's files). A kept table is trusted only while the commit file of its version
        is the one it read: a table deleted (or deleted and created again) under the query is
        loaded afresh, never extended from a version that is gone."""
        key = (self.options.path, self.options.app_id,
               tuple(sorted(self.options.storage_options.items())))
        kept = _TABLES.get(key)
        if kept is not None:
            table, mark = kept
            fs, root = self._fs()
            if mark is not None and _commit_mark(fs, root, table.version()) == mark:
                try:
                    held = table.version()
                    table.update_incremental()
                    if table.version() != held:  # the same version keeps its mark
                        _TABLES[key] = (table, _commit_mark(fs, root, table.version()))
                    return table
                except Exception as e:  # unreadable now: load it afresh
                    log.info("%s: reloading the table (%s)", self.describe(), e)
            _TABLES.pop(key, None)
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        try:
            table = DeltaTable(self.options.path, storage_options=self.options.storage_options)
        except TableNotFoundError:
            return None
        fs, root = self._fs()
        _TABLES[key] = (table, _commit_mark(fs, root, table.version()))
        return table

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
        """compactEvery=N: once the table has N commits since its last compaction, bin-pack
        small files with delta-rs's optimize before the batch's tasks run. Its commit changes
        no data (dataChange=false) and carries no txn action, so the sink's bookkeeping is
        untouched; one that fails (e.g. a conflict with another writer) is retried later."""
        n = self.options.compact_every
        if not n or self.settings.batch_job:
            return
        last = _LAST_COMPACTION.get(self.options.path)
        if last is None:  # once per driver process: the last compaction in the table's history
            last = next((h["version"] for h in table.history(limit=n)
                         if h.get("operation") == "OPTIMIZE"), max(table.version() - n, -1))
        if table.version() - last < n:
            _LAST_COMPACTION[self.options.path] = last
            return
        from deltalake import CommitProperties

        started = time.perf_counter()
        try:
            metrics = table.optimize.compact(
                commit_properties=CommitProperties(
                    custom_metadata={COMPACTION_METADATA_KEY: self.options.app_id}
                ),
            )
        except Exception as e:  # data-change-free: the batch goes on, a later one retries
            log.warning("%s: compaction failed, retried after %d more commits: %s",
                        self.describe(), n, e)
            _LAST_COMPACTION[self.options.path] = table.version()
            return
        table.update_incremental()
        _LAST_COMPACTION[self.options.path] = table.version()
        log.info("%s: compacted %s file(s) into %s in %.0f ms (version %d)", self.describe(),
                 metrics.get("numFilesRemoved"), metrics.get("numFilesAdded"),
                 (time.perf_counter() - started) * 1000, table.version())

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
        cols = self.options.partition_by
        if not cols:
            self._append(txn, (), _conform(batch, self.data_schema))
            return
        import pyarrow.compute as pc

        table = pa.Table.from_batches([batch])
        keys = table.select(list(cols)).group_by(list(cols)).aggregate([]).to_pylist()
        for key in keys:
            mask = None
            for c in cols:
                v = key[c]
                cond = pc.is_null(table[c]) if v is None else pc.equal(table[c], pa.scalar(v, table[c].type))
                mask = cond if mask is None else pc.and_(mask, cond)
            part = table.filter(mask).drop_columns(list(cols))
            self._append(txn, tuple(key[c] for c in cols), _conform_table(part, self.data_schema))

    def _append(self, txn: DeltaTxn, key: tuple, data: pa.RecordBatch | pa.Table) -> None:
        """Into the partition value's open file, rolling to a new file at maxRecordsPerFile
        rows or once maxBytesPerFile bytes are written (checked after each write: a file
        ends past the byte cap by at most one write)."""
        max_rows, max_bytes = self.options.max_records_per_file, self.options.max_bytes_per_file
        offset = 0
        while offset < data.num_rows:
            f = self._file(txn, key)
            n = data.num_rows - offset
            if max_rows:
                n = min(n, max_rows - f.rows)
            chunk = data.slice(offset, n)
            f.writer.write(chunk)
            self._bound_long_values(f, chunk)
            f.rows += n
            offset += n
            if (max_rows and f.rows >= max_rows) or (max_bytes and f.stream.tell() >= max_bytes):
                _close(f)
                txn.closed.append(txn.files.pop(key))

    def _bound_long_values(self, f: _OpenFile, chunk: pa.RecordBatch | pa.Table) -> None:
        """pyarrow leaves min/max out of the footer for a write holding a string longer than
        4 KiB: such writes are bounded here (one pass over the offsets decides; only then the
        values are compared), so the file keeps its statistics (sinks/delta/file_stats.py)."""
        if not self.string_columns:
            return
        import pyarrow.compute as pc

        for name in self.string_columns:
            column = chunk.column(name)
            longest = pc.max(pc.binary_length(column)).as_py()
            if longest is None or longest <= LONG_VALUE_BYTES:
                continue
            low, high = pc.min_max(column).values()
            lo, hi = low.as_py(), high.as_py()
            if name in f.long_value_bounds:
                old_lo, old_hi = f.long_value_bounds[name]
                lo, hi = min(lo, old_lo), max(hi, old_hi)
            f.long_value_bounds[name] = (lo, hi)

    def _file(self, txn: DeltaTxn, key: tuple) -> _OpenFile:
        f = txn.files.get(key)
        if f is not None:
            return f
        values = {c: (None if v is None else _partition_string(v)) for c, v in zip(self.options.partition_by, key)}
        dirs = "/".join(
            f"{c}={NULL_PARTITION if v is None else quote(v, safe='')}" for c, v in values.items()
        )
        i = txn.info
        name = (
            f"part-eos-{self.options.file_tag}-b{i.batch_id}-p{i.partition_id}-a{i.attempt}-"
            f"{uuid.uuid4().hex[:12]}.parquet"
        )
        relative = f"{dirs}/{name}" if dirs else name
        fs, root = self._fs()
        if isinstance(fs, pafs.LocalFileSystem):  # object stores have no directories
            fs.create_dir(f"{root}/{dirs}" if dirs else root, recursive=True)
        stream = fs.open_output_stream(f"{root}/{relative}")
        writer = pq.ParquetWriter(stream, self.data_schema)
        f = txn.files[key] = _OpenFile(writer, stream, relative, values)
        return f

    def preCommit(self, txn: DeltaTxn) -> AppendHandle:
        """Close (so flush) every file: durable, and still invisible to readers. Sizes and
        statistics come from the writer itself: no request back to the store per file."""
        for f in txn.files.values():
            _close(f)
        txn.closed.extend(txn.files.values())
        txn.files.clear()
        now_ms = int(time.time() * 1000)
        adds: list[DataFile] = []
        for f in txn.closed:
            meta = _footer(f)
            adds.append({
                "path": quote(f.relative_path, safe="/="),
                "file": f.relative_path,
                "size": f.size,
                "partition_values": f.partition_values,
                "modification_time": now_ms,
                "rows": meta.num_rows,
                "stats": file_stats(meta, self.table_schema, self.options.partition_by,
                                    self.table_configuration, f.long_value_bounds),
            })
        return append_handle(adds)

    def abortTransaction(self, txn: DeltaTxn) -> None:
        fs, root = self._fs()
        for f in [*txn.files.values(), *txn.closed]:
            try:
                _close(f)
            except Exception:
                pass
            _delete(fs, f"{root}/{f.relative_path}")

    # -- driver side ------------------------------------------------------------------------

    def isCommitted(self, batchId: int) -> bool | None:
        return self._retried(f"reading whether batch {batchId} is in the table",
                             lambda: self._is_committed(batchId))

    def _is_committed(self, batchId: int) -> bool | None:
        table = self._table()
        if table is None:
            return False
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
        for info in self._retried("listing the table's files", lambda: list(_data_files(fs, root))):
            if info.base_name.startswith(prefix):
                self._delete(fs, info.path)

    def cleanupAbandoned(self) -> None:
        """Delete this sink's data files that no readable version of the table references and
        that are older than orphanFileRetention: written by tasks killed before their handle
        was logged, or by failed and superseded attempts. Never inferred from names alone."""
        now_ms = time.time() * 1000
        last = _LAST_CLEANUP.get(self.options.path)
        if last is not None and now_ms - last < self.options.orphan_retention_ms / 2:
            return  # orphans are invisible to readers: a clean-up per half retention is enough
        fs, root = self._fs()
        prefix = f"part-eos-{self.options.file_tag}-"
        candidates = [
            info for info in self._retried("listing the table's files for orphans",
                                           lambda: list(_data_files(fs, root)))
            if info.base_name.startswith(prefix)
            and now_ms - _mtime_ms(info, now_ms) >= self.options.orphan_retention_ms
        ]
        if candidates:
            from sinks.delta.referenced_files import referenced_files

            def referenced_now() -> set[str]:
                table = self._table()
                return set() if table is None else referenced_files(table, fs, root)

            referenced = self._retried("reading the files the table references", referenced_now)
            for info in candidates:
                relative = info.path[len(root):].lstrip("/")
                if relative not in referenced:
                    log.info("%s: removing orphan file %s", self.describe(), info.path)
                    self._delete(fs, info.path)
        # Only once the sweep is through: one that failed is not skipped for half a retention.
        _LAST_CLEANUP[self.options.path] = now_ms

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
        if exactly_once and self._is_committed(batchId):
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
        table = self._table()
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


#: The table each process loaded, per location, appId and storage options, with the mark of
#: the commit file of its version (DeltaSink._table).
_TABLES: dict[tuple, tuple[DeltaTable, tuple | None]] = {}
#: When this worker process last cleaned up each table (see cleanupAbandoned).
_LAST_CLEANUP: dict[str, float] = {}
#: The table version of each table's last compaction this driver knows of (_maybe_compact).
_LAST_COMPACTION: dict[str, int] = {}
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


def _close(f: _OpenFile) -> None:
    if f.writer.is_open:
        f.writer.close()
    if not f.stream.closed:
        f.size = f.stream.tell()
        f.stream.close()


def _footer(f: _OpenFile) -> pq.FileMetaData:
    """The footer the closed writer just wrote: pyarrow keeps it (its own write_to_dataset
    collects footers this way), so no read back from the store."""
    return f.writer.writer.metadata


def _data_files(fs: pafs.FileSystem, root: str) -> Iterator[pafs.FileInfo]:
    """Every file under the table root except the Delta log's (which, at a 1 s trigger, holds
    hundreds of thousands of commits: never listed here)."""
    top = fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
    for info in top:
        if info.type == pafs.FileType.File:
            yield info
        elif info.type == pafs.FileType.Directory and info.base_name != "_delta_log":
            for inner in fs.get_file_info(pafs.FileSelector(info.path, recursive=True)):
                if inner.type == pafs.FileType.File:
                    yield inner


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


def _commit_mark(fs: pafs.FileSystem, root: str, version: int) -> tuple | None:
    """What identifies one commit file (size and modification time): None if it is gone."""
    info = fs.get_file_info(f"{root}/_delta_log/{version:020d}.json")
    if info.type == pafs.FileType.NotFound:
        return None
    return (info.size, info.mtime_ns)


def _mtime_ms(info: pafs.FileInfo, default: float) -> float:
    return info.mtime_ns / 1e6 if info.mtime_ns is not None else default


def _delete(fs: pafs.FileSystem, path: str) -> None:
    try:
        fs.delete_file(path)
    except FileNotFoundError:
        pass


def _partition_string(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


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


def _conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    if batch.schema.equals(schema, check_metadata=False):
        return batch
    return pa.RecordBatch.from_arrays(
        [batch.column(f.name).cast(f.type) for f in schema], schema=schema
    )


def _conform_table(table: pa.Table, schema: pa.Schema) -> pa.Table:
    return table.select(schema.names).cast(schema)
