"""The consumer pool's bookkeeping (sources/consumer_pool.py) with fake consumers, and
read_range's use of it. Real librdkafka consumers re-assigned across ranges, and reuse in a real
Spark query: integration_tests/source/test_consumer_pool.py."""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import KafkaError, Message

from connectors.core.options import OptionError
from sources.consumer_pool import ConsumerPool, pool_key
from sources.kafka_options import parse_source_options
from sources.offsets import OffsetRange
from sources.range_reader import FETCH_DEFAULTS, read_range, source_consumer_settings


class FakeConsumer:
    def __init__(self, conf, records=None, fail_unassign=False):
        self.conf = dict(conf)
        self.closed = False
        self.assigned = []
        self.unassigned = 0
        self.records = records or {}  # offset -> value
        self.position_ = -1001
        self.fail_unassign = fail_unassign
        self.asks: list[int] = []

    def unassign(self):
        if self.fail_unassign:
            raise RuntimeError("broken")
        self.unassigned += 1

    def close(self):
        assert not self.closed, "closed twice"
        self.closed = True

    def assign(self, tps):
        self.assigned.append([(tp.topic, tp.partition, tp.offset) for tp in tps])
        self.position_ = tps[0].offset
        self.topic, self.partition = tps[0].topic, tps[0].partition

    def consume(self, num_messages, timeout):
        self.asks.append(num_messages)
        out = []
        off = self.position_
        top = max(self.records) + 1 if self.records else off
        while len(out) < num_messages and off < top:
            if off in self.records:
                out.append(FakeMessage(self.topic, self.partition, off, self.records[off]))
            off += 1
        self.position_ = off
        return out

    def position(self, tps):
        return [type("TP", (), {"offset": self.position_})()]


def FakeMessage(topic, partition, offset, value):
    if isinstance(value, KafkaError):
        return Message(topic=topic, partition=partition, offset=offset, error=value)
    return Message(topic=topic, partition=partition, offset=offset, key=None, value=value,
                   timestamp=(1, 1000), headers=None, error=None)


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def make_pool(**kw):
    made = []

    def factory(conf):
        c = FakeConsumer(conf, **kw)
        made.append(c)
        return c

    clock = Clock()
    return ConsumerPool(factory=factory, clock=clock, reaper=False), made, clock


CONF_A = {"bootstrap.servers": "b:1", "group.id": "g-a"}
CONF_B = {"bootstrap.servers": "b:1", "group.id": "g-a", "sasl.password": "other"}


def test_a_returned_consumer_is_lent_again_unassigned():
    pool, made, _ = make_pool()
    c1 = pool.take(CONF_A, ("t", 0))
    pool.give_back(c1, CONF_A, tp=("t", 0))
    assert c1.unassigned == 1 and not c1.closed
    assert pool.take(CONF_A, ("t", 1)) is c1
    assert len(made) == 1
    assert (pool.stats.created, pool.stats.reused) == (1, 1)


def test_keys_differ_by_any_setting_and_never_show_values():
    assert pool_key(CONF_A) != pool_key(CONF_B)
    assert pool_key(CONF_A) == pool_key(dict(reversed(list(CONF_A.items()))))
    assert "other" not in pool_key(CONF_B) and len(pool_key(CONF_B)) == 16
    pool, made, _ = make_pool()
    c1 = pool.take(CONF_A)
    pool.give_back(c1, CONF_A)
    c2 = pool.take(CONF_B)  # other credentials: never the pooled one
    assert c2 is not c1 and len(made) == 2


def test_capacity_evicts_the_least_recently_returned_and_closes_it():
    pool, made, _ = make_pool()
    confs = [{**CONF_A, "group.id": f"g{i}"} for i in range(3)]
    taken = [pool.take(c) for c in confs]
    for c, conf in zip(taken, confs):
        pool.give_back(c, conf, capacity=2)
    assert taken[0].closed and not taken[1].closed and not taken[2].closed
    assert pool.idle_count() == 2 and pool.stats.evicted == 1


def test_capacity_zero_keeps_nothing():
    pool, _, _ = make_pool()
    c = pool.take(CONF_A)
    pool.give_back(c, CONF_A, capacity=0)
    assert c.closed and pool.idle_count() == 0


def test_idle_consumers_are_closed_after_the_timeout():
    pool, made, clock = make_pool()
    c = pool.take(CONF_A)
    pool.give_back(c, CONF_A, timeout_ms=1000)
    clock.now += 0.5
    pool.expire()
    assert not c.closed
    clock.now += 0.6
    c2 = pool.take(CONF_A)  # taking also closes what expired, then makes a new one
    assert c.closed and c2 is not c and pool.stats.expired == 1


def test_a_consumer_that_cannot_be_unassigned_is_closed():
    pool, _, _ = make_pool(fail_unassign=True)
    c = pool.take(CONF_A)
    pool.give_back(c, CONF_A)
    assert c.closed and pool.idle_count() == 0


def test_prefers_the_consumer_that_last_read_the_partition():
    pool, _, _ = make_pool()
    c0, c1 = pool.take(CONF_A, ("t", 0)), pool.take(CONF_A, ("t", 1))
    pool.give_back(c0, CONF_A, tp=("t", 0))
    pool.give_back(c1, CONF_A, tp=("t", 1))
    assert pool.take(CONF_A, ("t", 0)) is c0


def test_threads_never_share_a_consumer():
    pool, made, _ = make_pool()
    seen, lock, errors = set(), threading.Lock(), []

    def work():
        for _ in range(200):
            c = pool.take(CONF_A)
            with lock:
                if id(c) in seen:
                    errors.append("shared")
                seen.add(id(c))
            with lock:
                seen.discard(id(c))
            pool.give_back(c, CONF_A, capacity=4)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(made) <= 4 + 4


# -- read_range with the pool ----------------------------------------------------------------


def test_read_range_returns_its_consumer_only_when_the_range_completed():
    pool, made, _ = make_pool(records={o: b"v" for o in range(10)})
    rows = sum(b.num_rows for b in read_range(OffsetRange("t", 0, 2, 6), CONF_A, pool=pool))
    assert rows == 4 and pool.idle_count() == 1 and not made[0].closed
    assert made[0].conf == source_consumer_settings(CONF_A)
    assert max(made[0].asks) <= 4  # never more than the range still holds
    # The next range reuses it, assigned at its own start.
    got = [b for b in read_range(OffsetRange("t", 0, 6, 9), CONF_A, pool=pool)]
    assert len(made) == 1 and made[0].assigned[-1] == [("t", 0, 6)]
    assert got[0].column("offset").to_pylist() == [6, 7, 8]


def test_read_range_closes_a_consumer_whose_range_failed():
    err = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    pool, made, _ = make_pool(records={0: b"a", 1: err})
    with pytest.raises(Exception):
        list(read_range(OffsetRange("t", 0, 0, 3), CONF_A, pool=pool))
    assert made[0].closed and pool.idle_count() == 0


def test_read_range_stopped_early_closes_its_consumer():
    pool, made, _ = make_pool(records={o: b"v" for o in range(10)})
    it = read_range(OffsetRange("t", 0, 0, 10), CONF_A, pool=pool, batch_rows=2)
    next(it)
    it.close()
    assert made[0].closed and pool.idle_count() == 0


def test_a_tail_of_markers_ends_the_range_without_waiting():
    import time

    pool, made, _ = make_pool(records={0: b"a", 1: b"b"})  # offsets 2..4: markers
    made_before = len(made)
    r = OffsetRange("t", 0, 0, 5)

    def consumer_at_end(conf):
        c = FakeConsumer(conf, records={0: b"a", 1: b"b"})
        orig = c.consume

        def consume(num_messages, timeout):
            out = orig(num_messages, timeout)
            if not out:
                c.position_ = 5  # librdkafka moved past the control records
            return out

        c.consume = consume
        return c

    pool._factory = consumer_at_end
    t0 = time.monotonic()
    batches = list(read_range(r, CONF_A, pool=pool))
    assert time.monotonic() - t0 < 0.2
    assert sum(b.num_rows for b in batches) == 2 and len(made) == made_before


def test_fetch_defaults_yield_to_the_users_settings():
    assert source_consumer_settings(CONF_A)["fetch.wait.max.ms"] == FETCH_DEFAULTS["fetch.wait.max.ms"]
    assert source_consumer_settings({**CONF_A, "fetch.wait.max.ms": "250"})["fetch.wait.max.ms"] == "250"


# -- options ---------------------------------------------------------------------------------

BASE = {"kafka.bootstrap.servers": "b:1", "subscribe": "t"}


def test_cache_options_defaults_and_values():
    o = parse_source_options(BASE, batch=False)
    assert (o.consumer_cache_capacity, o.consumer_cache_timeout_ms) == (64, 300_000)
    o = parse_source_options({**BASE, "kafkaConsumer.cache.capacity": "0",
                              "kafkaConsumer.cache.timeout": "30s"}, batch=False)
    assert (o.consumer_cache_capacity, o.consumer_cache_timeout_ms) == (0, 30_000)


@pytest.mark.parametrize("name,value,words", [
    ("kafkaConsumer.cache.capacity", "-1", "at least 0"),
    ("kafkaConsumer.cache.capacity", "many", "whole number"),
    ("kafkaConsumer.cache.timeout", "soon", "duration"),
    ("kafkaConsumer.cache.timeout", "0", "positive duration"),
])
def test_cache_options_refused(name, value, words):
    with pytest.raises(OptionError) as e:
        parse_source_options({**BASE, name: value}, batch=False)
    assert name in str(e.value) and words in str(e.value)
