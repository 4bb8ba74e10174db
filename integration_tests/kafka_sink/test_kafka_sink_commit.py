"""The Kafka sink's commit path against real Apache Kafka, without Spark: the sink's task-side
methods play the tasks (two attempts of one partition, a killed attempt) and the template's
writer plays the driver, so each race is staged exactly. Checked with the marker-applying
oracle: what counts is what a read_committed reader would see.

Every test runs on both cluster generations (`any_broker`): Apache Kafka 4.x, whose new
clusters finalize transaction.version 2 (KIP-890 part 2), and 3.9. The sink's commit client
sends EndTxn v1 and InitProducerId v3 to both (sinks/kafka/commit_client.py), so the coordinator
applies the pre-KIP-890 rules to its requests on either."""

from __future__ import annotations

import logging
import sys
import time

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from pyspark.sql.types import BinaryType, StructField, StructType

from sinks.kafka.commit_client import (
    OutcomeUnreadable,
    PreparedTxn,
    TransientTxnError,
    end_transaction,
)
from sinks.kafka.outcome import transaction_outcome
from connectors.core.options import Options
from sinks.kafka.commit_client import END_TXN_VERSION, INIT_PRODUCER_ID_VERSION
from connectors.local.kafka_oracle import read_partition
from integration_tests.support.kafka_data import create_topic, unique_topic
from integration_tests.support.streaming import wait_for
from sinks.kafka import KafkaSink, KafkaSinkOptions
from sinks.two_phase_commit import (
    PreparedPartition,
    SinkSettings,
    TaskInfo,
    TwoPhaseCommitWriter,
)
from sinks.txn_log import TransactionLog

SCHEMA = StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])


@pytest.fixture
def bootstrap(any_broker) -> str:
    """This module's cluster: each generation in turn."""
    return any_broker.bootstrap_servers


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
    or INVALID_PRODUCER_EPOCH): the output's COMMIT marker settles it as committed, so the
    partition is marked committed and not written again."""
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
    (here a fence by someone else's init_transactions). The output's ABORT marker settles it as
    lost, so the replay writes the partition again instead of the restart failing until
    commitTimeout."""
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


def _wait_until_ended(bootstrap, txn: PreparedTxn, starts: dict) -> None:
    """EndTxn returns once the coordinator has logged its decision (PREPARE_COMMIT); it writes
    the markers to the partitions after that, so the output may show the records without a
    marker for a moment (seen on Apache Kafka 3.9 with the suite's two workers on 2 cores).
    The sink never reads an outcome in that window: it settles only after the coordinator
    refused its EndTxn, and a fence or an expiry completes only once the markers are written."""
    wait_for(lambda: transaction_outcome(bootstrap, txn, starts) != "open", 30,
             f"the markers of {txn.transactional_id}")


def test_settling_reads_from_the_batch_start_or_the_log_start(bootstrap, out, tmp_path):
    sink = make_sink(bootstrap, out, tmp_path / "ck")
    prepare(sink, 0, 0, 0, "before")  # an earlier transaction of the id, fenced by the next
    sink.open()
    handle = prepare(sink, 1, 0, 0, "mine")
    txn = PreparedTxn(handle["transactional_id"], handle["producer_id"], handle["producer_epoch"])
    (topic, partition, start), = handle["scan_from"]
    # The end offset before the batch
    first = min(r.offset for r in read_partition(bootstrap, out, 0).open if r.key == b"mine")
    assert 0 < start <= first
    assert transaction_outcome(bootstrap, txn, {(topic, partition): start}) == "open"
    end_transaction(bootstrap, txn, commit=True)
    _wait_until_ended(bootstrap, txn, {(topic, partition): start})
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
    _wait_until_ended(bootstrap, txn, {(out, 0): None})
    assert transaction_outcome(bootstrap, txn, {(out, 0): None}) == "committed"
    assert len(read_partition(bootstrap, out, 0).committed) == 3000 + 5  # and the 5 of "mine"


# -- item 6: definite errors -------------------------------------------------------------------


def test_endtxn_for_a_producer_id_the_coordinator_does_not_know(bootstrap, out, tmp_path,
                                                               monkeypatch):
    """The coordinator answers INVALID_PRODUCER_ID_MAPPING. No record of that producer is in the
    output, so the sink can neither commit nor call it lost: it fails loudly at once, naming
    the error, after one EndTxn: no retries until commitTimeout, and no guess."""
    from sinks.kafka import commit_client as kafka_commit

    sink = make_sink(bootstrap, out, tmp_path / "ck")
    sink.open()
    real = prepare(sink, 1, 0, 0, "real")
    unknown = dict(real, producer_id=real["producer_id"] + 10_000)
    with pytest.raises(OutcomeUnreadable) as e:
        sink.commit(1, {0: unknown})
    assert "INVALID_PRODUCER_ID_MAPPING" in str(e.value) or "InvalidProducerIdMapping" in str(
        e.value), str(e.value)
    assert "not in the log" in str(e.value)
    sent: list[int] = []
    end = kafka_commit.end_transaction
    monkeypatch.setattr(sys.modules["sinks.kafka.sink"], "end_transaction",
                        lambda cluster, txn, **kw: (sent.append(txn.producer_id),
                                                    end(cluster, txn, **kw))[1])
    writer = TwoPhaseCommitWriter(sink)
    with pytest.raises(OutcomeUnreadable):
        writer._commit(1, {0: unknown}, recovering=True)
    assert sent == [unknown["producer_id"]]  # a definite answer is not retried
    sink.abort([unknown])  # a definite error in abort is logged, not raised
    sink.abort([real])
    # the abort's markers follow its EndTxn (_wait_until_ended): a full run read the partition
    # before they were written
    wait_for(lambda: read_partition(bootstrap, out, 0).open == [], 30,
             "the abort's markers in the output")


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

    from sinks.kafka import commit_client as kafka_commit
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

    monkeypatch.setattr(sys.modules["sinks.kafka.sink"], "end_transaction", end_transaction)
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


# -- every failure path on the real coordinator ------------------------------------------------


def _spy_end_transaction(monkeypatch) -> list[tuple[int, str]]:
    """(producer id, outcome) of every EndTxn the sink sends: "NONE" or the exception's text."""
    from sinks.kafka import commit_client as kafka_commit

    calls: list[tuple[int, str]] = []
    end = kafka_commit.end_transaction

    def end_transaction(cluster, txn, **kw):
        try:
            end(cluster, txn, **kw)
        except Exception as e:
            calls.append((txn.producer_id, f"{type(e).__name__}: {e}"))
            raise
        calls.append((txn.producer_id, "NONE"))

    monkeypatch.setattr(sys.modules["sinks.kafka.sink"], "end_transaction", end_transaction)
    return calls


def test_the_request_versions_are_pinned():
    """What the coordinator's rules depend on (KIP-890 part 2: v5+ EndTxn bumps the epoch)."""
    assert (END_TXN_VERSION, INIT_PRODUCER_ID_VERSION) == (1, 3)


def test_a_commit_retried_after_the_driver_died_between_endtxn_and_its_record_reads_none(
        bootstrap, out, tmp_path, caplog, monkeypatch):
    """The driver's EndTxn(commit) landed, then the driver died before recording the partition
    committed. Recovery sends the same EndTxn again: the coordinator answers NONE (a repeated
    commit of a completed transaction, same epoch), so no refusal needs settling, and the
    records are committed once."""
    sink = make_sink(bootstrap, out, tmp_path / "ck")
    sink.open()
    handle = prepare(sink, 3, 0, 0, "once")
    txlog = _decided(sink, 3, handle)
    sink.commit(3, {0: handle})  # EndTxn done; the crash comes before record_committed
    calls = _spy_end_transaction(monkeypatch)
    with caplog.at_level(logging.INFO):
        TwoPhaseCommitWriter(make_sink(bootstrap, out, tmp_path / "ck")).prepare_for_tasks()
    # NONE, possibly after CONCURRENT_TRANSACTIONS retries while the first EndTxn's markers
    # are still being written (seen on 3.9): never a refusal
    assert calls[-1] == (handle["producer_id"], "NONE"), calls
    assert all("CONCURRENT_TRANSACTIONS" in outcome for _, outcome in calls[:-1]), calls
    assert "holds its COMMIT marker" not in caplog.text  # no refusal to settle
    assert txlog.state(3).committed == {0} and txlog.state(3).done
    assert len(read_partition(bootstrap, out, 0).committed) == 5


def test_a_transaction_aborted_by_the_brokers_timeout_is_lost_and_rewritten(
        bootstrap, out, tmp_path, caplog, monkeypatch):
    """kafka.transaction.timeout.ms=2000 and a driver frozen past it after its decision: the
    coordinator aborts the prepared transaction itself (ABORT marker, epoch bumped). The
    recovery's EndTxn is refused (INVALID_PRODUCER_EPOCH), the output's ABORT marker settles
    it as lost, the partition is rewritten by the replay: nothing duplicated, nothing missing."""
    sink = make_sink(bootstrap, out, tmp_path / "ck", **{"kafka.transaction.timeout.ms": "2000"})
    sink.open()
    handle = prepare(sink, 2, 0, 0, "timedout")
    txlog = _decided(sink, 2, handle)
    deadline = time.monotonic() + 30  # the driver, frozen: the broker's timeout fires
    while not read_partition(bootstrap, out, 0).aborted:
        assert time.monotonic() < deadline, "the broker never aborted the timed-out transaction"
        time.sleep(0.5)
    calls = _spy_end_transaction(monkeypatch)
    restarted = TwoPhaseCommitWriter(make_sink(bootstrap, out, tmp_path / "ck",
                                               **{"kafka.transaction.timeout.ms": "2000"}))
    with caplog.at_level(logging.WARNING):
        restarted.prepare_for_tasks()
    assert "were lost before their commit" in caplog.text
    assert len(calls) == 1 and "INVALID_PRODUCER_EPOCH" in calls[0][1], calls
    assert txlog.state(2).committed == set() and not txlog.state(2).done
    # the replay: the partition's task runs again, and the driver commits its new handle
    replay = make_sink(bootstrap, out, tmp_path / "ck", **{"kafka.transaction.timeout.ms": "2000"})
    replay.open()
    again = prepare(replay, 2, 0, 0, "timedout")
    restarted.commit([PreparedPartition(2, 0, 0, again)], 2)
    log = read_partition(bootstrap, out, 0)
    assert sorted(r.value for r in log.committed) == sorted(f"timedout-{i}".encode()
                                                           for i in range(5))
    assert len(log.aborted) == 5 and log.open == []


def test_concurrent_transactions_while_the_coordinator_writes_markers_is_retried(
        bootstrap, out, tmp_path, monkeypatch):
    """An EndTxn that reaches the coordinator while it is still writing the markers of an
    EndTxn for the same transaction is answered CONCURRENT_TRANSACTIONS (retriable): the
    sink retries it until the coordinator answers NONE, and the batch commits once."""
    from sinks.kafka import commit_client as kafka_commit
    from kafka.protocol.producer.transaction import EndTxnRequest

    sink = make_sink(bootstrap, out, tmp_path / "ck", commitTimeout="30s")
    writer = TwoPhaseCommitWriter(sink)
    writer.ready_for_tasks = True
    calls = _spy_end_transaction(monkeypatch)
    client = kafka_commit.commit_client(bootstrap)
    # The race is the coordinator's: the second EndTxn nearly always arrives while the first's
    # markers are being written (seen 19 times in 20 alone), but once in a busy suite run five
    # batches in a row missed it; up to 20 batches (some 50 ms each) make it certain.
    for batch in range(20):
        sink.open()
        handle = prepare(sink, batch, 0, 0, f"concurrent{batch}")
        txn = kafka_commit.PreparedTxn(handle["transactional_id"], handle["producer_id"],
                                       handle["producer_epoch"])
        node = kafka_commit.find_transaction_coordinator(bootstrap, txn.transactional_id)
        with client._lock:  # someone else's EndTxn(commit), not waited for
            client._net(10).send(node, EndTxnRequest(
                transactional_id=txn.transactional_id, producer_id=txn.producer_id,
                producer_epoch=txn.producer_epoch, committed=True, version=END_TXN_VERSION))
        writer.commit([PreparedPartition(batch, 0, 0, handle)], batch)
        assert calls[-1][1] == "NONE", calls
        assert TransactionLog(sink.settings.checkpoint_location).state(batch).done
        if any("CONCURRENT_TRANSACTIONS" in outcome for _, outcome in calls):
            break
    assert any("CONCURRENT_TRANSACTIONS" in outcome for _, outcome in calls), calls
    log = read_partition(bootstrap, out, 0)
    assert len(log.committed) == 5 * (batch + 1) and log.open == []


def test_a_zombie_attempt_fenced_by_its_successor_never_becomes_visible(bootstrap, out, tmp_path):
    """Attempt 0 of (batch 5, partition 0) is still writing when the restarted query's attempt 0
    of the same partition begins (same transactional id: init_transactions fences the zombie and
    aborts its transaction). The zombie's later writes fail with a fenced producer, its preCommit
    never yields a handle, and none of its records is visible; the successor's are, once."""
    from confluent_kafka import KafkaError, KafkaException as LibrdkafkaError

    zombie_sink = make_sink(bootstrap, out, tmp_path / "ck")
    zombie_sink.open()
    zombie = zombie_sink.beginTransaction(TaskInfo(5, 0, 0))
    zombie_sink.invoke(zombie, _records("zombie", 3))
    zombie.producer.flush(10)

    successor_sink = make_sink(bootstrap, out, tmp_path / "ck")
    successor_sink.open()
    handle = prepare(successor_sink, 5, 0, 0, "successor")  # fences the zombie
    with pytest.raises(LibrdkafkaError) as fenced:
        zombie_sink.invoke(zombie, _records("zombie-late", 3))
        zombie_sink.preCommit(zombie)
    assert fenced.value.args[0].code() == KafkaError._FENCED, fenced.value
    TwoPhaseCommitWriter(successor_sink).commit([PreparedPartition(5, 0, 0, handle)], 5)
    log = read_partition(bootstrap, out, 0)
    assert {r.key for r in log.committed} == {b"successor"}
    assert len(log.committed) == 5
    assert log.open == []


@pytest.mark.parametrize("failure", ["killed", "frozen"])
def test_the_broker_killed_or_frozen_while_a_batch_commits(any_broker, bootstrap, out, tmp_path,
                                                            failure):
    """The broker is SIGKILLed (then started again on its data directory) or SIGSTOPped (then
    continued) after the batch was decided and while the driver commits it: the commit retries
    through the outage and lands; every record exactly once, nothing left open."""
    import threading

    broker = any_broker
    if broker.node is None:
        pytest.skip(f"the {broker.kind} broker is not run by this machine: it cannot be killed")
    create_topic(bootstrap, out + "-b", 3)
    sink = make_sink(bootstrap, out + "-b", tmp_path / "ck", commitTimeout="120s",
                     commitRetries="1000")
    writer = TwoPhaseCommitWriter(sink)
    writer.ready_for_tasks = True
    sink.open()
    messages = [PreparedPartition(0, p, 0, prepare(sink, 0, p, 0, f"p{p}")) for p in range(3)]
    errors: list[BaseException] = []

    def commit():
        try:
            writer.commit(messages, 0)
        except BaseException as e:  # noqa: BLE001  (asserted below)
            errors.append(e)

    if failure == "killed":
        broker.node.kill()
    else:
        broker.freeze()
    committer = threading.Thread(target=commit)
    try:
        committer.start()
        time.sleep(3)  # the driver's first EndTxns meet no broker
        assert committer.is_alive(), errors
    finally:
        if failure == "killed":
            broker.node.restart()
        else:
            broker.resume()
    committer.join(150)
    assert not committer.is_alive() and not errors, errors
    logs = [read_partition(bootstrap, out + "-b", p) for p in range(3)]
    assert sorted(r.value for log in logs for r in log.committed) == sorted(
        f"p{p}-{i}".encode() for p in range(3) for i in range(5))
    assert all(log.open == [] for log in logs)
