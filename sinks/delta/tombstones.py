"""Tombstones of upsert mode: (key, sequence) of deleted keys, kept for `tombstoneRetention`.

A delete removes the row, and with it the sequence the MERGE would compare a late change
with: without a record of the delete, an older update arriving after it would bring the row
back. So each batch's winning deletes are kept as tombstones, as Databricks' APPLY CHANGES
does, and an update whose key has a tombstone with a sequence at least its own is dropped
(sinks/delta/fold.py, drop_tombstoned). They are cleaned up once older than the retention
(default 1 day): a change later than that is applied as if the key had never been deleted.

Where: a Delta table of its own beside the data, `<table>/_eos_tombstones/<writer tag>`. A
directory starting with `_` is ignored by Delta readers and by VACUUM (delta-spark and
delta-rs leave hidden directories alone), and the tag (the appId's hash, as in the data files'
names) keeps two writers of one table apart. Its commits carry the batch's `txn` action for
the sink's appId, as the data's MERGE does, so a batch's tombstones are recorded once however
often its commit is retried; they are committed before the data's MERGE, which is the
commit that makes the batch count as written (`isCommitted`), so a recovered batch finds its
tombstones in place.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from sinks.delta.fold import TOMBSTONE_SEQUENCE

if TYPE_CHECKING:
    from deltalake import DeltaTable

log = logging.getLogger("kafka_eos.sink.delta")

#: When the tombstone was recorded (the driver's clock, ms since the epoch): retention counts
#: from it.
DELETED_AT = "__eos_deleted_at_ms"
DIRECTORY = "_eos_tombstones"


def location(table_path: str, file_tag: str) -> str:
    """The tombstone table of one writer (appId) of the table at `table_path`."""
    return f"{table_path.rstrip('/')}/{DIRECTORY}/{file_tag}"


@dataclass
class Tombstones:
    path: str
    keys: tuple[str, ...]
    app_id: str
    storage_options: dict[str, str] = field(default_factory=dict, repr=False)

    def table(self) -> DeltaTable | None:
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        try:
            return DeltaTable(self.path, storage_options=self.storage_options or None)
        except TableNotFoundError:
            return None

    def recorded(self, batch_id: int) -> bool:
        """Whether batch `batch_id`'s tombstones (if it had any) are in."""
        table = self.table()
        version = None if table is None else table.transaction_version(self.app_id)
        return version is not None and version >= batch_id

    def read_for(self, changes: pa.Table) -> pa.Table:
        """The tombstones of the keys in `changes` (keys, TOMBSTONE_SEQUENCE). Read whole and
        filtered in memory: deltalake 1.6.6's pyarrow dataset fails on a filter over a string
        column of files delta-rs wrote (string against string_view statistics); a day of
        tombstones is a key and two numbers per delete."""
        import pyarrow.compute as pc

        table = self.table()
        if table is None or changes.num_rows == 0:
            return pa.table({})
        first = self.keys[0]
        found = table.to_pyarrow_table(columns=[*self.keys, TOMBSTONE_SEQUENCE])
        wanted = pc.unique(changes.column(first).combine_chunks())
        column = found.column(first)
        return found.filter(pc.is_in(column, value_set=wanted.cast(column.type)))

    def record(self, batch_id: int, tombstones: pa.Table, now_ms: int,
               batch_metadata: dict[str, str]) -> None:
        """Keep the batch's deletes: a key's tombstone takes the higher sequence. One commit,
        carrying Transaction(appId, batch_id): a repeat finds it and does nothing."""
        from deltalake import CommitProperties, Transaction, write_deltalake

        if tombstones.num_rows == 0:
            return
        table = self.table()
        if table is not None:
            version = table.transaction_version(self.app_id)
            if version is not None and version >= batch_id:
                return
        data = tombstones.append_column(DELETED_AT, pa.array([now_ms] * tombstones.num_rows,
                                                             pa.int64()))
        props = CommitProperties(app_transactions=[Transaction(self.app_id, batch_id)],
                                 custom_metadata=batch_metadata)
        if table is None:
            write_deltalake(self.path, data, mode="append", commit_properties=props,
                            storage_options=self.storage_options or None)
            return
        on = " AND ".join(f"target.{quote(k)} = source.{quote(k)}" for k in self.keys)
        newer = f"source.{quote(TOMBSTONE_SEQUENCE)} > target.{quote(TOMBSTONE_SEQUENCE)}"
        (table.merge(data, on, source_alias="source", target_alias="target",
                     commit_properties=props)
         .when_matched_update({quote(c): f"source.{quote(c)}" for c in (TOMBSTONE_SEQUENCE, DELETED_AT)},
                              predicate=newer)
         .when_not_matched_insert({quote(c): f"source.{quote(c)}" for c in data.column_names})
         .execute())

    def expire(self, now_ms: int, retention_ms: int) -> int:
        """Delete the tombstones recorded more than `retention_ms` ago; how many went."""
        table = self.table()
        if table is None:
            return 0
        cutoff = now_ms - retention_ms
        metrics = table.delete(f"{quote(DELETED_AT)} < {cutoff}")
        removed = int(metrics.get("num_deleted_rows") or 0)
        if removed:
            log.info("tombstones at %s: %d expired (older than %d ms)", self.path, removed,
                     retention_ms)
        return removed


def quote(column: str) -> str:
    """A column name as DataFusion's SQL reads it exactly (unquoted names are lower-cased)."""
    return '"' + column.replace('"', '""') + '"'

