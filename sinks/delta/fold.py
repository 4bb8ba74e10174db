"""The fold of a batch of changes, in Arrow, before the driver's MERGE applies it.

Per key, the change with the highest sequence wins; on equal sequences a delete wins over an
update (a delete and an update stamped alike most often come from one source transaction that
ended in the delete; and it makes the result independent of the order in which Spark hands
over the batch's partitions). Two updates with the same key and sequence are ordered by
nothing: give `sequenceBy` a value unique per key (a log position, an LSN, a Kafka offset).

Across batches the same rule is the MERGE's (sinks/delta/upsert.py): a change replaces the
stored row when its sequence is at least the row's, and a delete's tombstone keeps an update
with a sequence up to its own from bringing the row back (`drop_tombstoned`).

deletes are a boolean column, DELETE_COLUMN, computed by the tasks (applyAsDeletes); the
driver's MERGE reads it and never writes it to the table.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

#: The staged files' column saying whether the change is a delete (never written to the table).
DELETE_COLUMN = "__eos_delete"
#: The tombstones' sequence column (beside the key columns, under their own names).
TOMBSTONE_SEQUENCE = "__eos_sequence"
_ROW = "__eos_row"


def latest_per_key(changes: pa.Table, keys: Sequence[str], sequence: str) -> pa.Table:
    """One row per key: its change with the highest (sequence, delete), in `changes`' schema."""
    import pyarrow.compute as pc

    if changes.num_rows == 0:
        return changes
    rows = changes.select([*keys, sequence, DELETE_COLUMN]).append_column(
        _ROW, pa.array(range(changes.num_rows), pa.int64()))
    ordered = rows.sort_by([(sequence, "descending"), (DELETE_COLUMN, "descending")])
    # Ordered aggregation (use_threads=False): "first" is the first row of each key in that
    # order, the winner.
    winners = ordered.group_by(list(keys), use_threads=False).aggregate([(_ROW, "first")])
    picked = pc.sort_indices(winners.column(f"{_ROW}_first"))
    return changes.take(pc.take(winners.column(f"{_ROW}_first"), picked))


def drop_tombstoned(winners: pa.Table, tombstones: pa.Table, keys: Sequence[str],
                    sequence: str) -> pa.Table:
    """Updates whose key was deleted with a sequence at least theirs are dropped: an older
    change arriving after a delete must not bring the row back. Deletes are kept (the MERGE
    compares them with the stored row). `tombstones`: key columns and TOMBSTONE_SEQUENCE."""
    import pyarrow.compute as pc

    if winners.num_rows == 0 or tombstones.num_rows == 0:
        return winners
    tomb = tombstones.select([*keys, TOMBSTONE_SEQUENCE])
    # The keys' types as the winners have them (a table created from an older stream may
    # hold a large_string where the stream has a string).
    tomb = tomb.cast(pa.schema([*(winners.schema.field(k) for k in keys),
                                tomb.schema.field(TOMBSTONE_SEQUENCE)]))
    numbered = winners.append_column(_ROW, pa.array(range(winners.num_rows), pa.int64()))
    joined = numbered.select([*keys, sequence, DELETE_COLUMN, _ROW]).join(
        tomb, keys=list(keys), join_type="inner")
    seq = joined.column(sequence)
    tomb_seq = joined.column(TOMBSTONE_SEQUENCE).cast(seq.type)
    blocked = pc.and_(pc.invert(joined.column(DELETE_COLUMN)), pc.greater_equal(tomb_seq, seq))
    dropped = joined.filter(blocked).column(_ROW)
    if len(dropped) == 0:
        return winners
    keep = pc.invert(pc.is_in(numbered.column(_ROW), value_set=dropped.combine_chunks()))
    return winners.filter(keep)


def tombstones_of(winners: pa.Table, keys: Sequence[str], sequence: str) -> pa.Table:
    """The batch's deletes as tombstones: key columns and TOMBSTONE_SEQUENCE."""
    deletes = winners.filter(winners.column(DELETE_COLUMN))
    return pa.table([*(deletes.column(k) for k in keys), deletes.column(sequence)],
                    names=[*keys, TOMBSTONE_SEQUENCE])
