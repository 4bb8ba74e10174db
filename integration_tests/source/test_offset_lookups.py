"""The driver's offset look-ups on real Apache Kafka (connectors/core/kafka/client.py, KafkaMetadata):
the admin client's ListOffsets for every partition at once answers what a read_committed
consumer's per-partition look-ups answer (get_watermark_offsets, offsets_for_times), on a
topic with a committed transaction and one still open (latest = the last stable offset), in
one request per broker however many partitions."""

from __future__ import annotations

import logging
import time

from confluent_kafka import Consumer, Producer, TopicPartition

from connectors.core.kafka.client import KafkaMetadata, RetryPolicy, consumer_conf
from integration_tests.support.kafka_data import create_topic, produce, unique_topic

PARTITIONS = 12


def _topic_with_open_transaction(bootstrap: str) -> tuple[str, int, Producer]:
    """Per partition: 5 records, then (after the returned time) a committed transaction of 2;
    on even partitions one more transaction of 3 records left open. The open producer is
    returned: its transaction stays open while it lives."""
    topic = unique_topic("lookups")
    create_topic(bootstrap, topic, PARTITIONS)
    produce(bootstrap, topic, PARTITIONS, 5)
    time.sleep(0.05)
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    for name, parts, n, end in (("c", range(PARTITIONS), 2, True),
                                ("o", range(0, PARTITIONS, 2), 3, False)):
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0,
                             "transactional.id": f"{topic}-{name}"})
        producer.init_transactions(30)
        producer.begin_transaction()
        for p in parts:
            for i in range(n):
                producer.produce(topic, value=f"{name}{i}".encode(), partition=p)
        producer.flush(30)
        if end:
            producer.commit_transaction(30)
    return topic, middle, producer


def _per_partition(bootstrap: str, topic: str, stamps: dict[int, int]):
    """What the source asked before: a read_committed consumer, one partition at a time."""
    consumer = Consumer(consumer_conf({"bootstrap.servers": bootstrap}))
    try:
        marks = {(topic, p): consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10,
                                                            cached=False)
                 for p in range(PARTITIONS)}
        found = consumer.offsets_for_times(
            [TopicPartition(topic, p, ts) for p, ts in stamps.items()], timeout=10)
        return marks, {(tp.topic, tp.partition): tp.offset for tp in found}
    finally:
        consumer.close()


def _compare(bootstrap: str, topic: str, middle: int) -> tuple[dict, dict]:
    """Both paths' answers, asserted equal; the per-partition path's returned."""
    later = int(time.time() * 1000) + 60_000
    stamps = {p: (middle if p % 3 else later if p % 2 else 0) for p in range(PARTITIONS)}
    marks, by_time = _per_partition(bootstrap, topic, stamps)
    tps = sorted(marks)
    meta = KafkaMetadata({"bootstrap.servers": bootstrap})
    try:
        assert meta.watermarks(tps) == marks
        assert meta.earliest(tps) == {tp: low for tp, (low, _) in marks.items()}
        assert meta.latest(tps) == {tp: high for tp, (_, high) in marks.items()}
        assert meta.offsets_for_times({(topic, p): ts for p, ts in stamps.items()}) == by_time
    finally:
        meta.close()
    return marks, by_time


def test_list_offsets_answers_as_the_per_partition_look_ups(bootstrap):
    topic, middle, open_txn = _topic_with_open_transaction(bootstrap)
    try:
        marks, by_time = _compare(bootstrap, topic, middle)
        # the open transaction holds the last stable offset back on even partitions
        assert {p: marks[(topic, p)][1] for p in (0, 1)} == {0: 8, 1: 8}
        uncommitted = KafkaMetadata({"bootstrap.servers": bootstrap,
                                     "isolation.level": "read_uncommitted"})
        try:
            assert uncommitted.latest([(topic, 0), (topic, 1)]) == {(topic, 0): 11, (topic, 1): 8}
        finally:
            uncommitted.close()
        assert set(by_time.values()) >= {5, -1, 0}  # records after, none after, all after
    finally:
        open_txn.abort_transaction(30)


def test_the_embedded_broker_answers_list_offsets_as_its_per_partition_look_ups():
    """The demo's default broker (Tansu) has offset quirks of its own (a partition with an
    open transaction reports a latest read_committed offset of 0, measured); whatever they
    are, both paths see the same ones."""
    from connectors.local.tansu import tansu_broker

    with tansu_broker() as broker:
        topic, middle, open_txn = _topic_with_open_transaction(broker.bootstrap_servers)
        try:
            _compare(broker.bootstrap_servers, topic, middle)
        finally:
            open_txn.abort_transaction(30)


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_one_request_per_broker_for_two_hundred_partitions(bootstrap):
    """Counted in librdkafka's protocol log: one ListOffsets request to the (single) broker for
    the latest offsets of 200 partitions, where the consumer's look-up sent one per partition."""
    topic = unique_topic("lookups200")
    create_topic(bootstrap, topic, 200)
    handler = _Lines()
    logger = logging.getLogger(f"librdkafka.{topic}")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    meta = KafkaMetadata({"bootstrap.servers": bootstrap, "debug": "protocol",
                          "logger": logger})
    tps = [(topic, p) for p in range(200)]
    try:
        # connect, learn the leaders (of a topic just created: retried until it has them)
        RetryPolicy(timeout_s=60).call("warming up", lambda: meta.latest(tps),
                                       on_retry=lambda e: meta.reset())
        meta.admin().poll(0.2)  # librdkafka hands its log lines over in poll()
        handler.lines.clear()
        latest = meta.latest(tps)
        meta.admin().poll(0.2)
    finally:
        meta.close()
    assert latest == {(topic, p): 0 for p in range(200)}
    sent = [line for line in handler.lines if "Sent ListOffsetsRequest" in line]
    assert len(sent) == 1, sent
