"""Reading a packed task's ranges (sources/task_packing.py): several partitions with one
consumer, at once.

Read one after another, small ranges cost what packing saved: a pooled consumer re-assigned to
each range took 17-24 ms a range of 4 records on a local Apache Kafka (one fetch round trip and
the wait for the fetch still outstanding at its broker, per range), 200 ranges 3-5 s. Assigned
together, the same 200 ranges came in 50-140 ms: librdkafka asks each broker for all of its
partitions in one fetch. So a task assigns every range at its start offset, takes each record
into the range of its partition (offset order within a partition, as Kafka delivers), pauses a
partition once its range is read, and hands Spark record batches of at most `batch_rows` rows
mixing the partitions. A task holding two pieces of one partition (`maxRecordsPerPartition`
split it) reads them in turn: one consumer cannot be assigned a partition twice.

What a range read guarantees is kept from sources/range_reader.py (whose single-range path a
task of one range still takes): each record of each range exactly once, offsets that hold no
record (transaction markers, aborted records) are gaps, removed records are data loss, a
consumer that only gets empty fetches moves to a longer fetch wait, one that gets nothing for
`kafkaConsumer.pollTimeoutMs` fails the task, and the consumer goes back to the pool only when
the whole task was read.
"""

from __future__ import annotations

import bisect
import gc
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from connectors.core.kafka.client import is_transient
from sources import arrow_build
from sources import range_reader as rr
from sources.consumer_pool import DEFAULT_CAPACITY, DEFAULT_TIMEOUT_MS, POOL, ConsumerPool
from sources.offsets import OffsetRange

log = logging.getLogger(__name__)

TP = tuple[str, int]
#: Called once per range, when its last record is taken (before Spark has it): the range and
#: the rows it held.
RangeDone = Callable[[OffsetRange, int], None]

_TOPIC, _PARTITION, _OFFSET, _ERROR = Message.topic, Message.partition, Message.offset, Message.error


def read_task(
    ranges: Sequence[OffsetRange],
    kafka_conf: Mapping[str, str],
    *,
    include_headers: bool = False,
    batch_rows: int = 20_000,
    poll_timeout_ms: int = 120_000,
    fail_on_data_loss: bool = True,
    cache_capacity: int = DEFAULT_CAPACITY,
    cache_timeout_ms: int = DEFAULT_TIMEOUT_MS,
    pool: ConsumerPool | None = None,
    on_range_done: RangeDone | None = None,
) -> Iterator[pa.RecordBatch]:
    """Yield the records of every range of one task, each exactly once, in offset order
    within each partition."""
    settings = dict(include_headers=include_headers, batch_rows=batch_rows,
                    poll_timeout_ms=poll_timeout_ms, fail_on_data_loss=fail_on_data_loss,
                    cache_capacity=cache_capacity, cache_timeout_ms=cache_timeout_ms, pool=pool)
    for wave in waves([r for r in ranges if r.size > 0]):
        if len(wave) == 1:
            (r,) = wave
            rows = 0
            for batch in rr.read_range(r, kafka_conf, **settings):  # type: ignore[arg-type]
                rows += batch.num_rows
                yield batch
            if on_range_done is not None:
                on_range_done(r, rows)
        else:
            yield from _read_wave(wave, kafka_conf, on_range_done=on_range_done,
                                  **settings)  # type: ignore[arg-type]


def waves(ranges: Sequence[OffsetRange]) -> list[list[OffsetRange]]:
    """The ranges in groups of at most one range per partition: the i-th range of each
    partition (in offset order) in group i."""
    by_tp: dict[TP, list[OffsetRange]] = {}
    for r in sorted(ranges):
        by_tp.setdefault((r.topic, r.partition), []).append(r)
    depth = max((len(v) for v in by_tp.values()), default=0)
    return [[v[i] for v in by_tp.values() if i < len(v)] for i in range(depth)]


@dataclass
class _Reading:
    """One range being read: where reading resumes, and what it has yielded so far."""

    range: OffsetRange
    next_offset: int
    rows: int = 0
    done: bool = False


class _MixedColumns(rr._Columns):
    """A record batch being built from several partitions: the columns of range_reader's,
    plus the (topic, partition) of each run of rows."""

    def __init__(self, include_headers: bool) -> None:
        super().__init__(include_headers)
        self.runs: list[tuple[str, int, int]] = []

    def add_run(self, tp: TP, msgs: list, offsets: list[int]) -> None:
        self.add_chunk(msgs, offsets)
        if self.runs and self.runs[-1][:2] == tp:
            self.runs[-1] = (tp[0], tp[1], self.runs[-1][2] + len(offsets))
        else:
            self.runs.append((tp[0], tp[1], len(offsets)))

    def batch(self) -> pa.RecordBatch:
        topics = pa.concat_arrays([arrow_build.repeated_string(t, n) for t, _, n in self.runs])
        partitions = pa.concat_arrays([arrow_build.repeated_int32(p, n)
                                       for _, p, n in self.runs])
        return self.to_batch_of(topics, partitions)


def _read_wave(
    wave: list[OffsetRange], kafka_conf: Mapping[str, str], *, include_headers: bool,
    batch_rows: int, poll_timeout_ms: int, fail_on_data_loss: bool, cache_capacity: int,
    cache_timeout_ms: int, pool: ConsumerPool | None, on_range_done: RangeDone | None,
) -> Iterator[pa.RecordBatch]:
    """Ranges of distinct partitions, with one pooled consumer (given back only when every
    range was read; closed after anything else)."""
    pool = POOL if pool is None else pool
    base = rr.source_consumer_settings(kafka_conf)
    family = str(base.get("bootstrap.servers", ""))
    user_wait = "fetch.wait.max.ms" in kafka_conf
    conf = rr._with_fetch_wait(base, None if user_wait else rr._LEARNED_FETCH_WAIT_MS.get(family))
    first = (wave[0].topic, wave[0].partition)
    reader = _WaveReader(wave, include_headers, batch_rows, poll_timeout_ms, fail_on_data_loss,
                         on_range_done)
    reader.consumer = pool.take(conf, first)
    completed = False

    def longer_wait() -> bool:
        """Replace the consumer by one with the next fetch wait; False if there is none."""
        nonlocal conf
        wait = rr._next_fetch_wait(int(conf["fetch.wait.max.ms"]))
        if user_wait or wait is None:
            return False
        log.warning(
            "kafka-eos: fetches of %s came back empty for %.0f s although their ranges are not "
            "read; the broker may not read within fetch.wait.max.ms=%s, so this process's "
            "consumers now wait up to %d ms (set kafka.fetch.wait.max.ms to choose)",
            reader.describe_open(), rr.ESCALATE_AFTER_S, conf["fetch.wait.max.ms"], wait)
        rr._LEARNED_FETCH_WAIT_MS[family] = wait
        pool.discard(reader.consumer)
        conf = rr._with_fetch_wait(base, wait)
        reader.consumer = pool.take(conf, first)
        reader.assign_open()
        return True

    try:
        reader.assign_open()
        yield from reader.read(longer_wait)
        completed = reader.resume_paused()
    finally:
        if completed:
            pool.give_back(reader.consumer, conf, tp=first, capacity=cache_capacity,
                           timeout_ms=cache_timeout_ms)
        else:
            pool.discard(reader.consumer)


class _WaveReader:
    """The read loop of one wave: range_reader._read_assigned's, over several partitions."""

    consumer: object

    def __init__(self, wave: list[OffsetRange], include_headers: bool, batch_rows: int,
                 poll_timeout_ms: int, fail_on_data_loss: bool,
                 on_range_done: RangeDone | None) -> None:
        self.reading = {(r.topic, r.partition): _Reading(r, r.from_offset) for r in wave}
        self.open = dict(self.reading)  # the ranges not read whole yet, in the wave's order
        self.include_headers = include_headers
        self.batch_rows = batch_rows
        self.poll_timeout_ms = poll_timeout_ms
        self.fail = fail_on_data_loss
        self.on_range_done = on_range_done
        self.pending = _MixedColumns(include_headers)

    # -- the consumer's assignment -------------------------------------------------------------

    def assign_open(self) -> None:
        """Assign the ranges not read yet, each where its reading resumes. assign() replaces
        the assignment and drops whatever was fetched for it: records already taken come
        again and are skipped by offset."""
        self.consumer.assign([TopicPartition(t, p, s.next_offset)  # type: ignore[attr-defined]
                              for (t, p), s in self.open.items()])

    def resume_paused(self) -> bool:
        """Resume the partitions paused when their ranges were read, before the consumer goes
        back to the pool: librdkafka keeps a partition paused across unassign() and assign()
        (seen: the next task's assignment of the same partitions fetched nothing). False if
        that failed: the consumer is then closed, not pooled."""
        try:
            self.consumer.resume([TopicPartition(t, p)  # type: ignore[attr-defined]
                                  for t, p in self.reading])
            return True
        except KafkaException as e:
            log.info("kafka-eos: closing a consumer whose partitions could not be resumed: %s", e)
            return False

    def _finish(self, tp: TP) -> None:
        state = self.open.pop(tp)
        state.done = True
        try:  # stop fetching it; what was fetched beyond its range is dropped by offset
            self.consumer.pause([TopicPartition(*tp)])  # type: ignore[attr-defined]
        except KafkaException as e:
            log.debug("kafka-eos: pausing %s-%s failed (%s); its records are dropped", *tp, e)
        if self.on_range_done is not None:
            self.on_range_done(state.range, state.rows)

    def describe_open(self, most: int = 5) -> str:
        names = [f"{r.range.topic}-{r.range.partition} at {r.next_offset} (range ends at "
                 f"{r.range.until_offset})" for r in list(self.open.values())[:most]]
        more = len(self.open) - most
        return ", ".join(names) + (f" and {more} more" if more > 0 else "")

    # -- the loop ------------------------------------------------------------------------------

    def read(self, longer_wait: Callable[[], bool]) -> Iterator[pa.RecordBatch]:
        idle_since = time.monotonic()
        progress_since = idle_since
        wait_s = rr.EMPTY_WAIT_FIRST_S
        # As in range_reader: no cyclic GC while a batch is built (each consume() allocates
        # thousands of GC-tracked Messages); it runs while the batch is handed on.
        gc_was_enabled = gc.isenabled()
        try:
            gc.disable()
            while self.open:
                # Never ask for more than the ranges still hold (a short read would wait out
                # the timeout for records that do not exist), nor for more than the batch
                # being built has room for (batches of at most batch_rows rows).
                left = sum(s.range.until_offset - s.next_offset for s in self.open.values())
                want = min(self.batch_rows - len(self.pending), 10_000, left)
                msgs = self.consumer.consume(num_messages=want, timeout=wait_s)  # type: ignore[attr-defined]
                if not msgs:
                    if self._ended_on_gaps():
                        continue
                    now = time.monotonic()
                    if now - progress_since > rr.ESCALATE_AFTER_S and longer_wait():
                        progress_since, wait_s = now, rr.EMPTY_WAIT_FIRST_S
                        continue
                    if (now - idle_since) * 1000 > self.poll_timeout_ms:
                        raise TimeoutError(
                            f"kafka-eos: no record of {self.describe_open()} within "
                            f"kafkaConsumer.pollTimeoutMs={self.poll_timeout_ms}; is the "
                            "broker reachable?")
                    wait_s = min(wait_s * 2, rr.EMPTY_WAIT_MAX_S)
                    continue
                idle_since = progress_since = time.monotonic()
                wait_s = rr.EMPTY_WAIT_FIRST_S
                if any(map(_ERROR, msgs)):
                    self._take_slowly(msgs)
                else:
                    self._take(msgs)
                del msgs
                if len(self.pending) >= self.batch_rows:
                    batch = self._flush()
                    if gc_was_enabled:
                        gc.enable()
                    yield batch
                    del batch
                    gc.disable()
            if gc_was_enabled:
                gc.enable()
            if len(self.pending):
                yield self._flush()
        finally:
            if gc_was_enabled:
                gc.enable()

    def _flush(self) -> pa.RecordBatch:
        batch = self.pending.batch()
        self.pending = _MixedColumns(self.include_headers)
        return batch

    def _ended_on_gaps(self) -> bool:
        """After an empty poll: the ranges whose consumer position is at or past their end
        (their tails were transaction markers or aborted records) are read. True if any."""
        tps = [TopicPartition(t, p) for t, p in self.open]
        ended = [(tp.topic, tp.partition) for tp in self.consumer.position(tps)  # type: ignore[attr-defined]
                 if tp.offset >= self.open[(tp.topic, tp.partition)].range.until_offset]
        for tp in ended:
            self._finish(tp)
        return bool(ended)

    def _state(self, tp: TP, offset: int) -> _Reading:
        state = self.reading.get(tp)
        if state is None:
            # A record of a partition this task does not read (a pooled consumer's earlier
            # assignment): never taken for another partition's. Not expected of librdkafka.
            raise RuntimeError(
                f"kafka-eos: reading {self.describe_open()}, the consumer returned a record of "
                f"{tp[0]}-{tp[1]} (offset {offset}); the task fails rather than mistake it for "
                "a record of its ranges")
        return state

    def _take(self, msgs: list) -> None:
        """A chunk without errors: runs of records of one partition each, in offset order."""
        topics = list(map(_TOPIC, msgs))
        partitions = list(map(_PARTITION, msgs))
        offsets = list(map(_OFFSET, msgs))
        start = 0
        n = len(msgs)
        while start < n:
            tp = (topics[start], partitions[start])
            end = start + 1
            while end < n and partitions[end] == tp[1] and topics[end] == tp[0]:
                end += 1
            self._take_run(tp, msgs[start:end], offsets[start:end])
            start = end

    def _take_run(self, tp: TP, msgs: list, offs: list[int]) -> None:
        state = self._state(tp, offs[0])
        if state.done:
            return  # fetched before the partition was paused: beyond its range
        until = state.range.until_offset
        lo = bisect.bisect_left(offs, state.next_offset)
        hi = bisect.bisect_left(offs, until)
        if hi > lo:
            self.pending.add_run(tp, msgs[lo:hi], offs[lo:hi])
            state.rows += hi - lo
            state.next_offset = offs[hi - 1] + 1
        if hi < len(offs) or state.next_offset >= until:
            state.next_offset = until
            self._finish(tp)

    def _take_slowly(self, msgs: list) -> None:
        """Message by message, for the rare chunk that carries an error event."""
        for m in msgs:
            err = m.error()
            if err is None:
                tp = (m.topic(), m.partition())
                self._take_run(tp, [m], [m.offset()])
                continue
            tp = (m.topic(), m.partition())
            state = self.reading.get(tp) if tp[0] is not None else None
            if state is None or state.done:
                # Not about one of the open ranges: the consumer's own (a broker down).
                if err.code() == KafkaError._PARTITION_EOF or is_transient(KafkaException(err)):
                    log.warning("kafka-eos: transient error reading %s: %s",
                                self.describe_open(), err)
                    continue
                raise KafkaException(err)

            def reposition(resume: int, state: _Reading = state) -> None:
                state.next_offset = resume
                self.assign_open()

            state.next_offset = rr._handle_error(self.consumer, state.range, err,
                                                 state.next_offset, self.fail, reposition)
            if state.next_offset >= state.range.until_offset:
                self._finish(tp)
