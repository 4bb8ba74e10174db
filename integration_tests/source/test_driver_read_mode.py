"""`readMode=driver` (sources/driver_reader.py) in a real query on the real broker: every record
exactly once, in batches bounded by maxOffsetsPerTrigger; every column (timestamps, headers)
as the task-read path gives it; and a batch logged but not committed before a restart is read
again from its logged offsets, row for row."""

from __future__ import annotations

import os
import shutil

import pyarrow.parquet as pq

from integration_tests.support.kafka_data import create_topic, produce, unique_topic
from integration_tests.support.streaming import stream_options, wait_for

COLUMNS = ["topic", "partition", "offset", "key", "value", "timestamp", "timestampType", "headers"]


def _writer(out_dir: str):
    """Each batch's rows, every column, to out/batch=<id> (a replay overwrites its batch)."""

    def write(batch_df, batch_id: int) -> None:
        batch_df.select(*COLUMNS).write.mode("overwrite").parquet(
            os.path.join(out_dir, f"batch={batch_id:06d}"))

    return write


def _batches(out_dir: str) -> dict[int, list[dict]]:
    got = {}
    for name in sorted(os.listdir(out_dir)) if os.path.isdir(out_dir) else []:
        path = os.path.join(out_dir, name)
        if name.startswith("batch=") and os.path.exists(os.path.join(path, "_SUCCESS")):
            rows = pq.read_table(path).to_pylist()
            got[int(name.split("=")[1])] = sorted(rows, key=lambda r: (r["partition"], r["offset"]))
    return got


def _start(spark, bootstrap: str, topic: str, out: str, ckpt: str):
    df = (spark.readStream.format("kafka-eos")
          .options(**stream_options(bootstrap, subscribe=topic, startingOffsets="earliest",
                                    readMode="driver", maxOffsetsPerTrigger="40",
                                    includeHeaders="true"))
          .load())
    return (df.writeStream.foreachBatch(_writer(out)).option("checkpointLocation", ckpt)
            .trigger(processingTime="500 milliseconds").start())


def _rows(batches: dict[int, list[dict]]) -> list[dict]:
    return sorted((r for rows in batches.values() for r in rows),
                  key=lambda r: (r["partition"], r["offset"]))


def test_driver_reads_each_record_once_as_tasks_do_and_replays_a_logged_batch(
        spark, bootstrap, tmp_path):
    topic = unique_topic("driverread")
    create_topic(bootstrap, topic, 2)
    expected = produce(bootstrap, topic, 2, 60, headers=True)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")

    query = _start(spark, bootstrap, topic, out, ckpt)
    try:
        wait_for(lambda: len(_rows(_batches(out))) >= len(expected), 180, "every record")
    finally:
        query.stop()
    batches = _batches(out)
    rows = _rows(batches)
    # Exactly once, in bounded batches.
    assert [(r["partition"], r["offset"], r["key"], r["value"]) for r in rows] == sorted(
        (e.partition, e.offset, e.key, e.value) for e in expected)
    assert len(batches) >= 3 and max(len(b) for b in batches.values()) <= 40

    # Every column as a task reads it (a batch read of the same topic).
    by_tasks = (spark.read.format("kafka-eos")
                .options(**stream_options(bootstrap, subscribe=topic, includeHeaders="true"))
                .load().select(*COLUMNS).collect())
    assert rows == sorted((r.asDict(recursive=True) for r in by_tasks),
                          key=lambda r: (r["partition"], r["offset"]))
    assert all(r["headers"] for r in rows) and all(r["timestamp"] for r in rows)

    # The last batch logged but not committed: a restart reads it again from its offsets (a
    # Spark task, readBetweenOffsets), and gets the same rows.
    last = max(batches)
    commit = os.path.join(ckpt, "commits", str(last))
    if os.path.exists(commit):  # absent if the query stopped between the batch and its commit
        os.remove(commit)
    shutil.rmtree(os.path.join(out, f"batch={last:06d}"))
    query = _start(spark, bootstrap, topic, out, ckpt)
    try:
        wait_for(lambda: last in _batches(out), 180, f"batch {last} replayed")
    finally:
        query.stop()
    assert _batches(out)[last] == batches[last]
    assert _rows(_batches(out)) == rows
