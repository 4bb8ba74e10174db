"""Which Delta tables `delta-eos` may append to: the table's protocol and metadata are checked
at query start, and a feature the sink's own Parquet files and add actions do not honour is
refused, naming it. NOT NULL columns are enforced before a file is written."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from deltalake import DeltaTable


def check_writable(table: DeltaTable, path: str) -> None:
    """Raise OptionError("path", ...) naming the first table feature the sink cannot honour."""
    # TODO(protocol helper)


def not_null_columns(table: DeltaTable) -> tuple[str, ...]:
    """The table's columns declared NOT NULL (non-nullable top-level fields)."""
    return ()  # TODO(protocol helper)


def check_not_null(
    data: pa.RecordBatch | pa.Table, columns: Sequence[str], batch_id: int, partition_id: int
) -> None:
    """Raise before anything is written when a NOT NULL column holds a null."""
    # TODO(protocol helper)
