"""`kafka-eos` (writeStream): the exactly-once Kafka sink, on Kafka transactions.

Each task writes its partition of a batch in a transaction of a transactional producer whose id
is `<transactionalIdPrefix>-<partition>-<attempt>` (deterministic, so the next task with the same
partition and attempt fences what a crashed one left open; per attempt, so a speculative copy
never fences the accepted attempt), flushes it, and hands the driver (transactional id, producer
id, epoch) without committing. The driver ends the transaction with EndTxn
(commit_client.py) once Spark says the batch is complete; when the coordinator refuses,
the output's control markers settle whether it had been committed. The commit protocol is the
template's.
"""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException

from connectors.core.kafka.client import KafkaRetriesExhausted, check_connection, is_transient
from connectors.core.options import OptionError
from connectors.core.schema_registry.encoding import EncodingPlan, encoder_for
from connectors.core.schema_registry.sink_schema import resolve_plan
from sinks.kafka.attempts import AttemptNotes
from sinks.kafka.commit_client import (
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
    end_transaction,
    fence_transactional_id,
)
from sinks.kafka.errors import RecordTooLarge, record_too_large, row_place, transactions_refused
from sinks.kafka.handles import KafkaHandle, kafka_handle
from sinks.kafka.ids import acl_check_id, parse_transactional_id, transactional_id
from sinks.kafka.options import KafkaSinkOptions
from sinks.kafka.outcome import end_offsets, transaction_outcome
from sinks.kafka.producer import (
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    KafkaTxn,
    callbacks,
    conf_key,
    drop_shared_producer,
    fatal_from,
    init_transactions,
    produce_when_room,
    remember_transaction_timeout,
    resolve_transaction_timeout,
    shared_producer,
    timeout_warning,
    transactional_producer_conf,
)
from sinks.two_phase_commit import (
    EXACTLY_ONCE,
    SinkSettings,
    TaskInfo,
    TransactionLost,
    TwoPhaseCommitSink,
)
from sinks.txn_log import Handle

log = logging.getLogger("kafka_eos.sink.kafka")

#: A failed batch job's ids are fenced for attempts 0..this-1 of every partition (Spark's
#: default spark.task.maxFailures), and for any higher attempt its messages show.
BATCH_ABORT_ATTEMPTS = 4
#: abortJob fences this many ids at once (each is two small requests on the shared commit client).
_FENCE_THREADS = 8
#: (configuration, prefix) whose transactional id ACL was checked in this process.
_ACL_CHECKED: set[tuple] = set()


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
        self.transaction_timeout_ms = resolve_transaction_timeout(self.options.kafka_conf)
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
        return encoder_for(plan).encode(batch.column(name), where=row_place(batch, txn.info))

    def _check_transactional_id_acl(self) -> None:
        """Once per process and configuration: InitProducerId for `<prefix>-acl-check`, an id
        of the sink's prefix that no task uses, so that a principal without WRITE on the
        prefix fails the query at its start, naming the ACL, and not at the first batch with
        rows. Other failures are the tasks' to meet (logged here)."""
        key = (conf_key(self.options.kafka_conf), self.options.prefix)
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
            if refused := transactions_refused(self.options.bootstrap_servers, e):
                raise refused from None  # e.g. Event Hubs Standard
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
            txn.producer = shared_producer(self.options.kafka_conf, self.settings.guarantee, txn)
            return txn
        tid = transactional_id(self.options.prefix, context.partition_id, context.attempt)
        txn = KafkaTxn(context, None, tid, began_ms=int(time.time() * 1000))
        if context.attempt > 0 and self.settings.checkpoint_location:
            AttemptNotes(self.settings.checkpoint_location).note(
                self.options.prefix, context.partition_id, context.attempt)
        conf = transactional_producer_conf(self.options.kafka_conf)
        conf.update(callbacks(lambda: txn, statistics=True))
        conf["transactional.id"] = tid
        user_set = "transaction.timeout.ms" in self.options.kafka_conf
        timeout_ms = (self.transaction_timeout_ms
                      or resolve_transaction_timeout(self.options.kafka_conf))
        # init_transactions fences and aborts what an earlier task with this id left open
        txn.producer, txn.timeout_ms = init_transactions(
            conf, timeout_ms, user_set=user_set, prefix=self.options.prefix,
            retry=self.options.retry)
        if txn.timeout_ms != timeout_ms:
            remember_transaction_timeout(self.options.kafka_conf, txn.timeout_ms)
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
                        produce_when_room(producer, default_topic, value=value, key=key)
            except KafkaException as e:
                # `value` is the refused record's; the first equal one is its row (an equal
                # one before it would have been refused first)
                raise self._too_large(e, txn, batch, values.index(value), default_topic,
                                      value, key) from None
            fatal_from(txn, producer.poll, 0)
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
                produce_when_room(producer, topic, **kwargs)
            except KafkaException as e:
                raise self._too_large(e, txn, batch, row, topic, value, key, hdrs) from None
        fatal_from(txn, producer.poll, 0)
        self._raise_fatal(txn)

    def _too_large(self, e: KafkaException, txn: KafkaTxn, batch: pa.RecordBatch, row: int,
                   topic: str, value: Any, key: Any, headers: Any = None) -> Exception:
        """produce()'s own size check as a RecordTooLarge naming the record (errors.py); any
        other produce() error as it is."""
        err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
        if err is None or err.code() != KafkaError.MSG_SIZE_TOO_LARGE:
            return e
        return record_too_large(err, self.describe(), self.options.kafka_conf.get(
            "message.max.bytes"), row_place(batch, txn.info)(row), topic, value, key, headers)

    def _raise_fatal(self, txn: KafkaTxn) -> None:
        """Stop writing at a fatal producer error: a fenced producer is a zombie attempt."""
        if txn.errors and isinstance(txn.errors[0], KafkaError) and txn.errors[0].fatal():
            raise KafkaException(txn.errors[0])

    def preCommit(self, txn: KafkaTxn) -> KafkaHandle | Handle:
        producer = txn.producer
        deadline = time.monotonic() + self.options.flush_timeout_s
        while fatal_from(txn, producer.flush, 1.0) > 0:
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
            drop_shared_producer(txn.producer)  # a failed task's producer is not reused
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
        AttemptNotes). Every decided batch is committed by now, so nothing fenced here can be
        a transaction still to commit. Costs one listing of an empty directory per batch."""
        if not self.settings.checkpoint_location:
            return
        notes = AttemptNotes(self.settings.checkpoint_location)
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
