"""The `kafka-eos` sink's producers: a task's transactional producer (its callbacks, its
`init_transactions` under the transaction timeout the broker accepts) and, for at-least-once,
one idempotent producer per worker process and configuration, kept across tasks.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from connectors.core.kafka.client import RetryPolicy, broker_max_transaction_timeout_ms
from connectors.core.kafka.cloud_tokens import librdkafka_client_conf
from connectors.core.kafka.transactions_refused import (
    TransactionsUnsupported,
    refuses_transactions,
)
from connectors.core.kafka.transactions_refused import message as refused_message
from sinks.kafka.commit_client import TxnAuthorizationError, acl_needed
from sinks.kafka.errors import delivery_error, fencing_delivery_error
from sinks.two_phase_commit import AT_LEAST_ONCE, TaskInfo

log = logging.getLogger("kafka_eos.sink.kafka")


@dataclass
class KafkaTxn:
    info: TaskInfo
    producer: Any
    transactional_id: str | None
    stats: dict = field(default_factory=dict)
    #: The latest statistics JSON librdkafka reported, parsed only when preCommit needs one
    stats_json: str | None = None
    errors: list = field(default_factory=list)
    began_ms: int = 0  # wall clock before init_transactions: the driver warns of old batches
    timeout_ms: int = 0  # the transaction.timeout.ms the broker accepted


def callbacks(current, *, statistics: bool) -> dict[str, Any]:
    """Delivery failures (and statistics) go to the task's KafkaTxn, `current()`."""
    conf: dict[str, Any] = {
        # Delivery reports for failures only: no Python callback per record on the hot path.
        "delivery.report.only.error": True,
        "on_delivery": lambda err, msg: current().errors.append(delivery_error(err, msg)),
        # A fatal error (a fenced transactional producer: a newer attempt of the partition
        # took its id over) is kept first among the task's errors: invoke and preCommit raise
        # it, naming what happened (see fatal_from).
        "error_cb": lambda err: current().errors.insert(0, err) if err.fatal() else None,
    }
    if statistics:
        # Statistics carry the producer id and epoch (eos) and the partitions written;
        # preCommit waits for the first one after its flush, so the interval is short: the
        # producer lives for one task. The callback only keeps the latest report: preCommit
        # parses the one it uses, not every report of the task.
        conf["statistics.interval.ms"] = str(STATS_INTERVAL_MS)
        conf["stats_cb"] = lambda s: setattr(current(), "stats_json", s)
    return conf


def fatal_from(txn: "KafkaTxn", call, *args):
    """`call(*args)` (a producer's poll or flush), raising a fatal librdkafka error as the
    KafkaException it is. confluent-kafka raises a fenced producer's fatal error from inside
    the delivery callback that follows, which then fails as a SystemError ("returned a result
    with an exception set", or "returned NULL without setting an exception"), seen on Apache
    Kafka 4.4 and 3.9 with a zombie attempt. The fatal error itself reaches the task's errors
    through error_cb (or is the SystemError's cause)."""
    try:
        return call(*args)
    except SystemError as e:
        if isinstance(e.__cause__, KafkaException):
            raise e.__cause__ from None
        for _ in range(50):  # error_cb runs from the producer's own poll
            fatal = [err for err in txn.errors if isinstance(err, KafkaError) and err.fatal()]
            if fatal:
                raise KafkaException(fatal[0]) from None
            fenced = fencing_delivery_error(txn.errors)
            if fenced is not None:
                # The fatal error itself was lost with the callback that raised it (seen once
                # in CI on 4.4); a transactional producer whose batch the broker refused for
                # its epoch is the one librdkafka fences (_FENCED): raise that, naming it.
                raise KafkaException(KafkaError(
                    KafkaError._FENCED, f"this transactional producer was fenced by a newer "
                    f"attempt of its partition: the broker refused its records ({fenced.str()})",
                    fatal=True)) from None
            try:
                txn.producer.poll(0.1)
            except SystemError:
                continue
        raise



#: How often a transactional producer reports statistics (preCommit waits for one after its
#: flush: half of this on average).
STATS_INTERVAL_MS = 10

#: The producers' partitioner unless `kafka.partitioner` is set: librdkafka's Java-compatible
#: one. A keyed record goes to toPositive(murmur2(key)) % partitions, where Spark's Kafka sink
#: (the Java producer) puts it; librdkafka's own default, consistent_random (CRC32), would not.
#: Records without a key go to a random partition, as with Java's sticky partitioner.
DEFAULT_PARTITIONER = "murmur2_random"


def producer_conf(kafka_conf: dict[str, str]) -> dict[str, Any]:
    """What every producer of the sink starts from: the user's `kafka.*` options, with the
    Java client's partitioner unless the user chose one."""
    conf: dict[str, Any] = librdkafka_client_conf(kafka_conf)  # a cloud's token callback
    conf.setdefault("partitioner", DEFAULT_PARTITIONER)
    return conf


def transactional_producer_conf(kafka_conf: dict[str, str]) -> dict[str, Any]:
    """A task's transactional producer: as every producer, and connected to the cluster's
    brokers as soon as it learns them (`enable.sparse.connections=false`, unless the user set
    it). With sparse connections (librdkafka's default) a fresh producer's init_transactions
    often waits ~500 ms for a broker to ask for its coordinator
    (docs/design.md#a-transactional-producers-first-init). The producer lives for one task, and connects to the
    leaders of the partitions it writes anyway; the price is a connection to each broker."""
    conf = producer_conf(kafka_conf)
    conf.setdefault("enable.sparse.connections", "false")
    return conf


@dataclass
class _Shared:
    producer: Any
    holder: list  # [the KafkaTxn of the task now using the producer], read by its callbacks

    @property
    def txn(self) -> KafkaTxn:
        return self.holder[0]


#: Non-transactional producers of this worker process, by configuration (see beginTransaction).
_SHARED: dict[tuple, _Shared] = {}


def shared_producer(kafka_conf: dict[str, str], guarantee: str, txn: KafkaTxn) -> Any:
    key = (guarantee, tuple(sorted(kafka_conf.items())))
    shared = _SHARED.get(key)
    if shared is None:
        holder: list[KafkaTxn] = [txn]
        conf = producer_conf(kafka_conf)
        # No statistics: the producer outlives its tasks, and undelivered statistics would pile
        # up in its queue between them. Nothing but a flush is needed before its handle.
        conf.update(callbacks(lambda: holder[0], statistics=False))
        if guarantee == AT_LEAST_ONCE:
            conf.setdefault("enable.idempotence", "true")
        shared = _SHARED[key] = _Shared(Producer(conf), holder)
    else:
        shared.holder[0] = txn
    return shared.producer


def drop_shared_producer(producer: Any) -> None:
    for key, shared in list(_SHARED.items()):
        if shared.producer is producer:
            del _SHARED[key]
            producer.purge()
            producer.flush(0)


def produce_when_room(producer: Any, topic: str, **kwargs: Any) -> None:
    while True:
        producer.poll(0.05)
        try:
            producer.produce(topic, **kwargs)
            return
        except BufferError:
            pass


# -- the transaction timeout ------------------------------------------------------------------

#: The sink's default `transaction.timeout.ms`: the broker's default `transaction.max.timeout.ms`.
#: librdkafka's own default, 60 s, loses every decided batch whose restart takes over a minute.
DEFAULT_TRANSACTION_TIMEOUT_MS = 900_000
#: Lowering stops here: a broker whose maximum is below it refuses the sink.
MIN_TRANSACTION_TIMEOUT_MS = 1_000
#: A batch committed later than this fraction of the timeout after it began is logged.
WARN_AGE_FRACTION = 0.5


def choose_transaction_timeout(user_value: str | None, broker_max_ms: int | None) -> int:
    """The user's `kafka.transaction.timeout.ms` if set; else the default, lowered to the
    broker's `transaction.max.timeout.ms` when that is known and smaller."""
    if user_value:
        return int(user_value)
    if broker_max_ms is not None and broker_max_ms > 0:
        return max(MIN_TRANSACTION_TIMEOUT_MS, min(DEFAULT_TRANSACTION_TIMEOUT_MS, broker_max_ms))
    return DEFAULT_TRANSACTION_TIMEOUT_MS


def lower_transaction_timeout(refused_ms: int) -> int | None:
    """The next value to try after INVALID_TRANSACTION_TIMEOUT; None when there is none."""
    lower = refused_ms // 2
    return lower if lower >= MIN_TRANSACTION_TIMEOUT_MS else None


def timeout_warning(
    batch_id: int, began_ms: list[int], timeout_ms: int, now_ms: int, describe: str
) -> str | None:
    """A warning when a batch is committed more than WARN_AGE_FRACTION of the transaction
    timeout after its first transaction began (a slow restart, a long batch); else None."""
    if not began_ms or timeout_ms <= 0:
        return None
    age_ms = now_ms - min(began_ms)
    if age_ms <= WARN_AGE_FRACTION * timeout_ms:
        return None
    return (
        f"{describe}: batch {batch_id} is committed {age_ms / 1000:.0f} s after its first "
        f"transaction began, {100 * age_ms / timeout_ms:.0f}% of transaction.timeout.ms="
        f"{timeout_ms} ms. Past the timeout the broker aborts its transactions and the batch is "
        "written again (still exactly once). Restart crashed queries sooner, make batches "
        "shorter (maxOffsetsPerTrigger), or raise kafka.transaction.timeout.ms (up to the "
        "broker's transaction.max.timeout.ms)"
    )


#: The chosen transaction timeout per worker process and configuration: the broker's maximum
#: costs a DescribeConfigs round trip, and a lowered value an init_transactions that failed.
_TIMEOUTS: dict[tuple, int] = {}



def conf_key(kafka_conf: dict[str, str]) -> tuple:
    return tuple(sorted(kafka_conf.items()))


def resolve_transaction_timeout(kafka_conf: dict[str, str]) -> int:
    key = conf_key(kafka_conf)
    if key not in _TIMEOUTS:
        user_value = kafka_conf.get("transaction.timeout.ms")
        broker_max = None
        if not user_value:
            try:
                broker_max = broker_max_transaction_timeout_ms(kafka_conf, timeout_s=5.0)
            except Exception as e:  # best effort: init_transactions tells us too
                log.info("transaction.max.timeout.ms not known (%s): init_transactions decides",
                         type(e).__name__)
        _TIMEOUTS[key] = choose_transaction_timeout(user_value, broker_max)
    return _TIMEOUTS[key]


def init_transactions(
    conf: dict[str, Any], timeout_ms: int, *, user_set: bool, prefix: str, retry: RetryPolicy,
) -> tuple[Any, int]:
    """A transactional producer, initialised (fencing what its id left open). A transient
    failure (`_TRANSPORT` "Failed to initialize Producer ID" while the coordinator's broker
    restarts) is retried with a new producer under kafkaRetryTimeout. Brokers that do not
    report their maximum (Tansu accepts any timeout, measured) refuse a larger one here with
    INVALID_TRANSACTION_TIMEOUT: halve it and try again, unless the user chose it."""
    tid = conf["transactional.id"]

    def initialised() -> Any:
        producer = Producer({**conf, "transaction.timeout.ms": str(timeout_ms)})
        producer.init_transactions(30)
        return producer

    while True:
        try:
            producer = retry.call(f"init_transactions({tid}) at {conf['bootstrap.servers']}",
                                  initialised)
            return producer, timeout_ms
        except KafkaException as e:
            err = e.args[0] if e.args else None
            code = err.code() if isinstance(err, KafkaError) else None
            if code == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
                raise TxnAuthorizationError(
                    f"init_transactions({tid}): {err}; " + acl_needed(code, prefix), code,
                ) from e
            if refuses_transactions(code):
                raise TransactionsUnsupported(
                    refused_message(conf["bootstrap.servers"], str(err))) from None
            lower = lower_transaction_timeout(timeout_ms)
            if code != KafkaError.INVALID_TRANSACTION_TIMEOUT or user_set or lower is None:
                raise
            log.warning("the broker refused transaction.timeout.ms=%d (above its "
                        "transaction.max.timeout.ms); trying %d", timeout_ms, lower)
            timeout_ms = lower



def remember_transaction_timeout(kafka_conf: dict[str, str], timeout_ms: int) -> None:
    """The timeout a broker accepted after refusing a larger one: the next tasks of this
    process start from it rather than being refused again."""
    _TIMEOUTS[conf_key(kafka_conf)] = timeout_ms
