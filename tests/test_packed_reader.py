"""Unit tests of the packed task's read loop (sources/packed_reader.py) with a consumer that
hands out scripted chunks of real confluent-kafka Messages from several partitions: each range
read exactly once, records beyond a range dropped, ranges ending on gaps, pieces of one
partition read in turn, foreign records and data loss. The real broker's side is in
integration_tests/source/test_packed_reader.py."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, Message, TopicPartition

from sources.consumer_pool import ConsumerPool
from sources.offsets import OffsetRange
from sources.packed_reader import read_task, waves
from sources.range_reader import DataLossError


def _msg(t: str, p: int, o: int) -> Message:
    return Message(topic=t, partition=p, offset=o, key=b"k%d" % o, value=b"v%d" % o,
                   timestamp=(1, 1000 + o))


class ScriptedConsumer:
    """consume() returns the next scripted chunk (then nothing); position() is the offset after
    the last record handed out per partition, or a scripted one (a range ending on markers)."""

    def __init__(self, chunks: list[list], positions: dict | None = None) -> None:
        self.chunks = [[_msg(*m) if isinstance(m, tuple) else m for m in c] for c in chunks]
        self.pos: dict = dict(positions or {})
        self.assigned: list[list[tuple[str, int, int]]] = []
        self.paused: list[tuple[str, int]] = []
        self.resumed: list[tuple[str, int]] = []
        self.closed = False

    def assign(self, tps) -> None:
        self.assigned.append([(tp.topic, tp.partition, tp.offset) for tp in tps])

    def unassign(self) -> None:
        pass

    def pause(self, tps) -> None:
        self.paused.extend((tp.topic, tp.partition) for tp in tps)

    def resume(self, tps) -> None:
        self.resumed.extend((tp.topic, tp.partition) for tp in tps)

    def consume(self, num_messages: int, timeout: float) -> list:
        if not self.chunks:
            return []
        chunk = self.chunks.pop(0)
        if len(chunk) > num_messages:
            chunk, rest = chunk[:num_messages], chunk[num_messages:]
            self.chunks.insert(0, rest)
        for m in chunk:
            if m.error() is None:
                self.pos[(m.topic(), m.partition())] = m.offset() + 1
        return chunk

    def position(self, tps):
        return [TopicPartition(tp.topic, tp.partition, self.pos.get((tp.topic, tp.partition), -1001))
                for tp in tps]

    def get_watermark_offsets(self, tp, timeout=None, cached=False):
        return self.watermarks

    def close(self) -> None:
        self.closed = True


def _pool(*consumers: ScriptedConsumer) -> ConsumerPool:
    queue = list(consumers)
    return ConsumerPool(factory=lambda conf: queue.pop(0), reaper=False)


def _read(ranges, *consumers, **kw):
    done: list[tuple[OffsetRange, int]] = []
    batches = list(read_task(ranges, {"bootstrap.servers": "b:1"}, pool=_pool(*consumers),
                             poll_timeout_ms=kw.pop("poll_timeout_ms", 2_000),
                             on_range_done=lambda r, n: done.append((r, n)), **kw))
    rows = [(t, p, o) for b in batches
            for t, p, o in zip(b.column("topic").to_pylist(), b.column("partition").to_pylist(),
                               b.column("offset").to_pylist())]
    return rows, done, batches


def test_interleaved_partitions_each_read_exactly_once_within_their_ranges():
    ranges = [OffsetRange("a", 0, 2, 5), OffsetRange("a", 1, 0, 3), OffsetRange("b", 0, 10, 12)]
    consumer = ScriptedConsumer([
        [("a", 0, 2), ("a", 0, 3), ("a", 1, 0), ("b", 0, 10)],
        [("a", 1, 1), ("a", 1, 2), ("a", 1, 3), ("a", 0, 4), ("a", 0, 5), ("b", 0, 11)],
        [("a", 0, 6)],  # fetched before a-0 was paused: beyond its range
    ])
    rows, done, batches = _read(ranges, consumer)
    assert sorted(rows) == [("a", 0, 2), ("a", 0, 3), ("a", 0, 4), ("a", 1, 0), ("a", 1, 1),
                            ("a", 1, 2), ("b", 0, 10), ("b", 0, 11)]
    assert sorted(done) == [(ranges[0], 3), (ranges[1], 3), (ranges[2], 2)]
    assert consumer.assigned == [[("a", 0, 2), ("a", 1, 0), ("b", 0, 10)]]
    assert sorted(consumer.paused) == [("a", 0), ("a", 1), ("b", 0)]
    # resumed before it goes back to the pool: librdkafka keeps a pause across assign()
    assert sorted(consumer.resumed) == sorted(consumer.paused)
    assert batches[0].schema.field("partition").type == "int32"


def test_records_before_a_start_are_skipped_and_batches_stay_within_batch_rows():
    ranges = [OffsetRange("a", 0, 5, 25), OffsetRange("a", 1, 0, 20)]
    consumer = ScriptedConsumer([
        [("a", 0, o) for o in range(0, 25)] + [("a", 1, o) for o in range(20)],
    ])
    rows, done, batches = _read(ranges, consumer, batch_rows=8)
    assert len(rows) == 40 == len(set(rows))
    assert all(b.num_rows <= 8 for b in batches)
    assert sorted(n for _, n in done) == [20, 20]


def test_a_range_whose_tail_is_markers_ends_by_the_consumer_position():
    ranges = [OffsetRange("a", 0, 0, 4), OffsetRange("a", 1, 0, 2)]
    consumer = ScriptedConsumer([[("a", 0, 0), ("a", 0, 1), ("a", 1, 0), ("a", 1, 1)]])
    consumer_pos = consumer.position  # a-0's commit marker at 2, then 3 aborted: position 4

    def position(tps):
        found = consumer_pos(tps)
        return [TopicPartition(tp.topic, tp.partition, 4 if tp.partition == 0 and tp.offset == 2
                               else tp.offset) for tp in found]

    consumer.position = position
    rows, done, _ = _read(ranges, consumer)
    assert sorted(rows) == [("a", 0, 0), ("a", 0, 1), ("a", 1, 0), ("a", 1, 1)]
    assert sorted(done) == [(ranges[0], 2), (ranges[1], 2)]


def test_pieces_of_one_partition_are_read_in_turn():
    ranges = [OffsetRange("a", 0, 0, 2), OffsetRange("a", 0, 2, 4), OffsetRange("a", 1, 0, 2)]
    assert waves(ranges) == [[ranges[0], ranges[2]], [ranges[1]]]
    first = ScriptedConsumer([[("a", 0, 0), ("a", 1, 0), ("a", 0, 1), ("a", 1, 1)]])
    second = ScriptedConsumer([[("a", 0, 2), ("a", 0, 3)]])
    pool = ConsumerPool(factory=lambda conf: [first, second][pool.stats.created], reaper=False)
    done: list = []
    batches = list(read_task(ranges, {"bootstrap.servers": "b:1"}, pool=pool,
                             on_range_done=lambda r, n: done.append((r, n))))
    offsets = sorted((p, o) for b in batches for p, o in
                     zip(b.column("partition").to_pylist(), b.column("offset").to_pylist()))
    assert offsets == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1)]
    assert sorted(done) == sorted([(r, 2) for r in ranges])


def test_a_record_of_a_partition_the_task_does_not_read_fails_it():
    ranges = [OffsetRange("a", 0, 0, 5), OffsetRange("a", 1, 0, 5)]
    consumer = ScriptedConsumer([[("a", 0, 0), ("z", 3, 40)]])
    with pytest.raises(RuntimeError, match="returned a record of z-3"):
        _read(ranges, consumer)
    assert consumer.closed  # never lent again


def test_a_task_that_gets_nothing_fails_naming_its_open_ranges():
    ranges = [OffsetRange("a", 0, 0, 5), OffsetRange("a", 1, 0, 5)]
    consumer = ScriptedConsumer([[("a", 0, o) for o in range(5)]])
    with pytest.raises(TimeoutError, match=r"a-1 at 0 \(range ends at 5\).*pollTimeoutMs=300"):
        _read(ranges, consumer, poll_timeout_ms=300)


def _reset_error(t: str, p: int) -> Message:
    return Message(topic=t, partition=p, offset=-1001,
                   error=KafkaError(KafkaError._AUTO_OFFSET_RESET))


def test_removed_records_fail_the_task_naming_fail_on_data_loss():
    ranges = [OffsetRange("a", 0, 0, 5), OffsetRange("a", 1, 100, 150)]
    consumer = ScriptedConsumer([[("a", 0, 0), _reset_error("a", 1)]])
    consumer.watermarks = (120, 200)
    with pytest.raises(DataLossError, match=r"offsets 100\.\.119 of a-1.*failOnDataLoss=false"):
        _read(ranges, consumer)


def test_removed_records_are_skipped_without_fail_on_data_loss_and_the_rest_is_read():
    ranges = [OffsetRange("a", 0, 0, 3), OffsetRange("a", 1, 100, 123)]
    consumer = ScriptedConsumer([
        [("a", 0, 0), _reset_error("a", 1)],
        [("a", 0, 0), ("a", 0, 1), ("a", 0, 2), ("a", 1, 120), ("a", 1, 121), ("a", 1, 122)],
    ])
    consumer.watermarks = (120, 200)
    rows, done, _ = _read(ranges, consumer, fail_on_data_loss=False)
    assert sorted(rows) == [("a", 0, 0), ("a", 0, 1), ("a", 0, 2),
                            ("a", 1, 120), ("a", 1, 121), ("a", 1, 122)]
    # re-assigned where each range resumes: a-0 after its first record, a-1 at the earliest
    assert consumer.assigned[-1] == [("a", 0, 1), ("a", 1, 120)]
    assert sorted(done) == [(ranges[0], 3), (ranges[1], 3)]
