"""`kafka-eos` (writeStream): the exactly-once Kafka sink, on Kafka transactions.

Each task writes its partition of a batch in a transaction of a transactional producer whose id
is `<transactionalIdPrefix>-<partition>-<attempt>` (deterministic, so the next task with the same
partition and attempt fences what a crashed one left open; per attempt, so a speculative copy
never fences the accepted attempt), flushes it, and hands the driver (transactional id, producer
id, epoch) without committing. The driver ends the transaction with EndTxn
(sinks/kafka_commit.py) once Spark says the batch is complete; when the coordinator refuses,
the output's control markers settle whether it had been committed. The commit protocol is the
template's.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
from confluent_kafka import KafkaError, KafkaException, Producer
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructType,
)

from connectors.core.kafka_client import (
    RETRY_TIMEOUT_OPTION,
    KafkaRetriesExhausted,
    RetryPolicy,
    broker_max_transaction_timeout_ms,
    check_connection,
    is_transient,
    librdkafka_conf,
)
from sinks.kafka_commit import (
    ABORTED,
    COMMITTED,
    OPEN,
    OutcomeUnreadable,
    PreparedTxn,
    TransactionFenced,
    TransientTxnError,
    TxnAuthorizationError,
    TxnRefused,
    TxnRequestError,
    TxnStateInvalid,
    acl_needed,
    check_cluster,
    end_offsets,
    end_transaction,
    fence_transactional_id,
    transaction_outcome,
)
from connectors.core.cloud_tokens import librdkafka_client_conf
from connectors.core.transactions_refused import (
    TransactionsUnsupported,
    refuses_transactions,
)
from connectors.core.transactions_refused import message as refused_message
from connectors.core.options import OptionError, Options
from connectors.core.schema_registry.encoding import EncodingPlan, encoder_for
from connectors.core.schema_registry.sink_schema import (
    SINK_OPTION_PREFIXES,
    SinkRegistry,
    parse_sink_registries,
    resolve_plan,
    sink_option_names,
)
from sinks.two_phase_commit import (
    AT_LEAST_ONCE,
    EXACTLY_ONCE,
    SinkSettings,
    TaskInfo,
    TransactionLost,
    TwoPhaseCommitSink,
)
from connectors.core.kafka_format import FORMAT_NAME
from sinks.kafka_handles import KafkaHandle, kafka_handle
from sinks.kafka_ids import acl_check_id, default_prefix, parse_transactional_id, transactional_id
from sinks.txn_log import Handle, TransactionLog

log = logging.getLogger("kafka_eos.sink.kafka")

#: The sink's own options (besides the template's and `kafka.*`); anything else is refused.
OPTIONS = ("topic", "transactionalIdPrefix", "flushTimeout", RETRY_TIMEOUT_OPTION,
           *sink_option_names())
OPTION_PREFIXES = ("kafka.", *SINK_OPTION_PREFIXES)
#: A batch write's transactional ids: `<transactionalIdPrefix or this>-<job id>-<p>-<a>`.
BATCH_PREFIX = "kafka-eos-batch"
#: A failed batch job's ids are fenced for attempts 0..this-1 of every partition (Spark's
#: default spark.task.maxFailures), and for any higher attempt its messages show.
BATCH_ABORT_ATTEMPTS = 4
#: abortJob fences this many ids at once (each is two small requests on the shared commit client).
_FENCE_THREADS = 8
_TEXT_OR_BYTES = (StringType, BinaryType)


@dataclass(frozen=True)
class KafkaSinkOptions:
    kafka_conf: dict[str, str] = field(repr=False)  # may hold secrets
    topic: str | None
    prefix: str
    flush_timeout_s: float
    #: kafkaRetryTimeout: every Kafka call of the tasks and the driver retries transient errors
    #: (a broker restarting, a coordinator moving) under this deadline.
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    #: "value" / "key" -> its Schema Registry format settings (valueFormat, keyFormat), for the
    #: struct columns serialized into the Confluent wire format
    registries: dict[str, SinkRegistry] = field(default_factory=dict)

    @property
    def bootstrap_servers(self) -> str:
        return self.kafka_conf["bootstrap.servers"]

    @classmethod
    def parse(cls, opts: Options, settings: SinkSettings, schema: StructType) -> "KafkaSinkOptions":
        conf = librdkafka_conf(opts)
        _check_transaction_timeout(conf.get("transaction.timeout.ms"))
        topic = opts.get("topic")
        registries = parse_sink_registries(opts, schema, topic)
        _check_schema(schema, topic, serialized=tuple(registries))
        if settings.batch_job:
            # One set of ids per job: concurrent batch jobs never fence each other, and a
            # failed job's ids can all be fenced (abortJob). Under the user's prefix, if set,
            # so the prefixed TransactionalId ACL still covers them.
            prefix = f"{opts.get('transactionalIdPrefix') or BATCH_PREFIX}-{settings.job_id}"
        else:
            prefix = opts.get("transactionalIdPrefix") or default_prefix(
                settings.checkpoint_location, conf["bootstrap.servers"], topic)
        retry = RetryPolicy.from_options(opts)
        # A flush waits out a broker restart as any other call does (librdkafka resends what
        # a restarted leader did not acknowledge), unless the user bounds it.
        flush_ms = opts.get_duration_ms("flushTimeout", int(retry.timeout_s * 1000))
        return cls(conf, topic, prefix, flush_ms / 1000, retry, registries)


def commit_budget(settings: SinkSettings, opts: Options, retry: RetryPolicy) -> SinkSettings:
    """The driver's commit retries follow kafkaRetryTimeout unless commitTimeout or
    commitRetries say otherwise: EndTxn waits out a coordinator that moved or a quorum being
    restored as the other Kafka calls do, rather than giving up after nine attempts."""
    changes: dict[str, int] = {}
    if "commitTimeout" not in opts:
        changes["commit_timeout_ms"] = max(settings.commit_timeout_ms, int(retry.timeout_s * 1000))
    if "commitRetries" not in opts:
        changes["commit_attempts"] = max(settings.commit_attempts, UNBOUNDED_COMMIT_ATTEMPTS)
    return dataclasses.replace(settings, **changes) if changes else settings


#: commitRetries unset: the deadline bounds the commit's retries, not their number.
UNBOUNDED_COMMIT_ATTEMPTS = 1_000_000


def _check_transaction_timeout(value: str | None) -> None:
    if value is not None and not (value.strip().isdigit() and int(value) > 0):
        raise OptionError("kafka.transaction.timeout.ms",
                          f"must be a positive number of milliseconds, not {value!r}")


def _check_schema(schema: StructType, topic_option: str | None,
                  serialized: tuple[str, ...] = ()) -> None:
    """The columns Spark's Kafka sink takes; `serialized` names the columns (value, key) that a
    Schema Registry format writes, whose struct type parse_sink_registries checked."""
    fields = {f.name: f.dataType for f in schema.fields}
    if "value" not in fields:
        raise OptionError("value", f"the stream needs a 'value' column (string or binary); it has {sorted(fields)}")
    for name in ("key", "value"):
        if name in fields and name not in serialized and not isinstance(fields[name], _TEXT_OR_BYTES):
            raise OptionError(name, f"column '{name}' must be string or binary, not {fields[name].simpleString()}")
    # As in Spark's Kafka sink, the `topic` option, when set, overrides any `topic` column,
    # which is then ignored whatever its type.
    if "topic" in fields and not topic_option and not isinstance(fields["topic"], StringType):
        raise OptionError("topic", f"column 'topic' must be string, not {fields['topic'].simpleString()}")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise OptionError("partition", f"column 'partition' must be int, not {fields['partition'].simpleString()}")
    if "headers" in fields:
        t = fields["headers"]
        ok = (
            isinstance(t, ArrayType) and isinstance(t.elementType, StructType)
            and [f.name for f in t.elementType.fields] == ["key", "value"]
            and isinstance(t.elementType.fields[0].dataType, StringType)
            and isinstance(t.elementType.fields[1].dataType, _TEXT_OR_BYTES)
        )
        if not ok:
            raise OptionError("headers", "column 'headers' must be array<struct<key:string,value:binary>>")
    if "topic" not in fields and not topic_option:
        raise OptionError("topic", "no topic: set .option(\"topic\", ...) or give the stream a 'topic' column")


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


def _callbacks(current, *, statistics: bool) -> dict[str, Any]:
    """Delivery failures (and statistics) go to the task's KafkaTxn, `current()`."""
    conf: dict[str, Any] = {
        # Delivery reports for failures only: no Python callback per record on the hot path.
        "delivery.report.only.error": True,
        "on_delivery": lambda err, msg: current().errors.append(_delivery_error(err, msg)),
        # A fatal error (a fenced transactional producer: a newer attempt of the partition
        # took its id over) is kept first among the task's errors: invoke and preCommit raise
        # it, naming what happened (see _fatal_from).
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


def _fatal_from(txn: "KafkaTxn", call, *args):
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
            fenced = _fencing_delivery_error(txn.errors)
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


#: Delivery errors that mean a newer producer took the transactional id over.
_FENCING_CODES = frozenset({KafkaError.INVALID_PRODUCER_EPOCH, KafkaError.PRODUCER_FENCED,
                            KafkaError._FENCED})


def _fencing_delivery_error(errors: list) -> KafkaError | None:
    return next((err for err in errors
                 if isinstance(err, KafkaError) and err.code() in _FENCING_CODES), None)


#: librdkafka's default `message.max.bytes` (the producer's bound on one record, checked by
#: produce() before anything is sent) and Kafka's default `max.message.bytes` of a topic
#: (the broker's `message.max.bytes`: its bound on one record batch).
LIBRDKAFKA_MESSAGE_MAX_BYTES = 1_000_000
BROKER_MAX_MESSAGE_BYTES = 1_048_588


class RecordTooLarge(KafkaException):
    """A record over the producer's or the broker's size limit (MSG_SIZE_TOO_LARGE), named with
    its size, its key, the source row it came from when the row says so, and the settings to
    change. A KafkaException, so `except KafkaException` still catches it; its first line is
    what to change, instead of librdkafka's bare "Broker: Message size too large"."""

    def __init__(self, message: str, error: KafkaError | None = None) -> None:
        super().__init__(message)
        self.error = error

    def __str__(self) -> str:
        return str(self.args[0])


def _show_key(key: Any) -> str:
    """A key for a message: text as is (up to 64 characters), bytes decoded when they are
    UTF-8 text, else their first bytes in hex; no key says so."""
    if key is None:
        return "no key"
    if isinstance(key, (bytes, bytearray, memoryview)):
        raw = bytes(key)
        try:
            key = raw.decode("utf-8")
        except UnicodeDecodeError:
            return f"key 0x{raw[:16].hex()}{'...' if len(raw) > 16 else ''} ({len(raw)} bytes)"
    text = str(key)
    return f"key {text[:64]!r}{'...' if len(text) > 64 else ''}"


def _size(data: Any) -> int:
    if data is None:
        return 0
    return len(data.encode("utf-8")) if isinstance(data, str) else len(data)


def _delivery_error(err: KafkaError, msg: Any) -> Any:
    """What a failed delivery report leaves among the task's errors: the KafkaError, or for a
    record batch the broker refused as too large, a RecordTooLarge naming the record."""
    if err is None or err.code() != KafkaError.MSG_SIZE_TOO_LARGE:
        return err
    try:
        topic, partition, key = msg.topic(), msg.partition(), msg.key()
        size = _size(msg.value()) + _size(key)
    except Exception:  # no record to name: the plain error
        return err
    return RecordTooLarge(
        f"record batch too large for the broker (MSG_SIZE_TOO_LARGE): it refused the batch "
        f"holding a record of {size:,} bytes ({_show_key(key)}) for topic {topic} partition "
        f"{partition}: a record "
        f"batch must fit the topic's max.message.bytes (default: the broker's "
        f"message.max.bytes, {BROKER_MAX_MESSAGE_BYTES:,}). Raise the topic's max.message.bytes "
        f"(kafka-configs.sh --alter --entity-type topics --entity-name {topic} --add-config "
        f"max.message.bytes=N), or keep the producer's batches under it: kafka.batch.size and "
        f"kafka.message.max.bytes at most the topic's limit", err)


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


def _shared_producer(kafka_conf: dict[str, str], guarantee: str, txn: KafkaTxn) -> Any:
    key = (guarantee, tuple(sorted(kafka_conf.items())))
    shared = _SHARED.get(key)
    if shared is None:
        holder: list[KafkaTxn] = [txn]
        conf = producer_conf(kafka_conf)
        # No statistics: the producer outlives its tasks, and undelivered statistics would pile
        # up in its queue between them. Nothing but a flush is needed before its handle.
        conf.update(_callbacks(lambda: holder[0], statistics=False))
        if guarantee == AT_LEAST_ONCE:
            conf.setdefault("enable.idempotence", "true")
        shared = _SHARED[key] = _Shared(Producer(conf), holder)
    else:
        shared.holder[0] = txn
    return shared.producer


def _drop_shared_producer(producer: Any) -> None:
    for key, shared in list(_SHARED.items()):
        if shared.producer is producer:
            del _SHARED[key]
            producer.purge()
            producer.flush(0)


def _produce_when_room(producer: Any, topic: str, **kwargs: Any) -> None:
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
#: (configuration, prefix) whose transactional id ACL was checked in this process.
_ACL_CHECKED: set[tuple] = set()


def _conf_key(kafka_conf: dict[str, str]) -> tuple:
    return tuple(sorted(kafka_conf.items()))


def _resolve_transaction_timeout(kafka_conf: dict[str, str]) -> int:
    key = _conf_key(kafka_conf)
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


def _init_transactions(
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


# -- attempts other than the first ------------------------------------------------------------


class _AttemptNotes:
    """Which transactional ids beyond attempt 0 a checkpoint's tasks used, so the driver can
    fence what they may have left open. Spark numbers a partition's attempts 0, 1, ... (task
    retries and speculative copies), so `<prefix>-<p>-<a>` is a bounded id space; but an id of
    attempt a >= 1 may never be used again, and an open transaction on it (a speculative loser
    or a retry that was killed before its preCommit, without running its own abort) would hold
    read_committed readers of its partitions at the last stable offset until
    transaction.timeout.ms. A task of attempt a >= 1 notes (prefix, p, a) here, beside the
    transaction log, before it opens its transaction; before the next batch's tasks the driver
    fences ids a..0 of that partition (an attempt a exists only if 0..a-1 failed or were slow)
    and forgets the note. Attempt 0 needs no note: the next batch's attempt 0 of the partition
    fences its id when it begins, and a restart's replay of the batch does."""

    def __init__(self, checkpoint_location: str) -> None:
        txlog = TransactionLog(checkpoint_location)  # the same filesystem and scheme rules
        self.fs = txlog.fs
        self.root = f"{txlog.root.rsplit('/', 1)[0]}/{ATTEMPTS_DIR}"

    def note(self, prefix: str, partition: int, attempt: int) -> None:
        self.fs.create_dir(self.root, recursive=True)
        path = f"{self.root}/{partition}-{attempt}-{uuid.uuid4().hex[:8]}.json"
        with self.fs.open_output_stream(path) as out:
            note = {"prefix": prefix, "partition": partition, "attempt": attempt}
            out.write(json.dumps(note).encode())

    def pending(self) -> dict[str, dict]:
        infos = self.fs.get_file_info(pafs.FileSelector(self.root, allow_not_found=True))
        notes = {}
        for info in infos:
            if info.base_name.endswith(".json"):
                try:
                    with self.fs.open_input_stream(info.path) as f:
                        notes[info.path] = json.loads(f.read().decode())
                except (OSError, ValueError):
                    continue  # being written by a task right now: the next batch's sweep
        return notes

    def forget(self, path: str) -> None:
        try:
            self.fs.delete_file(path)
        except FileNotFoundError:
            pass


#: The directory of _AttemptNotes, beside the template's `eos-sink` transaction log.
ATTEMPTS_DIR = "eos-sink-kafka-attempts"


class KafkaSink(TwoPhaseCommitSink[KafkaTxn]):
    commits_per_partition = True  # each task's transaction is its own
    #: EndTxn of several partitions in flight at once (the commit client is thread-safe)
    concurrent_commits = 16

    def __init__(self, settings: SinkSettings, options: KafkaSinkOptions) -> None:
        super().__init__(settings)
        self.options = options
        #: Set by open() on the driver before a batch's tasks, and pickled to them:
        self.transaction_timeout_ms: int | None = None
        #: (topic, partition) -> an offset below every record this batch will write there.
        self.scan_from: dict[tuple[str, int], int] = {}
        self._warned_batch: int | None = None
        #: "value" / "key" -> how its struct column is serialized; resolved by open() on the
        #: driver (once per writer) and pickled to the tasks, which never ask the registry
        self.encodings: dict[str, EncodingPlan] | None = None

    def describe(self) -> str:
        return f"kafka-eos[{self.options.prefix}]"

    @property
    def _exactly_once(self) -> bool:
        return self.settings.guarantee == EXACTLY_ONCE

    def open(self) -> None:
        """Driver side, before every batch's tasks: the transaction timeout (once per worker
        process) and the output's end offsets (one Metadata and one ListOffsets request per
        leader, ~1 ms on the test broker): any record this batch's tasks write lies at or
        above them, so a transaction whose commit is in doubt can be settled by reading the
        output from there rather than from the log start. Before any of it, the schemas of
        the columns a Schema Registry format writes (once per writer)."""
        self._resolve_encodings()
        if not self._exactly_once:
            check_connection(self.options.kafka_conf)  # the tasks' producers' settings
            return
        # the commit client's TLS and SASL: a refusal, or a cluster that never answered this
        # process (often the wrong protocol), fails the query now, naming the option; once it
        # passed, the check is not made again, and a silent cluster is the commit's to wait for
        check_cluster(self.options.kafka_conf)
        self.transaction_timeout_ms = _resolve_transaction_timeout(self.options.kafka_conf)
        self._check_transactional_id_acl()
        self.scan_from = {}
        if self.options.topic:
            try:
                self.scan_from = self.options.retry.call(
                    f"reading the end offsets of {self.options.topic} at "
                    f"{self.options.bootstrap_servers}",
                    lambda: end_offsets(self.options.kafka_conf, [self.options.topic]),
                    transient=lambda e: isinstance(e, TransientTxnError))
            except (TransientTxnError, TxnRequestError) as e:
                log.warning("%s: end offsets of %s not read (%s); a commit in doubt would be "
                            "settled from the log start", self.describe(), self.options.topic, e)

    def _resolve_encodings(self) -> None:
        if self.encodings is None:
            self.encodings = {side: resolve_plan(registry, self.options.topic)
                              for side, registry in self.options.registries.items()}

    def _column(self, txn: KafkaTxn, batch: pa.RecordBatch, name: str) -> list:
        """The column's Kafka bytes or text: as it is, or serialized into the Confluent wire
        format when a Schema Registry format writes it (a row that does not fit fails the
        task, naming the row and the field, before anything of the batch is produced)."""
        plan = (self.encodings or {}).get(name)
        if plan is None:
            return batch.column(name).to_pylist()
        return encoder_for(plan).encode(batch.column(name), where=self._row_place(txn, batch))

    def _row_place(self, txn: KafkaTxn, batch: pa.RecordBatch):
        """Describes a row for errors: its source coordinates when the rows carry them."""
        names = batch.schema.names

        def where(row: int) -> str:
            if "offset" in names:
                return "source row " + " ".join(
                    f"{c} {batch.column(c)[row].as_py()}" for c in ("topic", "partition", "offset")
                    if c in names)
            return (f"row {row} of Spark partition {txn.info.partition_id}'s input in batch "
                    f"{txn.info.batch_id}")

        return where

    def _check_transactional_id_acl(self) -> None:
        """Once per process and configuration: InitProducerId for `<prefix>-acl-check`, an id
        of the sink's prefix that no task uses, so that a principal without WRITE on the
        prefix fails the query at its start, naming the ACL, and not at the first batch with
        rows. Other failures are the tasks' to meet (logged here)."""
        key = (_conf_key(self.options.kafka_conf), self.options.prefix)
        if key in _ACL_CHECKED:
            return
        tid = acl_check_id(self.options.prefix)
        try:
            fence_transactional_id(self.options.kafka_conf, tid,
                                   self.transaction_timeout_ms or DEFAULT_TRANSACTION_TIMEOUT_MS,
                                   deadline_s=10.0)
        except TxnAuthorizationError as e:
            raise self._acl_error(e) from e
        except (TransientTxnError, TxnRequestError) as e:
            if refuses_transactions(getattr(e, "code", None), str(e)):  # e.g. Event Hubs Standard
                raise TransactionsUnsupported(
                    refused_message(self.options.bootstrap_servers, str(e))) from None
            log.info("%s: the transactional id ACL was not checked at start (%s)",
                     self.describe(), e)
        _ACL_CHECKED.add(key)

    # -- task side --------------------------------------------------------------------------

    def beginTransaction(self, context: TaskInfo) -> KafkaTxn:
        if not self._exactly_once:
            txn = KafkaTxn(context, None, None)
            # One producer per worker process and configuration, kept across tasks: a fresh
            # idempotent producer waits ~0.5 s for its producer id before its first send
            # (librdkafka retries the id request on a 500 ms timer while no connection is up),
            # which made at-least-once batches slower than exactly-once ones.
            txn.producer = _shared_producer(self.options.kafka_conf, self.settings.guarantee, txn)
            return txn
        tid = transactional_id(self.options.prefix, context.partition_id, context.attempt)
        txn = KafkaTxn(context, None, tid, began_ms=int(time.time() * 1000))
        if context.attempt > 0 and self.settings.checkpoint_location:
            _AttemptNotes(self.settings.checkpoint_location).note(
                self.options.prefix, context.partition_id, context.attempt)
        conf = transactional_producer_conf(self.options.kafka_conf)
        conf.update(_callbacks(lambda: txn, statistics=True))
        conf["transactional.id"] = tid
        user_set = "transaction.timeout.ms" in self.options.kafka_conf
        timeout_ms = (self.transaction_timeout_ms
                      or _resolve_transaction_timeout(self.options.kafka_conf))
        # init_transactions fences and aborts what an earlier task with this id left open
        txn.producer, txn.timeout_ms = _init_transactions(
            conf, timeout_ms, user_set=user_set, prefix=self.options.prefix,
            retry=self.options.retry)
        if txn.timeout_ms != timeout_ms:
            _TIMEOUTS[_conf_key(self.options.kafka_conf)] = txn.timeout_ms
        txn.producer.begin_transaction()
        return txn

    def invoke(self, txn: KafkaTxn, batch: pa.RecordBatch) -> None:
        names = batch.schema.names
        n = batch.num_rows
        values = self._column(txn, batch, "value")
        keys = self._column(txn, batch, "key") if "key" in names else [None] * n
        default_topic = self.options.topic
        producer = txn.producer
        produce = producer.produce
        # The topic option, when set, overrides the topic column (as in Spark's Kafka sink).
        routed = {"partition", "headers"} if default_topic else {"topic", "partition", "headers"}
        if not routed & set(names):
            # The common case: positional arguments, no dict per record.
            try:  # outside the loop: nothing added per record on the hot path
                for value, key in zip(values, keys):
                    try:
                        produce(default_topic, value, key)
                    except BufferError:
                        _produce_when_room(producer, default_topic, value=value, key=key)
            except KafkaException as e:
                # `value` is the refused record's; the first equal one is its row (an equal
                # one before it would have been refused first)
                raise self._too_large(e, txn, batch, values.index(value), default_topic,
                                      value, key) from None
            _fatal_from(txn, producer.poll, 0)
            self._raise_fatal(txn)
            return
        topics = (batch.column("topic").to_pylist() if "topic" in names and not default_topic
                  else [None] * n)
        parts = batch.column("partition").to_pylist() if "partition" in names else [None] * n
        headers = batch.column("headers").to_pylist() if "headers" in names else [None] * n
        for row, (value, key, topic, part, hdrs) in enumerate(
                zip(values, keys, topics, parts, headers)):
            topic = topic or default_topic
            if topic is None:  # Spark's Kafka sink fails the same way
                raise ValueError(
                    f"{self.describe()}: null topic present in the data; set "
                    '.option("topic", ...) or give every row a topic')
            kwargs: dict[str, Any] = {"value": value, "key": key}
            if part is not None:
                kwargs["partition"] = part
            if hdrs:
                kwargs["headers"] = [(h["key"], h["value"]) for h in hdrs]
            try:
                produce(topic, **kwargs)
            except BufferError:
                _produce_when_room(producer, topic, **kwargs)
            except KafkaException as e:
                raise self._too_large(e, txn, batch, row, topic, value, key, hdrs) from None
        _fatal_from(txn, producer.poll, 0)
        self._raise_fatal(txn)

    def _too_large(self, e: KafkaException, txn: KafkaTxn, batch: pa.RecordBatch, row: int,
                   topic: str, value: Any, key: Any, headers: Any = None) -> Exception:
        """produce()'s own size check (librdkafka refuses a record over the producer's
        `message.max.bytes` before sending it) as a RecordTooLarge naming the record, its
        source row when the rows carry Kafka coordinates (`offset`, with `topic` and
        `partition`: a kafka-eos source's rows written on), and the settings to change; any
        other produce() error as it is."""
        err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
        if err is None or err.code() != KafkaError.MSG_SIZE_TOO_LARGE:
            return e
        size = _size(value) + _size(key) + sum(
            _size(h.get("key")) + _size(h.get("value")) for h in headers or ())
        limit = self.options.kafka_conf.get("message.max.bytes")
        limit_text = (f"kafka.message.max.bytes = {limit}" if limit else
                      f"kafka.message.max.bytes = {LIBRDKAFKA_MESSAGE_MAX_BYTES:,} (librdkafka's "
                      "default)")
        names = batch.schema.names
        if "offset" in names:
            src = {c: batch.column(c)[row].as_py() for c in ("topic", "partition", "offset")
                   if c in names}
            where = "source row " + " ".join(f"{c} {v}" for c, v in src.items())
        else:
            where = (f"row {row} of Spark partition {txn.info.partition_id}'s input in batch "
                     f"{txn.info.batch_id}")
        return RecordTooLarge(
            f"{self.describe()}: record too large for the producer (MSG_SIZE_TOO_LARGE): "
            f"{size:,} bytes ({_show_key(key)}, {where}) for topic {topic}, over "
            f"{limit_text}. Raise .option(\"kafka.message.max.bytes\", ...) above the "
            f"record's size (the topic's max.message.bytes, default "
            f"{BROKER_MAX_MESSAGE_BYTES:,}, must allow it too), or write smaller records", err)

    def _raise_fatal(self, txn: KafkaTxn) -> None:
        """Stop writing at a fatal producer error: a fenced producer is a zombie attempt."""
        if txn.errors and isinstance(txn.errors[0], KafkaError) and txn.errors[0].fatal():
            raise KafkaException(txn.errors[0])

    def preCommit(self, txn: KafkaTxn) -> KafkaHandle | Handle:
        producer = txn.producer
        deadline = time.monotonic() + self.options.flush_timeout_s
        while _fatal_from(txn, producer.flush, 1.0) > 0:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.describe()}: records not delivered within flushTimeout")
        if txn.errors:  # a fatal one first (error_cb)
            first = txn.errors[0]
            raise first if isinstance(first, RecordTooLarge) else KafkaException(first)
        if txn.transactional_id is None:
            # At-least-once / none: delivered, acknowledged; the producer stays in its cache.
            txn.producer = None
            return {"flushed": True}
        # Statistics taken after the flush count every record of this transaction.
        txn.stats.clear()
        txn.stats_json = None
        while "topics" not in txn.stats or (
            txn.stats.get("eos", {}).get("txn_state") != "InTransaction"
        ):
            if txn.stats_json is not None:
                txn.stats, txn.stats_json = json.loads(txn.stats_json), None
                continue
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.describe()}: librdkafka reported no statistics")
            producer.poll(0.05)
        eos = txn.stats["eos"]
        written = _partitions_written(txn.stats)
        handle = kafka_handle(
            txn.transactional_id, eos["producer_id"], eos["producer_epoch"],
            partitions=written, began_ms=txn.began_ms, timeout_ms=txn.timeout_ms,
            # Where the output can be read to settle this transaction if its commit is refused
            scan_from=[[t, p, self.scan_from[(t, p)]]
                       for t, p in written if (t, p) in self.scan_from],
        )
        # Drop the producer without committing: the transaction stays open on the broker
        # until the driver ends it (docs/design.md#kafka-commits).
        txn.producer = None
        del producer
        return handle

    def abortTransaction(self, txn: KafkaTxn) -> None:
        if txn.producer is not None and txn.transactional_id is not None:
            try:
                txn.producer.abort_transaction(10)
            except KafkaException as e:
                log.warning("%s: abort_transaction: %s", self.describe(), e)
        elif txn.producer is not None:
            _drop_shared_producer(txn.producer)  # a failed task's producer is not reused
        txn.producer = None

    # -- driver side ------------------------------------------------------------------------

    def commit(self, batchId: int, handles: dict[int, Handle]) -> None:
        if not self._exactly_once:
            return  # delivered by the task's idempotent producer
        self._warn_if_near_timeout(batchId, handles)
        for partition, h in handles.items():
            self._commit_one(batchId, partition, h)

    def _commit_one(self, batch_id: int, partition: int, h: KafkaHandle) -> None:
        txn = _prepared(h)
        try:
            # no answer, no connection, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, ...:
            # the coordinator is moving or its broker restarting; a closed connection is a
            # refusal for all the embedded broker tells, and is settled below
            self.options.retry.call(
                f"committing {txn.transactional_id} (batch {batch_id}, partition {partition})",
                lambda: end_transaction(self.options.kafka_conf, txn, commit=True),
                transient=_plainly_transient)
            return
        except TxnAuthorizationError as e:
            raise self._acl_error(e, h) from e
        except TxnRefused as e:
            refusal: Exception = e
        except TransientTxnError as e:
            if not e.closed_by_broker:
                raise
            # Workaround for the embedded demo broker (Tansu 0.6.0), which answers a refused
            # EndTxn by closing the connection: worth asking the output. Real Kafka answers
            # with an error code (TxnRefused above).
            refusal = e
        self._settle(batch_id, partition, h, refusal)

    def _settle(self, batch_id: int, partition: int, h: KafkaHandle, refusal: Exception) -> None:
        """The coordinator would not commit the handle: ask the output whether its transaction
        was committed before (a repeated commit after a fence or an id expiry), aborted, or is
        still open. A committed transaction is never taken for lost; nothing is guessed."""
        txn = _prepared(h)
        try:
            outcome = transaction_outcome(self.options.kafka_conf, txn, _scan_starts(h))
        except TransientTxnError:
            raise refusal from None  # the output cannot be read now: the refusal stands
        except OutcomeUnreadable as e:
            if isinstance(refusal, TransientTxnError):
                raise TransientTxnError(f"{refusal}; and the output does not settle it: {e}",
                                        closed_by_broker=True) from e
            raise OutcomeUnreadable(
                f"{self.describe()}: batch {batch_id}, partition {partition}: {refusal}, and "
                f"whether the transaction was committed cannot be told: {e}. Check whether "
                f"that batch's records of partition {partition} are in the output "
                "(read_committed); if they are, create the empty file "
                f"eos-sink/{batch_id}/committed-{partition} under the checkpoint and restart",
                e.code,
            ) from e
        if outcome == COMMITTED:
            log.info("%s: batch %d, partition %d: %s; the output holds its COMMIT marker, so it "
                     "was committed before", self.describe(), batch_id, partition, refusal)
            return
        if outcome == OPEN and isinstance(refusal, (TransientTxnError, TxnStateInvalid)):
            raise refusal  # not ended: retry, or fail with the Kafka error's name
        found = "its ABORT marker" if outcome == ABORTED else "no marker after its records"
        raise TransactionLost([partition], f"{refusal}; the output holds {found}")

    def _acl_error(self, e: TxnAuthorizationError, h: Handle | None = None) -> TxnAuthorizationError:
        topics = [t for t, _ in (h or {}).get("partitions", [])] or [self.options.topic or ""]
        return TxnAuthorizationError(
            f"{self.describe()}: {e}; "
            f"{acl_needed(e.code, self.options.prefix, filter(None, topics))}",
            e.code,
        )

    def _warn_if_near_timeout(self, batch_id: int, handles: dict[int, Handle]) -> None:
        if self._warned_batch == batch_id:
            return  # commit is called once per partition
        began = [int(h["began_ms"]) for h in handles.values() if "began_ms" in h]
        timeouts = [int(h["timeout_ms"]) for h in handles.values() if "timeout_ms" in h]
        message = timeout_warning(batch_id, began, min(timeouts, default=0),
                                  int(time.time() * 1000), self.describe())
        if message:
            self._warned_batch = batch_id
            log.warning(message)

    def abort(self, handles: list[Handle]) -> None:
        """End prepared transactions that will never be committed. Definite errors are logged,
        not raised (a newer producer with the id fences the transaction anyway), except an
        authorization failure: the sink cannot work without that ACL."""
        for h in handles:
            if "transactional_id" not in h:
                continue
            try:
                end_transaction(self.options.kafka_conf, _prepared(h), commit=False)
            except TxnAuthorizationError as e:
                raise self._acl_error(e, h) from e
            except TransactionFenced:
                pass  # already aborted, or fenced by a newer producer: nothing to undo
            except (TransientTxnError, TxnRequestError) as e:
                log.warning("%s: could not abort %s: %s", self.describe(), h["transactional_id"], e)

    def abortJob(self, handles: list[Handle], partitions: int) -> None:
        """A failed batch job: abort the handles Spark reported, then fence every id the job's
        tasks may have used (`<prefix>-<p>-<a>`, the prefix holding the job id), which aborts
        what tasks Spark did not report left open: those still running when the job failed,
        or killed. Ids never used cost a coordinator entry each, on this failure path only."""
        self.abort(handles)
        attempts = max([BATCH_ABORT_ATTEMPTS - 1] + [
            parsed.attempt for h in handles
            if (parsed := parse_transactional_id(h.get("transactional_id", ""))) is not None
        ])
        timeout_ms = self.transaction_timeout_ms or DEFAULT_TRANSACTION_TIMEOUT_MS
        tids = [transactional_id(self.options.prefix, partition, attempt)
                for partition in range(partitions) for attempt in range(attempts + 1)]
        # Concurrently: a fence waits out CONCURRENT_TRANSACTIONS while the coordinator cannot
        # write its abort markers (e.g. NOT_ENOUGH_REPLICAS), up to its deadline; one after
        # another, a job's ids would hold the failed query that long each.
        with ThreadPoolExecutor(max_workers=_FENCE_THREADS,
                                thread_name_prefix="kafka-eos-fence") as pool:
            list(pool.map(lambda tid: self._fence(tid, timeout_ms), tids))

    def _fence(self, tid: str, timeout_ms: int) -> bool:
        """InitProducerId for `tid`; False (logged) when the cluster cannot do it now."""
        try:
            fence_transactional_id(self.options.kafka_conf, tid, timeout_ms)
            return True
        except TxnAuthorizationError as e:
            raise self._acl_error(e) from e
        except (TransientTxnError, TxnRequestError) as e:
            log.warning("%s: could not fence %s: %s", self.describe(), tid, e)
            return False

    def isTransient(self, exc: BaseException) -> bool:
        """Definite Kafka errors (authorization, a refusal the output settled, any error
        Kafka does not call retriable) fail the commit at once instead of until commitTimeout."""
        if isinstance(exc, KafkaException):
            return is_transient(exc)
        return not isinstance(exc, (TxnRequestError, TransactionLost, OptionError,
                                    KafkaRetriesExhausted))

    def cleanupAbandoned(self) -> None:
        """Fence the ids of attempts >= 1 that tasks noted since the last batch (see
        _AttemptNotes). Every decided batch is committed by now, so nothing fenced here can be
        a transaction still to commit. Costs one listing of an empty directory per batch."""
        if not self.settings.checkpoint_location:
            return
        notes = _AttemptNotes(self.settings.checkpoint_location)
        timeout_ms = self.transaction_timeout_ms or DEFAULT_TRANSACTION_TIMEOUT_MS
        for path, note in notes.pending().items():
            for attempt in range(int(note["attempt"]), -1, -1):
                tid = transactional_id(note["prefix"], int(note["partition"]), attempt)
                if not self._fence(tid, timeout_ms):
                    return  # keep the note: the next batch tries again
            log.info("%s: fenced the transactional ids of partition %s, attempts 0..%s",
                     self.describe(), note["partition"], note["attempt"])
            notes.forget(path)


def _plainly_transient(exc: BaseException) -> bool:
    """A commit-client error to retry as it is: not a connection the broker closed after the
    request went out (the embedded broker's way of refusing; _settle asks the output)."""
    return isinstance(exc, TransientTxnError) and not exc.closed_by_broker


def _partitions_written(stats: dict) -> list[list]:
    return sorted(
        [topic, int(p)]
        for topic, t in stats.get("topics", {}).items()
        for p, part in t.get("partitions", {}).items()
        if int(p) >= 0 and part.get("txmsgs", 0) > 0
    )


def _prepared(h: KafkaHandle) -> PreparedTxn:
    return PreparedTxn(h["transactional_id"], int(h["producer_id"]), int(h["producer_epoch"]))


def _scan_starts(h: KafkaHandle) -> dict[tuple[str, int], int | None]:
    """Each partition the handle's transaction wrote -> where to read it from (None: the log
    start, for handles without the batch's end offsets)."""
    starts = {(t, int(p)): int(o) for t, p, o in h.get("scan_from", [])}
    return {(t, int(p)): starts.get((t, int(p))) for t, p in h.get("partitions", [])}

