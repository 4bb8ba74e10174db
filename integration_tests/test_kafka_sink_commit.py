"""The Kafka sink's commit path against the real broker, without Spark: the sink's task-side
methods play the tasks (two attempts of one partition, a killed attempt) and the template's
writer plays the driver, so each race is staged exactly. Checked with the marker-applying
oracle: what counts is what a read_committed reader would see."""

from __future__ import annotations

import logging
import sys

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from pyspark.sql.types import BinaryType, StructField, StructType

from sinks.kafka_commit import (
    OutcomeUnreadable,
    PreparedTxn,
    TransientTxnError,
    end_transaction,
    transaction_outcome,
)
from connectors.options import Options
from connectors.testing.kafka_oracle import read_partition
from integration_tests.kafka_data import create_topic, unique_topic
from sinks.kafka import KafkaSink, KafkaSinkOptions
from sinks.two_phase_commit import (
    CommitTimeoutError,
    SinkSettings,
    TaskInfo,
    TwoPhaseCommitWriter,
    _structured_logger,
)
from sinks.txn_log import TransactionLog

SCHEMA = StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])


@pytest.fixture(autouse=True)
def _sink_logs_reach_caplog(monkeypatch):
    """The template's logger stops propagating once it has its own handler."""
    monkeypatch.setattr(_structured_logger(), "propagate", True)


@pytest.fixture
def out(bootstrap):
    topic = unique_topic("kcommit")
    create_topic(bootstrap, topic, 1)
    return topic


def make_sink(bootstrap, out, checkpoint, **options) -> KafkaSink:
    opts = Options({"kafka.bootstrap.servers": bootstrap, "topic": out,
                    "checkpointLocation": str(checkpoint), "commitTimeout": "3s",
                    "commitRetries": "3", **options})
    settings = SinkSettings.from_options("kafka-eos", opts)
    sink = KafkaSink(settings, KafkaSinkOptions.parse(opts, settings, SCHEMA))
    return sink


def prepare(sink: KafkaSink, batch: int, partition: int, attempt: int, tag: str, n: int = 5):
    """One task attempt: begin, write n records tagged `tag`, preCommit -> its handle."""
    txn = sink.beginTransaction(TaskInfo(batch, partition, attempt))
    sink.invoke(txn, _records(tag, n))
    return sink.preCommit(txn)


def _records(tag: str, n: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {"key": [tag.encode()] * n, "value": [f"{tag}-{i}".encode() for i in range(n)]},
        schema=pa.schema([("key", pa.binary()), ("value", pa.binary())]),
    )


def tags(bootstrap, out, kind="committed") -> list[bytes]:
    return sorted({r.key for r in getattr(read_partition(bootstrap, out, 0), kind)})


def fence(bootstrap, transactional_id: str) -> None:
    """What a newer producer with the same id does (and what a timeout leaves)."""
    Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id}).init_transactions(30)


# -- item 8: speculation ---------------------------------------------------------------------


def test_a_speculative_attempt_does_not_fence_the_accepted_one(bootstrap, out, tmp_path):
    """Attempt 1 of the same (batch, partition) begins after attempt 0 prepared (Spark's
    speculation, or a zombie); the driver commits attempt 0: it must commit, not be fenced."""
    sink = make_sink(bootstrap, out, tmp_path / "ck")
    sink.open()
    first = prepare(sink, 4, 0, 0, "accepted")
    second = prepare(sink, 4, 0, 1, "speculative")
    assert first["transactional_id"] != second["transactional_id"]
    sink.commit(4, {0: first})
    sink.abort([second])  # what _abort_superseded does with the loser's logged handle
    assert tags(bootstrap, out) == [b"accepted"]
    assert read_partition(bootstrap, out, 0).open == []


# -- item 8: a committed transaction is never taken for lost ------------------------------------


def _decided(sink: KafkaSink, batch: int, handle: dict) -> TransactionLog:
    txlog = TransactionLog(sink.settings.checkpoint_location)
    txlog.record_prepared(batch, 0, 0, handle)
    txlog.record_decision(batch, {0: handle})
    return txlog


def test_a_committed_transaction_fenced_since_is_settled_as_committed(bootstrap, out, tmp_path, caplog):
    """The driver's EndTxn succeeded, then it crashed before the committed marker; a newer
    init_transactions on the id followed. Recovery's repeated EndTxn is refused (PRODUCER_FENCED
    on Kafka; a closed connection on Tansu): the output's COMMIT marker settles it as committed,
    so the partition is marked committed and not written again."""
    sink = make_sink(bootstrap, out, tmp_path / "ck")
    sink.open()
    handle = prepare(sink, 2, 0, 0, "once")
    txlog = _decided(sink, 2, handle)
    sink.commit(2, {0: handle})  # EndTxn done; the crash comes before record_committed
    fence(bootstrap, handle["transactional_id"])

    restarted = TwoPhaseCommitWriter(make_sink(bootstrap, out, tmp_path / "ck"))
    with caplog.at_level(logging.INFO):
        restarted.prepare_for_tasks()  # recovery
    state = txlog.state(2)
    assert state.committed == {0} and state.done
    assert "lost" not in caplog.text
    assert "holds its COMMIT marker" in caplog.text
    assert tags(bootstrap, out) == [b"once"]
    assert len(read_partition(bootstrap, out, 0).committed) == 5


def test_a_decided_transaction_aborted_behind_the_sinks_back_is_lost(bootstrap, out, tmp_path, caplog):
    """The opposite case: the prepared transaction was aborted before the driver committed it
    (what transaction.timeout.ms does; here a fence). The output's ABORT marker settles it as
    lost on every broker (on Tansu the coordinator only closes the connection), so the replay
    writes the partition again instead of the restart failing until commitTimeout."""
    sink = make_sink(bootstrap, out, tmp_path / "ck")
    sink.open()
    handle = prepare(sink, 2, 0, 0, "aborted")
    txlog = _decided(sink, 2, handle)
    fence(bootstrap, handle["transactional_id"])

    restarted = TwoPhaseCommitWriter(make_sink(bootstrap, out, tmp_path / "ck"))
    with caplog.at_level(logging.WARNING):
        restarted.prepare_for_tasks()
    assert "were lost before their commit" in caplog.text
    state = txlog.state(2)
    assert state.committed == set() and not state.done  # the replay writes partition 0 again
    assert tags(bootstrap, out) == [] and tags(bootstrap, out, "aborted") == [b"aborted"]


def test_settling_reads_from_the_batch_start_or_the_log_start(bootstrap, out, tmp_path):
    sink = make_sink(bootstrap, out, tmp_path / "ck")
    prepare(sink, 0, 0, 0, "before")  # an earlier transaction of the id, fenced by the next
    sink.open()
    handle = prepare(sink, 1, 0, 0, "mine")
    txn = PreparedTxn(handle["transactional_id"], handle["producer_id"], handle["producer_epoch"])
    (topic, partition, start), = handle["scan_from"]
    # The end offset before the batch (Tansu's ListOffsets: the last batch's base offset + 1)
    first = min(r.offset for r in read_partition(bootstrap, out, 0).open if r.key == b"mine")
    assert 0 < start <= first
    assert transaction_outcome(bootstrap, txn, {(topic, partition): start}) == "open"
    end_transaction(bootstrap, txn, commit=True)
    assert transaction_outcome(bootstrap, txn, {(topic, partition): start}) == "committed"
    assert transaction_outcome(bootstrap, txn, {(topic, partition): None}) == "committed"


def test_settling_and_the_oracle_read_past_a_megabyte_of_records(bootstrap, out, tmp_path):
    """The Fetch answers that settle a commit in doubt (and the oracle's) may hold up to 8 MiB:
    kafka-python's default frame limit (1 MB) refused them ("Invalid frame length") as soon
    as a partition held more than a megabyte, e.g. settling from the log start."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    for i in range(3000):
        producer.produce(out, value=b"x" * 1000, key=str(i).encode(), partition=0)
    producer.flush(30)
    sink = make_sink(bootstrap, out, tmp_path / "ck")
    sink.open()
    handle = prepare(sink, 0, 0, 0, "mine")
    txn = PreparedTxn(handle["transactional_id"], handle["producer_id"], handle["producer_epoch"])
    assert transaction_outcome(bootstrap, txn, {(out, 0): None}) == "open"
    end_transaction(bootstrap, txn, commit=True)
    assert transaction_outcome(bootstrap, txn, {(out, 0): None}) == "committed"
    assert len(read_partition(bootstrap, out, 0).committed) == 3000 + 5  # and the 5 of "mine"


# -- item 6: definite errors -------------------------------------------------------------------


def test_endtxn_for_a_producer_id_the_coordinator_does_not_know(bootstrap, broker, out, tmp_path):
    """Kafka answers INVALID_PRODUCER_ID_MAPPING; Tansu 0.6.0 closes the connection (measured).
    Either way no record of that producer is in the output, so the sink can neither commit
    nor call it lost: it fails loudly (at once on Kafka, after commitTimeout on Tansu, where
    the refusal is indistinguishable from an outage), never guessing."""
    sink = make_sink(bootstrap, out, tmp_path / "ck")
    sink.open()
    real = prepare(sink, 1, 0, 0, "real")
    unknown = dict(real, producer_id=real["producer_id"] + 10_000)
    with pytest.raises((TransientTxnError, OutcomeUnreadable)) as e:
        sink.commit(1, {0: unknown})
    assert "not in the log" in str(e.value)
    if not broker.supports("endtxn_fenced_error"):
        assert isinstance(e.value, TransientTxnError) and e.value.closed_by_broker
    writer = TwoPhaseCommitWriter(sink)
    with pytest.raises((CommitTimeoutError, OutcomeUnreadable)):
        writer._commit(1, {0: unknown}, recovering=True)
    sink.abort([unknown])  # a definite error in abort is logged, not raised
    sink.abort([real])
    assert read_partition(bootstrap, out, 0).open == []


# -- item 8: attempts that never prepared --------------------------------------------------------


def test_a_killed_attempt_beyond_the_first_is_fenced_before_the_next_batch(bootstrap, out, tmp_path):
    """Attempt 1 (a retry or a speculative copy) is killed while writing: no handle, no abort.
    Its id may never be used again, so it would hold read_committed readers until the
    transaction timeout; the driver's clean-up before the next batch fences it."""
    sink = make_sink(bootstrap, out, tmp_path / "ck")
    sink.open()
    txn = sink.beginTransaction(TaskInfo(6, 0, 1))
    sink.invoke(txn, _records("killed", 3))
    txn.producer.flush(10)
    txn.producer = None  # killed: the transaction stays open on the broker
    assert tags(bootstrap, out, "open") == [b"killed"]

    TwoPhaseCommitWriter(make_sink(bootstrap, out, tmp_path / "ck")).prepare_for_tasks()
    log = read_partition(bootstrap, out, 0)
    assert log.open == [] and {r.key for r in log.aborted} == {b"killed"}


# -- the commit's fixed costs ------------------------------------------------------------------


def test_a_batchs_transactions_are_committed_together_and_all_land(bootstrap, out, tmp_path,
                                                                    monkeypatch):
    """The driver's EndTxns of a batch's partitions are in flight together (threads sharing
    the commit client's connection); every one lands, every partition is marked, and the next
    batch asks no FindCoordinator for ids whose coordinator it already knows."""
    import threading

    from sinks import kafka_commit
    from sinks.two_phase_commit import PreparedPartition

    sink = make_sink(bootstrap, out, tmp_path / "ck")
    writer = TwoPhaseCommitWriter(sink)
    writer.ready_for_tasks = True
    finds: list[str] = []
    find = kafka_commit.find_transaction_coordinator
    monkeypatch.setattr(kafka_commit, "find_transaction_coordinator",
                        lambda cluster, tid, timeout_s=10.0: (finds.append(tid),
                                                               find(cluster, tid, timeout_s))[1])
    threads: set[int] = set()
    end = kafka_commit.end_transaction

    def end_transaction(cluster, txn, **kw):
        threads.add(threading.get_ident())
        return end(cluster, txn, **kw)

    monkeypatch.setattr(sys.modules["sinks.kafka"], "end_transaction", end_transaction)
    partitions = range(6)
    for batch in (0, 1):
        sink.open()
        messages = [PreparedPartition(batch, p, 0, prepare(sink, batch, p, 0, f"b{batch}p{p}"))
                    for p in partitions]
        writer.commit(messages, batch)
        state = TransactionLog(sink.settings.checkpoint_location).state(batch)
        assert state.committed == set(partitions) and state.done
        if batch == 0:
            assert len(threads) > 1  # not one after the other
            finds.clear()
    assert finds == []  # batch 1: every coordinator known from batch 0
    assert tags(bootstrap, out) == sorted(f"b{b}p{p}".encode() for b in (0, 1) for p in partitions)
    assert read_partition(bootstrap, out, 0).open == []
