"""delta-eos upsert mode's MERGE skips the files of the table that cannot hold a batch's keys.

The driver hands delta-rs the batch's winning changes as an Arrow table already in memory.
delta-rs's default streamed execution of a MERGE (streamed_exec=True) gains nothing over such a
source and costs the early pruning that delta-rs derives from the source's key range (and, for a
table partitioned by a key column, its partition values): every file of the table was scanned,
for a batch that touches one. Judged from the MERGE's own commit metrics in the Delta log."""

from __future__ import annotations

import json
import os

import pyarrow as pa
from deltalake import write_deltalake

from integration_tests.support.task_context import task  # noqa: F401  (a fixture)
from tests.test_delta_upsert import Query, fold

FILES, ROWS_PER_FILE = 4, 1000


def _merge_metrics(table: str) -> dict:
    """operationMetrics of the table's last MERGE commit."""
    log_dir = os.path.join(table, "_delta_log")
    found = None
    for name in sorted(n for n in os.listdir(log_dir) if n.endswith(".json")):
        with open(os.path.join(log_dir, name)) as f:
            for action in map(json.loads, f):
                info = action.get("commitInfo")
                if info and info.get("operation") == "MERGE":
                    found = info["operationMetrics"]
    assert found is not None, "no MERGE commit in the table's log"
    return found


def _table_of_ranges(path: str) -> list[tuple]:
    """FILES files, each holding one range of ids (as a table loaded in key order has them)."""
    rows = []
    for i in range(FILES):
        ids = list(range(i * ROWS_PER_FILE, (i + 1) * ROWS_PER_FILE))
        write_deltalake(path, pa.table({"id": pa.array(ids, pa.int64()),
                                        "seq": pa.array([0] * len(ids), pa.int64()),
                                        "v": pa.array([f"v{k}" for k in ids])}), mode="append")
        rows += [(k, 0, "u", f"v{k}") for k in ids]
    return rows


def test_a_batch_on_one_files_keys_scans_that_file_only(tmp_path, task):
    q = Query(tmp_path, task)
    base = _table_of_ranges(q.table)
    last = (FILES - 1) * ROWS_PER_FILE
    changes = [[(last + 1, 1, "u", "new"), (last + 2, 1, "d", None)],
               [(last + 3, 2, "u", "newer"), (last + 3, 1, "u", "older")]]
    q.run_batch(0, changes)
    assert q.rows() == fold(base + [c for p in changes for c in p])
    metrics = _merge_metrics(q.table)
    assert (metrics["num_target_files_scanned"], metrics["num_target_files_skipped_during_scan"],
            metrics["num_target_files_removed"]) == (1, FILES - 1, 1), metrics


def test_a_table_partitioned_by_a_key_column_merges_the_batchs_partitions_only(tmp_path, task):
    """mergeKeys=bucket,id on a table partitioned by bucket (a column derived from the key):
    the partitions the batch does not touch are not read."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    q = Query(tmp_path, task, mergeKeys="bucket,id")
    q.schema = StructType([StructField("bucket", LongType()), StructField("id", LongType()),
                           StructField("seq", LongType()), StructField("op", StringType()),
                           StructField("v", StringType())])
    arrow = pa.schema([("bucket", pa.int64()), ("id", pa.int64()), ("seq", pa.int64()),
                       ("op", pa.string()), ("v", pa.string())])
    ids = list(range(400))
    write_deltalake(q.table, pa.table({"bucket": pa.array([k % 4 for k in ids], pa.int64()),
                                       "id": pa.array(ids, pa.int64()),
                                       "seq": pa.array([0] * 400, pa.int64()),
                                       "v": pa.array([f"v{k}" for k in ids])}),
                    partition_by=["bucket"])
    q.run_batch(0, [[(1, 5, 1, "u", "five"), (1, 9, 1, "d", None), (1, 401, 1, "c", "new")]],
                arrow_schema=arrow)
    metrics = _merge_metrics(q.table)
    assert (metrics["num_target_files_scanned"], metrics["num_target_files_skipped_during_scan"]
            ) == (1, 3), metrics
    from deltalake import DeltaTable

    got = {r["id"]: (r["bucket"], r["v"]) for r in DeltaTable(q.table).to_pyarrow_table().to_pylist()}
    assert got[5] == (1, "five") and 9 not in got and got[401] == (1, "new") and len(got) == 400
