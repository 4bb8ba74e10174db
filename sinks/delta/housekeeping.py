"""`delta-eos`'s housekeeping between batches, none of it part of the commit protocol:
compaction (compactEvery) and the sweep of orphan data files (orphanFileRetention).

Both leave the sink's bookkeeping alone: a compaction's commit changes no data and carries no
txn action; the sweep deletes only files of this sink that no readable version of the table
references, never inferred from their names alone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pyarrow.fs as pafs

from sinks.delta.options import DeltaOptions

if TYPE_CHECKING:
    from deltalake import DeltaTable

#: Runs one step of the driver's (what, step), retried while the store fails transiently.
Retried = Callable[[str, Callable[[], Any]], Any]

log = logging.getLogger("kafka_eos.sink.delta")

#: In a compaction's commit info: the appId of the sink that compacted.
COMPACTION_METADATA_KEY = "kafka_eos.compaction"
#: When this worker process last cleaned up each table (see sweep_orphans).
_LAST_CLEANUP: dict[str, float] = {}
#: The table version of each table's last compaction this driver knows of (maybe_compact).
_LAST_COMPACTION: dict[str, int] = {}


def maybe_compact(table: DeltaTable, options: DeltaOptions, describe: str) -> None:
    """compactEvery=N: once the table has N commits since its last compaction, bin-pack
    small files with delta-rs's optimize before the batch's tasks run. Its commit changes
    no data (dataChange=false) and carries no txn action, so the sink's bookkeeping is
    untouched; one that fails (e.g. a conflict with another writer) is retried later."""
    n = options.compact_every
    if not n:
        return
    last = _LAST_COMPACTION.get(options.path)
    if last is None:  # once per driver process: the last compaction in the table's history
        last = next((h["version"] for h in table.history(limit=n)
                     if h.get("operation") == "OPTIMIZE"), max(table.version() - n, -1))
    if table.version() - last < n:
        _LAST_COMPACTION[options.path] = last
        return
    from deltalake import CommitProperties

    started = time.perf_counter()
    try:
        metrics = table.optimize.compact(
            commit_properties=CommitProperties(
                custom_metadata={COMPACTION_METADATA_KEY: options.app_id}
            ),
        )
    except Exception as e:  # data-change-free: the batch goes on, a later one retries
        log.warning("%s: compaction failed, retried after %d more commits: %s", describe, n, e)
        _LAST_COMPACTION[options.path] = table.version()
        return
    table.update_incremental()
    _LAST_COMPACTION[options.path] = table.version()
    log.info("%s: compacted %s file(s) into %s in %.0f ms (version %d)", describe,
             metrics.get("numFilesRemoved"), metrics.get("numFilesAdded"),
             (time.perf_counter() - started) * 1000, table.version())


def sweep_orphans(options: DeltaOptions, location: tuple[pafs.FileSystem, str],
                  table: Callable[[], DeltaTable | None], retried: Retried,
                  delete: Callable[[pafs.FileSystem, str], None], describe: str) -> None:
    """Delete the sink's data files that no readable version of the table references and
    that are older than orphanFileRetention: written by tasks killed before their handle
    was logged, or by failed and superseded attempts. At most once per half retention."""
    now_ms = time.time() * 1000
    last = _LAST_CLEANUP.get(options.path)
    if last is not None and now_ms - last < options.orphan_retention_ms / 2:
        return  # orphans are invisible to readers: a clean-up per half retention is enough
    fs, root = location
    prefix = f"part-eos-{options.file_tag}-"
    candidates = [
        info for info in retried("listing the table's files for orphans",
                                 lambda: list(data_files(fs, root)))
        if info.base_name.startswith(prefix)
        and now_ms - _mtime_ms(info, now_ms) >= options.orphan_retention_ms
    ]
    if candidates:
        from sinks.delta.referenced_files import referenced_files

        def referenced_now() -> set[str]:
            now = table()
            return set() if now is None else referenced_files(now, fs, root)

        referenced = retried("reading the files the table references", referenced_now)
        for info in candidates:
            relative = info.path[len(root):].lstrip("/")
            if relative not in referenced:
                log.info("%s: removing orphan file %s", describe, info.path)
                delete(fs, info.path)
    # Only once the sweep is through: one that failed is not skipped for half a retention.
    _LAST_CLEANUP[options.path] = now_ms


def data_files(fs: pafs.FileSystem, root: str) -> Iterator[pafs.FileInfo]:
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


def _mtime_ms(info: pafs.FileInfo, default: float) -> float:
    return info.mtime_ns / 1e6 if info.mtime_ns is not None else default
