"""A 1,000-partition topic on the suite's broker: behaviour, not timings. Streaming
queries read every record exactly once in batches of packed tasks (at most
targetTasksPerBatch, or what maxPartitionsPerTask asks for), the source's metrics line stays
small, the Delta sink writes a file per task rather than per partition, and the driver read
mode and batch reads work at that width.

The topic is created once for the module, with 4 records per partition (4,000), and deleted
at its end: the broker is shared with the rest of the suite."""

from __future__ import annotations

import json
import os

import pytest
from confluent_kafka.admin import AdminClient
from deltalake import DeltaTable

from integration_tests.support.delta_oracle import assert_exactly_once
from integration_tests.support.kafka_data import create_topic, produce, unique_topic
from integration_tests.support.streaming import all_records, parquet_batch_writer, read_batches, run_to_end
from sources.batch_metrics import SOURCE_METRICS_ENV
from sources.task_packing import default_target_tasks

PARTITIONS, PER_PARTITION = 1000, 4
#: The INFO line (the summary) and the metrics file's line (with the bounded detail), at most.
SUMMARY_BYTES, FILE_LINE_BYTES = 700, 2500


@pytest.fixture(scope="module")
def wide(bootstrap):
    topic = unique_topic("wide")
    create_topic(bootstrap, topic, PARTITIONS)
    expected = produce(bootstrap, topic, PARTITIONS, PER_PARTITION)
    yield topic, expected
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the result
    admin.delete_topics([topic])[topic].result(60)


def _stream(spark, bootstrap: str, topic: str, **options: str):
    return (spark.readStream.format("kafka-eos")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .options(**options)
            .load())


def _metrics_lines(topic: str, since: int) -> list[dict]:
    """The source's metrics lines of `topic` appended to the run's metrics file after byte
    `since`, with the length of each."""
    path = os.environ[SOURCE_METRICS_ENV]
    with open(path) as f:
        f.seek(since)
        docs = [json.loads(line) for line in f if line.strip()]
    return [d for d in docs if d["source"] == f"kafka-eos subscribe=['{topic}']"]


def _file_size() -> int:
    path = os.environ[SOURCE_METRICS_ENV]
    return os.path.getsize(path) if os.path.exists(path) else 0


#: The keys of the metrics file's line that are the bounded detail, not the INFO summary.
DETAIL_KEYS = ("slowest", "most_behind", "partitions_not_listed")


def test_every_record_once_in_few_tasks_with_a_small_metrics_line(spark, bootstrap, wide,
                                                                  tmp_path):
    topic, expected = wide
    since = _file_size()
    out = str(tmp_path / "out")
    query = (_stream(spark, bootstrap, topic, maxOffsetsPerTrigger="1000")
             .writeStream.foreachBatch(parquet_batch_writer(out))
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    run_to_end(query, 600)

    assert all_records(out) == expected  # every record, once
    batches = read_batches(out)
    assert sorted(batches) == [0, 1, 2, 3]  # 1,000 offsets a batch: one per partition
    lines = {line["batch"]: line for line in _metrics_lines(topic, since)}
    assert sorted(lines) == [0, 1, 2, 3]
    for batch_id, line in lines.items():
        assert line["rows"] == len(batches[batch_id]) == 1000
        assert line["partitions_read"] == PARTITIONS
        # 1,000 ranges packed, the tasks sized by the batch's records: 1, not 1,000 tasks
        assert line["tasks"] == default_target_tasks(line["offsets"]) == 1
        assert line["tasks_without_report"] == 0
        summary = {k: v for k, v in line.items() if k not in DETAIL_KEYS}
        assert len(json.dumps(summary)) < SUMMARY_BYTES
        assert len(json.dumps(line)) < FILE_LINE_BYTES
        assert len(line["slowest"]) == 10 and line["partitions_not_listed"] == PARTITIONS - 10
    assert [lines[b]["maxOffsetsBehindLatest"] for b in range(4)] == [3, 2, 1, 0]


def test_delta_sink_writes_a_file_per_task_not_per_partition(spark, bootstrap, wide, tmp_path):
    """maxPartitionsPerTask=250 with targetTasksPerBatch=2: 4 tasks a batch (the bound wins),
    so each Delta commit adds at most 4 files for 1,000 partitions."""
    topic, expected = wide
    since = _file_size()
    table = str(tmp_path / "table")
    query = (_stream(spark, bootstrap, topic, maxOffsetsPerTrigger="2000",
                     targetTasksPerBatch="2", maxPartitionsPerTask="250")
             .selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value",
                         "partition", "offset")
             .writeStream.format("delta-eos").option("path", table)
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    run_to_end(query, 600)

    assert_exactly_once(table, expected)
    lines = _metrics_lines(topic, since)
    assert [line["tasks"] for line in lines] == [4, 4]
    assert len(DeltaTable(table).file_uris()) <= 2 * 4  # two commits of at most a file per task


def test_driver_read_mode_and_a_batch_read_at_a_thousand_partitions(spark, bootstrap, wide,
                                                                    tmp_path):
    topic, expected = wide
    out = str(tmp_path / "out")
    query = (_stream(spark, bootstrap, topic, readMode="driver")
             .writeStream.foreachBatch(parquet_batch_writer(out))
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(once=True).start())
    run_to_end(query, 600)
    assert all_records(out) == expected  # one batch: maxOffsetsPerTrigger's default is 100,000

    df = (spark.read.format("kafka-eos").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic).load())
    assert df.rdd.getNumPartitions() == default_target_tasks(len(expected))
    assert df.count() == len(expected)
