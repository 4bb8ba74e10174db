"""Kafka client helpers shared by the source and the sinks: librdkafka configuration,
metadata look-ups and the retry policy for transient broker errors.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType
from tenacity import (
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from connectors.kafka_security import connection_hint, protocol_of, translate
from connectors.options import OptionError, Options

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Errors that say "try again": the broker or the network, not the request.
_TRANSIENT_CODES = {
    KafkaError._TRANSPORT,
    KafkaError._TIMED_OUT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._WAIT_COORD,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.NETWORK_EXCEPTION,
}


def is_transient(exc: BaseException) -> bool:
    if not isinstance(exc, KafkaException) or not exc.args:
        return False
    err = exc.args[0]
    if not isinstance(err, KafkaError):
        return False
    return err.retriable() or err.code() in _TRANSIENT_CODES


def with_retries(
    what: str, fn: Callable[[], T], *, attempts: int = 5, max_wait_s: float = 5.0
) -> T:
    """Run `fn`, retrying transient Kafka errors with exponential backoff, then re-raise."""
    retrying = Retrying(
        retry=retry_if_exception(is_transient),
        stop=stop_after_attempt(attempts),
        wait=wait_exponential(multiplier=0.1, max=max_wait_s),
        reraise=True,
        before_sleep=lambda rs: log.warning(
            "transient Kafka error during %s (attempt %d/%d): %s",
            what, rs.attempt_number, attempts, rs.outcome.exception() if rs.outcome else "",
        ),
    )
    return retrying(fn)


def librdkafka_conf(options: Options) -> dict[str, str]:
    """Every `kafka.*` option, prefix removed, in librdkafka's names (Java client names
    translated, connectors/kafka_security.py); bootstrap servers required."""
    conf = translate(options.with_prefix("kafka."))
    if not conf.get("bootstrap.servers", "").strip():
        raise OptionError(
            "kafka.bootstrap.servers",
            "is required: a comma-separated list of host:port brokers, "
            'e.g. .option("kafka.bootstrap.servers", "broker1:9092")',
        )
    return conf


def consumer_conf(base: Mapping[str, str]) -> dict[str, str]:
    """A consumer for assign()-based reads: no group membership, no committed offsets.

    Offsets live in Spark's offset log, so nothing is committed to Kafka; `auto.offset.reset`
    is `error` so that a range whose records were removed is reported, never silently skipped.
    """
    conf = {
        "group.id": f"kafka-eos-{uuid.uuid4().hex[:12]}",
        "isolation.level": "read_committed",
        "enable.partition.eof": "false",
        "socket.keepalive.enable": "true",
    }
    conf.update(base)
    conf.update({"enable.auto.commit": "false", "auto.offset.reset": "error"})
    return conf


class ClusterConnectionError(ConnectionError):
    """The cluster refused our connection (TLS or SASL) or never answered: the message names
    the options to check, never their values."""


#: librdkafka errors that say the security settings are wrong, not that the broker is busy.
_REFUSALS = {KafkaError._AUTHENTICATION, KafkaError._SSL, KafkaError.SASL_AUTHENTICATION_FAILED}


def _refusal(error: KafkaError) -> bool:
    if error.code() in _REFUSALS:
        return True
    # librdkafka's own diagnosis of a plaintext client at a TLS listener
    return error.code() == KafkaError._TRANSPORT and "security.protocol" in error.str()


def _connected_consumer(conf: Mapping[str, str], timeout_s: float) -> Consumer:
    """A consumer whose first metadata round trip succeeded. Wrong credentials, an untrusted
    certificate or the wrong protocol raise ClusterConnectionError within a second or two
    (librdkafka would otherwise retry them quietly until every look-up times out)."""
    errors: list[KafkaError] = []
    settings: dict[str, Any] = consumer_conf(conf)
    settings["error_cb"] = errors.append
    settings.setdefault("log_level", 0)  # what matters is raised below, once
    consumer = Consumer(settings)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            consumer.list_topics(timeout=0.5)
            return consumer
        except KafkaException as e:
            consumer.poll(0.1)  # serves error_cb
            refused = [err for err in errors if _refusal(err)]
            if refused or time.monotonic() > deadline:
                consumer.close()
                detail = (refused or errors or [e.args[0]])[-1]
                text = detail.str() if isinstance(detail, KafkaError) else str(detail)
                raise ClusterConnectionError(
                    f"cannot use the Kafka cluster at {conf.get('bootstrap.servers')} "
                    f"({protocol_of(conf)}): {text}. {connection_hint(conf, text)}") from None


_CHECKED: set[tuple] = set()


def check_connection(conf: Mapping[str, str], timeout_s: float = 10.0) -> None:
    """Once per process and configuration: connect and authenticate as librdkafka would, so a
    cluster that refuses us fails the query at its start (ClusterConnectionError)."""
    key = tuple(sorted(conf.items()))
    if key not in _CHECKED:
        _connected_consumer(conf, timeout_s).close()
        _CHECKED.add(key)


class KafkaMetadata:
    """Driver-side look-ups (topics, watermarks, offsets by time) with bounded retries."""

    def __init__(self, base_conf: Mapping[str, str], *, timeout_s: float = 10.0, attempts: int = 5):
        self._consumer = _connected_consumer(base_conf, timeout_s)
        self._timeout = timeout_s
        self._attempts = attempts

    def close(self) -> None:
        self._consumer.close()

    def topics(self) -> dict[str, int]:
        """Topic name -> partition count, for every topic the broker lists."""
        md = with_retries(
            "listing topics",
            lambda: self._consumer.list_topics(timeout=self._timeout),
            attempts=self._attempts,
        )
        return {
            name: len(t.partitions)
            for name, t in md.topics.items()
            if t.error is None and not name.startswith("__")
        }

    def watermarks(self, tps: Iterable[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
        """(low, high) per partition; `high` is the last stable offset under read_committed."""
        out = {}
        for topic, partition in tps:
            out[(topic, partition)] = with_retries(
                f"reading offsets of {topic}-{partition}",
                lambda t=topic, p=partition: self._consumer.get_watermark_offsets(
                    TopicPartition(t, p), timeout=self._timeout, cached=False
                ),
                attempts=self._attempts,
            )
        return out

    def offsets_for_times(
        self, wanted: Mapping[tuple[str, int], int]
    ) -> dict[tuple[str, int], int]:
        """Earliest offset whose timestamp is >= the given ms per partition; -1 where none."""
        if not wanted:
            return {}
        query = [TopicPartition(t, p, ts) for (t, p), ts in wanted.items()]
        found = with_retries(
            "looking up offsets by timestamp",
            lambda: self._consumer.offsets_for_times(query, timeout=self._timeout),
            attempts=self._attempts,
        )
        for tp in found:
            if tp.error is not None:
                raise KafkaException(tp.error)
        return {(tp.topic, tp.partition): tp.offset for tp in found}


def broker_max_transaction_timeout_ms(
    base_conf: Mapping[str, str], timeout_s: float = 10.0
) -> int | None:
    """The smallest `transaction.max.timeout.ms` the brokers report, or None when they do not
    say: Tansu 0.6.0 answers DescribeConfigs with no entries at all (measured), and a principal
    without DESCRIBE_CONFIGS on the cluster is refused. One metadata and one DescribeConfigs
    round trip."""
    admin = AdminClient(dict(base_conf))
    brokers = admin.list_topics(timeout=timeout_s).brokers
    resources = [ConfigResource(ResourceType.BROKER, str(b)) for b in brokers]
    values: list[int] = []
    for future in admin.describe_configs(resources, request_timeout=timeout_s).values():
        try:
            entry = future.result(timeout=timeout_s).get("transaction.max.timeout.ms")
        except KafkaException as e:
            log.info("DescribeConfigs of a broker failed (%s): its "
                     "transaction.max.timeout.ms is unknown", e)
            continue
        if entry is not None and entry.value:
            values.append(int(entry.value))
    return min(values) if values else None
