"""Producing known datasets and reading them back with a raw client, for the tests' oracles."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic


@dataclass(frozen=True, order=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes


#: How long a test's input may take to be delivered (one flush waits until the queue is
#: empty or this has passed). A topic of 1,000 partitions, just created, on a broker under the
#: suite's load left 399 of 3,000 records undelivered after 30 s (run of 2026-11-28 23:40):
#: its leaders were still being elected.
FLUSH_S = 180


def unique_topic(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def create_topic(bootstrap: str, topic: str, partitions: int,
                 conf: Mapping[str, str] | None = None) -> None:
    """`conf`: extra client settings (librdkafka names), e.g. a secured cluster's."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **(conf or {})})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(timeout=30)


def delete_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics([topic]).values():
        future.result(timeout=30)


def produce(
    bootstrap: str,
    topic: str,
    partitions: int,
    per_partition: int,
    *,
    start_index: int = 0,
    headers: bool = False,
    conf: Mapping[str, str] | None = None,
) -> list[Record]:
    """Produce `per_partition` keyed records to each partition; return what the log now holds.

    Each partition's last record goes out in a batch of its own (flush before it): the local
    broker's ListOffsets reports the last batch's base offset + 1 (docs/design.md#brokers).
    Offsets are taken from the delivery reports, so the expectation is the broker's own word.
    """
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True,
                         **(conf or {})})
    delivered: list[Record] = []

    def on_delivery(err, msg):
        if err is not None:
            raise RuntimeError(f"delivery failed: {err}")
        delivered.append(
            Record(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value())
        )

    for last in (False, True):
        for p in range(partitions):
            indices = [per_partition - 1] if last else range(per_partition - 1)
            for i in indices:
                n = start_index + i
                producer.produce(
                    topic,
                    key=f"k{p}-{n}".encode(),
                    value=f"v{p}-{n}".encode(),
                    partition=p,
                    headers=[("idx", str(n).encode()), ("p", str(p).encode())] if headers else None,
                    on_delivery=on_delivery,
                )
                producer.poll(0)
        remaining = producer.flush(FLUSH_S)
        assert remaining == 0, f"{remaining} records not delivered within {FLUSH_S} s"
    return sorted(delivered)


def produce_backlog(bootstrap: str, topic: str, partitions: int, per_partition: int,
                    value: bytes) -> None:
    """`per_partition` records of `value` (no key) into each partition, as fast as one Python
    producer goes: positional produce() calls (a quarter less CPU than keywords, measured), no
    delivery callbacks, batches of up to 1 MB. What arrived is the caller's to check (the
    broker's latest offsets): millions of delivery reports would cost more than producing."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 100,
                         "batch.size": 1_000_000, "batch.num.messages": 100_000,
                         "queue.buffering.max.messages": 2_000_000,
                         "queue.buffering.max.kbytes": 1_048_576})
    send = producer.produce
    for p in range(partitions):
        for _ in range(per_partition):
            try:
                send(topic, value, None, p)
            except BufferError:  # the queue is full: let the producer send
                producer.poll(0.05)
                send(topic, value, None, p)
    remaining = producer.flush(120)
    assert remaining == 0, f"{remaining} records not delivered"
