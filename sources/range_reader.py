"""Reading one offset range into Arrow record batches (runs in Spark's Python workers).

The range is read with an assign()-based consumer, never a group member, and handed to Spark
in record batches of at most `batch_rows` rows, so a worker holds one batch at a time whatever
the size of the range. Offsets inside the range that hold no record (transaction markers,
aborted records under read_committed, compacted-away keys) are gaps, not errors.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Iterator, Mapping

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from connectors.kafka_client import consumer_conf
from sources.offsets import OffsetRange

log = logging.getLogger(__name__)

HEADERS_TYPE = pa.list_(
    pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
)
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", TIMESTAMP_TYPE),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADERS_TYPE))
    return pa.schema(fields)


SPARK_SCHEMA_DDL = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
HEADERS_DDL = ", headers array<struct<key:string,value:binary>>"

class DataLossError(RuntimeError):
    """Offsets the query needs are gone (retention, deleted or recreated topic)."""


def _to_batch(r: OffsetRange, msgs: list, offsets: list[int], include_headers: bool) -> pa.RecordBatch:
    """Column by column, one comprehension each: no per-row dicts or tuples kept."""
    n = len(msgs)
    ts_types, stamps = zip(*[m.timestamp() for m in msgs])
    arrays = [
        pa.array([m.key() for m in msgs], pa.binary()),
        pa.array([m.value() for m in msgs], pa.binary()),
        pa.repeat(pa.scalar(r.topic, pa.string()), n),
        pa.repeat(pa.scalar(r.partition, pa.int32()), n),
        pa.array(offsets, pa.int64()),
        pc.multiply(pa.array(stamps, pa.int64()), 1000).cast(TIMESTAMP_TYPE),
        # librdkafka: 0 none, 1 CreateTime, 2 LogAppendTime; Spark: -1, 0, 1.
        pc.subtract(pa.array(ts_types, pa.int32()), 1),
    ]
    if include_headers:
        arrays.append(pa.array(
            [[{"key": k, "value": v} for k, v in h] if h else None
             for h in (m.headers() for m in msgs)],
            HEADERS_TYPE,
        ))
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(include_headers))


def read_range(
    r: OffsetRange,
    kafka_conf: Mapping[str, str],
    *,
    include_headers: bool = False,
    batch_rows: int = 20_000,
    poll_timeout_ms: int = 120_000,
    fail_on_data_loss: bool = True,
) -> Iterator[pa.RecordBatch]:
    """Yield the records of `r` in offset order, exactly once each."""
    if r.size == 0:
        return
    consumer = Consumer(consumer_conf(kafka_conf))
    consumer.assign([TopicPartition(r.topic, r.partition, r.from_offset)])
    next_offset = r.from_offset
    idle_since = time.monotonic()
    pending: list = []  # messages of the batch being built
    pending_offsets: list[int] = []
    try:
        while next_offset < r.until_offset:
            msgs = consumer.consume(num_messages=min(batch_rows, 10_000), timeout=0.5)
            if not msgs:
                position = consumer.position([TopicPartition(r.topic, r.partition)])[0].offset
                if position >= r.until_offset:
                    break  # the tail of the range is markers or aborted records
                if (time.monotonic() - idle_since) * 1000 > poll_timeout_ms:
                    raise TimeoutError(
                        f"kafka-eos: no record of {r.topic}-{r.partition} at or after offset "
                        f"{next_offset} within kafkaConsumer.pollTimeoutMs={poll_timeout_ms} "
                        f"(range ends at {r.until_offset}); is the broker reachable?"
                    )
                continue
            idle_since = time.monotonic()
            if any([m.error() is not None for m in msgs]):
                next_offset = _take_slowly(consumer, r, msgs, next_offset, fail_on_data_loss,
                                           pending, pending_offsets)
            else:
                # One partition, so offsets ascend: keep the slice inside [next, until).
                offs = [m.offset() for m in msgs]
                lo = bisect.bisect_left(offs, next_offset)
                hi = bisect.bisect_left(offs, r.until_offset)
                pending.extend(msgs[lo:hi])
                pending_offsets.extend(offs[lo:hi])
                if hi < len(offs):
                    next_offset = r.until_offset
                elif hi > lo:
                    next_offset = offs[hi - 1] + 1
            if len(pending) >= batch_rows:
                yield _to_batch(r, pending, pending_offsets, include_headers)
                pending, pending_offsets = [], []
        if pending:
            yield _to_batch(r, pending, pending_offsets, include_headers)
    finally:
        consumer.close()


def _take_slowly(consumer, r: OffsetRange, msgs: list, next_offset: int, fail: bool,
                 pending: list, pending_offsets: list[int]) -> int:
    """Message by message, for the rare chunk that carries an error event."""
    for m in msgs:
        err = m.error()
        if err is not None:
            next_offset = _handle_error(consumer, r, err, next_offset, fail)
            continue
        off = m.offset()
        if off < next_offset:
            continue  # re-delivered after a re-assign; already taken
        if off >= r.until_offset:
            return r.until_offset
        pending.append(m)
        pending_offsets.append(off)
        next_offset = off + 1
    return next_offset


def _handle_error(
    consumer: Consumer, r: OffsetRange, err: KafkaError, next_offset: int, fail: bool
) -> int:
    """Offsets out of range mean data loss; anything else non-retriable is raised."""
    if err.code() == KafkaError._PARTITION_EOF:
        return next_offset
    if err.code() in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET):
        low, _high = consumer.get_watermark_offsets(
            TopicPartition(r.topic, r.partition), timeout=10, cached=False
        )
        message = (
            f"kafka-eos: offsets {next_offset}..{min(low, r.until_offset) - 1} of "
            f"{r.topic}-{r.partition} are no longer available (earliest is now {low}); "
            "records were removed by retention or the topic was deleted"
        )
        if fail:
            raise DataLossError(
                message + ". Set failOnDataLoss=false to skip them with a warning instead."
            )
        log.warning("%s; skipping them because failOnDataLoss=false", message)
        resume = max(low, next_offset)
        if resume < r.until_offset:
            consumer.assign([TopicPartition(r.topic, r.partition, resume)])
        return resume
    if err.retriable():
        log.warning("kafka-eos: transient error reading %s-%s: %s", r.topic, r.partition, err)
        return next_offset
    raise KafkaException(err)
