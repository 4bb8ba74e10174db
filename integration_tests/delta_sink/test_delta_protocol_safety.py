"""`delta-eos` refuses what it cannot honour, end to end on real Spark: a table with a CHECK
constraint fails the query before any batch, and a null in a NOT NULL column fails the batch
that carries it, with nothing of that batch committed. Two streaming queries in all.

The stream is a JSON file source (no broker needed): each file is one micro-batch
(maxFilesPerTrigger=1), so which batch holds the null is known."""

from __future__ import annotations

import json
import os
import time

import pyarrow as pa
import pytest
from deltalake import DeltaTable, Field, Schema, write_deltalake

from integration_tests.support.delta_oracle import orphan_files


def _files(directory, *batches: list[dict]) -> str:
    """One JSON-lines file per batch, oldest first (the file source orders by mtime)."""
    os.makedirs(directory)
    now = time.time() - 100
    for i, rows in enumerate(batches):
        name = os.path.join(directory, f"part-{i}.json")
        with open(name, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        os.utime(name, (now + i, now + i))
    return str(directory)


def _run(spark, source: str, table: str, checkpoint: str):
    frame = (
        spark.readStream.schema("id BIGINT, v STRING").option("maxFilesPerTrigger", "1")
        .json(source)
    )
    query = (
        frame.writeStream.format("delta-eos").option("path", table)
        .option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    )
    with pytest.raises(Exception) as caught:
        query.awaitTermination(300)
    return str(caught.value)


def _data_files(table: str) -> list[str]:
    return sorted(
        os.path.join(d, n) for d, _, names in os.walk(table) if "_delta_log" not in d
        for n in names if n.endswith(".parquet")
    )


def test_check_constraint_fails_the_query_at_start(spark, tmp_path):
    table = str(tmp_path / "t")
    DeltaTable.create(table, Schema([Field("id", "long"), Field("v", "string")]))
    DeltaTable(table).alter.add_constraint({"id_positive": "id > 0"})
    version = DeltaTable(table).version()
    source = _files(tmp_path / "in", [{"id": 1, "v": "a"}, {"id": -1, "v": "b"}])

    message = _run(spark, source, table, str(tmp_path / "ckpt"))

    assert "id_positive" in message and "id > 0" in message and "CHECK constraint" in message
    after = DeltaTable(table)
    assert after.version() == version
    assert after.get_add_actions(flatten=True).num_rows == 0
    assert _data_files(table) == []  # refused before any task ran


def test_null_in_not_null_column_fails_its_batch_with_nothing_committed(spark, tmp_path):
    table = str(tmp_path / "t")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
    DeltaTable.create(table, Schema.from_arrow(schema))
    write_deltalake(table, pa.table({"id": [100], "v": ["seed"]}, schema=schema), mode="append")
    source = _files(
        tmp_path / "in",
        [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}],  # batch 0: clean, committed
        [{"id": 3, "v": "c"}, {"id": None, "v": "d"}],  # batch 1: a null id
    )

    message = _run(spark, source, table, str(tmp_path / "ckpt"))

    assert "NOT NULL" in message and "'id'" in message and "micro-batch 1" in message
    after = DeltaTable(table)
    assert after.version() == 2  # create, seed, batch 0; batch 1 committed nothing
    assert after.count() == 3
    assert sorted(after.to_pyarrow_table()["id"].to_pylist()) == [1, 2, 100]
    assert orphan_files(table) == []  # refused before its file was written
