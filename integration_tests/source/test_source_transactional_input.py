"""The `kafka-eos` source on transactional and compacted input, on real Apache Kafka.

Under `kafka.isolation.level=read_committed` (the source's default) a batch never ends past the
last stable offset (LSO) while a transaction is open, aborted records never appear, and offsets
that hold no record (control markers, aborted records, compacted-away keys) are gaps inside a
range: no wait, no false data-loss alarm. Ranges are kept small (maxOffsetsPerTrigger) so that
some start, end or lie wholly on such offsets.
"""

from __future__ import annotations

import collections
import json
import os
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from integration_tests.support.kafka_data import create_topic, unique_topic
from integration_tests.support.streaming import all_records, parquet_batch_writer, run_to_end


def _run(spark, bootstrap: str, topic: str, checkpoint: str, out: str, **options: str) -> None:
    query = (
        spark.readStream.format("kafka-eos")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "true")
        # a range that waited for offsets that hold no record would fail within 30 s
        .option("kafkaConsumer.pollTimeoutMs", "30000")
        .options(**options)
        .load()
        .writeStream.foreachBatch(parquet_batch_writer(out))
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    run_to_end(query, 120)


def _logged_end(checkpoint: str, topic: str) -> dict[int, int]:
    """The end offsets of the last batch in the checkpoint's offset log."""
    logs = os.path.join(checkpoint, "offsets")
    last = max(int(name) for name in os.listdir(logs) if name.isdigit())
    with open(os.path.join(logs, str(last))) as f:
        return {int(p): o for p, o in json.loads(f.read().splitlines()[-1])[topic].items()}


def _values(out: str) -> list[bytes]:
    got = [r.value for r in all_records(out)]
    dupes = [v for v, n in collections.Counter(got).items() if n > 1]
    assert not dupes, f"read more than once: {dupes[:3]}"
    return sorted(got)


class _Txn:
    """A transactional producer of `topic`; `send` produces values to partitions, in one
    transaction committed, aborted or left open."""

    def __init__(self, bootstrap: str, topic: str, name: str) -> None:
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap,
                                  "transactional.id": f"{topic}-{name}", "linger.ms": 0})
        self.producer.init_transactions(30)

    def send(self, tag: str, per_partition: dict[int, int], end: str) -> list[bytes]:
        self.producer.begin_transaction()
        values = []
        for p, n in per_partition.items():
            for i in range(n):
                value = f"{tag}-p{p}-{i}".encode()
                self.producer.produce(self.topic, value=value, partition=p)
                values.append(value)
        self.producer.flush(30)
        if end == "commit":
            self.producer.commit_transaction(30)
        elif end == "abort":
            self.producer.abort_transaction(30)
        return values


def test_read_committed_stream_stops_at_the_open_transaction(spark, bootstrap, tmp_path):
    topic = unique_topic("txn-in")
    create_topic(bootstrap, topic, 2)
    a, b, c = (_Txn(bootstrap, topic, n) for n in "abc")
    committed = a.send("c1", {0: 4, 1: 4}, "commit")
    aborted = b.send("a1", {0: 4, 1: 4}, "abort")
    committed += a.send("c2", {0: 3}, "commit")
    open_values = c.send("open", {0: 3}, "open")  # partition 0's LSO stops at its first record
    after_open = a.send("c3", {0: 3, 1: 3}, "commit")
    readable = [v for v in after_open if b"-p1-" in v]  # partition 1 has no open transaction
    behind_open = [v for v in after_open if b"-p0-" in v]

    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-lso",
                       "isolation.level": "read_committed"})
    try:
        lso = {p: reader.get_watermark_offsets(TopicPartition(topic, p), timeout=10,
                                               cached=False)[1] for p in (0, 1)}
    finally:
        reader.close()
    # partition 0: c1 (4 + marker), a1 (4 + marker), c2 (3 + marker), then the open transaction
    # at 14; partition 1: c1, a1 and c3 (3 + marker), its end
    assert lso == {0: 14, 1: 14}, lso

    checkpoint, out = str(tmp_path / "ckpt"), str(tmp_path / "out")
    # Kafka's default is read_uncommitted; the source's is read_committed (not set here).
    _run(spark, bootstrap, topic, checkpoint, out, maxOffsetsPerTrigger="5")
    got = _values(out)
    assert not set(got) & set(aborted), "aborted records were read"
    assert not set(got) & set(open_values), "records of the open transaction were read"
    assert not set(got) & set(behind_open), "records past the last stable offset were read"
    assert got == sorted(committed + readable)
    end = _logged_end(checkpoint, topic)
    assert end[0] <= lso[0] and end == lso, (end, lso)

    c.producer.commit_transaction(30)
    _run(spark, bootstrap, topic, checkpoint, out, maxOffsetsPerTrigger="5")
    assert _values(out) == sorted(committed + readable + open_values + behind_open)


def _compacted_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
              "delete.retention.ms": "100", "min.compaction.lag.ms": "0"}
    for future in admin.create_topics([NewTopic(topic, 1, 1, config=config)]).values():
        future.result(30)


def _log(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes]]:
    """(offset, key, value) of every record partition 0 holds now, read by a plain consumer."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-check",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = []
    try:
        while True:
            m = consumer.poll(10)
            assert m is not None, "no end of partition within 10 s"
            if m.error():
                break  # _PARTITION_EOF
            got.append((m.offset(), m.key(), m.value()))
    finally:
        consumer.close()
    return got


def test_compacted_topic_gaps_are_not_data_loss(spark, bootstrap, tmp_path):
    topic = unique_topic("compacted")
    _compacted_topic(bootstrap, topic)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    rounds = 4
    for r in range(rounds):  # one segment each (segment.ms=100): dup keys, one key of its own
        for key in ("dup0", "dup1", "dup2", f"keep{r}"):
            producer.produce(topic, key=key.encode(), value=f"{key}@{r}".encode())
        producer.flush(30)
        time.sleep(0.3)
    producer.produce(topic, key=b"last", value=b"last")  # rolls the last round's segment
    producer.flush(30)
    total = rounds * 4 + 1

    # The cleaner looks for work every log.cleaner.backoff.ms (15 s by default).
    produced = time.monotonic()
    deadline = produced + 45
    while True:
        before = _log(bootstrap, topic)
        offsets = [o for o, _, _ in before]
        if len(offsets) < total and offsets[0] < offsets[-1] - len(offsets) + 1 and offsets[0] < 4:
            break  # offsets removed in the middle of the log, not just at its start
        assert time.monotonic() < deadline, f"no compaction within 45 s: offsets {offsets}"
        time.sleep(1)
    print(f"compaction seen {time.monotonic() - produced:.1f} s after the last record: "
          f"offsets {offsets}")

    checkpoint, out = str(tmp_path / "ckpt"), str(tmp_path / "out")
    _run(spark, bootstrap, topic, checkpoint, out, maxOffsetsPerTrigger="3")
    after = _log(bootstrap, topic)
    got = [(r.offset, r.key, r.value) for r in all_records(out)]
    assert len(got) == len(set(got))
    # The cleaner may run again while the query reads: what it read lies between the two.
    assert set(after) <= set(got) <= set(before), (before, got, after)
    assert _logged_end(checkpoint, topic) == {0: total}
    latest = {k: v for _, k, v in got}
    assert all(latest[f"dup{i}".encode()] == f"dup{i}@{rounds - 1}".encode() for i in range(3))
