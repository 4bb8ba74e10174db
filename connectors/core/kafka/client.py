"""Kafka client helpers shared by the source and the sinks: librdkafka configuration,
metadata look-ups and the retry policy for transient broker errors.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, OffsetSpec, ResourceType
from tenacity import (
    RetryCallState,
    RetryError,
    Retrying,
    retry_if_exception,
    stop_before_delay,
)

from connectors.core.kafka.cloud_tokens import librdkafka_client_conf
from connectors.core.kafka.python_security import connection_hint, protocol_of
from connectors.core.kafka.java_options import translate
from connectors.core.options import OptionError, Options

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Errors that say "try again": the broker or the network, not the request. Besides what
#: librdkafka calls retriable, those a broker restart, a leader election or a moving coordinator
#: cause (seen on a 3-node cluster restarted broker by broker: `_UNKNOWN_PARTITION` while a
#: partition's leader moved, `_DESTROY_BROKER` when librdkafka dropped a restarted broker's handle).
_TRANSIENT_CODES = {
    KafkaError._TRANSPORT,
    KafkaError._TIMED_OUT,
    KafkaError._TIMED_OUT_QUEUE,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._WAIT_COORD,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError._DESTROY_BROKER,
    KafkaError._NODE_UPDATE,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.NOT_ENOUGH_REPLICAS,
    KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    KafkaError.NETWORK_EXCEPTION,
    KafkaError.NOT_CONTROLLER,
    KafkaError.FENCED_LEADER_EPOCH,
    KafkaError.UNKNOWN_LEADER_EPOCH,
    KafkaError.OFFSET_NOT_AVAILABLE,
    KafkaError.KAFKA_STORAGE_ERROR,
}


def is_transient(exc: BaseException) -> bool:
    """Worth trying again: a retriable Kafka error, or a cluster that did not answer (as
    opposed to one that refused our credentials or TLS)."""
    if isinstance(exc, ClusterConnectionError):
        return not exc.refused
    if not isinstance(exc, KafkaException) or not exc.args:
        return False
    err = exc.args[0]
    if not isinstance(err, KafkaError):
        return False
    if err.fatal():
        return False
    return err.retriable() or err.code() in _TRANSIENT_CODES


#: `kafkaRetryTimeout`: how long every Kafka call of the source and the Kafka sink (metadata,
#: offsets, init_transactions, flush, EndTxn, ...) is retried across transient errors before it
#: fails. Minutes, not seconds: a broker restarted in a rolling upgrade is back in 10-30 s, a
#: lost quorum in about as long as its operator takes.
RETRY_TIMEOUT_OPTION = "kafkaRetryTimeout"
DEFAULT_RETRY_TIMEOUT_MS = 5 * 60_000


class KafkaRetriesExhausted(RuntimeError):
    """A Kafka call kept failing with transient errors until `kafkaRetryTimeout` ran out. Not
    itself transient: the callers above it must not start another round of retries."""

    def __init__(self, message: str, last: BaseException) -> None:
        super().__init__(message)
        self.last = last


def retry_timeout_ms(options: Options) -> int:
    """`kafkaRetryTimeout` (a duration such as `5m`, `90s`), positive."""
    value = options.get_duration_ms(RETRY_TIMEOUT_OPTION, DEFAULT_RETRY_TIMEOUT_MS)
    if value <= 0:
        raise OptionError(RETRY_TIMEOUT_OPTION,
                          f"must be a positive duration such as '5m' or '90s', not {value} ms")
    return value


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of one Kafka call across transient errors, with exponential backoff, under one
    overall deadline. Pickled to tasks with the source's and the sinks' options."""

    timeout_s: float = DEFAULT_RETRY_TIMEOUT_MS / 1000
    first_wait_s: float = 0.1
    max_wait_s: float = 5.0

    @classmethod
    def from_options(cls, options: Options) -> "RetryPolicy":
        return cls(timeout_s=retry_timeout_ms(options) / 1000)

    def call(
        self,
        what: str,
        fn: Callable[[], T],
        *,
        transient: Callable[[BaseException], bool] = is_transient,
        min_wait_s: float = 0.0,
        on_retry: Callable[[BaseException], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> T:
        """`fn()`, tried again while it fails with an error `transient` accepts and the
        deadline allows; then KafkaRetriesExhausted naming `what`, the last error, how many
        attempts and for how long. Other errors are raised at once, as they are. `on_retry`
        runs before each new attempt (e.g. to drop a client in doubt)."""
        started = time.monotonic()

        def wait(state: RetryCallState) -> float:
            return max(min_wait_s, min(self.max_wait_s,
                                       self.first_wait_s * 2 ** (state.attempt_number - 1)))

        def before_sleep(state: RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome else None
            (log.warning if state.attempt_number == 1 else log.info)(
                "kafka-eos: transient error %s (attempt %d, %.1f s so far, retrying for up to "
                "%s=%.0f s): %s", what, state.attempt_number, time.monotonic() - started,
                RETRY_TIMEOUT_OPTION, self.timeout_s, _describe_error(error))
            if on_retry is not None and error is not None:
                on_retry(error)

        retrying = Retrying(retry=retry_if_exception(transient),
                            stop=stop_before_delay(self.timeout_s), wait=wait,
                            before_sleep=before_sleep, sleep=sleep)
        try:
            result = retrying(fn)
        except RetryError as e:
            last = e.last_attempt.exception()
            raise KafkaRetriesExhausted(
                f"kafka-eos: {what} failed with transient errors for "
                f"{time.monotonic() - started:.0f} s ({e.last_attempt.attempt_number} attempts); "
                f"the last: {_describe_error(last)}. Gave up after {RETRY_TIMEOUT_OPTION}="
                f"{self.timeout_s:.0f} s: check that the brokers are up and reachable from here, "
                f"or raise {RETRY_TIMEOUT_OPTION}", last) from last
        attempts = retrying.statistics.get("attempt_number", 1)
        if attempts > 1:
            log.warning("kafka-eos: %s succeeded after %d attempts, %.1f s", what, attempts,
                        time.monotonic() - started)
        return result


def _describe_error(e: BaseException | None) -> str:
    if isinstance(e, KafkaException) and e.args and isinstance(e.args[0], KafkaError):
        err = e.args[0]
        return f"{err.name()} ({err.str()})"
    return f"{type(e).__name__}: {e}"


def librdkafka_conf(options: Options) -> dict[str, str]:
    """Every `kafka.*` option, prefix removed, in librdkafka's names (Java client names
    translated, connectors/core/kafka/java_options.py); bootstrap servers required."""
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
    return librdkafka_client_conf(conf)  # a cloud's token callback, when one is configured


class ClusterConnectionError(ConnectionError):
    """The cluster refused our connection (TLS or SASL: `refused`) or never answered: the
    message names the options to check, never their values. One that never answered is
    transient (a cluster restarting, a network cut)."""

    def __init__(self, message: str, *, refused: bool = True) -> None:
        super().__init__(message)
        self.refused = refused


#: librdkafka errors that say the security settings are wrong, not that the broker is busy.
_REFUSALS = {KafkaError._AUTHENTICATION, KafkaError._SSL, KafkaError.SASL_AUTHENTICATION_FAILED}


def _refusal(error: KafkaError) -> bool:
    if error.code() in _REFUSALS:
        return True
    # librdkafka's own diagnosis of a plaintext client at a TLS listener
    return error.code() == KafkaError._TRANSPORT and "security.protocol" in error.str()


#: Configurations this process has reached the cluster with: a later silence is the cluster's
#: (restarting, cut off), worth waiting for. A configuration that never got an answer fails
#: the query at its start instead: the wrong protocol for a listener often shows as nothing but
#: silence (a plaintext client at a TLS port, under load, before librdkafka names the cause).
_REACHED: set[tuple] = set()


def _connected_consumer(conf: Mapping[str, str], timeout_s: float) -> Consumer:
    """A consumer whose first metadata round trip succeeded. Wrong credentials, an untrusted
    certificate or the wrong protocol raise ClusterConnectionError within a second or two
    (librdkafka would otherwise retry them quietly until every look-up times out)."""
    key = tuple(sorted(conf.items()))
    errors: list[KafkaError] = []
    settings: dict[str, Any] = consumer_conf(conf)
    settings["error_cb"] = errors.append
    settings.setdefault("log_level", 0)  # what matters is raised below, once
    consumer = Consumer(settings)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            consumer.list_topics(timeout=0.5)
            _REACHED.add(key)
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
                    f"({protocol_of(conf)}): {text}. {connection_hint(conf, text)}",
                    refused=bool(refused) or key not in _REACHED) from None


_CHECKED: set[tuple] = set()


def check_connection(conf: Mapping[str, str], timeout_s: float = 10.0) -> None:
    """Once per process and configuration: connect and authenticate as librdkafka would, so a
    cluster that refuses us fails the query at its start (ClusterConnectionError)."""
    key = tuple(sorted(conf.items()))
    if key not in _CHECKED:
        _connected_consumer(conf, timeout_s).close()
        _CHECKED.add(key)


#: librdkafka properties of consumers only (scope "C" in its CONFIGURATION.md): left out of an
#: admin client's configuration, which would otherwise log a warning for each of them.
CONSUMER_ONLY = frozenset({
    "group.id", "group.instance.id", "partition.assignment.strategy", "session.timeout.ms",
    "heartbeat.interval.ms", "group.protocol.type", "group.protocol", "group.remote.assignor",
    "coordinator.query.interval.ms", "max.poll.interval.ms", "enable.auto.commit",
    "auto.commit.interval.ms", "enable.auto.offset.store", "queued.min.messages",
    "queued.max.messages.kbytes", "fetch.wait.max.ms", "fetch.queue.backoff.ms",
    "fetch.message.max.bytes", "max.partition.fetch.bytes", "fetch.max.bytes",
    "fetch.min.bytes", "fetch.error.backoff.ms", "offset.store.method", "isolation.level",
    "enable.partition.eof", "check.crcs", "allow.auto.create.topics", "auto.offset.reset",
    "auto.commit.enable", "offset.store.path", "offset.store.sync.interval.ms",
    "consume.callback.max.messages",
})


def admin_conf(conf: Mapping[str, str]) -> dict[str, str]:
    """The settings of an admin client beside consumers of `conf`: the same, less consumers'
    (and a cloud's token callback, when one is configured)."""
    return librdkafka_client_conf({k: v for k, v in conf.items() if k not in CONSUMER_ONLY})


def isolation_of(conf: Mapping[str, str]) -> IsolationLevel:
    """The isolation level the source's consumers read with (read_committed unless the user's
    `kafka.isolation.level` says otherwise): offset look-ups must answer for the same one."""
    level = str(conf.get("isolation.level", "read_committed")).strip().lower()
    return IsolationLevel.READ_UNCOMMITTED if level == "read_uncommitted" \
        else IsolationLevel.READ_COMMITTED


class KafkaMetadata:
    """Driver-side look-ups (topics, earliest and latest offsets, offsets by time), one attempt
    each: the caller retries (RetryPolicy) and calls `reset()` after a failure, so that a client
    in doubt (a handle librdkafka gave up on, `_DESTROY_BROKER`; metadata naming a dead broker)
    is not asked again and the next attempt connects afresh.

    Offsets come from the admin client's ListOffsets, which librdkafka sends as one request per
    partition leader for all of that broker's partitions, as the Java consumer's `endOffsets`
    does: a batch's look-up costs one round trip per broker whatever the partition count
    (a consumer's `get_watermark_offsets` is one round trip per partition: 1,000 a batch at
    1,000 partitions). Verified to answer as the consumer's per-partition look-ups do, last
    stable offset under read_committed included, on Apache Kafka 4.x and on the embedded
    broker (integration_tests/source/test_offset_lookups.py)."""

    def __init__(self, base_conf: Mapping[str, str], *, timeout_s: float = 10.0):
        self._conf = dict(base_conf)
        self._timeout = timeout_s
        self._consumer: Consumer | None = None
        self._admin: AdminClient | None = None
        #: Connections the admin client's brokers refused (a new client starts without).
        self._refused: list[str] = []

    def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        self._admin = None  # librdkafka destroys the handle with the object
        if consumer is not None:
            consumer.close()

    def admin(self) -> AdminClient:
        """The admin client of these look-ups (opened on first use, dropped by reset())."""
        if self._admin is None:
            self._refused = []
            self._admin = AdminClient({**admin_conf(self._conf), "error_cb": self._on_error})
        return self._admin

    def _on_error(self, error: KafkaError) -> None:
        """Keeps a refusal by a broker known by its node id ("host:port/3: Connect to ...
        failed: Connection refused"): a bootstrap address's refusal only sends the client to
        the next one."""
        text = error.str()
        broker = text.split(": ", 1)[0]
        if error.code() == KafkaError._TRANSPORT and "refused" in text.lower() \
                and not broker.endswith("/bootstrap"):
            self._refused.append(text)

    def reset(self) -> None:
        try:
            self.close()
        except Exception as e:  # a client in doubt: nothing of it is needed
            log.debug("closing a metadata client after an error: %s", e)

    def _client(self) -> Consumer:
        if self._consumer is None:
            self._consumer = _connected_consumer(self._conf, self._timeout)
        return self._consumer

    def topics(self) -> dict[str, int]:
        """Topic name -> partition count, for every topic the broker lists."""
        md = self._client().list_topics(timeout=self._timeout)
        return {
            name: len(t.partitions)
            for name, t in md.topics.items()
            if t.error is None and not name.startswith("__")
        }

    def earliest(self, tps: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The earliest offset of each partition (its log start)."""
        return self._list_offsets({tp: OffsetSpec.earliest() for tp in tps})

    def latest(self, tps: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The latest offset of each partition: the last stable offset under read_committed
        (the end of the log before any open transaction), the high watermark otherwise."""
        return self._list_offsets({tp: OffsetSpec.latest() for tp in tps})

    def watermarks(self, tps: Iterable[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
        """(earliest, latest) per partition: both requests in flight at once."""
        tps = list(tps)
        low = self._send({tp: OffsetSpec.earliest() for tp in tps})
        high = self._send({tp: OffsetSpec.latest() for tp in tps})
        lows, highs = self._results(low), self._results(high)
        return {tp: (lows[tp], highs[tp]) for tp in tps}

    def offsets_for_times(
        self, wanted: Mapping[tuple[str, int], int]
    ) -> dict[tuple[str, int], int]:
        """Earliest offset whose timestamp is >= the given ms per partition; -1 where none."""
        return self._list_offsets({tp: OffsetSpec.for_timestamp(ts) for tp, ts in wanted.items()},
                                  none=-1)

    def _list_offsets(self, specs: Mapping[tuple[str, int], OffsetSpec],
                      none: int | None = None) -> dict[tuple[str, int], int]:
        return self._results(self._send(specs), none)

    def _send(self, specs: Mapping[tuple[str, int], OffsetSpec]) -> dict[tuple[str, int], Any]:
        """One ListOffsets per partition leader, for all of `specs`; the futures per partition."""
        if not specs:
            return {}
        futures = self.admin().list_offsets(
            {TopicPartition(t, p): spec for (t, p), spec in specs.items()},
            isolation_level=isolation_of(self._conf), request_timeout=self._timeout)
        return {(tp.topic, tp.partition): f for tp, f in futures.items()}

    def _results(self, futures: Mapping[tuple[str, int], Any],
                 none: int | None = None) -> dict[tuple[str, int], int]:
        """Each partition's offset; the first partition's error is raised (the caller retries
        the whole look-up if it is transient). A negative offset is no answer, and raised as a
        transient error too, except `none` (by timestamp, -1: no record at or after it):
        seen on Apache Kafka 3.9, the latest offset of a partition answered as -1001 without an
        error while the quorum came back, which the source took for an offset that went back
        (data loss)."""
        self._wait_unless_refused(futures.values())
        out = {}
        for tp, f in futures.items():
            try:
                offset = f.result(timeout=0).offset
            except KafkaException as e:
                raise _leaderless(e, tp) from None
            if offset < 0 and offset != none:
                raise KafkaException(KafkaError(
                    KafkaError.OFFSET_NOT_AVAILABLE,
                    f"ListOffsets answered no offset ({offset}) for {tp[0]}-{tp[1]}",
                    retriable=True))
            out[tp] = offset
        return out

    def _wait_unless_refused(self, futures: Iterable[concurrent.futures.Future]) -> None:
        """Until every answer is in, the time is up, or a leader refused the connection. A
        request to a leader whose broker is down (restarting: the others still name it leader)
        makes librdkafka's admin client reconnect in a loop, some 7,000 refused connections a
        second, a core busy until the request times out (measured: 2.3 s user and 8.3 s system
        CPU in 12 s). The look-up fails at the first refusal instead, as transient, and drops
        the client: the retry policy waits before it asks a new one."""
        pending = set(futures)
        deadline = time.monotonic() + self._timeout + 5
        while pending and time.monotonic() < deadline:
            _, pending = concurrent.futures.wait(pending, timeout=0.1)
            if pending and self._admin is not None:
                self._admin.poll(0)  # serves error_cb
            if pending and self._refused:
                refused = self._refused[-1]
                self.reset()
                raise KafkaException(KafkaError(
                    KafkaError._TRANSPORT, f"ListOffsets: a partition leader refused the "
                    f"connection ({refused})", retriable=True))
        if pending:
            raise KafkaException(KafkaError(
                KafkaError._TIMED_OUT, f"ListOffsets: no answer in {self._timeout + 5:.0f} s",
                retriable=True))


def _leaderless(e: KafkaException, tp: tuple[str, int]) -> KafkaException:
    """ListOffsets answers `_NOENT` ("Failed to query partition leaders: No leaders found")
    for a partition whose leader the client does not know: one being elected, or one of a topic
    this client has no metadata of yet (a topic just created; measured: a partition that does
    not exist answers the same). The consumer's per-partition look-up called that
    `_UNKNOWN_PARTITION`, transient: so is this, as LEADER_NOT_AVAILABLE naming the partition.
    Other errors are raised as they are."""
    err = e.args[0] if e.args else None
    if not isinstance(err, KafkaError) or err.code() != KafkaError._NOENT:
        return e
    return KafkaException(KafkaError(KafkaError.LEADER_NOT_AVAILABLE,
                                     f"{err.str()} for {tp[0]}-{tp[1]}", retriable=True))


def broker_max_transaction_timeout_ms(
    base_conf: Mapping[str, str], timeout_s: float = 10.0
) -> int | None:
    """The smallest `transaction.max.timeout.ms` the brokers report, or None when they do not
    say: Tansu 0.6.0 answers DescribeConfigs with no entries at all (measured), and a principal
    without DESCRIBE_CONFIGS on the cluster is refused. One metadata and one DescribeConfigs
    round trip."""
    admin = AdminClient(admin_conf(base_conf))
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
