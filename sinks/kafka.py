"""`kafka-eos` (writeStream): the exactly-once Kafka sink, on Kafka transactions.

Each task writes its partition of a batch in a transaction of a transactional producer whose id
is `<transactionalIdPrefix>-<partition>` (deterministic, so a restart fences what a crashed run
left open), flushes it, and hands the driver (transactional id, producer id, epoch) without
committing. The driver ends the transaction with EndTxn (connectors/kafka_txn.py) once Spark says
the batch is complete. The commit protocol is the template's.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaException, Producer
from pyspark.sql.datasource import DataSourceStreamWriter
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructType,
)

from connectors.kafka_client import librdkafka_conf
from connectors.kafka_txn import (
    PreparedTxn,
    TransactionFenced,
    TransientTxnError,
    end_transaction,
)
from connectors.options import OptionError, Options
from sinks.two_phase_commit import (
    AT_LEAST_ONCE,
    EXACTLY_ONCE,
    SinkSettings,
    TaskInfo,
    TransactionLost,
    TwoPhaseCommitSink,
)
from sinks.txn_log import Handle

log = logging.getLogger("kafka_eos.sink.kafka")

FORMAT_NAME = "kafka-eos"
_TEXT_OR_BYTES = (StringType, BinaryType)


@dataclass(frozen=True)
class KafkaSinkOptions:
    kafka_conf: dict[str, str] = field(repr=False)  # may hold secrets
    topic: str | None
    prefix: str
    flush_timeout_s: float

    @property
    def bootstrap_servers(self) -> str:
        return self.kafka_conf["bootstrap.servers"]

    @classmethod
    def parse(cls, opts: Options, settings: SinkSettings, schema: StructType) -> "KafkaSinkOptions":
        conf = librdkafka_conf(opts)
        topic = opts.get("topic")
        _check_schema(schema, topic)
        prefix = opts.get("transactionalIdPrefix")
        if not prefix:
            origin = settings.checkpoint_location or f"{conf['bootstrap.servers']}/{topic}"
            prefix = "kafka-eos-" + hashlib.sha256(origin.encode()).hexdigest()[:16]
        return cls(conf, topic, prefix, opts.get_duration_ms("flushTimeout", 60_000) / 1000)


def _check_schema(schema: StructType, topic_option: str | None) -> None:
    fields = {f.name: f.dataType for f in schema.fields}
    if "value" not in fields:
        raise OptionError("value", f"the stream needs a 'value' column (string or binary); it has {sorted(fields)}")
    for name in ("key", "value"):
        if name in fields and not isinstance(fields[name], _TEXT_OR_BYTES):
            raise OptionError(name, f"column '{name}' must be string or binary, not {fields[name].simpleString()}")
    if "topic" in fields and not isinstance(fields["topic"], StringType):
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
    errors: list = field(default_factory=list)


def _callbacks(current, *, statistics: bool) -> dict[str, Any]:
    """Delivery failures (and statistics) go to the task's KafkaTxn, `current()`."""
    conf: dict[str, Any] = {
        # Delivery reports for failures only: no Python callback per record on the hot path.
        "delivery.report.only.error": True,
        "on_delivery": lambda err, msg: current().errors.append(err),
    }
    if statistics:
        # Statistics carry the producer id and epoch (eos) and the partitions written;
        # preCommit waits for the first one after its flush, so the interval is short: the
        # producer lives for one task.
        conf["statistics.interval.ms"] = str(STATS_INTERVAL_MS)
        conf["stats_cb"] = lambda s: current().stats.update(json.loads(s))
    return conf


#: How often a transactional producer reports statistics (preCommit waits for one).
STATS_INTERVAL_MS = 20


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
        conf: dict[str, Any] = dict(kafka_conf)
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


class KafkaSink(TwoPhaseCommitSink[KafkaTxn]):
    commits_per_partition = True  # each task's transaction is its own

    def __init__(self, settings: SinkSettings, options: KafkaSinkOptions) -> None:
        super().__init__(settings)
        self.options = options

    def describe(self) -> str:
        return f"kafka-eos[{self.options.prefix}]"

    # -- task side --------------------------------------------------------------------------

    def beginTransaction(self, context: TaskInfo) -> KafkaTxn:
        exactly_once = self.settings.guarantee == EXACTLY_ONCE
        tid = f"{self.options.prefix}-{context.partition_id}" if exactly_once else None
        txn = KafkaTxn(context, None, tid)
        if not exactly_once:
            # One producer per worker process and configuration, kept across tasks: a fresh
            # idempotent producer waits ~0.5 s for its producer id before its first send
            # (librdkafka retries the id request on a 500 ms timer while no connection is up),
            # which made at-least-once batches slower than exactly-once ones.
            txn.producer = _shared_producer(self.options.kafka_conf, self.settings.guarantee, txn)
            return txn
        conf: dict[str, Any] = dict(self.options.kafka_conf)
        conf.update(_callbacks(lambda: txn, statistics=True))
        conf["transactional.id"] = tid
        txn.producer = Producer(conf)
        txn.producer.init_transactions(30)  # fences and aborts what a crashed run left
        txn.producer.begin_transaction()
        return txn

    def invoke(self, txn: KafkaTxn, batch: pa.RecordBatch) -> None:
        names = batch.schema.names
        n = batch.num_rows
        values = batch.column("value").to_pylist()
        keys = batch.column("key").to_pylist() if "key" in names else [None] * n
        default_topic = self.options.topic
        producer = txn.producer
        produce = producer.produce
        if not {"topic", "partition", "headers"} & set(names):
            # The common case: positional arguments, no dict per record.
            for value, key in zip(values, keys):
                try:
                    produce(default_topic, value, key)
                except BufferError:
                    _produce_when_room(producer, default_topic, value=value, key=key)
            producer.poll(0)
            return
        topics = batch.column("topic").to_pylist() if "topic" in names else [None] * n
        parts = batch.column("partition").to_pylist() if "partition" in names else [None] * n
        headers = batch.column("headers").to_pylist() if "headers" in names else [None] * n
        for value, key, topic, part, hdrs in zip(values, keys, topics, parts, headers):
            kwargs: dict[str, Any] = {"value": value, "key": key}
            if part is not None:
                kwargs["partition"] = part
            if hdrs:
                kwargs["headers"] = [(h["key"], h["value"]) for h in hdrs]
            try:
                produce(topic or default_topic, **kwargs)
            except BufferError:
                _produce_when_room(producer, topic or default_topic, **kwargs)
        producer.poll(0)

    def preCommit(self, txn: KafkaTxn) -> Handle:
        producer = txn.producer
        deadline = time.monotonic() + self.options.flush_timeout_s
        while producer.flush(1.0) > 0:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.describe()}: records not delivered within flushTimeout")
        if txn.errors:
            raise KafkaException(txn.errors[0])
        if txn.transactional_id is None:
            # At-least-once / none: delivered, acknowledged; the producer stays in its cache.
            txn.producer = None
            return {"flushed": True}
        # Statistics taken after the flush count every record of this transaction.
        txn.stats.clear()
        while "topics" not in txn.stats or (
            txn.stats.get("eos", {}).get("txn_state") != "InTransaction"
        ):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.describe()}: librdkafka reported no statistics")
            producer.poll(0.05)
        eos = txn.stats["eos"]
        handle: Handle = {
            "partitions": _partitions_written(txn.stats),
            "transactional_id": txn.transactional_id,
            "producer_id": eos["producer_id"],
            "producer_epoch": eos["producer_epoch"],
        }
        # Drop the producer without committing: the transaction stays open on the broker
        # until the driver ends it (DESIGN.md section 4).
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
        if self.settings.guarantee != EXACTLY_ONCE:
            return  # delivered by the task's idempotent producer
        for partition, h in handles.items():
            try:
                end_transaction(self.options.bootstrap_servers, _prepared(h), commit=True)
            except TransactionFenced as e:
                raise TransactionLost([partition], str(e)) from e

    def abort(self, handles: list[Handle]) -> None:
        for h in handles:
            if "transactional_id" not in h:
                continue
            try:
                end_transaction(self.options.bootstrap_servers, _prepared(h), commit=False)
            except TransactionFenced:
                pass  # already aborted, or fenced by a newer producer: nothing to undo
            except TransientTxnError as e:
                # A newer producer with this id fences the transaction anyway.
                log.warning("%s: could not abort %s: %s", self.describe(), h["transactional_id"], e)


def _partitions_written(stats: dict) -> list[list]:
    return sorted(
        [topic, int(p)]
        for topic, t in stats.get("topics", {}).items()
        for p, part in t.get("partitions", {}).items()
        if int(p) >= 0 and part.get("txmsgs", 0) > 0
    )


def _prepared(h: Handle) -> PreparedTxn:
    return PreparedTxn(h["transactional_id"], int(h["producer_id"]), int(h["producer_epoch"]))


def kafka_stream_writer(
    raw_options: dict[str, str], schema: StructType, overwrite: bool
) -> DataSourceStreamWriter:
    """The writer behind `writeStream.format("kafka-eos")` (the format's DataSource, which it
    shares with the source, lives in connectors/formats.py)."""
    if overwrite:
        raise OptionError("outputMode", "kafka-eos supports the append output mode only")
    opts = Options(raw_options)
    settings = SinkSettings.from_options(FORMAT_NAME, opts)
    return KafkaSink(settings, KafkaSinkOptions.parse(opts, settings, schema)).streamWriter()
