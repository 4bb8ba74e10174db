"""The demo's input: keyed JSON events produced at a steady rate by an idempotent producer.

Each delivery report is kept as (partition, offset) -> event id: the broker's own word on what
the input topic holds, which is what the verification compares the sinks' output against.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from connectors.core.kafka.cloud_tokens import librdkafka_client_conf

ACTIONS = ("view", "click", "add_to_cart", "purchase")


@dataclass(frozen=True)
class Event:
    event_id: int
    user_id: int
    action: str
    amount: float
    event_time: str

    @property
    def key_id(self) -> int:
        """The Kafka key and partitioner input (EventProducer): the user."""
        return self.user_id

    def value(self) -> bytes:
        return json.dumps(self.__dict__, separators=(",", ":")).encode()


def sample_events(count: int, users: int, seed: int) -> list[Event]:
    rng = random.Random(seed)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    return [
        Event(
            event_id=i,
            user_id=rng.randrange(users),
            action=rng.choice(ACTIONS),
            amount=round(rng.uniform(0, 500), 2),
            event_time=(start + timedelta(milliseconds=37 * i)).isoformat(),
        )
        for i in range(count)
    ]


@dataclass
class EventProducer:
    """Produces `events` to `topic` in a background thread, at most `rate` per second (0: flat out).

    Keyed by `key_id` (the user; for `demo --upsert`'s changes, the row's id); the partition
    is `key_id % partitions`, so one key's events stay in order.
    Each partition's last event goes out alone, after a flush: a broker whose ListOffsets reports
    the last batch's base offset + 1 (the embedded one, docs/design.md#brokers) then shows the
    whole topic, so the final drain reads every event.
    """

    bootstrap_servers: str
    topic: str
    partitions: int
    events: list  # Event, or connectors.demo.changes.Change (anything with key_id, event_id, value())
    rate: float
    #: Client settings for a secured cluster (librdkafka names), from --kafka-config.
    client_config: dict[str, str] = field(default_factory=dict, repr=False)
    #: An event -> its Kafka value; None: `value()` (JSON). `demo --format avro`: Avro in the
    #: Confluent wire format (connectors.demo.avro.event_serializer).
    serialize: Callable[[Any], bytes] | None = field(default=None, repr=False)
    delivered: dict[tuple[int, int], int] = field(default_factory=dict)
    error: str | None = None
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="demo-producer", daemon=True)
        self._thread.start()

    def join(self, timeout_s: float | None = None) -> None:
        assert self._thread is not None
        self._thread.join(timeout_s)

    @property
    def done(self) -> bool:
        return self._thread is not None and not self._thread.is_alive()

    @property
    def produced(self) -> int:
        with self._lock:
            return len(self.delivered)

    def _run(self) -> None:
        try:
            self._produce_all()
        except Exception as exc:  # shown by the demo, which then fails
            self.error = f"{type(exc).__name__}: {exc}"

    def _produce_all(self) -> None:
        producer = Producer(librdkafka_client_conf(
            {
                "linger.ms": 20,
                "client.id": "kafka-eos-demo-producer",
                **self.client_config,
                # what the verification relies on: not the settings' to change
                "bootstrap.servers": self.bootstrap_servers,
                "enable.idempotence": True,
            }
        ))

        def on_delivery(err: KafkaError | None, msg: Message, event_id: int) -> None:
            if err is not None:
                self.error = f"delivery failed: {err}"
                return
            with self._lock:
                self.delivered[(msg.partition(), msg.offset())] = event_id

        last_of_partition = {e.key_id % self.partitions: e for e in self.events}
        held_back = {id(e) for e in last_of_partition.values()}
        started = time.monotonic()
        for n, event in enumerate(self.events):
            if id(event) not in held_back:
                self._send(producer, event, on_delivery)
            if self.rate > 0 and n % 50 == 0:
                ahead = n / self.rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
            if self.error:
                raise RuntimeError(self.error)
        self._flush(producer)
        for event in last_of_partition.values():
            self._send(producer, event, on_delivery)
            self._flush(producer)
        if self.error:
            raise RuntimeError(self.error)

    def _send(self, producer: Producer, event, on_delivery) -> None:
        while True:
            try:
                producer.produce(
                    self.topic,
                    key=str(event.key_id).encode(),
                    value=self.serialize(event) if self.serialize else event.value(),
                    partition=event.key_id % self.partitions,
                    on_delivery=lambda err, msg, eid=event.event_id: on_delivery(err, msg, eid),
                )
                break
            except BufferError:  # local queue full: let deliveries drain
                producer.poll(0.1)
        producer.poll(0)

    @staticmethod
    def _flush(producer: Producer) -> None:
        remaining = producer.flush(60)
        if remaining:
            raise RuntimeError(f"{remaining} events not delivered within 60 s")
