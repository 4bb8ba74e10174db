"""Reading one offset range into Arrow record batches (runs in Spark's Python workers).

The range is read with an assign()-based consumer, never a group member, and handed to Spark
in record batches of at most `batch_rows` rows, so a worker holds one batch at a time whatever
the size of the range. Offsets inside the range that hold no record (transaction markers,
aborted records under read_committed, compacted-away keys) are gaps, not errors.
"""

from __future__ import annotations

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

# librdkafka timestamp types -> Spark's (-1 none, 0 CreateTime, 1 LogAppendTime).
_TS_TYPE = {0: -1, 1: 0, 2: 1}


class DataLossError(RuntimeError):
    """Offsets the query needs are gone (retention, deleted or recreated topic)."""


def _to_batch(
    r: OffsetRange,
    keys: list,
    values: list,
    offsets: list,
    stamps: list,
    stamp_types: list,
    headers: list | None,
) -> pa.RecordBatch:
    n = len(offsets)
    ts = pa.array(stamps, pa.int64())
    arrays = [
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        pa.repeat(pa.scalar(r.topic, pa.string()), n),
        pa.repeat(pa.scalar(r.partition, pa.int32()), n),
        pa.array(offsets, pa.int64()),
        pc.multiply(ts, 1000).cast(TIMESTAMP_TYPE),
        pa.array(stamp_types, pa.int32()),
    ]
    if headers is not None:
        arrays.append(pa.array(headers, HEADERS_TYPE))
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(headers is not None))


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
    tp = TopicPartition(r.topic, r.partition, r.from_offset)
    consumer.assign([tp])
    next_offset = r.from_offset
    idle_since = time.monotonic()
    keys: list = []
    values: list = []
    offsets: list = []
    stamps: list = []
    stamp_types: list = []
    headers: list | None = [] if include_headers else None
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
            for m in msgs:
                err = m.error()
                if err is not None:
                    next_offset = _handle_error(consumer, r, err, next_offset, fail_on_data_loss)
                    continue
                off = m.offset()
                if off < next_offset:
                    continue  # re-delivered after a seek; already yielded
                if off >= r.until_offset:
                    next_offset = r.until_offset
                    break
                ts_type, ts = m.timestamp()
                keys.append(m.key())
                values.append(m.value())
                offsets.append(off)
                stamps.append(ts)
                stamp_types.append(_TS_TYPE.get(ts_type, -1))
                if headers is not None:
                    h = m.headers()
                    headers.append([{"key": k, "value": v} for k, v in h] if h else None)
                next_offset = off + 1
            if len(offsets) >= batch_rows:
                yield _to_batch(r, keys, values, offsets, stamps, stamp_types, headers)
                keys, values, offsets, stamps, stamp_types = [], [], [], [], []
                headers = [] if include_headers else None
        if offsets:
            yield _to_batch(r, keys, values, offsets, stamps, stamp_types, headers)
    finally:
        consumer.close()


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
