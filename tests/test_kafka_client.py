"""Retry policy and consumer configuration: pure logic, no broker."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from connectors.kafka_client import consumer_conf, is_transient, librdkafka_conf, with_retries
from connectors.options import OptionError, Options


def _failing(times: int, code: int):
    calls = {"n": 0}

    def fn():
        calls["n"] += 1
        if calls["n"] <= times:
            raise KafkaException(KafkaError(code))
        return "ok"

    return fn, calls


def test_transient_errors_are_retried_then_succeed():
    fn, calls = _failing(2, KafkaError._TRANSPORT)
    assert with_retries("test", fn, attempts=3, max_wait_s=0.01) == "ok"
    assert calls["n"] == 3


def test_retry_budget_is_bounded_and_the_error_is_reraised():
    fn, calls = _failing(10, KafkaError._TIMED_OUT)
    with pytest.raises(KafkaException):
        with_retries("test", fn, attempts=3, max_wait_s=0.01)
    assert calls["n"] == 3


def test_permanent_errors_are_not_retried():
    fn, calls = _failing(10, KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException):
        with_retries("test", fn, attempts=5, max_wait_s=0.01)
    assert calls["n"] == 1
    assert not is_transient(ValueError("not kafka"))


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
    from connectors import kafka_client

    monkeypatch.setattr(kafka_client, "AdminClient", _fake_admin(answers))
    assert kafka_client.broker_max_transaction_timeout_ms({"bootstrap.servers": "b:1"}) == expected
