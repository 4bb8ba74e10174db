"""`delta-eos`: the exactly-once Delta Lake sink, written with deltalake (delta-rs).

Phase one (tasks): Parquet files are written into the table directory; no Delta log entry
names them, so no reader sees them. Phase two (driver): all of the batch's add actions go into
one Delta commit carrying `Transaction(appId, version=batchId)`, so the table itself records
atomically whether batch N is in (`isCommitted`). The commit protocol is the template's.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Field, Schema, Transaction
from deltalake.exceptions import TableNotFoundError
from deltalake.transaction import AddAction, create_table_with_add_actions
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, DataSourceStreamWriter
from pyspark.sql.types import StructType

from connectors.options import OptionError, Options
from connectors.paths import normalise, resolve
from sinks.checkpoint import last_committed_batch, writer_identity
from sinks.two_phase_commit import (
    EXACTLY_ONCE,
    JOB_BATCH_ID,
    SinkSettings,
    TaskInfo,
    TransactionLost,
    TwoPhaseCommitSink,
    reject_unknown_options,
)
from sinks.txn_log import Handle

log = logging.getLogger("kafka_eos.sink.delta")

FORMAT_NAME = "delta-eos"
#: The sink's own options (besides the template's and `delta.*`); anything else is refused.
OPTIONS = ("path", "partitionBy", "mergeSchema", "appId", "orphanFileRetention")
OPTION_PREFIXES = ("delta.",)
#: A batch write's: appId names a streaming writer's batches, and the orphan sweep belongs
#: to the streaming sink (a job deletes its own files when it fails).
BATCH_OPTIONS = ("path", "partitionBy", "mergeSchema")
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
#: In a batch job's commit info: the job's id, by which a retried commit finds it landed.
JOB_METADATA_KEY = "kafka_eos.job"


#: Orphan files younger than this are left alone: a task may still be writing them.
DEFAULT_ORPHAN_RETENTION_MS = 3_600_000


@dataclass(frozen=True)
class DeltaOptions:
    path: str  # a URI delta-rs and pyarrow.fs read alike (connectors/paths.py)
    partition_by: tuple[str, ...]
    merge_schema: bool
    app_id: str
    app_id_explicit: bool
    orphan_retention_ms: int
    storage_options: dict[str, str] = field(repr=False)  # may hold keys: never in a repr

    @property
    def file_tag(self) -> str:
        """In every data file's name: whose files they are, for the orphan clean-up."""
        return hashlib.sha256(self.app_id.encode()).hexdigest()[:16]

    @classmethod
    def parse(cls, opts: Options, settings: SinkSettings) -> "DeltaOptions":
        path = normalise(
            "path", opts.require("path", 'the Delta table\'s location, e.g. .option("path", "/data/t")')
        )
        partition_by = tuple(
            c.strip() for c in (opts.get("partitionBy") or "").split(",") if c.strip()
        )
        app_id = opts.get("appId")
        explicit = bool(app_id)
        if settings.batch_job:
            app_id = f"delta-eos-batch-{settings.job_id}"  # names the job's files only
        elif not app_id:
            app_id = "delta-eos-" + _default_identity(settings, path)
        return cls(
            path=path,
            partition_by=partition_by,
            merge_schema=opts.get_bool("mergeSchema", False),
            app_id=app_id,
            app_id_explicit=explicit,
            orphan_retention_ms=opts.get_duration_ms("orphanFileRetention", DEFAULT_ORPHAN_RETENTION_MS),
            storage_options=opts.with_prefix("delta."),
        )


def _default_identity(settings: SinkSettings, path: str) -> str:
    """The query's own id (so a reset checkpoint is a new writer), fixed in the transaction
    log at the first exactly-once start; checkpoints of earlier versions keep the id they had,
    derived from the checkpoint path."""
    origin = settings.checkpoint_location or path
    legacy = hashlib.sha256(origin.encode()).hexdigest()[:16]
    if settings.guarantee != EXACTLY_ONCE or not settings.checkpoint_location:
        return legacy  # no txn action is written: the id only names files
    return writer_identity(settings.checkpoint_location, legacy=legacy)


@dataclass
class _OpenFile:
    writer: pq.ParquetWriter
    relative_path: str  # as on disk, relative to the table root
    partition_values: dict[str, str | None]
    rows: int = 0


@dataclass
class DeltaTxn:
    info: TaskInfo
    files: dict[tuple, _OpenFile] = field(default_factory=dict)


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

    def describe(self) -> str:
        return f"delta-eos[{self.options.path}]"

    # -- helpers ----------------------------------------------------------------------------

    def _fs(self) -> tuple[pafs.FileSystem, str]:
        loc = resolve("path", self.options.path)
        return loc.fs, loc.path

    def _table(self) -> DeltaTable | None:
        try:
            return DeltaTable(self.options.path, storage_options=self.options.storage_options)
        except TableNotFoundError:
            return None

    def open(self) -> None:
        """At each batch's planning: the table, if it exists, must accept this stream."""
        table = self._table()
        #: A batch job's commit is looked for in the versions after this one (isCommitted).
        self.job_base_version = -1 if table is None else table.version()
        if table is None:
            return
        self._check_checkpoint_not_behind(table)
        existing = pa.schema(table.schema().to_arrow())
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
        cols = self.options.partition_by
        if not cols:
            self._file(txn, ()).writer.write_batch(_conform(batch, self.data_schema))
            return
        table = pa.Table.from_batches([batch])
        keys = table.select(list(cols)).group_by(list(cols)).aggregate([]).to_pylist()
        for key in keys:
            mask = None
            for c in cols:
                v = key[c]
                cond = pc.is_null(table[c]) if v is None else pc.equal(table[c], pa.scalar(v, table[c].type))
                mask = cond if mask is None else pc.and_(mask, cond)
            part = table.filter(mask).drop_columns(list(cols))
            f = self._file(txn, tuple(key[c] for c in cols))
            f.writer.write_table(_conform_table(part, self.data_schema))
            f.rows += part.num_rows

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
        fs.create_dir(f"{root}/{dirs}" if dirs else root, recursive=True)
        writer = pq.ParquetWriter(f"{root}/{relative}", self.data_schema, filesystem=fs)
        f = txn.files[key] = _OpenFile(writer, relative, values)
        return f

    def preCommit(self, txn: DeltaTxn) -> Handle:
        """Close (so flush) every file: durable, and still invisible to readers."""
        fs, root = self._fs()
        adds = []
        for f in txn.files.values():
            f.writer.close()
            info = fs.get_file_info(f"{root}/{f.relative_path}")
            meta = pq.read_metadata(f"{root}/{f.relative_path}", filesystem=fs)
            adds.append({
                "path": quote(f.relative_path, safe="/="),
                "file": f.relative_path,
                "size": info.size,
                "partition_values": f.partition_values,
                "modification_time": int(info.mtime_ns // 1_000_000) if info.mtime_ns else int(time.time() * 1000),
                "rows": meta.num_rows,
            })
        return {"adds": adds}

    def abortTransaction(self, txn: DeltaTxn) -> None:
        fs, root = self._fs()
        for f in txn.files.values():
            try:
                f.writer.close()
            except Exception:
                pass
            _delete(fs, f"{root}/{f.relative_path}")

    # -- driver side ------------------------------------------------------------------------

    def isCommitted(self, batchId: int) -> bool | None:
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
        selector = pafs.FileSelector(root, recursive=True, allow_not_found=True)
        for info in fs.get_file_info(selector):
            if (info.type == pafs.FileType.File and info.base_name.startswith(prefix)
                    and "/_delta_log/" not in info.path):
                _delete(fs, info.path)

    def cleanupAbandoned(self) -> None:
        """Delete this sink's data files that no readable version of the table references and
        that are older than orphanFileRetention: written by tasks killed before their handle
        was logged, or by failed and superseded attempts. Never inferred from names alone."""
        now_ms = time.time() * 1000
        last = _LAST_CLEANUP.get(self.options.path)
        if last is not None and now_ms - last < self.options.orphan_retention_ms / 2:
            return  # orphans are invisible to readers: a clean-up per half retention is enough
        _LAST_CLEANUP[self.options.path] = now_ms
        fs, root = self._fs()
        prefix = f"part-eos-{self.options.file_tag}-"
        selector = pafs.FileSelector(root, recursive=True, allow_not_found=True)
        candidates = [
            info for info in fs.get_file_info(selector)
            if info.type == pafs.FileType.File and info.base_name.startswith(prefix)
            and "/_delta_log/" not in info.path
            and now_ms - _mtime_ms(info, now_ms) >= self.options.orphan_retention_ms
        ]
        if not candidates:
            return
        since_ms = min(_mtime_ms(c, now_ms) for c in candidates) - 60_000  # clock slack
        referenced = self._referenced_files(fs, root, since_ms)
        for info in candidates:
            relative = info.path[len(root):].lstrip("/")
            if relative not in referenced:
                log.info("%s: removing orphan file %s", self.describe(), info.path)
                _delete(fs, info.path)

    def _referenced_files(self, fs: pafs.FileSystem, root: str, since_ms: float) -> set[str]:
        """Relative paths (as on disk) of every file a readable version references: the
        current snapshot, plus every add and remove of the commits written since `since_ms`
        (a file can only be referenced by a commit made after the file was written)."""
        table = self._table()
        if table is None:
            return set()
        paths = table.get_add_actions(flatten=True).column("path").to_pylist()
        selector = pafs.FileSelector(f"{root}/_delta_log", allow_not_found=True)
        for info in fs.get_file_info(selector):
            if not info.base_name.endswith(".json") or _mtime_ms(info, since_ms) < since_ms:
                continue
            with fs.open_input_stream(info.path) as f:
                for line in f.read().decode("utf-8").splitlines():
                    if not line.strip():
                        continue
                    action = json.loads(line)
                    for kind in ("add", "remove"):
                        if kind in action:
                            paths.append(action[kind]["path"])
        return {unquote(p) for p in paths}  # add paths are the on-disk names, URL-encoded

    def recoverAndCommit(self, batchId: int, handles: dict[int, Handle]) -> None:
        """A decided batch committed after a restart: its files may have gone while the query
        was down (a VACUUM removes unreferenced files). Adding actions for missing files would
        commit a batch nobody can read and make the replay skip it; it is lost instead."""
        if self.isCommitted(batchId):
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
        exactly_once = self.settings.guarantee == EXACTLY_ONCE
        job = self.settings.job_id
        if exactly_once and self.isCommitted(batchId):
            return  # a retry after an ambiguous failure, or a recovery: already in
        adds = [
            AddAction(
                a["path"], a["size"], a["partition_values"], a["modification_time"], True,
                f'{{"numRecords":{a["rows"]}}}',
            )
            for p in sorted(handles)
            for a in handles[p]["adds"]
        ]
        props = CommitProperties(
            app_transactions=(
                [Transaction(self.options.app_id, batchId)] if exactly_once and not job else None
            ),
            custom_metadata={JOB_METADATA_KEY: job} if job else {"kafka_eos.batch": str(batchId)},
        )
        table = self._table()
        if job and not adds and table is not None:
            return  # an empty batch job: nothing to add (a missing table is still created)
        if table is None:
            create_table_with_add_actions(
                self.options.path,
                Schema.from_arrow(self.schema),
                adds,
                mode="append",
                partition_by=list(self.options.partition_by) or None,
                storage_options=self.options.storage_options or None,
                commit_properties=props,
            )
        else:
            self._add_new_columns(table)
            table.create_write_transaction(
                adds,
                mode="append",
                schema=table.schema(),
                partition_by=list(self.options.partition_by) or None,
                commit_properties=props,
            )

    def _add_new_columns(self, table: DeltaTable) -> None:
        """mergeSchema: columns the stream has and the table lacks are added first (their own
        commit; repeating it after a crash finds them there and adds nothing)."""
        if not self.options.merge_schema:
            return
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
                _delete(fs, f"{root}/{a['file']}")


#: When this worker process last cleaned up each table (see cleanupAbandoned).
_LAST_CLEANUP: dict[str, float] = {}


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
        return DeltaSink(settings, delta_options, arrow_schema).streamWriter()

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
        reject_unknown_options(opts, BATCH_OPTIONS, prefixes=OPTION_PREFIXES,
                               format_name=FORMAT_NAME, batch=True)
        settings = SinkSettings.for_batch_job(FORMAT_NAME, opts)
        delta_options = DeltaOptions.parse(opts, settings)
        arrow_schema = to_arrow_schema(schema, timezone="UTC")
        return DeltaSink(settings, delta_options, arrow_schema).batchWriter()
