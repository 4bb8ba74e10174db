"""A `subscribePattern` over 200 topics of 4 partitions each, on the suite's broker: what a
batch's discovery costs (requests counted on the broker, not timed), and a stream that reads
every record once in packed tasks and picks up a topic created and partitions added while it
runs.

The topics are created once for the module (5 records a partition, 4,000 in all) and deleted
at its end: the broker is shared with the rest of the suite."""

from __future__ import annotations

import json
import os
import re
import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from pyspark.sql.streaming.datasource import ReadAllAvailable

from connectors.core.kafka.client import KafkaMetadata, RetryPolicy
from integration_tests.support.broker_requests import RequestLog, wait_for_group_coordinator
from integration_tests.support.kafka_data import Record, unique_topic
from integration_tests.support.streaming import all_records, parquet_batch_writer, wait_for
from sources import offsets as off
from sources.batch_metrics import SOURCE_METRICS_ENV
from sources.kafka_options import parse_source_options
from sources.kafka_source import KafkaStreamReader
from sources.task_packing import default_target_tasks

TOPICS, PARTITIONS, PER_PARTITION = 200, 4, 5


class ManyTopics:
    """The module's topics (`<prefix>-000` to `-199`, and those tests add), what they hold,
    and the admin calls the tests make on them."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.prefix = unique_topic("many")
        self.pattern = re.escape(self.prefix) + r"-\d{3}"
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.expected: list[Record] = []

    def name(self, i: int) -> str:
        return f"{self.prefix}-{i:03d}"

    def create(self, partitions: dict[str, int]) -> None:
        futures = self.admin.create_topics([NewTopic(t, n, 1) for t, n in partitions.items()])
        for future in futures.values():
            future.result(60)

    def grow(self, topic: str, partitions: int) -> None:
        self.admin.create_partitions([NewPartitions(topic, partitions)])[topic].result(60)

    def produce(self, targets: list[tuple[str, int]], per_partition: int) -> list[Record]:
        """`per_partition` keyed records into each (topic, partition), in one producer; what the
        broker acknowledged (delivery reports) is added to `expected` and returned."""
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 20,
                             "enable.idempotence": True})
        delivered: list[Record] = []

        def on_delivery(err, msg) -> None:
            if err is not None:
                raise RuntimeError(f"delivery failed: {err}")
            delivered.append(Record(msg.topic(), msg.partition(), msg.offset(), msg.key(),
                                    msg.value()))

        for topic, p in targets:
            for i in range(per_partition):
                producer.produce(topic, key=f"k{p}-{i}".encode(), value=f"{topic}/{p}/{i}".encode(),
                                 partition=p, on_delivery=on_delivery)
                producer.poll(0)
        assert producer.flush(60) == 0
        self.expected.extend(delivered)
        return sorted(delivered)

    def wait_until_listable(self, tps: list[tuple[str, int]]) -> None:
        """Until the broker answers ListOffsets for `tps`. A topic or partition just created
        has no leader for a moment: a producer then fails with an unknown partition, and the
        source retries, which would add its retries to the requests a test counts."""
        meta = KafkaMetadata({"bootstrap.servers": self.bootstrap})
        try:
            RetryPolicy(timeout_s=60).call("waiting for leaders", lambda: meta.latest(tps),
                                           on_retry=lambda e: meta.reset())
        finally:
            meta.close()

    def delete_all(self) -> None:
        names = [t for t in self.admin.list_topics(timeout=30).topics
                 if t.startswith(self.prefix + "-")]
        if names:
            for future in self.admin.delete_topics(names).values():
                future.result(120)


@pytest.fixture(scope="module")
def many(bootstrap):
    topics = ManyTopics(bootstrap)
    topics.create({topics.name(i): PARTITIONS for i in range(TOPICS)})
    try:
        topics.produce([(topics.name(i), p) for i in range(TOPICS) for p in range(PARTITIONS)],
                       PER_PARTITION)
        yield topics
    finally:
        topics.delete_all()


def _options(many: ManyTopics, **extra: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": many.bootstrap, "subscribePattern": many.pattern,
            "startingOffsets": "earliest", **extra}


def _latest(reader: KafkaStreamReader, start: dict) -> tuple[dict, float]:
    began = time.perf_counter()
    end = reader.latestOffset(start, ReadAllAvailable())
    return end, (time.perf_counter() - began) * 1000


def test_a_batch_discovers_two_hundred_topics_in_three_requests(broker, many):
    """The driver's per-batch look-ups (KafkaStreamReader.latestOffset, what Spark calls
    before each batch), counted by the broker: one Metadata request listing the topics, one
    describing the matching ones (their partitions and topic ids), one ListOffsets per broker
    for the latest offsets of all 800 partitions; one ListOffsets more in a batch that meets
    new partitions (their earliest offsets). Spark's own source asks the same (listTopics,
    describeTopics, listOffsets). Per topic or per partition look-ups would be hundreds."""
    if broker.node is None:
        pytest.skip(f"counts requests in the request log of a broker this run started (the "
                    f"suite's Apache Kafka node); the broker here is {broker.kind}")
    client_id = f"discovery-{uuid.uuid4().hex[:8]}"
    reader = KafkaStreamReader(parse_source_options(
        _options(many, **{"kafka.client.id": client_id}), batch=False))
    wait_for_group_coordinator(many.bootstrap, reader.options.kafka_conf["group.id"])
    latest = {(r.topic, r.partition): r.offset + 1 for r in many.expected}
    try:
        with RequestLog(broker.node) as requests:
            start = reader.initialOffset()
            assert off.from_json(start) == dict.fromkeys(latest, 0)
            start, _ = _latest(reader, start)  # the first batch: connections opened
            steady = []
            for _ in range(3):
                mark = requests.mark()
                end, ms = _latest(reader, start)
                steady.append((requests.counts(mark, client_id), ms))
            assert off.from_json(end) == latest

            new_topic, grown = many.name(TOPICS), many.name(1)
            many.create({new_topic: 2})
            many.grow(grown, PARTITIONS + 2)
            added = [(new_topic, 0), (new_topic, 1), (grown, 4), (grown, 5)]
            many.wait_until_listable(added)
            mark = requests.mark()
            grown_end, grown_ms = _latest(reader, end)
            grown_counts = requests.counts(mark, client_id)
    finally:
        reader.stop()
    print(f"\ndiscovery per batch at {TOPICS} topics x {PARTITIONS} partitions: "
          + "; ".join(f"{dict(c)} in {ms:.0f} ms" for c, ms in steady)
          + f"; with 4 new partitions: {dict(grown_counts)} in {grown_ms:.0f} ms")

    for counts, _ in steady:
        assert set(counts) == {"METADATA", "LIST_OFFSETS"}, counts
        assert counts["METADATA"] <= 2 and counts["LIST_OFFSETS"] == 1, counts
    assert set(grown_counts) == {"METADATA", "LIST_OFFSETS"}, grown_counts
    assert grown_counts["METADATA"] <= 2 and grown_counts["LIST_OFFSETS"] == 2, grown_counts
    assert off.from_json(grown_end) == {**latest, **dict.fromkeys(added, 0)}


def _metrics_since(since: int, source: str) -> list[dict]:
    path = os.environ[SOURCE_METRICS_ENV]
    if not os.path.exists(path):
        return []
    with open(path) as f:
        f.seek(since)
        docs = [json.loads(line) for line in f if line.strip()]
    return [d for d in docs if d["source"] == source]


def _rows_read(query) -> int:
    return sum(p["numInputRows"] for p in query.recentProgress)


def test_a_stream_over_the_pattern_reads_every_record_once_and_picks_up_new_topics(
        spark, many, tmp_path):
    path = os.environ[SOURCE_METRICS_ENV]
    since = os.path.getsize(path) if os.path.exists(path) else 0
    source = f"kafka-eos subscribePattern={many.pattern!r}"
    out = str(tmp_path / "out")
    query = (spark.readStream.format("kafka-eos").options(**_options(many)).load()
             .writeStream.foreachBatch(parquet_batch_writer(out))
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(processingTime="1 second").start())
    try:
        first = len(many.expected)
        wait_for(lambda: _rows_read(query) >= first, 300, f"the first {first} records")
        # While it runs: a topic matching the pattern appears, one of the topics grows, and
        # records arrive in both and in an old partition.
        new_topic, grown = many.name(TOPICS + 1), many.name(2)
        many.create({new_topic: 2})
        many.grow(grown, PARTITIONS + 2)
        targets = [(new_topic, 0), (new_topic, 1), (grown, 4), (grown, 5), (grown, 0)]
        many.wait_until_listable(targets)  # a producer meeting them sooner: unknown partition
        many.produce(targets, 3)
        wait_for(lambda: _rows_read(query) >= len(many.expected), 300,
                 "the records of the new topic and partitions")
        # A batch's metrics line comes when the next trigger plans: a trigger more, which
        # would read anything read twice.
        wait_for(lambda: sum(line["rows"] for line in _metrics_since(since, source))
                 >= len(many.expected), 60, "the metrics lines of every batch")
    finally:
        query.stop()
    progress = query.recentProgress

    assert all_records(out) == sorted(many.expected)  # every record, once
    lines = _metrics_since(since, source)
    assert lines[0]["partitions_read"] == TOPICS * PARTITIONS
    assert lines[0]["rows"] == first
    # 800 ranges packed, the tasks sized by each batch's records (offsets)
    planned = [(line["tasks"], line["offsets"]) for line in lines]  # a batch of nothing: none
    assert all(t == (default_target_tasks(o) if o else 0) for t, o in planned), planned
    assert sum(line["rows"] for line in lines) == len(many.expected)
    with_data = [p for p in progress if p["numInputRows"]]
    print(f"\nlatestOffset per trigger at {TOPICS}+ topics (ms): "
          f"{[p['durationMs'].get('latestOffset') for p in progress]}; batches with data: "
          + ", ".join(f"{p['numInputRows']} rows in {p['durationMs']['triggerExecution']} ms"
                      for p in with_data))
