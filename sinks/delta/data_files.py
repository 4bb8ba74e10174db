"""`delta-eos`'s task side in append mode: a task's rows written as Parquet files into the table
directory, one open file per partition value, rolled at maxRecordsPerFile / maxBytesPerFile;
at preCommit their add actions, with statistics from the footers the writers kept. No Delta
log entry names the files yet, so no reader sees them (sinks/delta/sink.py commits them).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from sinks.delta.file_stats import file_stats
from sinks.delta.handles import DataFile
from sinks.delta.options import DeltaOptions
from sinks.two_phase_commit import TaskInfo

NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
#: Longer string values than this may cost a write its footer min/max (pyarrow: 4 KiB).
LONG_VALUE_BYTES = 4000


@dataclass
class OpenFile:
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
    files: dict[tuple, OpenFile] = field(default_factory=dict)  # open: one per partition value
    closed: list[OpenFile] = field(default_factory=list)  # full (size caps) or prepared


class ParquetFiles:
    """How one sink's tasks write their rows: the options' partitioning and file caps, the data
    columns (the stream's, less the partition columns), and the table's filesystem."""

    def __init__(self, options: DeltaOptions, data_schema: pa.Schema,
                 location: Callable[[], tuple[pafs.FileSystem, str]]) -> None:
        self.options = options
        self.data_schema = data_schema
        self.location = location
        self.string_columns = [f.name for f in data_schema
                               if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]

    def write(self, txn: DeltaTxn, batch: pa.RecordBatch) -> None:
        """The batch's rows, each into the open file of its partition value."""
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

    def _bound_long_values(self, f: OpenFile, chunk: pa.RecordBatch | pa.Table) -> None:
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

    def _file(self, txn: DeltaTxn, key: tuple) -> OpenFile:
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
        fs, root = self.location()
        if isinstance(fs, pafs.LocalFileSystem):  # object stores have no directories
            fs.create_dir(f"{root}/{dirs}" if dirs else root, recursive=True)
        stream = fs.open_output_stream(f"{root}/{relative}")
        writer = pq.ParquetWriter(stream, self.data_schema)
        f = txn.files[key] = OpenFile(writer, stream, relative, values)
        return f

    def prepared(self, txn: DeltaTxn, table_schema: pa.Schema,
                 table_configuration: dict[str, str]) -> list[DataFile]:
        """Close (so flush) every file of the task: durable, and still invisible to readers;
        their add actions. Sizes and statistics come from the writer itself: no request back
        to the store per file."""
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
                "stats": file_stats(meta, table_schema, self.options.partition_by,
                                    table_configuration, f.long_value_bounds),
            })
        return adds

    def discard(self, txn: DeltaTxn) -> None:
        """A failed task's files, closed and deleted (what a delete misses is an orphan the
        driver's sweep removes)."""
        fs, root = self.location()
        for f in [*txn.files.values(), *txn.closed]:
            try:
                _close(f)
            except Exception:
                pass
            try:
                fs.delete_file(f"{root}/{f.relative_path}")
            except FileNotFoundError:
                pass


def _close(f: OpenFile) -> None:
    if f.writer.is_open:
        f.writer.close()
    if not f.stream.closed:
        f.size = f.stream.tell()
        f.stream.close()


def _footer(f: OpenFile) -> pq.FileMetaData:
    """The footer the closed writer just wrote: pyarrow keeps it (its own write_to_dataset
    collects footers this way), so no read back from the store."""
    return f.writer.writer.metadata


def _partition_string(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    if batch.schema.equals(schema, check_metadata=False):
        return batch
    return pa.RecordBatch.from_arrays(
        [batch.column(f.name).cast(f.type) for f in schema], schema=schema
    )


def _conform_table(table: pa.Table, schema: pa.Schema) -> pa.Table:
    return table.select(schema.names).cast(schema)
