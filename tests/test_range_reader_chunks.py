"""Unit tests of the read loop's offset arithmetic (sources/range_reader.py), with a consumer
that hands out scripted chunks of real confluent-kafka Message objects: how chunks fall
depends on fetch timing, so the rare shapes are scripted here rather than waited for."""

from __future__ import annotations

import pytest
from confluent_kafka import Message, TopicPartition

from sources.offsets import OffsetRange
from sources.range_reader import _read_assigned


class ScriptedConsumer:
    """consume() returns the next scripted chunk (then nothing); position() is the offset
    after the last record handed out, as librdkafka's application position."""

    def __init__(self, chunks: list[list[tuple[str, int, int]]]) -> None:
        self.chunks = [[Message(topic=t, partition=p, offset=o, key=b"k%d" % o, value=b"v%d" % o,
                                timestamp=(1, 1000 + o)) for t, p, o in c] for c in chunks]
        self.pos = -1001

    def consume(self, num_messages: int, timeout: float) -> list:
        if not self.chunks:
            return []
        chunk = self.chunks.pop(0)
        if len(chunk) > num_messages:  # as librdkafka: at most num_messages, the rest later
            chunk, rest = chunk[:num_messages], chunk[num_messages:]
            self.chunks.insert(0, rest)
        if chunk:
            self.pos = chunk[-1].offset() + 1
        return chunk

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tps[0].topic, tps[0].partition, self.pos)]


def _offsets(r: OffsetRange, consumer: ScriptedConsumer) -> list[int]:
    batches = list(_read_assigned(consumer, r, False, 1000, 2_000, True))
    return [o for b in batches for o in b.column("offset").to_pylist()]


def test_a_chunk_starting_after_a_range_that_ended_on_markers():
    # [0, 6): data 0..4, a COMMIT marker at 5; the next chunk begins at 6, past the range.
    # Its slice inside the range is empty (this raised "not enough values to unpack").
    consumer = ScriptedConsumer([[("t", 0, o) for o in range(5)], [("t", 0, 6), ("t", 0, 7)]])
    assert _offsets(OffsetRange("t", 0, 0, 6), consumer) == [0, 1, 2, 3, 4]


def test_records_before_the_range_start_are_dropped_and_the_rest_kept():
    consumer = ScriptedConsumer([[("t", 0, o) for o in range(3, 9)]])
    assert _offsets(OffsetRange("t", 0, 5, 9), consumer) == [5, 6, 7, 8]


def test_a_chunk_reaching_past_the_end_is_cut_at_the_end():
    consumer = ScriptedConsumer([[("t", 0, o) for o in (0, 1, 3, 4)], [("t", 0, 6)]])
    assert _offsets(OffsetRange("t", 0, 0, 6), consumer) == [0, 1, 3, 4]


def test_a_record_of_another_partition_fails_the_task_instead_of_ending_the_range():
    # Taken for t-1's, offset 40 would end [10, 20) at once with nothing read.
    consumer = ScriptedConsumer([[("t", 0, 40), ("t", 0, 41)]])
    with pytest.raises(RuntimeError, match="reading t-1, the consumer returned a record of t-0"):
        _offsets(OffsetRange("t", 1, 10, 20), consumer)


def test_a_consumer_that_gets_nothing_is_replaced_by_one_that_waits_longer(monkeypatch):
    # The first consumer's fetches come back empty although the range is not read (a broker
    # that cannot read within fetch.wait.max.ms); its replacement, asked from offset 3, reads.
    import sources.range_reader as rr

    monkeypatch.setattr(rr, "ESCALATE_AFTER_S", 0.05)
    first = ScriptedConsumer([[("t", 0, o) for o in range(3)]])
    second = ScriptedConsumer([[("t", 0, o) for o in range(3, 8)]])
    asked = []

    def longer_wait(next_offset: int) -> ScriptedConsumer:
        asked.append(next_offset)
        return second

    batches = list(rr._read_assigned(first, OffsetRange("t", 0, 0, 8), False, 1000, 5_000, True,
                                     longer_wait))
    assert [o for b in batches for o in b.column("offset").to_pylist()] == list(range(8))
    assert asked == [3]


class ScriptedPool:
    """The pool's three calls, recorded: each take() hands out the next scripted consumer."""

    def __init__(self, consumers: list[ScriptedConsumer]) -> None:
        self.consumers, self.calls = list(consumers), []

    def take(self, conf: dict, tp: tuple) -> ScriptedConsumer:
        consumer = self.consumers.pop(0)
        self.calls.append(("take", conf["fetch.wait.max.ms"], consumer))
        return consumer

    def discard(self, consumer: ScriptedConsumer) -> None:
        self.calls.append(("discard", None, consumer))

    def give_back(self, consumer: ScriptedConsumer, conf: dict, **_: object) -> None:
        self.calls.append(("give_back", conf["fetch.wait.max.ms"], consumer))


def test_read_range_swaps_in_the_longer_waiting_consumer_and_pools_it_afterwards(monkeypatch):
    """The replaced consumer is discarded, its successor (the next fetch wait, assigned where
    the first stopped) reads the rest and is the one given back to the pool."""
    import sources.range_reader as rr

    monkeypatch.setattr(rr, "ESCALATE_AFTER_S", 0.05)
    monkeypatch.setattr(rr, "_LEARNED_FETCH_WAIT_MS", {})
    assigned: list[list[TopicPartition]] = []
    first = ScriptedConsumer([[("t", 0, o) for o in range(3)]])
    second = ScriptedConsumer([[("t", 0, o) for o in range(3, 8)]])
    for c in (first, second):
        c.assign = assigned.append
    pool = ScriptedPool([first, second])
    conf = {"bootstrap.servers": "b:9092", "fetch.wait.max.ms": "10"}
    r = OffsetRange("t", 0, 0, 8)
    batches = list(rr.read_range(r, {"bootstrap.servers": "b:9092"}, pool=pool,
                                 poll_timeout_ms=5_000))
    assert [o for b in batches for o in b.column("offset").to_pylist()] == list(range(8))
    first_wait = rr.source_consumer_settings(conf)["fetch.wait.max.ms"]
    longer = str(rr._next_fetch_wait(int(first_wait)))
    assert pool.calls == [("take", first_wait, first), ("discard", None, first),
                          ("take", longer, second), ("give_back", longer, second)]
    assert [(tp[0].partition, tp[0].offset) for tp in assigned] == [(0, 0), (0, 3)]
    assert rr._LEARNED_FETCH_WAIT_MS == {"b:9092": int(longer)}
