"""Reading one offset range into Arrow record batches (runs in Spark's Python workers).

The range is read with an assign()-based consumer, never a group member, and handed to Spark
in record batches of at most `batch_rows` rows, so a worker holds one batch at a time whatever
the size of the range. Offsets inside the range that hold no record (transaction markers,
aborted records under read_committed, compacted-away keys) are gaps, not errors.
"""

from __future__ import annotations

import bisect
import gc
import logging
import time
from collections.abc import Callable, Iterator, Mapping

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from connectors.core.kafka.client import RetryPolicy, is_transient
from sources import arrow_build
from sources.consumer_pool import DEFAULT_CAPACITY, DEFAULT_TIMEOUT_MS, POOL, ConsumerPool
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

#: librdkafka settings of the source's consumers unless the user's `kafka.*` options say
#: otherwise. A range ends at offsets that exist, so a fetch waits at the end of the log only at
#: its tail, and a pooled consumer's next assignment waits for the fetch still outstanding at its
#: broker (librdkafka keeps one in flight per broker): both cost up to `fetch.wait.max.ms`
#: (librdkafka's default 500), now 10 ms. A fetch that finds data returns at once either way,
#: so large ranges read as fast as before.
FETCH_DEFAULTS = {
    "fetch.wait.max.ms": "10",
}

#: For the embedded demo broker. A broker may answer a fetch with no records, although they
#: exist, when it cannot read them within `fetch.wait.max.ms`: Tansu (the demo's embedded
#: broker) does once a partition holds some 15,000 record batches (measured: every 10 ms fetch
#: of such a partition came back empty, a 500 ms one at once), and a range then stalled until
#: pollTimeoutMs failed the task. Apache Kafka answers as soon as it has data, so there this
#: should not fire: ranges end at or below the last stable offset, and transaction markers,
#: aborted records and compacted-away offsets inside a range are stepped over by librdkafka,
#: whose position moves past them (checked on Kafka 4.4: ranges that start, end or lie wholly
#: inside an aborted transaction or on a marker end within milliseconds). It is kept because
#: the demo needs it, and it is safe on both: a longer wait delays only a fetch at the end of
#: the log, never what is read. So when a consumer with the short default wait makes no
#: progress for ESCALATE_AFTER_S while records it has not read are known to exist, it is
#: replaced by one with the next, longer wait, and this process's later consumers of that
#: cluster start with it. A `kafka.fetch.wait.max.ms` set by the user is left alone.
FETCH_WAIT_STEPS_MS = (10, 500, 5_000)
ESCALATE_AFTER_S = 1.0
#: bootstrap.servers -> the fetch.wait.max.ms this process has learned that cluster needs
_LEARNED_FETCH_WAIT_MS: dict[str, int] = {}

#: consume() waits this long at first when the queue is empty, doubling while it stays empty up
#: to EMPTY_WAIT_MAX_S; after each empty wait the consumer's position says whether the range is
#: done (its tail was transaction markers or aborted records), so that costs milliseconds.
EMPTY_WAIT_FIRST_S = 0.005
EMPTY_WAIT_MAX_S = 0.5


def source_consumer_settings(kafka_conf: Mapping[str, str]) -> dict[str, str]:
    """The settings a task's consumer is created with (and pooled by)."""
    return {**FETCH_DEFAULTS, **kafka_conf}


class DataLossError(RuntimeError):
    """Offsets the query needs are gone (retention, deleted or recreated topic)."""


_KEY, _VALUE, _TIMESTAMP, _HEADERS = Message.key, Message.value, Message.timestamp, Message.headers
_OFFSET, _ERROR = Message.offset, Message.error


class _Columns:
    """The batch being built, column by column. Each consume() chunk is taken apart at once,
    so no Message outlives its chunk: kept Messages (GC-tracked, 20k a batch) made the cyclic
    garbage collector traverse them over and over, half of the read path's time."""

    def __init__(self, include_headers: bool) -> None:
        self.include_headers = include_headers
        self.keys: list = []
        self.values: list = []
        self.offsets: list[int] = []
        self.stamps: list[int] = []
        self.ts_types: list[int] = []
        self.headers: list | None = [] if include_headers else None

    def __len__(self) -> int:
        return len(self.offsets)

    def add_chunk(self, msgs: list, offsets: list[int]) -> None:
        """Messages without errors, one partition, in offset order."""
        # map() over the C methods: no Python frame per message.
        self.offsets.extend(offsets)
        self.keys.extend(map(_KEY, msgs))
        self.values.extend(map(_VALUE, msgs))
        ts_types, stamps = zip(*map(_TIMESTAMP, msgs))
        self.ts_types.extend(ts_types)
        self.stamps.extend(stamps)
        if self.headers is not None:
            self.headers.extend(map(_HEADERS, msgs))

    def add(self, m, offset: int) -> None:
        self.add_chunk([m], [offset])

    def to_batch(self, r: OffsetRange) -> pa.RecordBatch:
        n = len(self.offsets)
        return self.to_batch_of(arrow_build.repeated_string(r.topic, n),
                                arrow_build.repeated_int32(r.partition, n))

    def to_batch_of(self, topics: pa.Array, partitions: pa.Array) -> pa.RecordBatch:
        """The batch, with its topic and partition columns given (records of several
        partitions: sources/packed_reader.py). Built through buffers (sources/arrow_build.py):
        pa.array would import pandas into every worker that reads."""
        arrays = [
            arrow_build.binary(self.keys),
            arrow_build.binary(self.values),
            topics,
            partitions,
            arrow_build.int64(self.offsets),
            arrow_build.timestamps_us(self.stamps, TIMESTAMP_TYPE),
            # librdkafka: 0 none, 1 CreateTime, 2 LogAppendTime; Spark: -1, 0, 1.
            arrow_build.int32_minus_one(self.ts_types),
        ]
        if self.headers is not None:
            arrays.append(pa.array(
                [[{"key": k, "value": v} for k, v in h] if h else None for h in self.headers],
                HEADERS_TYPE,
            ))
        return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(self.include_headers))


def read_range(
    r: OffsetRange,
    kafka_conf: Mapping[str, str],
    *,
    include_headers: bool = False,
    batch_rows: int = 20_000,
    poll_timeout_ms: int = 120_000,
    fail_on_data_loss: bool = True,
    cache_capacity: int = DEFAULT_CAPACITY,
    cache_timeout_ms: int = DEFAULT_TIMEOUT_MS,
    pool: ConsumerPool | None = None,
) -> Iterator[pa.RecordBatch]:
    """Yield the records of `r` in offset order, exactly once each.

    The consumer comes from the process's pool (sources/consumer_pool.py) and goes back to it
    only when the whole range was read; after anything else (an error, data loss, the reader
    stopped early) it is closed."""
    if r.size == 0:
        return
    pool = POOL if pool is None else pool
    base = source_consumer_settings(kafka_conf)
    # What the wait must be is the brokers' property: learned per cluster, not per query.
    family = str(base.get("bootstrap.servers", ""))
    user_wait = "fetch.wait.max.ms" in kafka_conf
    conf = _with_fetch_wait(base, None if user_wait else _LEARNED_FETCH_WAIT_MS.get(family))
    tp = (r.topic, r.partition)
    consumer = pool.take(conf, tp)  # the one reading now (replaced if it must wait longer)
    completed = False

    def longer_wait(next_offset: int) -> Consumer | None:
        """The consumer replaced by one with the next fetch wait, assigned at `next_offset`;
        None if there is none."""
        nonlocal conf, consumer
        wait = _next_fetch_wait(int(conf["fetch.wait.max.ms"]))
        if user_wait or wait is None:
            return None
        log.warning(
            "kafka-eos: fetches of %s-%s at offset %d came back empty for %.0f s although the "
            "range ends at %d; the broker may not read within fetch.wait.max.ms=%s, so this "
            "process's consumers now wait up to %d ms (set kafka.fetch.wait.max.ms to choose)",
            r.topic, r.partition, next_offset, ESCALATE_AFTER_S, r.until_offset,
            conf["fetch.wait.max.ms"], wait,
        )
        _LEARNED_FETCH_WAIT_MS[family] = wait
        pool.discard(consumer)
        conf = _with_fetch_wait(base, wait)
        consumer = pool.take(conf, tp)
        consumer.assign([TopicPartition(r.topic, r.partition, next_offset)])
        return consumer

    try:
        consumer.assign([TopicPartition(r.topic, r.partition, r.from_offset)])
        yield from _read_assigned(consumer, r, include_headers, batch_rows, poll_timeout_ms,
                                  fail_on_data_loss, longer_wait)
        completed = True
    finally:
        if completed:
            pool.give_back(consumer, conf, tp=tp, capacity=cache_capacity,
                           timeout_ms=cache_timeout_ms)
        else:
            pool.discard(consumer)


def _with_fetch_wait(conf: dict[str, str], wait_ms: int | None) -> dict[str, str]:
    return conf if wait_ms is None else {**conf, "fetch.wait.max.ms": str(wait_ms)}


def _next_fetch_wait(current_ms: int) -> int | None:
    return next((w for w in FETCH_WAIT_STEPS_MS if w > current_ms), None)


def _read_assigned(
    consumer: Consumer, r: OffsetRange, include_headers: bool, batch_rows: int,
    poll_timeout_ms: int, fail_on_data_loss: bool,
    longer_wait: Callable[[int], Consumer | None] | None = None,
) -> Iterator[pa.RecordBatch]:
    """`consumer` is assigned at the range's start; `longer_wait(next_offset)` gives one with a
    longer fetch wait in its place, or None (see FETCH_WAIT_STEPS_MS)."""
    next_offset = r.from_offset
    idle_since = time.monotonic()
    progress_since = idle_since  # the last record, or the last change of consumer
    wait_s = EMPTY_WAIT_FIRST_S
    pending = _Columns(include_headers)  # the batch being built
    # The cyclic garbage collector is paused while a batch is built, and runs as before while
    # the batch is handed on: each consume() allocates thousands of GC-tracked Messages,
    # which set off collections that traverse every live object again and again (half of the
    # read path's time in the profile). The loop makes no reference cycles.
    gc_was_enabled = gc.isenabled()
    try:
        gc.disable()
        while next_offset < r.until_offset:
            # consume() returns when it has num_messages or the timeout expired: never ask for
            # more than the range still holds, or a short range waits out the timeout.
            want = min(batch_rows, 10_000, r.until_offset - next_offset)
            msgs = consumer.consume(num_messages=want, timeout=wait_s)
            if not msgs:
                position = consumer.position([TopicPartition(r.topic, r.partition)])[0].offset
                if position >= r.until_offset:
                    break  # the tail of the range is markers or aborted records
                now = time.monotonic()
                replaced = (longer_wait(next_offset) if longer_wait is not None
                            and now - progress_since > ESCALATE_AFTER_S else None)
                if replaced is not None:
                    consumer, progress_since, wait_s = replaced, now, EMPTY_WAIT_FIRST_S
                    continue
                if (now - idle_since) * 1000 > poll_timeout_ms:
                    raise TimeoutError(
                        f"kafka-eos: no record of {r.topic}-{r.partition} at or after offset "
                        f"{next_offset} within kafkaConsumer.pollTimeoutMs={poll_timeout_ms} "
                        f"(range ends at {r.until_offset}); is the broker reachable?"
                    )
                wait_s = min(wait_s * 2, EMPTY_WAIT_MAX_S)
                continue
            idle_since = progress_since = time.monotonic()
            wait_s = EMPTY_WAIT_FIRST_S
            if any(map(_ERROR, msgs)):  # KafkaError is truthy, None is not
                next_offset = _take_slowly(consumer, r, msgs, next_offset, fail_on_data_loss,
                                           pending)
            else:
                next_offset = _take_chunk(msgs, r, next_offset, pending)
            del msgs  # before the next consume(): the chunk's Messages go now
            if len(pending) >= batch_rows:
                batch = pending.to_batch(r)
                pending = _Columns(include_headers)
                if gc_was_enabled:
                    gc.enable()
                yield batch
                del batch
                gc.disable()
        if gc_was_enabled:
            gc.enable()
        if len(pending):
            yield pending.to_batch(r)
    finally:
        if gc_was_enabled:
            gc.enable()


def _take_chunk(msgs: list, r: OffsetRange, next_offset: int, pending: _Columns) -> int:
    """A chunk without errors into `pending`, its part inside [next_offset, until); returns
    the next offset to read."""
    _check_partition(msgs, r)
    # One partition, so offsets ascend: keep the slice inside [next, until).
    offs = list(map(_OFFSET, msgs))
    lo = bisect.bisect_left(offs, next_offset)
    hi = bisect.bisect_left(offs, r.until_offset)
    beyond = hi < len(offs)  # the chunk reaches past the range's end
    if lo or beyond:
        msgs, offs = msgs[lo:hi], offs[lo:hi]
    if offs:  # empty when the range's tail was markers and the chunk starts after it
        pending.add_chunk(msgs, offs)
    if beyond:
        return r.until_offset
    if offs:
        return offs[-1] + 1
    return next_offset


def _check_partition(msgs: list, r: OffsetRange) -> None:
    """A chunk holds records of the assigned partition only. A record of another partition
    (a pooled consumer's earlier assignment) would be taken for this one's and its offset would
    end the range early: records lost without a trace. Not expected of librdkafka (unassign()
    purges the old partition's queue), so checked cheaply, at the chunk's ends, and loudly."""
    for m in (msgs[0], msgs[-1]):
        if m.partition() != r.partition or m.topic() != r.topic:
            raise RuntimeError(
                f"kafka-eos: reading {r.topic}-{r.partition}, the consumer returned a record of "
                f"{m.topic()}-{m.partition()} (offset {m.offset()}); the task fails rather "
                "than mistake it for a record of this range"
            )


def _take_slowly(consumer, r: OffsetRange, msgs: list, next_offset: int, fail: bool,
                 pending: _Columns) -> int:
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
        pending.add(m, off)
        next_offset = off + 1
    return next_offset


def _handle_error(
    consumer: Consumer, r: OffsetRange, err: KafkaError, next_offset: int, fail: bool,
    reposition: Callable[[int], None] | None = None,
) -> int:
    """Offsets out of range mean data loss; anything else non-retriable is raised.
    `reposition(offset)` moves the consumer to where the range's reading resumes (by default
    it is assigned the range's partition alone, at that offset)."""
    if err.code() == KafkaError._PARTITION_EOF:
        return next_offset
    if err.code() in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET):
        low, _high = RetryPolicy().call(
            f"reading the earliest offset of {r.topic}-{r.partition}",
            lambda: consumer.get_watermark_offsets(
                TopicPartition(r.topic, r.partition), timeout=10, cached=False))
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
            if reposition is None:
                consumer.assign([TopicPartition(r.topic, r.partition, resume)])
            else:
                reposition(resume)
        return resume
    if is_transient(KafkaException(err)):  # a leader moving: librdkafka fetches again
        log.warning("kafka-eos: transient error reading %s-%s: %s", r.topic, r.partition, err)
        return next_offset
    if err.code() == KafkaError._AUTHENTICATION:
        # One connection's (re-)authentication failed mid-read: an OAUTHBEARER session that
        # outlived its token, a token endpoint's blip (seen in the OAuth lane, 4 s tokens: the
        # pooled consumer's "FindCoordinator response error: Local: Authentication failure",
        # which killed the task). librdkafka connects again with its current token; wrong
        # credentials fail the query at its start instead, and the read's poll timeout bounds
        # a refusal that lasts.
        log.warning("kafka-eos: an authentication failed while reading %s-%s (librdkafka "
                    "connects again): %s", r.topic, r.partition, err.str())
        return next_offset
    raise KafkaException(err)
