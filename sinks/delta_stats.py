"""Per-file statistics for Delta add actions (`numRecords`, `minValues`, `maxValues`,
`nullCount`), read from the Parquet footer the task has just written, so every Delta reader can
skip files. Follows the Delta protocol's "Per-file Statistics" section."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyarrow as pa
import pyarrow.parquet as pq


def file_stats(
    metadata: pq.FileMetaData,
    table_schema: pa.Schema,
    partition_columns: Sequence[str],
    configuration: Mapping[str, str],
) -> str:
    """The add action's `stats` JSON string for one data file.

    `table_schema` is the table's whole schema (partition columns included, in table order);
    the file holds the other columns. `configuration` is the table's (or the table-to-be's)
    properties: `delta.dataSkippingNumIndexedCols` / `delta.dataSkippingStatsColumns`.
    """
    return '{"numRecords":%d}' % metadata.num_rows  # TODO(stats helper): min/max/nullCount
