"""The source's monitoring, end to end with a real broker and Spark: the opt-in commit of each
completed batch's end offsets to kafka.group.id (lag tools), never used for recovery, and the
per-batch metrics line (rows, read times, offsets behind latest)."""

from __future__ import annotations

import json
import os

import pytest
from confluent_kafka import Consumer, TopicPartition

from integration_tests.support.kafka_data import create_topic, produce, unique_topic
from integration_tests.support.streaming import all_records, parquet_batch_writer, read_batches, run_to_end
from sources.batch_metrics import SOURCE_METRICS_ENV


def _start(spark, bootstrap: str, topic: str, checkpoint: str, out: str, **options: str):
    df = (spark.readStream.format("kafka-eos")
          .option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic)
          .option("startingOffsets", "earliest")
          .options(**options)
          .load())
    return (df.writeStream.foreachBatch(parquet_batch_writer(out))
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start())


def _group_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """What kafka-consumer-groups would show: the group's committed offsets (negative: none)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)],
                                   timeout=10)
        return {tp.partition: tp.offset for tp in found}
    finally:
        consumer.close()


def _commit_group(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()],
                        asynchronous=False)
    finally:
        consumer.close()


def _checkpoint_end(checkpoint: str, topic: str) -> dict[int, int]:
    """The end offsets of the last batch in Spark's offset log."""
    logs = os.path.join(checkpoint, "offsets")
    last = max(int(name) for name in os.listdir(logs) if name.isdigit())
    with open(os.path.join(logs, str(last))) as f:
        source_offsets = json.loads(f.read().splitlines()[-1])
    return {int(p): o for p, o in source_offsets[topic].items()}


def _metrics_lines(topic: str) -> list[dict]:
    path = os.environ[SOURCE_METRICS_ENV]
    if not os.path.exists(path):
        return []
    with open(path) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    return [line for line in lines if line["source"] == f"kafka-eos subscribe=['{topic}']"]


def test_group_offsets_and_metrics_follow_each_batch(spark, bootstrap, tmp_path):
    """commitOffsetsToGroup: after the run, the group holds the checkpoint's last end offsets.
    Each batch's metrics line counts the rows the batch delivered, and the offsets behind
    latest are the backlog maxOffsetsPerTrigger left (the target is fixed at the start)."""
    topic, group = unique_topic("lag"), unique_topic("lag-group")
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, 2, 50)
    checkpoint, out = str(tmp_path / "ckpt"), str(tmp_path / "out")
    query = _start(spark, bootstrap, topic, checkpoint, out, maxOffsetsPerTrigger="40",
                   commitOffsetsToGroup="true", **{"kafka.group.id": group})
    run_to_end(query, 300)

    assert _checkpoint_end(checkpoint, topic) == {0: 50, 1: 50}
    assert _group_offsets(bootstrap, group, topic, 2) == {0: 50, 1: 50}

    batches = read_batches(out)
    lines = {line["batch"]: line for line in _metrics_lines(topic)}
    assert sorted(lines) == sorted(batches) == [0, 1, 2]
    for batch_id, records in batches.items():
        line = lines[batch_id]  # the INFO line's summary, and the detail the file adds
        assert line["rows"] == len(records), line
        # a batch of at most 40 records: one task reading both partitions (sized by records)
        assert line["partitions_read"] == 2 and line["tasks"] == 1
        # both partitions are in the detail (it lists up to 10): their rows add up
        assert sum(p["rows"] for p in line["slowest"].values()) == len(records)
        assert line["partitions_not_listed"] == 0
        assert line["tasks_without_report"] == 0
        assert line["slowest_partition"] == next(iter(line["slowest"]))
        assert line["skew"] >= 1.0
        assert line["committed_to_group"] == group
    # 40 offsets a batch over two partitions of 50: ends at 20, 40, 50 on each.
    behind = {b: (line["avgOffsetsBehindLatest"], line["maxOffsetsBehindLatest"],
                  line["minOffsetsBehindLatest"]) for b, line in lines.items()}
    assert behind == {0: (30.0, 30, 30), 1: (10.0, 10, 10), 2: (0.0, 0, 0)}
    assert lines[0]["most_behind"] == {f"{topic}-0": 30, f"{topic}-1": 30}
    assert lines[2]["most_behind"] == {}


def test_nothing_is_committed_to_the_group_by_default(spark, bootstrap, tmp_path):
    topic, group = unique_topic("nolag"), unique_topic("nolag-group")
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 1, 5)
    query = _start(spark, bootstrap, topic, str(tmp_path / "ckpt"), str(tmp_path / "out"),
                   **{"kafka.group.id": group})
    run_to_end(query, 300)
    assert len(all_records(str(tmp_path / "out"))) == 5
    assert _group_offsets(bootstrap, group, topic, 1)[0] < 0  # OFFSET_INVALID: no commit


def test_commit_to_group_without_a_group_id_fails_at_start(spark, bootstrap):
    with pytest.raises(Exception, match=r"Option 'commitOffsetsToGroup'.*'kafka.group.id'"):
        (spark.readStream.format("kafka-eos")
         .option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", "anything")
         .option("commitOffsetsToGroup", "true")
         .load())


def test_a_restart_resumes_from_the_checkpoint_not_the_group(spark, bootstrap, tmp_path):
    """Group offsets moved behind the checkpoint (and another partition ahead of it) between
    runs change nothing: the restart reads exactly the records after the checkpoint, and then
    the group is put back at the query's position."""
    topic, group = unique_topic("resume"), unique_topic("resume-group")
    create_topic(bootstrap, topic, 2)
    first = produce(bootstrap, topic, 2, 10)
    checkpoint, out = str(tmp_path / "ckpt"), str(tmp_path / "out")
    options = {"commitOffsetsToGroup": "true", "kafka.group.id": group}
    run_to_end(_start(spark, bootstrap, topic, checkpoint, out, **options), 300)
    assert _group_offsets(bootstrap, group, topic, 2) == {0: 10, 1: 10}

    _commit_group(bootstrap, group, topic, {0: 3, 1: 12})  # someone resets the group
    more = produce(bootstrap, topic, 2, 5, start_index=10)
    run_to_end(_start(spark, bootstrap, topic, checkpoint, out, **options), 300)

    assert all_records(out) == sorted(first + more)  # nothing again, nothing skipped
    assert _group_offsets(bootstrap, group, topic, 2) == {0: 15, 1: 15}
