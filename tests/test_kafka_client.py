"""Retry policy and consumer configuration: pure logic, no broker."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from connectors.core.kafka.client import (
    ClusterConnectionError,
    KafkaMetadata,
    KafkaRetriesExhausted,
    RetryPolicy,
    consumer_conf,
    is_transient,
    librdkafka_conf,
)
from connectors.core.options import OptionError, Options


def _failing(times: int, code: int):
    calls = {"n": 0}

    def fn():
        calls["n"] += 1
        if calls["n"] <= times:
            raise KafkaException(KafkaError(code))
        return "ok"

    return fn, calls


class Clock:
    """time.monotonic and sleep for RetryPolicy, without waiting."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch) -> Clock:
    c = Clock()
    monkeypatch.setattr("connectors.core.kafka.client.time.monotonic", lambda: c.now)
    monkeypatch.setattr("tenacity.time.monotonic", lambda: c.now, raising=False)
    return c


def test_transient_errors_are_retried_then_succeed(clock):
    fn, calls = _failing(2, KafkaError._TRANSPORT)
    assert RetryPolicy(timeout_s=60).call("test", fn, sleep=clock.sleep) == "ok"
    assert calls["n"] == 3
    assert clock.sleeps == [0.1, 0.2]


@pytest.mark.parametrize("code", [
    KafkaError._UNKNOWN_PARTITION,  # a partition's leader moving (a broker restarted)
    KafkaError._DESTROY_BROKER,  # librdkafka dropped a restarted broker's handle
    KafkaError._TRANSPORT,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.NOT_ENOUGH_REPLICAS,
    KafkaError.REQUEST_TIMED_OUT,
])
def test_what_a_broker_restart_causes_is_transient(code):
    assert is_transient(KafkaException(KafkaError(code)))


def test_a_cluster_that_never_answered_is_transient_one_that_refused_is_not():
    assert is_transient(ClusterConnectionError("no answer", refused=False))
    assert not is_transient(ClusterConnectionError("bad password", refused=True))


def test_retries_outlast_a_broker_restart_and_stop_at_the_deadline(clock):
    """The old policy gave up after five attempts, about 1.5 s: a restarted broker is back
    in about 10 s. Now the deadline decides, and the error names what and for how long."""
    fn, calls = _failing(10_000, KafkaError._UNKNOWN_PARTITION)
    with pytest.raises(KafkaRetriesExhausted) as info:
        RetryPolicy(timeout_s=120).call("reading the offsets of t-3", fn, sleep=clock.sleep)
    assert 100 <= sum(clock.sleeps) <= 120
    assert max(clock.sleeps) == 5.0  # backoff capped
    message = str(info.value)
    assert "reading the offsets of t-3" in message and "kafkaRetryTimeout=120 s" in message
    assert "_UNKNOWN_PARTITION" in message and f"{calls['n']} attempts" in message
    assert not is_transient(info.value)  # nobody above retries it again


def test_permanent_errors_are_not_retried(clock):
    fn, calls = _failing(10, KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException):
        RetryPolicy(timeout_s=60).call("test", fn, sleep=clock.sleep)
    assert calls["n"] == 1
    assert not is_transient(ValueError("not kafka"))


def test_retries_wait_at_least_the_minimum_and_drop_the_client_between(clock):
    fn, calls = _failing(2, KafkaError._DESTROY_BROKER)
    dropped: list[BaseException] = []
    RetryPolicy(timeout_s=60).call("t", fn, min_wait_s=0.7, on_retry=dropped.append,
                                   sleep=clock.sleep)
    assert clock.sleeps == [0.7, 0.7] and len(dropped) == 2


def test_the_retry_timeout_option():
    assert RetryPolicy.from_options(Options({})).timeout_s == 300
    assert RetryPolicy.from_options(Options({"kafkaRetryTimeout": "90s"})).timeout_s == 90
    with pytest.raises(OptionError, match="kafkaRetryTimeout"):
        RetryPolicy.from_options(Options({"kafkaRetryTimeout": "0s"}))


def test_consumer_conf_keeps_offsets_out_of_kafka_whatever_the_user_sets():
    conf = consumer_conf({
        "bootstrap.servers": "b:9092",
        "enable.auto.commit": "true",
        "auto.offset.reset": "earliest",
        "isolation.level": "read_uncommitted",
    })
    assert conf["enable.auto.commit"] == "false"
    assert conf["auto.offset.reset"] == "error"  # removed records are data loss, not a skip
    assert conf["isolation.level"] == "read_uncommitted"  # the user's choice is kept
    assert consumer_conf({"bootstrap.servers": "b"})["isolation.level"] == "read_committed"


def test_librdkafka_conf_requires_bootstrap_servers():
    with pytest.raises(OptionError, match="kafka.bootstrap.servers"):
        librdkafka_conf(Options({"kafka.client.id": "x"}))
    assert librdkafka_conf(Options({"kafka.bootstrap.servers": "b:1", "kafka.client.id": "x"})) == {
        "bootstrap.servers": "b:1", "client.id": "x",
    }


class _Entry:
    def __init__(self, value):
        self.value = value


class _Future:
    def __init__(self, result):
        self._result = result

    def result(self, timeout=None):
        if isinstance(self._result, Exception):
            raise self._result
        return self._result


def _fake_admin(answers):
    """An AdminClient whose brokers answer DescribeConfigs with `answers` (one per broker)."""

    class Metadata:
        brokers = {i: object() for i in range(len(answers))}

    class Admin:
        def __init__(self, conf):
            pass

        def list_topics(self, timeout):
            return Metadata()

        def describe_configs(self, resources, request_timeout):
            return {r: _Future(a) for r, a in zip(resources, answers)}

    return Admin


@pytest.mark.parametrize(
    "answers,expected",
    [
        ([{"transaction.max.timeout.ms": _Entry("900000")}], 900_000),
        ([{"transaction.max.timeout.ms": _Entry("900000")},
          {"transaction.max.timeout.ms": _Entry("300000")}], 300_000),  # the smallest counts
        ([{}], None),  # Tansu 0.6.0 answers with no entries
        ([KafkaException(KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED))], None),
    ],
)
def test_broker_max_transaction_timeout(monkeypatch, answers, expected):
    from connectors.core.kafka import client as kafka_client

    monkeypatch.setattr(kafka_client, "AdminClient", _fake_admin(answers))
    assert kafka_client.broker_max_transaction_timeout_ms({"bootstrap.servers": "b:1"}) == expected


def test_silence_fails_a_configuration_never_answered_and_is_waited_for_once_it_was(monkeypatch):
    """A query's first connection that gets no answer fails at once (the wrong protocol for a
    listener often looks like silence); once the configuration reached the cluster in this
    process, silence is a broker restarting or a network cut, retried under kafkaRetryTimeout.
    (Treating every silence as transient made the secured-refusal tests' queries wait.)"""
    import connectors.core.kafka.client as kc

    conf = {"bootstrap.servers": "127.0.0.1:1"}
    monkeypatch.setattr(kc, "_REACHED", set())
    with pytest.raises(ClusterConnectionError) as first:
        kc._connected_consumer(conf, timeout_s=1)
    assert not is_transient(first.value)
    kc._REACHED.add(tuple(sorted(conf.items())))
    with pytest.raises(ClusterConnectionError) as later:
        kc._connected_consumer(conf, timeout_s=1)
    assert is_transient(later.value)


@pytest.mark.parametrize("code, text, kept", [
    (KafkaError._TRANSPORT, "127.0.0.1:39123/3: Connect to ipv4#127.0.0.1:39123 failed: "
     "Connection refused (after 0ms in state CONNECT)", True),
    # a bootstrap address refusing only sends the client to the next one
    (KafkaError._TRANSPORT, "127.0.0.1:39123/bootstrap: Connect to ipv4#127.0.0.1:39123 "
     "failed: Connection refused (after 0ms in state CONNECT)", False),
    (KafkaError._TRANSPORT, "127.0.0.1:39123/3: Disconnected (after 600000ms in state UP)",
     False),
    (KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down: Connection refused", False),
])
def test_only_a_known_brokers_refused_connection_ends_an_offset_look_up(code, text, kept):
    """A refusal by a node the metadata names (a dead leader) ends a ListOffsets look-up at once
    (librdkafka's admin client would reconnect to it in a busy loop); nothing else does."""
    md = KafkaMetadata({"bootstrap.servers": "127.0.0.1:1"})
    md._on_error(KafkaError(code, text))
    assert md._refused == ([text] if kept else [])
