"""Batch reads of known datasets through `kafka-eos`, checked record by record."""

from __future__ import annotations

import json

import pytest

from integration_tests.support.kafka_data import Record, create_topic, produce, unique_topic


def _records(df) -> list[Record]:
    rows = df.select("topic", "partition", "offset", "key", "value").collect()
    return sorted(Record(r.topic, r.partition, r.offset, r.key, r.value) for r in rows)


@pytest.mark.quick  # the quick lane's end-to-end smoke of this format
def test_batch_read_returns_every_record_once(spark, bootstrap):
    topic = unique_topic("batch")
    create_topic(bootstrap, topic, 3)
    expected = produce(bootstrap, topic, 3, 200)
    df = (
        spark.read.format("kafka-eos")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
    )
    assert [f.name for f in df.schema.fields] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType",
    ]
    got = _records(df)
    assert len(got) == len(set(got))
    assert got == expected


def test_headers_timestamps_and_types(spark, bootstrap):
    topic = unique_topic("hdr")
    create_topic(bootstrap, topic, 1)
    expected = produce(bootstrap, topic, 1, 5, headers=True)
    df = (
        spark.read.format("kafka-eos")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .load()
    )
    assert dict(df.dtypes) == {
        "key": "binary", "value": "binary", "topic": "string", "partition": "int",
        "offset": "bigint", "timestamp": "timestamp", "timestampType": "int",
        "headers": "array<struct<key:string,value:binary>>",
    }
    rows = sorted(df.collect(), key=lambda r: r.offset)
    assert [r.offset for r in rows] == [r.offset for r in expected]
    for row, rec in zip(rows, expected):
        idx = rec.value.decode().split("-")[1]
        assert [(h.key, h.value) for h in row.headers] == [("idx", idx.encode()), ("p", b"0")]
        assert row.timestampType == 0  # CreateTime
        assert row.timestamp is not None


def test_specific_offsets_and_assign(spark, bootstrap):
    topic = unique_topic("range")
    create_topic(bootstrap, topic, 2)
    expected = produce(bootstrap, topic, 2, 50)
    df = (
        spark.read.format("kafka-eos")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("assign", json.dumps({topic: [0, 1]}))
        .option("startingOffsets", json.dumps({topic: {"0": 10, "1": -2}}))
        .option("endingOffsets", json.dumps({topic: {"0": 20, "1": 5}}))
        .load()
    )
    want = [
        r for r in expected
        if (r.partition == 0 and 10 <= r.offset < 20) or (r.partition == 1 and r.offset < 5)
    ]
    assert _records(df) == want


def test_large_partition_is_split_across_tasks(spark, bootstrap):
    topic = unique_topic("skew")
    create_topic(bootstrap, topic, 2)
    expected = produce(bootstrap, topic, 2, 300)
    base = (
        spark.read.format("kafka-eos")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
    )
    split = base.option("maxRecordsPerPartition", "100").load()
    assert split.rdd.getNumPartitions() == 6  # each 300-record partition in 3 tasks
    assert _records(split) == expected
    spread = base.option("minPartitions", "8").load()
    assert spread.rdd.getNumPartitions() >= 8
    assert _records(spread) == expected


def test_starting_timestamp(spark, bootstrap):
    import time

    topic = unique_topic("ts")
    create_topic(bootstrap, topic, 2)
    early = produce(bootstrap, topic, 2, 10)
    time.sleep(1.0)  # record timestamps are ms: leave a clear gap
    cut_ms = int(time.time() * 1000)
    time.sleep(0.1)
    late = produce(bootstrap, topic, 2, 10, start_index=10)
    def base():  # a new reader each time: option() changes the reader it is called on
        return (
            spark.read.format("kafka-eos")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
        )

    assert _records(base().option("startingTimestamp", str(cut_ms)).load()) == late
    by_partition = json.dumps({topic: {"0": cut_ms, "1": 0}})
    got = _records(base().option("startingOffsetsByTimestamp", by_partition).load())
    assert got == sorted([r for r in late if r.partition == 0] + [r for r in early + late if r.partition == 1])


def test_transaction_markers_are_gaps_not_errors(spark, bootstrap):
    """Transactional topics have control markers at some offsets (and the range's last offset
    is a COMMIT marker): the reader must step over them and still end on time."""
    from confluent_kafka import Producer

    topic = unique_topic("txn")
    create_topic(bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-p"})
    producer.init_transactions(30)
    committed, aborted = [], []
    for txn in range(3):
        producer.begin_transaction()
        values = [f"txn{txn}-{i}".encode() for i in range(4)]
        for v in values:
            producer.produce(topic, value=v, partition=0)
        producer.flush(30)
        if txn == 1:
            producer.abort_transaction(30)
            aborted += values
        else:
            producer.commit_transaction(30)
            committed += values
    df = (
        spark.read.format("kafka-eos")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
    )
    rows = sorted(df.select("offset", "value").collect())
    offsets = [r.offset for r in rows]
    values = [r.value for r in rows]
    assert offsets == sorted(set(offsets))
    assert offsets[-1] - offsets[0] + 1 > len(offsets), "markers should leave offset gaps"
    assert values == committed  # read_committed: the aborted transaction's records are hidden
