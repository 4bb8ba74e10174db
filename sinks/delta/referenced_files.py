"""Which data files a Delta table's readable versions reference, read at a bounded cost.

The orphan clean-up (sinks/delta/sink.py) may delete one of its own files only when no readable
version references it: not the current snapshot, and not a version a reader can still travel
to, whose files are the snapshot's tombstones (`remove` actions). Reading every commit since a
file was written costs one GET per commit: with compaction, the files it replaced stay
candidates until a VACUUM, and at a 1 s trigger that is 600,000 commits a week, every sweep. So
the tombstones come from the last log checkpoint (which carries every unexpired `remove`) and
the few commits after it, found by version number, without listing `_delta_log`.

A tombstone older than the table's `delta.deletedFileRetentionDuration` leaves the checkpoint:
such a file is what a VACUUM removes, and Delta promises no time travel to it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING
from urllib.parse import unquote

import pyarrow.fs as pafs
import pyarrow.parquet as pq

if TYPE_CHECKING:
    from deltalake import DeltaTable


def referenced_files(table: DeltaTable, fs: pafs.FileSystem, root: str) -> set[str]:
    """Paths relative to the table root, as on storage (add paths are URL-encoded), of every
    file the current snapshot holds or a tombstone names."""
    paths = set(table.get_add_actions(flatten=True).column("path").to_pylist())
    log = f"{root}/_delta_log"
    checkpoint = _last_checkpoint(fs, log)
    first = 0
    if checkpoint is not None:
        version, files = checkpoint
        for path in files:
            paths |= _checkpoint_paths(fs, path)
        first = version + 1
    for version in range(first, table.version() + 1):
        paths |= _commit_paths(fs, f"{log}/{version:020d}.json")
    return {unquote(p) for p in paths}


def _last_checkpoint(fs: pafs.FileSystem, log: str) -> tuple[int, list[str]] | None:
    """(version, parquet files) of the classic checkpoint `_last_checkpoint` names (single
    file or multi-part); None when there is none. A V2 checkpoint (sidecars) is read through
    every commit instead (the caller starts at version 0)."""
    try:
        with fs.open_input_stream(f"{log}/_last_checkpoint") as f:
            hint = json.loads(f.read().decode("utf-8"))
    except FileNotFoundError:
        return None
    version = int(hint["version"])
    if hint.get("v2Checkpoint") is not None:
        return None
    parts = hint.get("parts")
    if parts:
        files = [f"{log}/{version:020d}.checkpoint.{i:010d}.{int(parts):010d}.parquet"
                 for i in range(1, int(parts) + 1)]
    else:
        files = [f"{log}/{version:020d}.checkpoint.parquet"]
    if any(i.type == pafs.FileType.NotFound for i in fs.get_file_info(files)):
        return None  # a UUID-named (V2) checkpoint, or one being cleaned up: read the commits
    return version, files


def _checkpoint_paths(fs: pafs.FileSystem, path: str) -> set[str]:
    checkpoint = pq.ParquetFile(path, filesystem=fs)  # one footer read, for columns and rows
    columns = [c for c in ("add", "remove") if c in checkpoint.schema_arrow.names]
    table = checkpoint.read(columns=columns)
    found: set[str] = set()
    for c in columns:
        found |= {p for p in table.column(c).combine_chunks().field("path").to_pylist() if p}
    return found


def _commit_paths(fs: pafs.FileSystem, path: str) -> set[str]:
    try:
        with fs.open_input_stream(path) as f:
            text = f.read().decode("utf-8")
    except FileNotFoundError:
        return set()  # removed by log clean-up: covered by a checkpoint
    found: set[str] = set()
    for line in text.splitlines():
        if line.strip():
            action = json.loads(line)
            for kind in ("add", "remove"):
                if kind in action:
                    found.add(action[kind]["path"])
    return found
