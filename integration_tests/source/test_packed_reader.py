"""A packed task's ranges read with one consumer (sources/packed_reader.py) against real
Apache Kafka: the same records as each range read alone (sources/range_reader.py), on
transactional input whose ranges start, end or lie wholly on markers and aborted records, with
a pooled consumer that read other partitions before."""

from __future__ import annotations

from confluent_kafka import Producer

from integration_tests.support.kafka_data import create_topic, produce, unique_topic
from sources.consumer_pool import ConsumerPool
from sources.offsets import OffsetRange
from sources.packed_reader import read_task
from sources.range_reader import read_range

PARTITIONS = 10


def _rows(batches) -> list[tuple[int, int, bytes]]:
    return [row for b in batches for row in zip(b.column("partition").to_pylist(),
                                                 b.column("offset").to_pylist(),
                                                 b.column("value").to_pylist())]


def _transactional_topic(bootstrap: str) -> str:
    """Per partition: offsets 0-4 plain records; 5-7 committed, 8 its marker; 9-11 aborted,
    12 its marker; 13-14 committed, 15 its marker. Latest offset 16."""
    topic = unique_topic("packed")
    create_topic(bootstrap, topic, PARTITIONS)
    produce(bootstrap, topic, PARTITIONS, 5)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-p",
                         "linger.ms": 0})
    producer.init_transactions(30)
    for n, end in ((3, "commit"), (3, "abort"), (2, "commit")):
        producer.begin_transaction()
        for p in range(PARTITIONS):
            for i in range(n):
                producer.produce(topic, value=f"{end}-{p}-{i}".encode(), partition=p)
        producer.flush(30)
        getattr(producer, f"{end}_transaction")(30)
    return topic


def test_a_packed_task_reads_what_its_ranges_read_alone(bootstrap):
    topic = _transactional_topic(bootstrap)
    conf = {"bootstrap.servers": bootstrap, "group.id": f"{topic}-g"}
    # whole partitions, ranges ending on a marker, lying wholly on aborted records and their
    # marker, starting on a marker, and two pieces of one partition
    shapes = [(0, 16), (5, 9), (9, 13), (8, 14), (0, 3), (12, 16), (2, 6), (9, 12), (13, 16),
              (0, 9)]
    ranges = [OffsetRange(topic, p, lo, hi) for p, (lo, hi) in enumerate(shapes)]
    ranges.append(OffsetRange(topic, 9, 9, 16))
    pool = ConsumerPool(reaper=False)
    try:
        alone = sorted(row for r in ranges for row in _rows(read_range(r, conf, pool=pool)))
        done: list = []
        packed = _rows(read_task(ranges, conf, pool=pool, batch_rows=7,
                                 on_range_done=lambda r, n: done.append((r, n))))
        assert len(packed) == len(set(packed)), "a record read twice"
        assert sorted(packed) == alone
        assert not any(v.startswith(b"abort") for _, _, v in packed)
        by_range = {r: sum(1 for p, o, _ in packed if p == r.partition
                           and r.from_offset <= o < r.until_offset) for r in ranges}
        assert sorted(done) == sorted(by_range.items())
        # one pooled consumer served it all, and went back after each wave
        assert pool.stats.created == 1 and pool.idle_count() == 1
    finally:
        pool.close_all()


def test_many_partitions_in_one_task(bootstrap):
    topic = unique_topic("packedmany")
    create_topic(bootstrap, topic, 200)
    expected = produce(bootstrap, topic, 200, 4)
    conf = {"bootstrap.servers": bootstrap, "group.id": f"{topic}-g"}
    ranges = [OffsetRange(topic, p, 0, 4) for p in range(200)]
    pool = ConsumerPool(reaper=False)
    try:
        for _ in range(2):  # the second time with the pooled consumer
            got = _rows(read_task(ranges, conf, pool=pool))
            assert sorted(got) == sorted((r.partition, r.offset, r.value) for r in expected)
        assert pool.stats.created == 1
    finally:
        pool.close_all()
