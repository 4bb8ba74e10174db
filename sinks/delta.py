"""`delta-eos`: the exactly-once Delta Lake sink, written with deltalake (delta-rs).

Phase one (tasks): Parquet files are written into the table directory; no Delta log entry
names them, so no reader sees them. Phase two (driver): all of the batch's add actions go into
one Delta commit carrying `Transaction(appId, version=batchId)`, so the table itself records
atomically whether batch N is in (`isCommitted`). The commit protocol is the template's.
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Field, Schema, Transaction
from deltalake.exceptions import TableNotFoundError
from deltalake.transaction import AddAction, create_table_with_add_actions
from pyspark.sql.datasource import DataSource, DataSourceStreamWriter
from pyspark.sql.types import StructType

from connectors.options import OptionError, Options
from sinks.two_phase_commit import (
    EXACTLY_ONCE,
    SinkSettings,
    TaskInfo,
    TwoPhaseCommitSink,
    qualify_path,
)
from sinks.txn_log import Handle

log = logging.getLogger("kafka_eos.sink.delta")

FORMAT_NAME = "delta-eos"
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"


@dataclass(frozen=True)
class DeltaOptions:
    path: str
    partition_by: tuple[str, ...]
    merge_schema: bool
    app_id: str
    storage_options: dict[str, str] = field(repr=False)  # may hold keys: never in a repr

    @classmethod
    def parse(cls, opts: Options, settings: SinkSettings) -> "DeltaOptions":
        path = opts.require("path", 'the Delta table\'s location, e.g. .option("path", "/data/t")')
        partition_by = tuple(
            c.strip() for c in (opts.get("partitionBy") or "").split(",") if c.strip()
        )
        app_id = opts.get("appId")
        if not app_id:
            origin = settings.checkpoint_location or path
            app_id = "delta-eos-" + hashlib.sha256(origin.encode()).hexdigest()[:16]
        return cls(
            path=qualify_path(path.rstrip("/")),
            partition_by=partition_by,
            merge_schema=opts.get_bool("mergeSchema", False),
            app_id=app_id,
            storage_options=opts.with_prefix("delta."),
        )


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
        return pafs.FileSystem.from_uri(self.options.path)

    def _table(self) -> DeltaTable | None:
        try:
            return DeltaTable(self.options.path, storage_options=self.options.storage_options)
        except TableNotFoundError:
            return None

    def open(self) -> None:
        """At each batch's planning: the table, if it exists, must accept this stream."""
        table = self._table()
        if table is None:
            return
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
            f"part-eos-{self.options.app_id[-16:]}-b{i.batch_id}-p{i.partition_id}-a{i.attempt}-"
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
        version = table.transaction_version(self.options.app_id)
        return version is not None and version >= batchId

    def cleanupAbandoned(self) -> None:
        """Delete this sink's data files of batches the table does not hold yet: written by
        tasks killed before they could log a handle. The replay writes those batches anew."""
        table = self._table()
        if table is None:
            return
        version = table.transaction_version(self.options.app_id)
        committed_through = -1 if version is None else version
        fs, root = self._fs()
        prefix = f"part-eos-{self.options.app_id[-16:]}-b"
        selector = pafs.FileSelector(root, recursive=True, allow_not_found=True)
        for info in fs.get_file_info(selector):
            name = info.base_name
            if info.type != pafs.FileType.File or not name.startswith(prefix):
                continue
            batch = int(name[len(prefix):].split("-", 1)[0])
            if batch > committed_through:
                log.info("%s: removing abandoned file %s", self.describe(), info.path)
                _delete(fs, info.path)

    def commit(self, batchId: int, handles: dict[int, Handle]) -> None:
        """One Delta commit for the whole batch, carrying Transaction(appId, batchId).

        In at-least-once mode every task commits its own files, without the txn action: the
        batch id no longer names one commit, so it cannot serve as an idempotency key.
        """
        exactly_once = self.settings.guarantee == EXACTLY_ONCE
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
            app_transactions=[Transaction(self.options.app_id, batchId)] if exactly_once else None,
            custom_metadata={"kafka_eos.batch": str(batchId)},
        )
        table = self._table()
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
        settings = SinkSettings.from_options(FORMAT_NAME, opts)
        delta_options = DeltaOptions.parse(opts, settings)
        arrow_schema = to_arrow_schema(schema, timezone="UTC")
        return DeltaSink(settings, delta_options, arrow_schema).streamWriter()
