"""The Delta table as of now, kept per process: loaded once, then brought up to date.

Each process keeps the table it loaded and brings it up to date with the commits since
(`update_incremental`: a listing after the version it holds), instead of loading it from its
checkpoint at each step of each batch (open, isCommitted, commit: three loads a batch, each
reading a checkpoint that grows with the table's files). A kept table is trusted only while the
commit file of its version is the one it read: a table deleted (or deleted and created again)
under the query is loaded afresh, never extended from a version that is gone.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pyarrow.fs as pafs

from connectors.core.paths import resolve_location
from sinks.delta.options import DeltaOptions

if TYPE_CHECKING:
    from deltalake import DeltaTable

log = logging.getLogger("kafka_eos.sink.delta")

#: The table each process loaded, per location, appId and storage options, with the mark of
#: the commit file of its version.
_TABLES: dict[tuple, tuple[DeltaTable, tuple | None]] = {}


def table_location(options: DeltaOptions) -> tuple[pafs.FileSystem, str]:
    """The table's filesystem and root path, from its path and storage options."""
    loc = resolve_location("path", options.path, options.storage_options)
    return loc.fs, loc.path


def cached_table(options: DeltaOptions, describe: str) -> DeltaTable | None:
    """The table as of now; None while it does not exist."""
    key = (options.path, options.app_id, tuple(sorted(options.storage_options.items())))
    kept = _TABLES.get(key)
    if kept is not None:
        table, mark = kept
        fs, root = table_location(options)
        if mark is not None and _commit_mark(fs, root, table.version()) == mark:
            try:
                held = table.version()
                table.update_incremental()
                if table.version() != held:  # the same version keeps its mark
                    _TABLES[key] = (table, _commit_mark(fs, root, table.version()))
                return table
            except Exception as e:  # unreadable now: load it afresh
                log.info("%s: reloading the table (%s)", describe, e)
        _TABLES.pop(key, None)
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(options.path, storage_options=options.storage_options)
    except TableNotFoundError:
        return None
    fs, root = table_location(options)
    _TABLES[key] = (table, _commit_mark(fs, root, table.version()))
    return table


def _commit_mark(fs: pafs.FileSystem, root: str, version: int) -> tuple | None:
    """What identifies one commit file (size and modification time): None if it is gone."""
    info = fs.get_file_info(f"{root}/_delta_log/{version:020d}.json")
    if info.type == pafs.FileType.NotFound:
        return None
    return (info.size, info.mtime_ns)
