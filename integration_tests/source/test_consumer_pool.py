"""Pooled consumers against the real broker: re-assigned consumers read exactly their range
(nothing pre-fetched for an earlier assignment leaks into the next), a tail of transaction
markers ends a range at once, and in a real Spark query the second and later batches' tasks
reuse their worker's consumer (counted through KAFKA_EOS_CONSUMER_POOL_STATS, set for the
whole run in conftest.py before Spark starts, so the Python workers inherit it)."""

from __future__ import annotations

import collections
import os

from confluent_kafka import Producer

from integration_tests.support.kafka_data import create_topic, produce, unique_topic
from integration_tests.support.streaming import read_batches, stream_options, wait_for
from sources.consumer_pool import STATS_ENV, ConsumerPool
from sources.offsets import OffsetRange
from sources.range_reader import read_range


def _offsets(batches) -> list[int]:
    return [o for b in batches for o in b.column("offset").to_pylist()]


def test_a_reassigned_consumer_reads_exactly_its_range(bootstrap):
    topic = unique_topic("pool")
    create_topic(bootstrap, topic, 2)
    expected = produce(bootstrap, topic, 2, 400)
    values = {(r.partition, r.offset): r.value for r in expected}
    conf = {"bootstrap.servers": bootstrap, "group.id": f"{topic}-g"}
    pool = ConsumerPool(reaper=False)
    # Out of order, across partitions, small and large, and one range read only in part before
    # the next: the consumer has pre-fetched beyond each range's end by then.
    plan = [(0, 200, 300), (0, 100, 200), (1, 0, 399), (0, 0, 5), (1, 390, 400), (0, 5, 400)]
    try:
        for partition, lo, hi in plan:
            batches = list(read_range(OffsetRange(topic, partition, lo, hi), conf, pool=pool,
                                      batch_rows=64))
            assert _offsets(batches) == list(range(lo, hi)), (partition, lo, hi)
            got = [v for b in batches for v in b.column("value").to_pylist()]
            assert got == [values[(partition, o)] for o in range(lo, hi)]
        assert (pool.stats.created, pool.stats.reused) == (1, len(plan) - 1)
        # Another configuration (other credentials, another query's group) gets its own.
        other = {**conf, "group.id": f"{topic}-other"}
        list(read_range(OffsetRange(topic, 0, 0, 3), other, pool=pool))
        assert pool.stats.created == 2 and pool.idle_count() == 2
    finally:
        pool.close_all()


def test_a_tail_of_markers_ends_the_range(bootstrap):
    topic = unique_topic("pooltxn")
    create_topic(bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-p"})
    producer.init_transactions(30)
    for txn in range(3):
        producer.begin_transaction()
        for i in range(5):
            producer.produce(topic, value=f"t{txn}-{i}".encode(), partition=0)
        producer.flush(30)
        producer.commit_transaction(30)
    # 3 x (5 records + a COMMIT marker): offsets 0..17, the last one a marker.
    conf = {"bootstrap.servers": bootstrap, "group.id": f"{topic}-g"}
    pool = ConsumerPool(reaper=False)
    try:
        list(read_range(OffsetRange(topic, 0, 0, 18), conf, pool=pool))  # connect, warm up
        for lo, hi in ((0, 6), (6, 18), (0, 18)):
            batches = list(read_range(OffsetRange(topic, 0, lo, hi), conf, pool=pool))
            assert _offsets(batches) == [o for o in range(lo, hi) if o % 6 != 5]
        # How long the marker tail costs is measured by `python -m benchmarks --only latency`,
        # not asserted here (a timed assertion fails on a loaded machine, not on a bug).
        assert pool.stats.created == 1
    finally:
        pool.close_all()


def _one_record_batches(bootstrap: str, topic: str, count: int, producers: int = 8) -> None:
    """`count` records in `count` record batches (a flush after each), from parallel producers."""
    import threading

    def run(share: int) -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        for i in range(share):
            producer.produce(topic, value=str(i).encode(), partition=0)
            producer.flush(30)

    threads = [threading.Thread(target=run, args=(count // producers,)) for _ in range(producers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_a_broker_slower_than_the_fetch_wait_does_not_stall_the_read(broker, bootstrap):
    # Tansu answers a fetch it cannot serve within fetch.wait.max.ms with no records, and a
    # partition of some 20,000 record batches takes it longer than the source's 10 ms: the
    # range stalled until pollTimeoutMs failed the task ("no record of ... at or after offset").
    # The reader now moves to a consumer with a longer wait. (Real Kafka answers at once.)
    topic = unique_topic("slowfetch")
    create_topic(bootstrap, topic, 1)
    _one_record_batches(bootstrap, topic, 24_000)
    from confluent_kafka import Consumer, TopicPartition

    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-probe"})
    _, end = probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=30, cached=False)
    probe.close()
    conf = {"bootstrap.servers": bootstrap, "group.id": f"{topic}-g"}
    pool = ConsumerPool(reaper=False)
    try:
        lo = end - 500
        batches = list(read_range(OffsetRange(topic, 0, lo, end), conf, pool=pool,
                                  poll_timeout_ms=30_000))
        assert _offsets(batches) == list(range(lo, end))
        # and the next range of this process starts with the wait it learned
        more = list(read_range(OffsetRange(topic, 0, lo - 100, lo), conf, pool=pool,
                               poll_timeout_ms=30_000))
        assert _offsets(more) == list(range(lo - 100, lo))
    finally:
        pool.close_all()


def test_streaming_batches_reuse_their_workers_consumers(spark, bootstrap, tmp_path):
    topic = unique_topic("poolstream")
    create_topic(bootstrap, topic, 2)
    expected = produce(bootstrap, topic, 2, 120)
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "ckpt")
    # a task per partition (the default plans a batch of 40 records as one task): each of the
    # two partitions' consumers is reused by its worker from batch to batch
    opts = stream_options(bootstrap, subscribe=topic, startingOffsets="earliest",
                          maxOffsetsPerTrigger="40", groupIdPrefix=topic,
                          targetTasksPerBatch="8")

    def write(batch_df, batch_id):
        (batch_df.select("topic", "partition", "offset", "key", "value")
         .write.mode("overwrite").parquet(os.path.join(out, f"batch={batch_id:06d}")))

    query = (spark.readStream.format("kafka-eos").options(**opts).load()
             .writeStream.foreachBatch(write).option("checkpointLocation", checkpoint)
             .trigger(processingTime="100 milliseconds").start())
    try:
        wait_for(lambda: sum(map(len, read_batches(out).values())) >= len(expected), 180,
                 "every record")
    finally:
        query.stop()

    batches = read_batches(out)
    assert len(batches) >= 6
    # (a) exactly once, in offset order per partition across the batches
    by_partition = collections.defaultdict(list)
    for batch_id in sorted(batches):
        for rec in batches[batch_id]:
            by_partition[rec.partition].append(rec)
    for p in (0, 1):
        assert by_partition[p] == [r for r in expected if r.partition == p]

    # (b) the consumers were reused: one created per Python worker that read this query's
    # ranges, every later task of that worker reusing it. The group id (groupIdPrefix-<uuid>)
    # is in the pooled configuration, so the key is this query's alone; find it by topic.
    where = os.environ[STATS_ENV]
    lines = []
    for name in os.listdir(where):
        with open(os.path.join(where, name)) as f:
            lines += [ln.split() for ln in f if f" {topic}-" in ln]
    keys = {ln[1] for ln in lines}
    assert len(keys) == 1, keys
    created = collections.Counter(ln[0] for ln in lines if ln[2] == "created")
    reused = collections.Counter(ln[0] for ln in lines if ln[2] == "reused")
    assert created and all(n == 1 for n in created.values()), created
    assert sum(reused.values()) >= len(lines) - len(created) > 0, (created, reused)
    assert sum(reused.values()) >= len(batches)  # at least one reuse a batch after the first

