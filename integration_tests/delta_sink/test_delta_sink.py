"""`delta-eos` behaviour beyond crashes: bad input at query start, schema evolution, modes,
and a concurrent writer on the same table."""

from __future__ import annotations

import os
import threading

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from integration_tests.support.delta_oracle import assert_exactly_once, orphan_files, txn_versions
from integration_tests.support.kafka_data import create_topic, produce, unique_topic
from integration_tests.support.streaming import earliest_stream


@pytest.fixture
def source(spark, bootstrap):
    topic = unique_topic("dsink")
    create_topic(bootstrap, topic, 2)
    expected = produce(bootstrap, topic, 2, 40)

    def frame(max_per_trigger: str = "30"):
        return earliest_stream(spark, bootstrap, topic, max_per_trigger).selectExpr(
            "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "partition", "offset"
        )

    return frame, expected


def _run(df, tmp_path, name="ckpt", **options):
    writer = df.writeStream.format("delta-eos").option(
        "checkpointLocation", str(tmp_path / name)
    )
    for k, v in options.items():
        writer = writer.option(k, v)
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination(300)
    return query


@pytest.mark.quick  # the quick lane's end-to-end smoke of this format
def test_appends_exactly_once_across_batches(source, tmp_path):
    frame, expected = source
    table = str(tmp_path / "t")
    q = _run(frame(), tmp_path, path=table, partitionBy="partition")
    assert q.exception() is None
    assert_exactly_once(table, expected)
    (version,) = txn_versions(table).values()
    assert version == q.lastProgress["batchId"]
    assert DeltaTable(table).metadata().partition_columns == ["partition"]
    assert orphan_files(table) == []


def test_missing_path_fails_at_query_start(source, tmp_path):
    frame, _ = source
    with pytest.raises(Exception, match="Option 'path'"):
        _run(frame(), tmp_path)


def test_partition_by_unknown_column(source, tmp_path):
    frame, _ = source
    with pytest.raises(Exception, match="Option 'partitionBy'.*nosuch"):
        _run(frame(), tmp_path, path=str(tmp_path / "t"), partitionBy="nosuch")


def test_bad_delivery_guarantee(source, tmp_path):
    frame, _ = source
    with pytest.raises(Exception, match="Option 'deliveryGuarantee'.*exactly-once, at-least-once, none"):
        _run(frame(), tmp_path, path=str(tmp_path / "t"), deliveryGuarantee="twice")


def test_schema_change_needs_merge_schema(source, tmp_path):
    frame, expected = source
    table = str(tmp_path / "t")
    assert _run(frame().drop("value"), tmp_path, name="c1", path=table).exception() is None
    with pytest.raises(Exception, match="Option 'mergeSchema'.*value"):
        _run(frame(), tmp_path, name="c2", path=table)
    q = _run(frame(), tmp_path, name="c3", path=table, mergeSchema="true")
    assert q.exception() is None
    t = DeltaTable(table).to_pyarrow_table()
    assert "value" in t.column_names
    assert t.num_rows == 2 * len(expected)  # two queries, two checkpoints: two copies


def test_complete_mode_is_refused(spark, source, tmp_path):
    frame, _ = source
    counts = frame().groupBy("partition").count()
    query = (
        counts.writeStream.format("delta-eos").outputMode("complete")
        .option("path", str(tmp_path / "t")).option("checkpointLocation", str(tmp_path / "c"))
        .trigger(availableNow=True).start()
    )
    with pytest.raises(Exception, match="append output mode only"):
        query.awaitTermination(300)


def test_at_least_once_mode_commits_from_tasks(source, tmp_path):
    frame, expected = source
    table = str(tmp_path / "t")
    q = _run(frame(), tmp_path, path=table, deliveryGuarantee="at-least-once")
    assert q.exception() is None
    assert_exactly_once(table, expected)  # no failure happened, so no duplicate either
    assert not (tmp_path / "ckpt" / "eos-sink").exists()  # no decision log in this mode


def test_concurrent_appends_by_another_writer_are_not_lost(source, tmp_path):
    frame, expected = source
    table = str(tmp_path / "t")
    seed = pa.table({"key": ["seed"], "value": ["seed"], "partition": pa.array([-1], pa.int32()),
                     "offset": pa.array([-1], pa.int64())})
    write_deltalake(table, seed)
    stop = threading.Event()
    other_rows: list[int] = []

    def other_writer():
        i = 0
        while not stop.is_set():
            row = pa.table({"key": [f"other-{i}"], "value": ["x"],
                            "partition": pa.array([-2], pa.int32()),
                            "offset": pa.array([i], pa.int64())})
            write_deltalake(table, row, mode="append")
            other_rows.append(i)
            i += 1

    t = threading.Thread(target=other_writer)
    t.start()
    try:
        q = _run(frame("10"), tmp_path, path=table)
    finally:
        stop.set()
        t.join()
    assert q.exception() is None
    everything = DeltaTable(table).to_pyarrow_table().to_pylist()
    ours = [r for r in everything if r["partition"] >= 0]
    theirs = sorted(r["offset"] for r in everything if r["partition"] == -2)
    assert theirs == other_rows  # the other writer lost nothing
    assert len(other_rows) > 0
    got = sorted((r["partition"], r["offset"]) for r in ours)
    assert got == sorted((r.partition, r.offset) for r in expected)


# -- a table gone or replaced under a stopped query --------------------------------------------


def _refused_restart(spark, bootstrap, topic, tmp_path, table) -> str:
    """New rows, and the query restarted on its checkpoint: the failure's message."""
    produce(bootstrap, topic, 2, 20, start_index=1000)
    df = earliest_stream(spark, bootstrap, topic, "20").selectExpr(
        "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "partition", "offset")
    with pytest.raises(Exception) as failure:
        _run(df, tmp_path, path=table)
    return str(failure.value)


@pytest.fixture
def stopped_query(spark, bootstrap, tmp_path):
    """A delta-eos query that committed batches 0-1 into its table, then stopped."""
    topic = unique_topic("dgone")
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, 2, 20)
    table = str(tmp_path / "t")
    df = earliest_stream(spark, bootstrap, topic, "20").selectExpr(
        "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "partition", "offset")
    q = _run(df, tmp_path, path=table)
    assert q.exception() is None and q.lastProgress["batchId"] >= 1
    return topic, table, q.lastProgress["batchId"]


def test_a_table_deleted_while_its_query_was_stopped_is_refused(spark, bootstrap, tmp_path,
                                                                stopped_query):
    """The restarted query must not create a new table holding only the new rows: the checkpoint
    knows batches were committed into the table. It fails naming the table, the last batch and
    the ways out; with allowNewTable=true it starts a new table."""
    import shutil

    topic, table, last = stopped_query
    shutil.rmtree(table)
    message = _refused_restart(spark, bootstrap, topic, tmp_path, table)
    assert table in message and "allowNewTable" in message, message
    assert f"batch {last}" in message and "deleted" in message, message
    assert not os.path.exists(table), "the table was created again"
    q = _run(earliest_stream(spark, bootstrap, topic, "20").selectExpr(
        "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "partition", "offset"),
        tmp_path, path=table, allowNewTable="true")
    assert q.exception() is None
    assert DeltaTable(table).to_pyarrow_table().num_rows == 40  # the new rows only


def test_a_table_replaced_by_another_is_refused(spark, bootstrap, tmp_path, stopped_query):
    import shutil

    topic, table, last = stopped_query
    shutil.rmtree(table)
    write_deltalake(table, pa.table({"key": ["x"], "value": ["y"],  # the stream's schema
                                     "partition": pa.array([0], pa.int32()), "offset": [0]}))
    message = _refused_restart(spark, bootstrap, topic, tmp_path, table)
    assert table in message and "replaced" in message and "allowNewTable" in message, message
    assert DeltaTable(table).to_pyarrow_table().num_rows == 1  # nothing written into it
