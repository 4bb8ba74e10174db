"""The Kafka sink's batched produce (sinks.kafka.producer.produce_rows) against a real broker:
a producer queue far smaller than the rows (`queue.buffering.max.messages`) refuses most of
each produce_batch call, and every row still lands once, in its order, on the partition a
produce() per row puts it on (test_kafka_sink_partitioning.py holds that placement to the Java
client's formula through the sink); a row too large for the producer is named by its index."""

from __future__ import annotations

from collections import defaultdict

from confluent_kafka import KafkaError, Producer

from connectors.local.kafka_oracle import committed
from integration_tests.support.kafka_data import create_topic, unique_topic
from sinks.kafka.producer import produce_rows, produce_when_room


class _Counting:
    """A producer whose produce_batch calls are counted."""

    def __init__(self, producer: Producer) -> None:
        self.producer, self.calls = producer, 0

    def produce_batch(self, topic: str, messages: list) -> int:
        self.calls += 1
        return self.producer.produce_batch(topic, messages)

    def poll(self, timeout: float) -> int:
        return self.producer.poll(timeout)


def _by_partition(bootstrap: str, topic: str) -> dict[int, list[tuple]]:
    out: dict[int, list[tuple]] = defaultdict(list)
    for record in committed(bootstrap, topic):
        out[record.partition].append((record.key, record.value))
    return dict(out)


def test_a_full_queue_delays_rows_but_lands_each_once_in_order_where_produce_would(bootstrap):
    batched, one_by_one = unique_topic("rows-batch"), unique_topic("rows-each")
    for topic in (batched, one_by_one):
        create_topic(bootstrap, topic, 4)
    rows = 5_000
    keys = [b"key-%d" % (i % 97) for i in range(rows)]
    values = [b"%06d" % i for i in range(rows)]
    conf = {"bootstrap.servers": bootstrap, "partitioner": "murmur2_random",
            "queue.buffering.max.messages": 300}

    counting = _Counting(Producer(conf))
    assert produce_rows(counting, batched, values, keys) is None
    assert counting.producer.flush(30) == 0
    each = Producer(conf)
    for value, key in zip(values, keys):
        produce_when_room(each, one_by_one, value=value, key=key)
    assert each.flush(30) == 0

    assert counting.calls > rows // 300, "the small queue should have refused most calls"
    got, expected = _by_partition(bootstrap, batched), _by_partition(bootstrap, one_by_one)
    assert got == expected
    assert sorted(v for part in got.values() for _, v in part) == values
    for part in got.values():
        assert [v for _, v in part] == sorted(v for _, v in part), "a partition's order changed"


def test_a_row_too_large_for_the_producer_is_named_by_its_index(bootstrap):
    topic = unique_topic("rows-large")
    create_topic(bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 10_000})
    refused = produce_rows(producer, topic, [b"a", b"b", b"x" * 20_000, b"c"], [None] * 4)
    assert refused is not None
    row, error = refused
    assert row == 2
    assert error.code() == KafkaError.MSG_SIZE_TOO_LARGE
