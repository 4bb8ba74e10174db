"""What the `kafka-eos` sink raises and reads beyond the template's errors: a record too large
for the producer or the broker, named with its size, key and row; the delivery errors that
mean a newer attempt fenced this producer; a cluster that refuses transactions, said plainly
at start. The commit client's own errors (EndTxn refused,
fenced, unauthorized) live with it, in commit_client.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from connectors.core.kafka.transactions_refused import (
    TransactionsUnsupported,
    refuses_transactions,
)
from connectors.core.kafka.transactions_refused import message as refused_message

#: Delivery errors that mean a newer producer took the transactional id over.
_FENCING_CODES = frozenset({KafkaError.INVALID_PRODUCER_EPOCH, KafkaError.PRODUCER_FENCED,
                            KafkaError._FENCED})


def transactions_refused(bootstrap: str, exc: Exception) -> TransactionsUnsupported | None:
    """What the sink raises when the commit client's InitProducerId at start (`exc`) says the
    cluster does not do transactions; None for any other failure."""
    if refuses_transactions(getattr(exc, "code", None), str(exc)):
        return TransactionsUnsupported(refused_message(bootstrap, str(exc)))
    return None


def fencing_delivery_error(errors: list) -> KafkaError | None:
    return next((err for err in errors
                 if isinstance(err, KafkaError) and err.code() in _FENCING_CODES), None)


#: librdkafka's default `message.max.bytes` (the producer's bound on one record, checked by
#: produce() before anything is sent) and Kafka's default `max.message.bytes` of a topic
#: (the broker's `message.max.bytes`: its bound on one record batch).
LIBRDKAFKA_MESSAGE_MAX_BYTES = 1_000_000
BROKER_MAX_MESSAGE_BYTES = 1_048_588


class RecordTooLarge(KafkaException):
    """A record over the producer's or the broker's size limit (MSG_SIZE_TOO_LARGE), named with
    its size, its key, the source row it came from when the row says so, and the settings to
    change. A KafkaException, so `except KafkaException` still catches it; its first line is
    what to change, instead of librdkafka's bare "Broker: Message size too large"."""

    def __init__(self, message: str, error: KafkaError | None = None) -> None:
        super().__init__(message)
        self.error = error

    def __str__(self) -> str:
        return str(self.args[0])


def show_key(key: Any) -> str:
    """A key for a message: text as is (up to 64 characters), bytes decoded when they are
    UTF-8 text, else their first bytes in hex; no key says so."""
    if key is None:
        return "no key"
    if isinstance(key, (bytes, bytearray, memoryview)):
        raw = bytes(key)
        try:
            key = raw.decode("utf-8")
        except UnicodeDecodeError:
            return f"key 0x{raw[:16].hex()}{'...' if len(raw) > 16 else ''} ({len(raw)} bytes)"
    text = str(key)
    return f"key {text[:64]!r}{'...' if len(text) > 64 else ''}"


def record_size(data: Any) -> int:
    if data is None:
        return 0
    return len(data.encode("utf-8")) if isinstance(data, str) else len(data)


def delivery_error(err: KafkaError, msg: Any) -> Any:
    """What a failed delivery report leaves among the task's errors: the KafkaError, or for a
    record batch the broker refused as too large, a RecordTooLarge naming the record."""
    if err is None or err.code() != KafkaError.MSG_SIZE_TOO_LARGE:
        return err
    try:
        topic, partition, key = msg.topic(), msg.partition(), msg.key()
        size = record_size(msg.value()) + record_size(key)
    except Exception:  # no record to name: the plain error
        return err
    return RecordTooLarge(
        f"record batch too large for the broker (MSG_SIZE_TOO_LARGE): it refused the batch "
        f"holding a record of {size:,} bytes ({show_key(key)}) for topic {topic} partition "
        f"{partition}: a record "
        f"batch must fit the topic's max.message.bytes (default: the broker's "
        f"message.max.bytes, {BROKER_MAX_MESSAGE_BYTES:,}). Raise the topic's max.message.bytes "
        f"(kafka-configs.sh --alter --entity-type topics --entity-name {topic} --add-config "
        f"max.message.bytes=N), or keep the producer's batches under it: kafka.batch.size and "
        f"kafka.message.max.bytes at most the topic's limit", err)


def row_place(batch: Any, task: Any) -> Callable[[int], str]:
    """Describes a row of `batch` for errors: its source coordinates when the rows carry them
    (`offset`, with `topic` and `partition`: a kafka-eos source's rows written on), else its
    place in the task's (TaskInfo) input."""
    names = batch.schema.names

    def where(row: int) -> str:
        if "offset" in names:
            return "source row " + " ".join(
                f"{c} {batch.column(c)[row].as_py()}" for c in ("topic", "partition", "offset")
                if c in names)
        return (f"row {row} of Spark partition {task.partition_id}'s input in batch "
                f"{task.batch_id}")

    return where


def record_too_large(err: KafkaError, describe: str, limit: str | None, where: str, topic: str,
                     value: Any, key: Any, headers: Any = None) -> RecordTooLarge:
    """produce()'s own size check (librdkafka refuses a record over the producer's
    `message.max.bytes` before sending it) as a RecordTooLarge naming the record, where it came
    from, and the settings to change."""
    size = record_size(value) + record_size(key) + sum(
        record_size(h.get("key")) + record_size(h.get("value")) for h in headers or ())
    limit_text = (f"kafka.message.max.bytes = {limit}" if limit else
                  f"kafka.message.max.bytes = {LIBRDKAFKA_MESSAGE_MAX_BYTES:,} (librdkafka's "
                  "default)")
    return RecordTooLarge(
        f"{describe}: record too large for the producer (MSG_SIZE_TOO_LARGE): "
        f"{size:,} bytes ({show_key(key)}, {where}) for topic {topic}, over "
        f"{limit_text}. Raise .option(\"kafka.message.max.bytes\", ...) above the "
        f"record's size (the topic's max.message.bytes, default "
        f"{BROKER_MAX_MESSAGE_BYTES:,}, must allow it too), or write smaller records", err)
