"""The Kafka sink's decisions, without a broker: how each EndTxn / FindCoordinator error code is
classified, what the sink does with each class (retry, settle from the output, lose, fail at
once naming the ACL), the transaction timeout it chooses, the warning for old batches, and the
clean-up of attempts other than the first."""

from __future__ import annotations

import json
import logging

import kafka.errors as kafka_errors
import pytest
from confluent_kafka import KafkaError, KafkaException
from pyspark.sql.types import BinaryType, StructField, StructType

from sinks.kafka import commit_client as kafka_txn
from sinks.kafka.commit_client import (
    ABORTED,
    COMMITTED,
    OPEN,
    OutcomeUnreadable,
    TransactionFenced,
    TransactionUnknown,
    TransientTxnError,
    TxnAuthorizationError,
    TxnRequestError,
    TxnStateInvalid,
    acl_needed,
    classify,
    error_name,
    txn_error,
)
from connectors.core.kafka.client import KafkaRetriesExhausted, RetryPolicy
from connectors.core.options import OptionError, Options
from sinks.kafka import errors as kerrors
from sinks.kafka import producer as kproducer
from sinks.kafka import sink as ksink
from sinks.kafka.data_source import KafkaSinkDataSource
from sinks.kafka import (
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    KafkaSink,
    KafkaSinkOptions,
    choose_transaction_timeout,
    commit_budget,
    lower_transaction_timeout,
    timeout_warning,
    transactional_id,
)
from sinks.two_phase_commit import (
    CommitTimeoutError,
    SinkSettings,
    TaskInfo,
    TransactionLost,
    TwoPhaseCommitWriter,
)

SCHEMA = StructType([StructField("value", BinaryType())])


# ------------------------------------------------------------------ classification (pure)


@pytest.mark.parametrize(
    "code,kind,exc",
    [
        (0, "none", None),
        (7, "transient", TransientTxnError),    # REQUEST_TIMED_OUT
        (14, "transient", TransientTxnError),   # COORDINATOR_LOAD_IN_PROGRESS
        (15, "transient", TransientTxnError),   # COORDINATOR_NOT_AVAILABLE
        (16, "transient", TransientTxnError),   # NOT_COORDINATOR
        (51, "transient", TransientTxnError),   # CONCURRENT_TRANSACTIONS
        (47, "fenced", TransactionFenced),      # INVALID_PRODUCER_EPOCH
        (90, "fenced", TransactionFenced),      # PRODUCER_FENCED
        (49, "unknown", TransactionUnknown),    # INVALID_PRODUCER_ID_MAPPING: the id expired
        (105, "unknown", TransactionUnknown),   # TRANSACTIONAL_ID_NOT_FOUND
        (48, "invalid_state", TxnStateInvalid),  # INVALID_TXN_STATE
        (53, "authorization", TxnAuthorizationError),  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        (31, "authorization", TxnAuthorizationError),  # CLUSTER_AUTHORIZATION_FAILED
        (29, "authorization", TxnAuthorizationError),  # TOPIC_AUTHORIZATION_FAILED
        (-1, "definite", TxnRequestError),      # UNKNOWN_SERVER_ERROR
        (35, "definite", TxnRequestError),      # UNSUPPORTED_VERSION
        (50, "definite", TxnRequestError),      # INVALID_TRANSACTION_TIMEOUT
        (9999, "definite", TxnRequestError),    # a code newer than kafka-python's table
    ],
)
def test_each_error_code_is_classified(code, kind, exc):
    assert classify(code) == kind
    error = txn_error(code, "EndTxn(commit) of t-0-0")
    if exc is None:
        assert error is None
        return
    assert type(error) is exc
    assert "EndTxn(commit) of t-0-0" in str(error)
    assert f"(error {code})" in str(error)
    if isinstance(error, TxnRequestError):
        assert error.code == code


def test_definite_errors_carry_kafkas_name():
    assert "INVALID_TXN_STATE (error 48)" in str(txn_error(48, "EndTxn"))
    assert "INVALID_PRODUCER_ID_MAPPING" in str(txn_error(49, "EndTxn"))
    assert "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" in str(txn_error(53, "FindCoordinator"))
    assert error_name(35) == "UNSUPPORTED_VERSION (error 35)"


def test_acl_needed_names_the_prefixed_transactional_id_acl():
    text = acl_needed(53, "kafka-eos-abc")
    assert "WRITE (and DESCRIBE) on TransactionalId 'kafka-eos-abc*'" in text
    assert "prefixed" in text
    assert "Topic 'out'" in acl_needed(29, "p", ["out"])
    assert "IDEMPOTENT_WRITE on the Cluster" in acl_needed(31, "p")


# ------------------------------------------------------------------ the sink around a commit


def _sink(tmp_path, **options) -> KafkaSink:
    opts = Options({"kafka.bootstrap.servers": "b:9092", "topic": "out",
                    "checkpointLocation": str(tmp_path / "ck"), **options})
    settings = SinkSettings.from_options("kafka-eos", opts)
    return KafkaSink(settings, KafkaSinkOptions.parse(opts, settings, SCHEMA))


HANDLE = {"partitions": [["out", 0]], "transactional_id": "kafka-eos-x-0-0",
          "producer_id": 7, "producer_epoch": 3, "scan_from": [["out", 0, 40]]}


@pytest.fixture
def coordinator(monkeypatch):
    """EndTxn raises what `answers` says; the output settles as `outcome` says."""
    state = {"answers": [], "outcome": None, "settled": [], "ended": []}

    def end_transaction(bootstrap, txn, *, commit, timeout_s=10.0):
        state["ended"].append((txn, commit))
        if state["answers"]:
            raise state["answers"].pop(0)

    def transaction_outcome(bootstrap, txn, starts, timeout_s=10.0):
        state["settled"].append((txn, starts))
        if isinstance(state["outcome"], Exception):
            raise state["outcome"]
        return state["outcome"]

    monkeypatch.setattr(ksink, "end_transaction", end_transaction)
    monkeypatch.setattr(ksink, "transaction_outcome", transaction_outcome)
    return state


def test_a_refused_commit_that_the_output_shows_committed_is_a_success(tmp_path, coordinator):
    sink = _sink(tmp_path)
    for refusal in (txn_error(90, "EndTxn"), txn_error(49, "EndTxn"), txn_error(48, "EndTxn"),
                    TransientTxnError("closed", closed_by_broker=True)):
        coordinator["answers"] = [refusal]
        coordinator["outcome"] = COMMITTED
        sink.commit(5, {0: HANDLE})  # no TransactionLost: never taken for lost
    # read from the offset the batch's end offsets gave, not from the log start
    assert coordinator["settled"][-1][1] == {("out", 0): 40}


@pytest.mark.parametrize("code", [47, 90, 49])
def test_a_refused_commit_whose_output_shows_abort_or_no_marker_is_lost(tmp_path, coordinator, code):
    sink = _sink(tmp_path)
    for outcome in (ABORTED, OPEN):
        coordinator["answers"] = [txn_error(code, "EndTxn")]
        coordinator["outcome"] = outcome
        with pytest.raises(TransactionLost) as e:
            sink.commit(5, {0: HANDLE})
        assert e.value.partitions == [0]


def test_invalid_txn_state_with_no_marker_fails_with_its_kafka_name(tmp_path, coordinator):
    sink = _sink(tmp_path)
    coordinator["answers"], coordinator["outcome"] = [txn_error(48, "EndTxn")], OPEN
    with pytest.raises(TxnStateInvalid, match="INVALID_TXN_STATE"):
        sink.commit(5, {0: HANDLE})
    coordinator["answers"], coordinator["outcome"] = [txn_error(48, "EndTxn")], ABORTED
    with pytest.raises(TransactionLost):
        sink.commit(5, {0: HANDLE})


def test_a_refusal_the_output_cannot_settle_fails_loudly_saying_what_to_check(tmp_path, coordinator):
    sink = _sink(tmp_path)
    coordinator["answers"] = [txn_error(49, "EndTxn")]
    coordinator["outcome"] = OutcomeUnreadable("records gone (retention deleted them?)")
    with pytest.raises(OutcomeUnreadable) as e:
        sink.commit(5, {0: HANDLE})
    assert "eos-sink/5/committed-0" in str(e.value)
    assert "retention" in str(e.value)
    assert not sink.isTransient(e.value)


def test_a_closed_connection_the_output_cannot_settle_stays_transient(tmp_path, coordinator):
    sink = _sink(tmp_path)
    for outcome in (OPEN, OutcomeUnreadable("not in the log")):
        coordinator["answers"] = [TransientTxnError("closed", closed_by_broker=True)]
        coordinator["outcome"] = outcome
        with pytest.raises(TransientTxnError) as e:
            sink.commit(5, {0: HANDLE})
        assert sink.isTransient(e.value)
    coordinator["answers"] = [TransientTxnError("closed", closed_by_broker=True)]
    coordinator["outcome"] = ABORTED  # an ABORT marker is final, whatever the coordinator said
    with pytest.raises(TransactionLost):
        sink.commit(5, {0: HANDLE})


def test_an_unreachable_broker_is_retried_without_reading_the_output(tmp_path, coordinator):
    """A coordinator restarting (no connection, NOT_COORDINATOR, loading) is waited for under
    kafkaRetryTimeout inside the commit: before, the first such error went up to the
    template's nine attempts."""
    sink = _sink(tmp_path)
    coordinator["answers"] = [TransientTxnError("connection refused"),
                              txn_error(16, "EndTxn"), txn_error(14, "EndTxn")]  # NOT_COORDINATOR, LOADING
    sink.commit(5, {0: HANDLE})
    assert len(coordinator["ended"]) == 4 and coordinator["settled"] == []

    sink = _sink(tmp_path, kafkaRetryTimeout="1s")
    coordinator["answers"] = [TransientTxnError("connection refused")] * 1000
    with pytest.raises(KafkaRetriesExhausted, match=r"committing kafka-eos-x-0-0 \(batch 5"):
        sink.commit(5, {0: HANDLE})
    assert coordinator["settled"] == []


def test_an_authorization_failure_names_the_acl(tmp_path, coordinator):
    sink = _sink(tmp_path)
    coordinator["answers"] = [txn_error(53, "FindCoordinator(kafka-eos-x-0-0)")]
    with pytest.raises(TxnAuthorizationError) as e:
        sink.commit(5, {0: HANDLE})
    assert f"TransactionalId '{sink.options.prefix}*'" in str(e.value)
    assert not sink.isTransient(e.value)


def test_the_commit_budget_follows_the_retry_timeout_unless_set(tmp_path):
    opts = Options({"kafkaRetryTimeout": "7m"})
    settings = SinkSettings.from_options("kafka-eos", Options({"deliveryGuarantee": "none"}))
    budget = commit_budget(settings, opts, RetryPolicy.from_options(opts))
    assert budget.commit_timeout_ms == 420_000 and budget.commit_attempts > 1000
    opts = Options({"kafkaRetryTimeout": "7m", "commitTimeout": "30s", "commitRetries": "2"})
    assert commit_budget(settings, opts, RetryPolicy.from_options(opts)) == settings


def test_definite_errors_fail_the_commit_at_once_not_after_commit_timeout(tmp_path, coordinator):
    """The template retries what isTransient calls transient: an authorization failure (or any
    definite error) must fail on the first attempt, not after commitTimeout on every restart."""
    sink = _sink(tmp_path, commitTimeout="60s", commitRetries="8")
    writer = TwoPhaseCommitWriter(sink)
    for error, cls in ((txn_error(53, "EndTxn"), TxnAuthorizationError),
                       (txn_error(35, "EndTxn"), TxnRequestError)):
        coordinator["ended"].clear()
        coordinator["answers"] = [error] * 9
        with pytest.raises(cls):
            writer._commit(5, {0: HANDLE}, recovering=True)
        assert len(coordinator["ended"]) == 1


def test_transient_errors_are_retried_until_the_retry_timeout_and_not_again(tmp_path, coordinator):
    sink = _sink(tmp_path, commitTimeout="60s", commitRetries="2", kafkaRetryTimeout="1s")
    writer = TwoPhaseCommitWriter(sink)
    coordinator["answers"] = [TransientTxnError("coordinator moved")] * 1000
    with pytest.raises(KafkaRetriesExhausted):
        writer._commit(5, {0: HANDLE}, recovering=True)
    ended = len(coordinator["ended"])
    assert 3 < ended < 20  # retried inside the call with backoff; the template did not start over
    assert not sink.isTransient(KafkaRetriesExhausted("gave up", TransientTxnError("x")))
    # a refusal whose settling read the output as still open goes to the template's retries
    coordinator["answers"] = [TransientTxnError("closed", closed_by_broker=True)] * 3
    coordinator["outcome"] = OPEN
    with pytest.raises(CommitTimeoutError):
        writer._commit(5, {0: HANDLE}, recovering=True)
    assert sink.isTransient(KafkaException(KafkaError(KafkaError._TRANSPORT)))
    assert not sink.isTransient(KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)))


def test_abort_logs_definite_errors_but_fails_on_authorization(tmp_path, coordinator, caplog):
    sink = _sink(tmp_path)
    coordinator["answers"] = [txn_error(48, "EndTxn"), txn_error(49, "EndTxn"), txn_error(-1, "EndTxn"),
                         txn_error(90, "EndTxn"), TransientTxnError("down")]
    with caplog.at_level(logging.WARNING, logger="kafka_eos.sink.kafka"):
        sink.abort([HANDLE] * 5)  # none escapes
    assert "INVALID_TXN_STATE" in caplog.text
    coordinator["answers"] = [txn_error(53, "EndTxn")]
    with pytest.raises(TxnAuthorizationError, match="prefixed"):
        sink.abort([HANDLE])


# ------------------------------------------------------------------ transaction timeout


@pytest.mark.parametrize(
    "user,broker_max,chosen",
    [
        (None, None, 900_000),          # the broker does not say (Tansu): 15 minutes
        (None, 900_000, 900_000),
        (None, 300_000, 300_000),       # lowered to the broker's maximum
        (None, 3_600_000, 900_000),     # a larger maximum does not raise the default
        ("120000", 300_000, 120_000),   # the user's value wins
        ("3600000", 300_000, 3_600_000),
    ],
)
def test_transaction_timeout_choice(user, broker_max, chosen):
    assert choose_transaction_timeout(user, broker_max) == chosen


def test_lowering_after_invalid_transaction_timeout_halves_and_stops():
    assert lower_transaction_timeout(900_000) == 450_000
    assert lower_transaction_timeout(1_500) is None


class _FakeProducer:
    """Refuses transaction timeouts above `max_ms` as a broker does."""

    max_ms = 300_000
    created: list[dict] = []

    def __init__(self, conf):
        self.conf = conf
        _FakeProducer.created.append(conf)

    def init_transactions(self, timeout):
        if int(self.conf["transaction.timeout.ms"]) > self.max_ms:
            raise KafkaException(KafkaError(KafkaError.INVALID_TRANSACTION_TIMEOUT))

    def begin_transaction(self):
        pass


@pytest.fixture
def fake_producer(monkeypatch):
    _FakeProducer.created = []
    monkeypatch.setattr(kproducer, "Producer", _FakeProducer)
    monkeypatch.setattr(kproducer, "broker_max_transaction_timeout_ms", lambda conf, timeout_s: None)
    monkeypatch.setattr(kproducer, "_TIMEOUTS", {})
    return _FakeProducer


def test_tasks_use_15_minutes_lowered_when_the_broker_refuses(tmp_path, fake_producer):
    fake_producer.max_ms = 10**9
    sink = _sink(tmp_path)
    txn = sink.beginTransaction(TaskInfo(3, 1, 0))
    assert fake_producer.created[-1]["transaction.timeout.ms"] == str(DEFAULT_TRANSACTION_TIMEOUT_MS)
    assert txn.timeout_ms == DEFAULT_TRANSACTION_TIMEOUT_MS
    assert txn.transactional_id == f"{sink.options.prefix}-1-0"

    fake_producer.max_ms = 300_000
    kproducer._TIMEOUTS.clear()
    txn = sink.beginTransaction(TaskInfo(3, 1, 0))
    assert txn.timeout_ms == 225_000  # 900000 -> 450000 -> 225000
    sink.beginTransaction(TaskInfo(4, 1, 0))
    assert fake_producer.created[-1]["transaction.timeout.ms"] == "225000"  # remembered


def test_a_user_set_timeout_is_never_changed(tmp_path, fake_producer):
    fake_producer.max_ms = 300_000
    sink = _sink(tmp_path, **{"kafka.transaction.timeout.ms": "600000"})
    with pytest.raises(KafkaException):
        sink.beginTransaction(TaskInfo(3, 1, 0))
    assert [c["transaction.timeout.ms"] for c in fake_producer.created] == ["600000"]
    with pytest.raises(OptionError, match="kafka.transaction.timeout.ms"):
        _sink(tmp_path, **{"kafka.transaction.timeout.ms": "15m"})


def test_timeout_warning_only_past_half_the_timeout():
    assert timeout_warning(7, [1_000], 900_000, 1_000 + 449_000, "s") is None
    text = timeout_warning(7, [5_000, 1_000], 900_000, 1_000 + 600_000, "kafka-eos[p]")
    assert "batch 7" in text and "600 s" in text and "transaction.timeout.ms=900000" in text
    assert "kafka.transaction.timeout.ms" in text and "67%" in text
    assert timeout_warning(7, [], 900_000, 10**9, "s") is None


def test_the_driver_warns_once_per_batch_when_a_commit_comes_late(tmp_path, coordinator, caplog, monkeypatch):
    sink = _sink(tmp_path)
    now_s = 1_000_000.0
    monkeypatch.setattr(ksink.time, "time", lambda: now_s)
    old = dict(HANDLE, began_ms=int((now_s - 500) * 1000), timeout_ms=900_000)
    young = dict(HANDLE, began_ms=int((now_s - 5) * 1000), timeout_ms=900_000)
    with caplog.at_level(logging.WARNING, logger="kafka_eos.sink.kafka"):
        sink.commit(8, {0: young})
        assert "batch 8" not in caplog.text
        sink.commit(9, {0: old})
        sink.commit(9, {1: old})  # commit is called once per partition
    assert caplog.text.count("batch 9 is committed 500 s after") == 1


# ------------------------------------------------------------------ ids and attempts


def test_transactional_ids_are_per_partition_and_attempt_and_bounded():
    assert transactional_id("pre", 3, 0) == "pre-3-0"
    assert transactional_id("pre", 3, 1) != transactional_id("pre", 3, 0)


def test_the_default_prefix_derives_from_the_checkpoint_path(tmp_path):
    a, b = _sink(tmp_path), _sink(tmp_path)
    assert a.options.prefix == b.options.prefix  # a reset checkpoint fences its predecessor
    assert _sink(tmp_path / "other").options.prefix != a.options.prefix
    assert _sink(tmp_path, transactionalIdPrefix="mine").options.prefix == "mine"


def test_attempts_beyond_the_first_are_fenced_before_the_next_batch(tmp_path, fake_producer,
                                                                     monkeypatch):
    fenced: list[str] = []
    monkeypatch.setattr(ksink, "fence_transactional_id",
                        lambda bootstrap, tid, timeout_ms: fenced.append(tid))
    fake_producer.max_ms = 10**9
    sink = _sink(tmp_path)
    sink.cleanupAbandoned()
    assert fenced == []  # nothing noted: no request at all
    sink.beginTransaction(TaskInfo(3, 1, 0))
    sink.beginTransaction(TaskInfo(3, 2, 2))  # a retry or speculative copy
    sink.cleanupAbandoned()
    p = sink.options.prefix
    assert fenced == [f"{p}-2-2", f"{p}-2-1", f"{p}-2-0"]
    sink.cleanupAbandoned()
    assert len(fenced) == 3  # noted once, fenced once


def test_a_failed_fence_keeps_its_note_for_the_next_batch(tmp_path, fake_producer, monkeypatch):
    calls: list[str] = []

    def fence(bootstrap, tid, timeout_ms):
        calls.append(tid)
        raise TransientTxnError("down")

    monkeypatch.setattr(ksink, "fence_transactional_id", fence)
    fake_producer.max_ms = 10**9
    sink = _sink(tmp_path)
    sink.beginTransaction(TaskInfo(3, 0, 1))
    sink.cleanupAbandoned()
    sink.cleanupAbandoned()
    assert len(calls) == 2


def test_handles_without_end_offsets_are_settled_from_the_log_start():
    h = {"partitions": [["a", 0], ["a", 1]], "scan_from": [["a", 1, 9]]}
    assert ksink._scan_starts(h) == {("a", 0): None, ("a", 1): 9}
    assert ksink._scan_starts({"partitions": [["a", 0]]}) == {("a", 0): None}


def test_handle_is_json_with_what_the_driver_needs(tmp_path, fake_producer):
    fake_producer.max_ms = 10**9
    sink = _sink(tmp_path)
    sink.scan_from = {("out", 0): 40, ("out", 1): 12}
    txn = sink.beginTransaction(TaskInfo(3, 0, 0))

    class Flushed:
        def flush(self, timeout):
            return 0

        def poll(self, timeout):
            txn.stats.update({"eos": {"txn_state": "InTransaction", "producer_id": 7,
                                      "producer_epoch": 3},
                              "topics": {"out": {"partitions": {"0": {"txmsgs": 2},
                                                                "1": {"txmsgs": 0}}}}})

    txn.producer = Flushed()
    h = sink.preCommit(txn)
    assert json.loads(json.dumps(h)) == h
    assert h["scan_from"] == [["out", 0, 40]]
    assert h["timeout_ms"] == DEFAULT_TRANSACTION_TIMEOUT_MS and h["began_ms"] > 0
    assert kafka_txn.PreparedTxn(h["transactional_id"], 7, 3) == ksink._prepared(h)


# ------------------------------------------------------------------ drop-in for Spark's sink


@pytest.mark.parametrize("guarantee", ["exactly-once", "at-least-once", "none"])
def test_producers_partition_keys_as_the_java_client_unless_told_otherwise(
    tmp_path, fake_producer, monkeypatch, guarantee
):
    fake_producer.max_ms = 10**9
    monkeypatch.setattr(kproducer, "_SHARED", {})
    sink = _sink(tmp_path, deliveryGuarantee=guarantee)
    sink.beginTransaction(TaskInfo(3, 0, 0))
    assert fake_producer.created[-1]["partitioner"] == "murmur2_random"
    assert "partitioner" not in sink.options.kafka_conf  # the commit client's conf is the user's

    monkeypatch.setattr(kproducer, "_SHARED", {})
    sink = _sink(tmp_path, deliveryGuarantee=guarantee, **{"kafka.partitioner": "random"})
    sink.beginTransaction(TaskInfo(3, 0, 0))
    assert fake_producer.created[-1]["partitioner"] == "random"


class _RecordingProducer:
    def __init__(self):
        self.sent = []

    def produce(self, topic, value=None, key=None, **kwargs):
        self.sent.append((topic, key, value))

    def poll(self, timeout):
        return 0


def _rows(**columns) -> "pa.RecordBatch":
    import pyarrow as pa

    return pa.RecordBatch.from_pydict(columns)


def test_the_topic_option_overrides_a_topic_column_as_in_spark(tmp_path):
    from pyspark.sql.types import StringType

    schema = StructType([StructField("topic", StringType()), StructField("value", BinaryType())])
    opts = Options({"kafka.bootstrap.servers": "b:9092", "topic": "chosen",
                    "checkpointLocation": str(tmp_path / "ck")})
    settings = SinkSettings.from_options("kafka-eos", opts)
    sink = KafkaSink(settings, KafkaSinkOptions.parse(opts, settings, schema))
    producer = _RecordingProducer()
    txn = kproducer.KafkaTxn(TaskInfo(0, 0, 0), producer, None)
    sink.invoke(txn, _rows(topic=["other", None], value=[b"a", b"b"]))
    assert [t for t, _, _ in producer.sent] == ["chosen", "chosen"]


def test_without_the_topic_option_the_topic_column_routes_each_row(tmp_path):
    from pyspark.sql.types import StringType

    schema = StructType([StructField("topic", StringType()), StructField("value", BinaryType())])
    opts = Options({"kafka.bootstrap.servers": "b:9092", "checkpointLocation": str(tmp_path / "ck")})
    settings = SinkSettings.from_options("kafka-eos", opts)
    sink = KafkaSink(settings, KafkaSinkOptions.parse(opts, settings, schema))
    producer = _RecordingProducer()
    sink.invoke(kproducer.KafkaTxn(TaskInfo(0, 0, 0), producer, None),
                _rows(topic=["t1", "t2"], value=[b"a", b"b"]))
    assert [t for t, _, _ in producer.sent] == ["t1", "t2"]


def test_with_the_topic_option_a_topic_column_of_any_type_is_ignored(tmp_path):
    from pyspark.sql.types import IntegerType

    schema = StructType([StructField("topic", IntegerType()), StructField("value", BinaryType())])
    opts = Options({"kafka.bootstrap.servers": "b:9092", "topic": "chosen",
                    "checkpointLocation": str(tmp_path / "ck")})
    settings = SinkSettings.from_options("kafka-eos", opts)
    KafkaSinkOptions.parse(opts, settings, schema)  # Spark's sink ignores the column: so do we
    opts = Options({"kafka.bootstrap.servers": "b:9092", "checkpointLocation": str(tmp_path / "ck")})
    with pytest.raises(OptionError, match="column 'topic' must be string"):
        KafkaSinkOptions.parse(opts, settings, schema)


# ------------------------------------------------------------------ no option silently ignored


def _stream_writer(raw: dict[str, str], schema: StructType, overwrite: bool):
    """What `writeStream.format("kafka-eos")` gets at query start."""
    return KafkaSinkDataSource(raw).streamWriter(schema, overwrite)


def _batch_writer(raw: dict[str, str], schema: StructType, overwrite: bool):
    """What `df.write.format("kafka-eos")` gets at job start."""
    return KafkaSinkDataSource(raw).writer(schema, overwrite)


def _writer_options(tmp_path, **extra) -> dict[str, str]:
    # lower-cased keys, as Spark hands them over
    return {"kafka.bootstrap.servers": "b:9092", "topic": "out",
            "checkpointlocation": str(tmp_path / "ck"), **extra}


@pytest.mark.parametrize(
    "option,hint",
    [
        ("flushTimout", "did you mean 'flushTimeout'"),
        ("transactionalIdPrefx", "did you mean 'transactionalIdPrefix'"),
        ("deliveryGuarante", "did you mean 'deliveryGuarantee'"),
        ("subscribe", "is not an option of the kafka-eos sink"),  # a source option
        ("kafkaa.acks", "is not an option of the kafka-eos sink"),
    ],
)
def test_an_unknown_sink_option_fails_at_query_start_naming_the_closest(tmp_path, option, hint):
    with pytest.raises(OptionError, match=hint) as e:
        _stream_writer(_writer_options(tmp_path, **{option.lower(): "x"}), SCHEMA, False)
    assert option.lower() in str(e.value) and "'kafka.*'" in str(e.value)


def test_what_spark_passes_to_a_sink_is_never_refused(tmp_path):
    # seen with PySpark 4.3: queryName(), start(path), option("checkpointLocation")
    raw = _writer_options(tmp_path, queryname="q", path="/somewhere",
                          **{"kafka.acks": "all", "flushtimeout": "5s"})
    writer = _stream_writer(raw, SCHEMA, False)
    assert writer.sink.options.flush_timeout_s == 5


# ------------------------------------------------------------------ batch writes (df.write)


def test_a_batch_job_has_transactional_ids_of_its_own_under_the_prefix(tmp_path):
    raw = {"kafka.bootstrap.servers": "b:9092", "topic": "out"}
    one = _batch_writer(raw, SCHEMA, False).sink
    two = _batch_writer(raw, SCHEMA, False).sink
    assert one.settings.job_id != two.settings.job_id
    assert one.options.prefix == f"kafka-eos-batch-{one.settings.job_id}"
    mine = _batch_writer({**raw, "transactionalidprefix": "app"}, SCHEMA, False).sink
    assert mine.options.prefix == f"app-{mine.settings.job_id}"  # the ACL app* covers it


@pytest.mark.parametrize("option", ["checkpointlocation", "minbatchestoretain", "queryname"])
def test_a_batch_write_refuses_streaming_options(option):
    raw = {"kafka.bootstrap.servers": "b:9092", "topic": "out", option: "x"}
    with pytest.raises(OptionError, match=rf"Option '{option}'.*a kafka-eos batch write"):
        _batch_writer(raw, SCHEMA, False)
    with pytest.raises(OptionError, match=r"Option 'mode'.*'overwrite' is refused"):
        _batch_writer({"kafka.bootstrap.servers": "b:9092", "topic": "o"}, SCHEMA, True)


def test_a_failed_batch_job_fences_every_id_its_tasks_may_have_used(coordinator, monkeypatch):
    fenced = []
    monkeypatch.setattr(ksink, "fence_transactional_id",
                        lambda conf, tid, timeout_ms: fenced.append(tid))
    sink = _batch_writer({"kafka.bootstrap.servers": "b:9092", "topic": "out"},
                                    SCHEMA, False).sink
    p = sink.options.prefix
    reported = {**HANDLE, "transactional_id": f"{p}-1-5"}  # a sixth attempt succeeded
    sink.abortJob([reported], partitions=2)
    assert [(t, c) for t, c in coordinator["ended"]] == [(ksink._prepared(reported), False)]
    assert sorted(fenced) == sorted(f"{p}-{part}-{a}" for part in range(2) for a in range(6))


def test_a_failed_batch_job_fences_its_ids_concurrently(coordinator, monkeypatch):
    """A fence can wait out its whole deadline (abort markers that cannot be written under
    NOT_ENOUGH_REPLICAS): one after another, a job's ids would each hold the query that long."""
    import threading

    together = threading.Barrier(ksink._FENCE_THREADS, timeout=10)
    monkeypatch.setattr(ksink, "fence_transactional_id",
                        lambda conf, tid, timeout_ms: together.wait())
    sink = _batch_writer({"kafka.bootstrap.servers": "b:9092", "topic": "out"},
                                    SCHEMA, False).sink
    # as many ids as fencing threads, so that all of them must wait at once
    sink.abortJob([], partitions=ksink._FENCE_THREADS // ksink.BATCH_ABORT_ATTEMPTS)
    assert together.n_waiting == 0 and not together.broken


def test_a_null_topic_without_the_topic_option_fails_the_task_as_in_spark(tmp_path):
    from pyspark.sql.types import StringType

    schema = StructType([StructField("topic", StringType()), StructField("value", BinaryType())])
    opts = Options({"kafka.bootstrap.servers": "b:9092", "checkpointLocation": str(tmp_path / "ck")})
    settings = SinkSettings.from_options("kafka-eos", opts)
    sink = KafkaSink(settings, KafkaSinkOptions.parse(opts, settings, schema))
    with pytest.raises(ValueError, match=r"null topic.*set \.option\(\"topic\""):
        sink.invoke(kproducer.KafkaTxn(TaskInfo(0, 0, 0), _RecordingProducer(), None),
                    _rows(topic=["t1", None], value=[b"a", b"b"]))


# ------------------------------------------------------------------ per-batch fixed costs


def test_transactional_producers_connect_to_the_brokers_at_once_unless_told_otherwise(
    tmp_path, fake_producer
):
    """With librdkafka's sparse connections a fresh producer's init_transactions waits ~500 ms
    about one time in two (no broker up to find the coordinator; a 500 ms retry timer)."""
    fake_producer.max_ms = 10**9
    sink = _sink(tmp_path)
    sink.beginTransaction(TaskInfo(3, 0, 0))
    assert fake_producer.created[-1]["enable.sparse.connections"] == "false"
    assert "enable.sparse.connections" not in sink.options.kafka_conf  # not the commit client's

    sink = _sink(tmp_path, **{"kafka.enable.sparse.connections": "true"})
    sink.beginTransaction(TaskInfo(3, 0, 0))
    assert fake_producer.created[-1]["enable.sparse.connections"] == "true"


def test_statistics_are_kept_as_reported_and_parsed_once_after_the_flush(tmp_path, fake_producer):
    fake_producer.max_ms = 10**9
    sink = _sink(tmp_path)
    txn = sink.beginTransaction(TaskInfo(3, 0, 0))
    stats_cb = fake_producer.created[-1]["stats_cb"]
    assert int(fake_producer.created[-1]["statistics.interval.ms"]) <= 10
    stats_cb("not parsed: only the report preCommit uses is")  # during the task
    assert txn.stats_json and txn.stats == {}

    def report(state, txmsgs):
        return json.dumps({"eos": {"txn_state": state, "producer_id": 7, "producer_epoch": 3},
                           "topics": {"out": {"partitions": {"0": {"txmsgs": txmsgs}}}}})

    reports = [report("BeginCommit", 0), report("InTransaction", 2)]

    class Flushed:
        def flush(self, timeout):
            stats_cb(report("InTransaction", 1))  # served by the flush: before it ended
            return 0

        def poll(self, timeout):
            if reports:
                stats_cb(reports.pop(0))

    txn.producer = Flushed()
    h = sink.preCommit(txn)
    assert (h["producer_id"], h["producer_epoch"], h["partitions"]) == (7, 3, [["out", 0]])
    assert reports == []  # the first report after the flush in InTransaction state was used


def test_endtxn_asks_the_remembered_coordinator_and_forgets_it_when_a_request_fails(monkeypatch):
    client = kafka_txn.CommitClient({"bootstrap.servers": "127.0.0.1:1"})
    monkeypatch.setattr(kafka_txn, "commit_client", lambda cluster: client)
    finds: list[str] = []

    def find(cluster, tid, timeout_s=10.0):
        finds.append(tid)
        client._coordinators[tid] = "node-1"
        return "node-1"

    answers: list = [None, None, kafka_errors.NodeNotReadyError("gone"), None]

    class Answer:
        error_code = 0

    def call(request, node_id=None, *, timeout_s=10.0):
        assert node_id == "node-1"
        answer = answers.pop(0)
        if answer is not None:
            raise answer
        return Answer()

    monkeypatch.setattr(kafka_txn, "find_transaction_coordinator", find)
    monkeypatch.setattr(client, "call", call)
    txn = kafka_txn.PreparedTxn("p-0-0", 7, 3)
    kafka_txn.end_transaction("x", txn, commit=True)
    kafka_txn.end_transaction("x", txn, commit=True)
    assert finds == ["p-0-0"]  # the second batch asked the remembered coordinator
    with pytest.raises(kafka_errors.NodeNotReadyError):
        kafka_txn.end_transaction("x", txn, commit=True)
    kafka_txn.end_transaction("x", txn, commit=True)
    assert finds == ["p-0-0", "p-0-0"]  # asked again after the failure


# ------------------------------------------------------------------ oversized records


def test_a_record_over_the_producers_limit_names_the_record_its_source_row_and_the_option(
        tmp_path):
    """librdkafka refuses a record over `message.max.bytes` in produce(), before any broker is
    asked (a real producer here, pointed at no broker): the task's error names the record and
    what to change, not librdkafka's bare "Broker: Message size too large"."""
    import pyarrow as pa
    from confluent_kafka import Producer
    from pyspark.sql.types import IntegerType, LongType, StringType

    schema = StructType([StructField("key", StringType()), StructField("value", BinaryType()),
                         StructField("topic", StringType()), StructField("partition", IntegerType()),
                         StructField("offset", LongType())])
    opts = Options({"kafka.bootstrap.servers": "127.0.0.1:9", "topic": "out",
                    "checkpointLocation": str(tmp_path / "ck")})
    settings = SinkSettings.from_options("kafka-eos", opts)
    sink = KafkaSink(settings, KafkaSinkOptions.parse(opts, settings, schema))
    txn = kproducer.KafkaTxn(TaskInfo(3, 1, 0), Producer({"bootstrap.servers": "127.0.0.1:9",
                                                       "log_level": 0}), None)
    rows = pa.record_batch({"key": ["user-1", "user-7"], "value": [b"x", b"y" * 2_000_000],
                            "topic": ["events", "events"], "partition": [0, 0],
                            "offset": [10, 11]})
    with pytest.raises(kerrors.RecordTooLarge) as e:
        sink.invoke(txn, rows)
    message = str(e.value)
    assert message.startswith(f"kafka-eos[{sink.options.prefix}]: record too large for the "
                              "producer (MSG_SIZE_TOO_LARGE): 2,000,006 bytes (key 'user-7', "
                              "source row topic events partition 0 offset 11) for topic out")
    assert "over kafka.message.max.bytes = 1,000,000 (librdkafka's default)" in message
    assert 'Raise .option("kafka.message.max.bytes", ...)' in message
    assert isinstance(e.value, KafkaException)  # what callers catching KafkaException expect

    # without Kafka coordinates in the rows: the row of the task's input
    plain = pa.record_batch({"value": [b"z" * 1_500_000]})
    sink_plain = KafkaSink(settings, KafkaSinkOptions.parse(opts, settings, SCHEMA))
    with pytest.raises(kerrors.RecordTooLarge, match=r"1,500,000 bytes \(no key, row 0 of Spark "
                                                   r"partition 1's input in batch 3\)"):
        sink_plain.invoke(txn, plain)


def test_a_batch_the_broker_refuses_as_too_large_names_the_record_and_the_topic_setting():
    class Delivered:  # what a delivery report carries of its record
        def topic(self): return "out"
        def partition(self): return 2
        def key(self): return b"user-9"
        def value(self): return b"v" * 5000

    error = kerrors.delivery_error(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), Delivered())
    assert isinstance(error, kerrors.RecordTooLarge)
    assert str(error).startswith("record batch too large for the broker (MSG_SIZE_TOO_LARGE): "
                                 "it refused the batch holding a record of 5,006 bytes (key "
                                 "'user-9') for topic out partition 2")
    assert "--entity-name out --add-config max.message.bytes=N" in str(error)
    other = KafkaError(KafkaError.REQUEST_TIMED_OUT)
    assert kerrors.delivery_error(other, Delivered()) is other


class _CrashedProducer:
    """A producer whose flush fails the way confluent-kafka's did once in CI on Apache Kafka 4.4
    for a fenced zombie: SystemError, with the fatal error lost (error_cb never ran)."""

    def flush(self, timeout: float) -> int:
        raise SystemError("<built-in method flush of cimpl.Producer object> returned NULL "
                          "without setting an exception")

    def poll(self, timeout: float) -> int:
        return 0


def test_a_crashed_flush_after_a_refused_epoch_raises_fenced_not_system_error():
    """The broker refused the zombie's records for their epoch (a delivery error) and the fatal
    error itself never reached error_cb: the task fails as fenced (_FENCED), naming the refusal,
    not with confluent-kafka's SystemError."""
    from sinks.kafka.producer import KafkaTxn, fatal_from
    from sinks.two_phase_commit import TaskInfo

    producer = _CrashedProducer()
    refused = KafkaError(KafkaError.INVALID_PRODUCER_EPOCH, "Broker: Producer attempted an "
                         "operation with an old epoch")
    txn = KafkaTxn(TaskInfo(5, 0, 0), producer, "t-5-0", errors=[refused])
    with pytest.raises(KafkaException) as fenced:
        fatal_from(txn, producer.flush, 1.0)
    assert fenced.value.args[0].code() == KafkaError._FENCED
    assert fenced.value.args[0].fatal()
    assert "old epoch" in fenced.value.args[0].str()


def test_a_crashed_flush_with_no_error_known_stays_a_system_error():
    """Nothing says why the call failed: the SystemError is raised as it is, never a guess."""
    from sinks.kafka.producer import KafkaTxn, fatal_from
    from sinks.two_phase_commit import TaskInfo

    producer = _CrashedProducer()
    txn = KafkaTxn(TaskInfo(5, 0, 0), producer, "t-5-0")
    with pytest.raises(SystemError):
        fatal_from(txn, producer.flush, 1.0)
