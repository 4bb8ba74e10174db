"""Unit tests for sinks/two_phase_commit.py (and the parsing side of sinks/faults.py).

Pure logic: an in-memory fake store, a local checkpoint under tmp_path, no Spark session,
no broker, no Delta. No kill point of `sinks.faults` is ever armed here.
"""

from __future__ import annotations

import logging
import os
import pickle
import time
from typing import Any

import pyarrow as pa
import pytest

from connectors.core.options import OptionError, Options
from integration_tests.support.task_context import task  # noqa: F401  (a fixture)
from sinks import faults
from sinks.two_phase_commit import (
    AT_LEAST_ONCE,
    EXACTLY_ONCE,
    NONE,
    CommitTimeoutError,
    PreparedPartition,
    SinkSettings,
    TaskInfo,
    TransactionLost,
    TwoPhaseCommitSink,
    TwoPhaseCommitWriter,
    log as sink_log,
)
from sinks.txn_log import LOG_DIR, TransactionLog


class Transient(ConnectionError):
    """A store error worth retrying."""


# --------------------------------------------------------------------------- the fake store


class FakeStore(TwoPhaseCommitSink):
    """In-memory store recording every step in order.

    fail_times      the next N commit calls (commit or recoverAndCommit) raise Transient
    sleep_s         each commit call sleeps that long first
    lost            partitions whose handles the store can no longer commit (TransactionLost)
    committed_answer  what isCommitted returns
    on_commit       hook(batchId, handles) called at the start of each commit call
    """

    def __init__(
        self,
        settings: SinkSettings,
        *,
        per_partition: bool = False,
        fail_times: int = 0,
        sleep_s: float = 0.0,
        lost: set[int] | None = None,
        committed_answer: bool | None = None,
    ) -> None:
        super().__init__(settings)
        self.commits_per_partition = per_partition
        self.fail_times = fail_times
        self.sleep_s = sleep_s
        self.lost = set(lost or ())
        self.committed_answer = committed_answer
        self.on_commit = None
        self.calls: list[tuple[Any, ...]] = []
        self.visible: dict[int, dict[int, Any]] = {}  # batch -> partition -> handle
        self.aborted: list[Any] = []

    # task side
    def beginTransaction(self, context: TaskInfo):
        self.calls.append(("begin", context.batch_id, context.partition_id, context.attempt))
        return {"info": context, "rows": 0}

    def invoke(self, txn, batch: pa.RecordBatch) -> None:
        self.calls.append(("invoke", batch.num_rows))
        txn["rows"] += batch.num_rows

    def preCommit(self, txn):
        i = txn["info"]
        self.calls.append(("preCommit", i.batch_id, i.partition_id, i.attempt))
        return {"b": i.batch_id, "p": i.partition_id, "a": i.attempt, "rows": txn["rows"]}

    def abortTransaction(self, txn) -> None:
        self.calls.append(("abortTransaction", txn["info"].partition_id))

    # driver side
    def _do_commit(self, batchId, handles):
        if self.on_commit is not None:
            self.on_commit(batchId, dict(handles))
        if self.sleep_s:
            time.sleep(self.sleep_s)
        if self.fail_times > 0:
            self.fail_times -= 1
            raise Transient("store unavailable")
        lost = [p for p in handles if p in self.lost]
        if lost:
            raise TransactionLost(lost, "fake store timed the transaction out")
        self.visible.setdefault(batchId, {}).update(handles)

    def commit(self, batchId, handles):
        self.calls.append(("commit", batchId, dict(handles)))
        self._do_commit(batchId, handles)

    def recoverAndCommit(self, batchId, handles):
        self.calls.append(("recoverAndCommit", batchId, dict(handles)))
        self._do_commit(batchId, handles)

    def abort(self, handles):
        self.calls.append(("abort", list(handles)))
        self.aborted.extend(handles)

    def recoverAndAbort(self, batchId, handles):
        self.calls.append(("recoverAndAbort", batchId, list(handles)))
        self.aborted.extend(handles)

    def isCommitted(self, batchId):
        self.calls.append(("isCommitted", batchId))
        return self.committed_answer

    def cleanupAbandoned(self) -> None:
        self.calls.append(("cleanupAbandoned",))

    def open(self) -> None:
        self.calls.append(("open",))

    def named(self, *names: str) -> list[tuple[Any, ...]]:
        return [c for c in self.calls if c[0] in names]


# --------------------------------------------------------------------------- helpers


@pytest.fixture(autouse=True)
def _no_faults_and_clean_logger(monkeypatch):
    # Never let an inherited KAFKA_EOS_FAULTS arm a kill point in this process.
    monkeypatch.delenv(faults.ENV, raising=False)
    monkeypatch.delenv(faults.PGID_ENV, raising=False)
    handlers, level, propagate = list(sink_log.handlers), sink_log.level, sink_log.propagate
    yield
    sink_log.handlers[:] = handlers
    sink_log.setLevel(level)
    sink_log.propagate = propagate


@pytest.fixture
def chk(tmp_path):
    """A query's checkpoint as Spark leaves it before the first task runs: its `metadata`."""
    path = tmp_path / "checkpoint"
    path.mkdir()
    (path / "metadata").write_text('{"id":"00000000-0000-0000-0000-000000000001"}')
    return str(path)


def make_settings(
    chk: str | None,
    guarantee: str = EXACTLY_ONCE,
    *,
    timeout_ms: int = 60_000,
    attempts: int = 4,
    retain: int = 10,
) -> SinkSettings:
    return SinkSettings("fake", guarantee, chk, timeout_ms, attempts, retain)


def make(chk, guarantee=EXACTLY_ONCE, *, timeout_ms=60_000, attempts=4, retain=10, **store_kw):
    store = FakeStore(
        make_settings(chk, guarantee, timeout_ms=timeout_ms, attempts=attempts, retain=retain),
        **store_kw,
    )
    writer = TwoPhaseCommitWriter(store)
    writer.ready_for_tasks = True  # as if unpickled in a task; tests of recovery call recover()
    return store, writer


def h(batch: int, partition: int, attempt: int = 0, tag: str = "") -> dict:
    return {"b": batch, "p": partition, "a": attempt, "tag": tag}


def msgs(batch: int, partitions, attempt: int = 0) -> list[PreparedPartition]:
    return [PreparedPartition(batch, p, attempt, h(batch, p, attempt)) for p in partitions]


def handles_of(messages) -> dict[int, dict]:
    return {m.partition: m.handle for m in messages if m.handle is not None}


# --------------------------------------------------------------------------- settings


def test_settings_from_options_defaults():
    s = SinkSettings.from_options("s", Options({"checkpointLocation": "/c"}))
    assert s == SinkSettings("s", EXACTLY_ONCE, "/c", 120_000, 9, 10)


def test_settings_from_options_parses_values():
    s = SinkSettings.from_options("s", Options({
        "checkpointLocation": "/c",
        "deliveryGuarantee": "At-Least-Once",
        "commitTimeout": "30s",
        "commitRetries": "0",
        "minBatchesToRetain": "3",
    }))
    assert s.guarantee == AT_LEAST_ONCE
    assert s.commit_timeout_ms == 30_000
    assert s.commit_attempts == 1  # retries + the first attempt
    assert s.retain_batches == 3


def test_settings_exactly_once_requires_checkpoint():
    with pytest.raises(OptionError) as e:
        SinkSettings.from_options("s", Options({}))
    assert e.value.option == "checkpointLocation"
    # The other guarantees keep no log and need no checkpoint.
    assert SinkSettings.from_options("s", Options({"deliveryGuarantee": "none"})).guarantee == NONE
    s = SinkSettings.from_options("s", Options({"deliveryGuarantee": "at-least-once"}))
    assert s.checkpoint_location is None


@pytest.mark.parametrize("opts, option", [
    ({"commitRetries": "-1"}, "commitRetries"),
    ({"minBatchesToRetain": "1"}, "minBatchesToRetain"),
    ({"deliveryGuarantee": "twice"}, "deliveryGuarantee"),
    ({"commitTimeout": "soon"}, "commitTimeout"),
])
def test_settings_reject_bad_values(opts, option):
    with pytest.raises(OptionError) as e:
        SinkSettings.from_options("s", Options({"checkpointLocation": "/c", **opts}))
    assert e.value.option == option


def test_transaction_lost_sorts_partitions_and_is_not_transient(chk):
    e = TransactionLost([3, 1, 2], "gone")
    assert e.partitions == [1, 2, 3]
    assert "[1, 2, 3]" in str(e) and "gone" in str(e)
    store, _ = make(chk)
    assert not store.isTransient(e)
    assert not store.isTransient(OptionError("x", "bad"))
    assert store.isTransient(Transient("flaky"))


# --------------------------------------------------------------------------- 1. commit()


def test_decision_is_logged_before_the_store_commits(chk):
    store, writer = make(chk)
    messages = msgs(0, [0, 1, 2])
    seen = []

    def check(batch_id, handles):
        st = TransactionLog(chk).state(batch_id)
        seen.append((st.decided(), set(st.committed), st.done))

    store.on_commit = check
    writer.commit(messages, 0)
    assert seen == [(handles_of(messages), set(), False)]
    assert store.named("commit") == [("commit", 0, handles_of(messages))]


def test_commit_marks_partitions_committed_and_batch_done(chk):
    store, writer = make(chk)
    messages = msgs(3, [0, 1, 2])
    writer.commit(messages, 3)
    st = TransactionLog(chk).state(3)
    assert st.done
    assert st.committed == {0, 1, 2}
    assert st.decided() == handles_of(messages)
    assert store.visible == {3: handles_of(messages)}
    assert TransactionLog(chk).pending() == []
    assert not store.named("abort", "recoverAndAbort", "recoverAndCommit")


def test_messages_without_handle_are_not_committed(chk):
    store, writer = make(chk)
    messages = [
        PreparedPartition(1, 0, 0, h(1, 0)),
        PreparedPartition(1, 1, 0, None, skipped=True),  # committed by an earlier run
        PreparedPartition(1, 2, 0, None),  # empty partition
        None,  # Spark may hand None for a task without a message
        PreparedPartition(1, 3, 0, h(1, 3)),
    ]
    writer.commit(messages, 1)
    assert store.named("commit") == [("commit", 1, {0: h(1, 0), 3: h(1, 3)})]
    st = TransactionLog(chk).state(1)
    assert st.decided() == {0: h(1, 0), 3: h(1, 3)}
    assert st.committed == {0, 3}
    assert st.done


def test_batch_without_any_handle_writes_no_decision_but_is_done(chk):
    store, writer = make(chk)
    writer.commit([PreparedPartition(4, 0, 0, None, skipped=True)], 4)
    st = TransactionLog(chk).state(4)
    assert st.decisions == []
    assert st.done
    assert not store.named("commit")


def test_per_partition_store_commits_handle_by_handle_and_marks_each(chk):
    store, writer = make(chk, per_partition=True)
    messages = msgs(2, [2, 0, 1])  # out of order on purpose
    seen = []
    store.on_commit = lambda b, hs: seen.append((dict(hs), set(TransactionLog(chk).state(b).committed)))
    writer.commit(messages, 2)
    assert [c[2] for c in store.named("commit")] == [{0: h(2, 0)}, {1: h(2, 1)}, {2: h(2, 2)}]
    # Each partition is marked committed before the next one is committed.
    assert seen == [({0: h(2, 0)}, set()), ({1: h(2, 1)}, {0}), ({2: h(2, 2)}, {0, 1})]
    st = TransactionLog(chk).state(2)
    assert st.committed == {0, 1, 2} and st.done


def test_a_store_that_allows_it_commits_partitions_concurrently_and_marks_each(chk):
    """concurrent_commits > 1: the batch waits for the slowest commit, not for their sum, and
    every partition is still committed and marked; a lost one is still lost alone."""
    import threading

    store, writer = make(chk, per_partition=True, sleep_s=0.3, lost={3})
    store.concurrent_commits = 8
    running, peak, lock = [0], [0], threading.Lock()

    def on_commit(b, hs):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])

    def done(b, hs):
        with lock:
            running[0] -= 1

    store.on_commit = on_commit
    inner = store._do_commit

    def do_commit(b, hs):
        try:
            inner(b, hs)
        finally:
            done(b, hs)

    store._do_commit = do_commit
    started = time.monotonic()
    with pytest.raises(TransactionLost) as e:
        writer.commit(msgs(2, range(6)), 2)
    elapsed = time.monotonic() - started
    assert e.value.partitions == [3]
    assert peak[0] == 6 and elapsed < 6 * 0.3  # sequential would take 1.8 s
    assert sorted(next(iter(c[2])) for c in store.named("commit")) == list(range(6))
    st = TransactionLog(chk).state(2)
    assert st.committed == {0, 1, 2, 4, 5} and not st.done
    assert store.visible == {2: {p: h(2, p) for p in (0, 1, 2, 4, 5)}}


def test_concurrent_commits_fail_the_batch_after_every_started_commit_ended(chk):
    store, writer = make(chk, per_partition=True, attempts=1)
    store.concurrent_commits = 4

    def on_commit(b, hs):
        if 1 in hs:
            raise RuntimeError("definite store error")

    store.on_commit = on_commit
    store.isTransient = lambda exc: False
    with pytest.raises(RuntimeError, match="definite store error"):
        writer.commit(msgs(4, range(4)), 4)
    st = TransactionLog(chk).state(4)
    assert st.committed == {0, 2, 3} and not st.done  # the others landed and are marked


def test_commits_are_sequential_unless_the_store_allows_concurrency(chk):
    store, writer = make(chk, per_partition=True)
    assert store.concurrent_commits == 1
    import threading

    threads = set()
    store.on_commit = lambda b, hs: threads.add(threading.get_ident())
    writer.commit(msgs(2, range(4)), 2)
    assert threads == {threading.get_ident()}


def test_atomic_store_commits_the_whole_batch_in_one_call(chk):
    store, writer = make(chk, per_partition=False)
    writer.commit(msgs(2, [0, 1, 2]), 2)
    assert len(store.named("commit")) == 1


# --------------------------------------------------------------------------- 2. retries, timeout


def test_transient_failures_are_retried_then_succeed(chk):
    store, writer = make(chk, attempts=3, fail_times=2)
    writer.commit(msgs(0, [0, 1]), 0)
    assert len(store.named("commit")) == 3
    assert store.visible == {0: {0: h(0, 0), 1: h(0, 1)}}
    assert TransactionLog(chk).state(0).done


def test_retries_are_bounded_and_raise_commit_timeout(chk):
    store, writer = make(chk, attempts=2, fail_times=100)
    with pytest.raises(CommitTimeoutError) as e:
        writer.commit(msgs(7, [0, 1]), 7)
    assert len(store.named("commit")) == 2  # exactly commit_attempts, no more
    msg = str(e.value)
    assert "batch 7" in msg
    assert "commitTimeout" in msg
    assert isinstance(e.value.__cause__, Transient)
    st = TransactionLog(chk).state(7)
    assert not st.done
    assert st.committed == set()
    assert st.decided() == {0: h(7, 0), 1: h(7, 1)}  # kept: committed on restart


def test_commit_retries_zero_means_one_attempt(chk):
    store, writer = make(chk, attempts=1, fail_times=1)
    with pytest.raises(CommitTimeoutError):
        writer.commit(msgs(1, [0]), 1)
    assert len(store.named("commit")) == 1


def test_commit_timeout_stops_retrying(chk):
    # Plenty of attempts, but each takes longer than the whole timeout.
    store, writer = make(chk, timeout_ms=50, attempts=1000, fail_times=1000, sleep_s=0.1)
    started = time.monotonic()
    with pytest.raises(CommitTimeoutError) as e:
        writer.commit(msgs(5, [0]), 5)
    assert time.monotonic() - started < 5
    assert len(store.named("commit")) == 1
    assert "batch 5" in str(e.value) and "commitTimeout=50" in str(e.value)
    assert not TransactionLog(chk).state(5).done


def test_non_transient_error_is_not_retried(chk):
    store, writer = make(chk, attempts=5)

    def boom(b, hs):
        raise OptionError("path", "table vanished")

    store.on_commit = boom
    with pytest.raises(OptionError):
        writer.commit(msgs(0, [0]), 0)
    assert len(store.named("commit")) == 1


def test_guarantee_none_commit_in_task_is_not_retried(chk):
    store, writer = make(None, NONE, attempts=5, fail_times=1)
    with pytest.raises(Transient):
        writer._commit(0, {0: h(0, 0)}, recovering=False)
    assert len(store.named("commit")) == 1


# --------------------------------------------------------------------------- 3. lost transactions


def test_transaction_lost_fails_the_batch_and_it_is_not_done(chk):
    store, writer = make(chk, per_partition=True, lost={1})
    messages = msgs(6, [0, 1, 2])
    with pytest.raises(TransactionLost) as e:
        writer.commit(messages, 6)
    assert e.value.partitions == [1]
    assert "batch 6" in str(e.value)
    # TransactionLost is not transient: one try per partition.
    assert [c[2] for c in store.named("commit")] == [{0: h(6, 0)}, {1: h(6, 1)}, {2: h(6, 2)}]
    txlog = TransactionLog(chk)
    st = txlog.state(6)
    assert not st.done
    assert st.committed == {0, 2}
    assert txlog.pending() == [6]
    assert txlog.is_partition_committed(6, 0)
    assert not txlog.is_partition_committed(6, 1)  # the replay rewrites it

    # Spark then aborts the batch: its decision stands, nothing is aborted.
    writer.abort(messages, 6)
    assert not store.named("abort")

    # Restart: the store still cannot commit partition 1.
    store.calls.clear()
    writer.recover()
    assert store.named("recoverAndCommit") == [("recoverAndCommit", 6, {1: h(6, 1)})]
    st = txlog.state(6)
    assert not st.done
    assert st.committed == {0, 2}
    assert not store.named("recoverAndAbort")  # every prepared handle is decided


def test_recovery_with_lost_partition_marks_the_others_committed(chk):
    txlog = TransactionLog(chk)
    for p in (0, 1, 2):
        txlog.record_prepared(9, p, 0, h(9, p))
    txlog.record_decision(9, {p: h(9, p) for p in (0, 1, 2)})
    store, writer = make(chk, per_partition=True, lost={1})
    writer.recover()
    assert [c[2] for c in store.named("recoverAndCommit")] == [
        {0: h(9, 0)}, {1: h(9, 1)}, {2: h(9, 2)},
    ]
    st = txlog.state(9)
    assert not st.done
    assert st.committed == {0, 2}
    assert 1 not in st.committed
    assert txlog.pending() == [9]
    assert store.visible == {9: {0: h(9, 0), 2: h(9, 2)}}


def test_replay_after_lost_partition_commits_only_the_rewritten_partition(chk):
    store, writer = make(chk, per_partition=True, lost={1})
    with pytest.raises(TransactionLost):
        writer.commit(msgs(6, [0, 1, 2]), 6)
    # The store works again; the replay rewrites only partition 1 (new handle).
    store.lost.clear()
    store.calls.clear()
    new1 = h(6, 1, tag="replay")
    replay = [
        PreparedPartition(6, 0, 0, None, skipped=True),
        PreparedPartition(6, 1, 0, new1),
        PreparedPartition(6, 2, 0, None, skipped=True),
    ]
    writer.commit(replay, 6)
    assert store.named("commit") == [("commit", 6, {1: new1})]
    st = TransactionLog(chk).state(6)
    assert st.done
    assert len(st.decisions) == 2
    assert st.decided() == {0: h(6, 0), 1: new1, 2: h(6, 2)}
    assert store.visible[6] == {0: h(6, 0), 1: new1, 2: h(6, 2)}


# --------------------------------------------------------------------------- 4. recover()


def test_recover_commits_decided_uncommitted_handles_then_done(chk):
    txlog = TransactionLog(chk)
    for p in (0, 1, 2):
        txlog.record_prepared(4, p, 0, h(4, p))
    txlog.record_decision(4, {p: h(4, p) for p in (0, 1, 2)})
    txlog.record_committed(4, [0])  # crashed after committing partition 0
    store, writer = make(chk)
    writer.recover()
    assert store.named("recoverAndCommit") == [("recoverAndCommit", 4, {1: h(4, 1), 2: h(4, 2)})]
    assert not store.named("commit", "abort", "recoverAndAbort")
    st = txlog.state(4)
    assert st.done
    assert st.committed == {0, 1, 2}
    assert txlog.pending() == []


def test_recover_aborts_undecided_batch_and_forgets_it(chk):
    txlog = TransactionLog(chk)
    txlog.record_prepared(3, 0, 0, h(3, 0))
    txlog.record_prepared(3, 1, 0, h(3, 1))
    txlog.record_prepared(3, 1, 1, h(3, 1, 1))
    store, writer = make(chk)
    writer.recover()
    aborts = store.named("recoverAndAbort")
    assert len(aborts) == 1
    assert aborts[0][1] == 3
    key = lambda x: (x["p"], x["a"])  # noqa: E731
    assert sorted(aborts[0][2], key=key) == [h(3, 0), h(3, 1), h(3, 1, 1)]
    assert not store.named("commit", "recoverAndCommit")
    assert not os.path.exists(os.path.join(chk, LOG_DIR, "3"))
    assert txlog.batches() == []


def test_recover_forgets_empty_undecided_batch_without_aborting(chk):
    txlog = TransactionLog(chk)
    os.makedirs(os.path.join(chk, LOG_DIR, "2"))
    store, writer = make(chk)
    writer.recover()
    assert not store.named("recoverAndAbort", "abort")
    assert txlog.batches() == []


def test_recover_trusts_store_is_committed(chk):
    txlog = TransactionLog(chk)
    for p in (0, 1):
        txlog.record_prepared(5, p, 0, h(5, p))
    txlog.record_decision(5, {0: h(5, 0), 1: h(5, 1)})
    store, writer = make(chk, committed_answer=True)
    writer.recover()
    assert store.named("isCommitted") == [("isCommitted", 5)]
    assert not store.named("commit", "recoverAndCommit", "recoverAndAbort", "abort")
    st = txlog.state(5)
    assert st.committed == {0, 1}
    assert st.done


@pytest.mark.parametrize("answer", [False, None])
def test_recover_commits_when_store_cannot_say_or_says_no(chk, answer):
    txlog = TransactionLog(chk)
    txlog.record_prepared(5, 0, 0, h(5, 0))
    txlog.record_decision(5, {0: h(5, 0)})
    store, writer = make(chk, committed_answer=answer)
    writer.recover()
    assert store.named("recoverAndCommit") == [("recoverAndCommit", 5, {0: h(5, 0)})]
    assert txlog.state(5).done


def test_recover_aborts_prepared_attempts_not_in_the_decision(chk):
    txlog = TransactionLog(chk)
    txlog.record_prepared(8, 0, 0, h(8, 0, 0))  # attempt 0 of partition 0: superseded
    txlog.record_prepared(8, 0, 1, h(8, 0, 1))
    txlog.record_prepared(8, 1, 0, h(8, 1, 0))
    txlog.record_prepared(8, 2, 0, h(8, 2, 0))  # prepared, never decided
    txlog.record_decision(8, {0: h(8, 0, 1), 1: h(8, 1, 0)})
    store, writer = make(chk)
    writer.recover()
    assert store.named("recoverAndCommit") == [
        ("recoverAndCommit", 8, {0: h(8, 0, 1), 1: h(8, 1, 0)}),
    ]
    aborts = store.named("recoverAndAbort")
    assert len(aborts) == 1 and aborts[0][1] == 8
    key = lambda x: (x["p"], x["a"])  # noqa: E731
    assert sorted(aborts[0][2], key=key) == [h(8, 0, 0), h(8, 2, 0)]
    # The committed handles themselves are never aborted.
    assert h(8, 0, 1) not in store.aborted and h(8, 1, 0) not in store.aborted
    assert txlog.state(8).done


def test_recover_aborts_superseded_attempts_even_when_already_committed(chk):
    txlog = TransactionLog(chk)
    txlog.record_prepared(1, 0, 0, h(1, 0, 0))
    txlog.record_prepared(1, 0, 1, h(1, 0, 1))
    txlog.record_decision(1, {0: h(1, 0, 1)})
    txlog.record_committed(1, [0])  # crashed between "committed-0" and "done"
    store, writer = make(chk)
    writer.recover()
    assert not store.named("recoverAndCommit", "commit")
    assert store.named("recoverAndAbort") == [("recoverAndAbort", 1, [h(1, 0, 0)])]
    assert txlog.state(1).done


def test_recover_handles_every_pending_batch_in_order_and_skips_done(chk):
    txlog = TransactionLog(chk)
    txlog.record_prepared(1, 0, 0, h(1, 0))
    txlog.record_decision(1, {0: h(1, 0)})
    txlog.record_done(1)  # done: untouched
    txlog.record_prepared(10, 0, 0, h(10, 0))
    txlog.record_decision(10, {0: h(10, 0)})
    txlog.record_prepared(2, 0, 0, h(2, 0))  # undecided
    store, writer = make(chk)
    writer.recover()
    steps = [(c[0], c[1]) for c in store.named("recoverAndCommit", "recoverAndAbort")]
    assert steps == [("recoverAndAbort", 2), ("recoverAndCommit", 10)]
    assert txlog.batches() == [1, 10]
    assert txlog.pending() == []


def test_recover_retries_transient_failures(chk):
    txlog = TransactionLog(chk)
    txlog.record_prepared(0, 0, 0, h(0, 0))
    txlog.record_decision(0, {0: h(0, 0)})
    store, writer = make(chk, attempts=3, fail_times=1)
    writer.recover()
    assert len(store.named("recoverAndCommit")) == 2
    assert txlog.state(0).done


def test_recover_is_idempotent(chk):
    txlog = TransactionLog(chk)
    txlog.record_prepared(1, 0, 0, h(1, 0, 0))
    txlog.record_prepared(1, 0, 1, h(1, 0, 1))
    txlog.record_decision(1, {0: h(1, 0, 1)})
    txlog.record_prepared(2, 0, 0, h(2, 0))
    store, writer = make(chk)
    writer.recover()
    calls = list(store.calls)
    assert [c[0] for c in calls] == [
        "isCommitted", "recoverAndCommit", "recoverAndAbort", "recoverAndAbort", "cleanupAbandoned",
    ]
    state_before = (txlog.batches(), txlog.pending(), txlog.state(1))
    writer.recover()
    # Nothing left to recover; only the store's clean-up runs again (before every batch).
    assert store.calls == calls + [("cleanupAbandoned",)]
    assert (txlog.batches(), txlog.pending(), txlog.state(1)) == state_before


def test_cleanup_abandoned_runs_after_recovery_before_every_batch(tmp_path):
    """Not once per worker process: a worker outlives a query run, and a speculative loser
    may prepare after its batch's commit; each planning cleans up again."""
    chk_a = str(tmp_path / "a")
    txlog = TransactionLog(chk_a)
    txlog.record_prepared(0, 0, 0, h(0, 0))
    txlog.record_decision(0, {0: h(0, 0)})
    store, writer = make(chk_a)
    writer.recover()
    assert [c[0] for c in store.calls] == ["isCommitted", "recoverAndCommit", "cleanupAbandoned"]
    writer.recover()
    assert len(store.named("cleanupAbandoned")) == 2
    assert len(store.named("recoverAndCommit")) == 1


def test_pickling_for_tasks_opens_the_store_and_recovers(chk):
    """Spark pickles the writer it ships to tasks: that, not the worker's module name (which is
    __main__ with spark.python.use.daemon=false), is what runs recovery."""
    txlog = TransactionLog(chk)
    txlog.record_prepared(0, 0, 0, h(0, 0))
    txlog.record_decision(0, {0: h(0, 0)})
    store = FakeStore(make_settings(chk))
    writer = TwoPhaseCommitWriter(store)
    assert store.calls == []  # building it (as the commit runner does) does nothing
    shipped = pickle.loads(pickle.dumps(writer))
    assert [c[0] for c in store.calls] == [
        "open", "isCommitted", "recoverAndCommit", "cleanupAbandoned",
    ]
    assert txlog.state(0).done
    assert shipped.ready_for_tasks
    pickle.dumps(writer)  # Spark pickles it twice (the write function's closure and itself)
    assert len(store.named("open")) == 1


def test_pickling_at_least_once_opens_but_does_not_recover(tmp_path):
    store = FakeStore(make_settings(str(tmp_path / "c"), AT_LEAST_ONCE))
    pickle.dumps(TwoPhaseCommitWriter(store))
    assert [c[0] for c in store.calls] == ["open"]


def test_a_writer_built_to_commit_does_not_recover(chk):
    txlog = TransactionLog(chk)
    txlog.record_prepared(0, 0, 0, h(0, 0))
    store = FakeStore(make_settings(chk))
    TwoPhaseCommitWriter(store).commit([], 5)
    assert not store.named("recoverAndAbort", "recoverAndCommit", "cleanupAbandoned", "open")
    assert 0 in txlog.pending()


def test_a_task_refuses_a_writer_that_did_not_recover(chk, monkeypatch):
    """Recovery that silently does not run duplicates output: the task fails instead."""
    store = FakeStore(make_settings(chk))
    writer = TwoPhaseCommitWriter(store)
    with pytest.raises(RuntimeError, match="without having recovered"):
        writer.write(iter([]))


# --------------------------------------------------------------------------- 5. abort()


def test_abort_without_decision_aborts_the_handles(chk):
    store, writer = make(chk)
    messages = msgs(3, [0, 1]) + [PreparedPartition(3, 2, 0, None), None]
    writer.abort(messages, 3)
    assert store.named("recoverAndAbort") == [("recoverAndAbort", 3, [h(3, 0), h(3, 1)])]
    assert not store.named("commit", "recoverAndCommit")


def test_abort_also_aborts_what_other_tasks_logged(chk):
    """Spark's abort gets only some tasks' messages; a task that prepared and logged its
    handle is aborted too, not left holding the store until the next start."""
    txlog = TransactionLog(chk)
    txlog.record_prepared(3, 0, 0, h(3, 0))
    txlog.record_prepared(3, 2, 0, h(3, 2))
    store, writer = make(chk)
    writer.abort(msgs(3, [0]) + [None, None], 3)
    assert store.named("recoverAndAbort") == [("recoverAndAbort", 3, [h(3, 0), h(3, 2)])]


def test_abort_with_decision_keeps_the_handles(chk):
    txlog = TransactionLog(chk)
    txlog.record_decision(3, {0: h(3, 0), 1: h(3, 1)})
    store, writer = make(chk)
    writer.abort(msgs(3, [0, 1]), 3)
    assert not store.named("abort", "recoverAndAbort")
    assert txlog.state(3).decided() == {0: h(3, 0), 1: h(3, 1)}


def test_abort_decision_of_another_batch_does_not_matter(chk):
    TransactionLog(chk).record_decision(2, {0: h(2, 0)})
    store, writer = make(chk)
    writer.abort(msgs(3, [0]), 3)
    assert store.named("recoverAndAbort") == [("recoverAndAbort", 3, [h(3, 0)])]


def test_abort_after_commit_timeout_keeps_the_decided_handles(chk):
    store, writer = make(chk, attempts=1, fail_times=1)
    messages = msgs(4, [0])
    with pytest.raises(CommitTimeoutError):
        writer.commit(messages, 4)
    writer.abort(messages, 4)
    assert not store.named("abort")
    # ... and the restart commits them.
    writer.recover()
    assert store.named("recoverAndCommit") == [("recoverAndCommit", 4, {0: h(4, 0)})]
    assert TransactionLog(chk).state(4).done


def test_abort_with_nothing_to_abort_does_not_call_the_store(chk):
    store, writer = make(chk)
    writer.abort([PreparedPartition(1, 0, 0, None), None], 1)
    writer.abort([], 1)
    assert not store.named("abort", "recoverAndAbort")


# --------------------------------------------------------------------------- 6. garbage collection


def test_garbage_collection_keeps_at_most_retain_batches(chk):
    store, writer = make(chk, retain=3)
    for b in range(8):
        writer.commit(msgs(b, [0, 1]), b)
        done = [x for x in TransactionLog(chk).batches() if TransactionLog(chk).state(x).done]
        assert len(done) <= 3
    assert TransactionLog(chk).batches() == [5, 6, 7]


def test_garbage_collection_never_drops_pending_batches(chk):
    txlog = TransactionLog(chk)
    txlog.record_prepared(1, 0, 0, h(1, 0))
    txlog.record_decision(1, {0: h(1, 0)})  # decided, never finished
    store, writer = make(chk, retain=2)
    for b in range(2, 10):
        writer.commit(msgs(b, [0]), b)
    assert txlog.batches() == [1, 8, 9]
    assert txlog.pending() == [1]
    assert txlog.state(1).decided() == {0: h(1, 0)}


def test_garbage_collection_keeps_the_failed_batch(chk):
    store, writer = make(chk, retain=2, per_partition=True)
    for b in range(3):
        writer.commit(msgs(b, [0]), b)
    store.lost = {0}
    with pytest.raises(TransactionLost):
        writer.commit(msgs(3, [0]), 3)
    assert TransactionLog(chk).batches() == [1, 2, 3]
    assert TransactionLog(chk).pending() == [3]


# --------------------------------------------------------------------------- 7. other guarantees


@pytest.mark.parametrize("guarantee", [AT_LEAST_ONCE, NONE])
def test_non_exactly_once_commit_writes_no_log(chk, guarantee):
    store, writer = make(chk, guarantee)
    writer.commit(msgs(0, [0, 1]), 0)
    writer.abort(msgs(1, [0, 1]), 1)
    assert not os.path.exists(os.path.join(chk, LOG_DIR))
    assert os.listdir(chk) == ["metadata"]  # Spark's only: nothing of the sink's
    # The tasks committed their own transactions; the driver has nothing to commit or abort.
    assert store.calls == []


def test_at_least_once_without_checkpoint_commit_works(tmp_path):
    store = FakeStore(make_settings(None, AT_LEAST_ONCE))
    writer = TwoPhaseCommitWriter(store)
    writer.commit(msgs(0, [0]), 0)
    writer.abort(msgs(0, [0]), 0)
    assert store.calls == []


# --------------------------------------------------------------------------- write() (task side)


def _batches(*sizes: int) -> list[pa.RecordBatch]:
    return [pa.record_batch({"x": list(range(n))}, schema=pa.schema([("x", pa.int64())])) for n in sizes]


def test_write_prepares_and_logs_the_handle(chk, task):
    store, writer = make(chk)
    task(2, 1, 0)
    msg = writer.write(iter(_batches(3, 0, 2)))
    assert isinstance(msg, PreparedPartition)
    assert (msg.batch_id, msg.partition, msg.attempt, msg.skipped) == (2, 1, 0, False)
    assert msg.rows == 5
    assert msg.handle == {"b": 2, "p": 1, "a": 0, "rows": 5}
    assert [c[0] for c in store.calls] == ["begin", "invoke", "invoke", "preCommit"]
    st = TransactionLog(chk).state(2)
    assert list(st.prepared.values()) == [(1, msg.handle)]
    assert st.decisions == [] and not st.done  # the driver decides, not the task


def test_a_task_that_does_not_see_the_drivers_local_checkpoint_writes_nothing(tmp_path, task):
    """A checkpoint on the driver's local disk, the task on another host (no Spark `metadata`
    there): refused before the store sees a transaction, naming the option and what to use; on
    the task's host no record of a prepared transaction is left where the driver never looks."""
    from sinks.txn_log import CheckpointNotShared

    chk = str(tmp_path / "on-the-drivers-disk")
    store, writer = make(chk)
    task(2, 1, 0)
    with pytest.raises(CheckpointNotShared) as e:
        writer.write(iter(_batches(3, 0, 2)))
    assert f"checkpointLocation {chk!r} is a path on the driver's local disk" in str(e.value)
    assert "s3://" in str(e.value) and "docs/deploying.md" in str(e.value)
    assert store.calls == []
    assert not os.path.exists(os.path.join(chk, LOG_DIR))


def test_write_of_empty_partition_has_no_handle(chk, task):
    store, writer = make(chk)
    task(0, 0)
    msg = writer.write(iter(_batches(0)))
    assert msg.handle is None and not msg.skipped
    assert store.calls == []
    assert TransactionLog(chk).batches() == []


def test_write_skips_partition_committed_by_an_earlier_run(chk, task):
    TransactionLog(chk).record_committed(4, [1])
    store, writer = make(chk)
    consumed = []

    def rows():
        for b in _batches(2, 2):
            consumed.append(b)
            yield b

    task(4, 1)
    msg = writer.write(rows())
    assert msg.skipped and msg.handle is None
    assert len(consumed) == 2  # the input is drained
    assert store.calls == []
    # Partition 0 of that batch was not committed: it is written.
    task(4, 0)
    assert writer.write(iter(_batches(1))).handle is not None


def test_injected_task_failure_on_first_attempt_only(chk, task, monkeypatch):
    monkeypatch.setenv(faults.ENV, "task_fail@3/1")
    store, writer = make(chk)
    task(3, 1, 0)
    with pytest.raises(faults.InjectedFault):
        writer.write(iter(_batches(2)))
    assert store.named("abortTransaction") == [("abortTransaction", 1)]
    assert not store.named("preCommit")
    assert TransactionLog(chk).state(3).prepared == {}
    # Spark's retry (attempt 1) goes through.
    task(3, 1, 1)
    msg = writer.write(iter(_batches(2)))
    assert msg.handle == {"b": 3, "p": 1, "a": 1, "rows": 2}
    # Another partition of the same batch is not affected on attempt 0.
    task(3, 0, 0)
    assert writer.write(iter(_batches(1))).handle is not None


def test_at_least_once_task_commits_its_own_transaction(chk, task):
    store, writer = make(chk, AT_LEAST_ONCE)
    task(0, 2)
    msg = writer.write(iter(_batches(3)))
    assert store.named("commit") == [("commit", 0, {2: msg.handle})]
    assert store.visible == {0: {2: msg.handle}}
    assert not os.path.exists(os.path.join(chk, LOG_DIR))


def test_at_least_once_task_fails_when_its_transaction_is_lost(chk, task):
    # At-least-once may write twice but never drop rows: a task whose own commit reports the
    # transaction lost must fail (so Spark retries it), not report success.
    store, writer = make(chk, AT_LEAST_ONCE, lost={2})
    task(0, 2)
    with pytest.raises(TransactionLost):
        writer.write(iter(_batches(3)))
    assert store.visible == {}


# --------------------------------------------------------------------------- faults parsing


@pytest.mark.parametrize("spec, point, batch, partition, armed", [
    ("after_decision@3", "after_decision", 3, None, True),
    ("after_decision@3", "after_decision", 4, None, False),
    ("after_decision@3", "after_commit", 3, None, False),
    ("after_decision", "after_decision", 99, None, True),
    ("task_write@2/1", "task_write", 2, 1, True),
    ("task_write@2/1", "task_write", 2, 0, False),
    ("task_write@2/1", "task_write", 3, 1, False),
    ("task_write@2/1", "task_write", 2, None, True),
    ("task_write@2/1, task_fail@4", "task_fail", 4, 7, True),
    ("task_write@2/1, task_fail@4", "task_fail", 5, 7, False),
    (" , ,task_fail@4,", "task_fail", 4, 0, True),
    ("", "task_fail", 4, 0, False),
])
def test_faults_armed_parsing(monkeypatch, spec, point, batch, partition, armed):
    monkeypatch.setenv(faults.ENV, spec)
    assert faults._armed(point, batch, partition) is armed


@pytest.mark.parametrize("spec, scope, armed", [
    ("ck-pg:after_decision@3", "/tmp/x/ck-pg", True),
    ("ck-pg:after_decision@3", "/tmp/x/ck-pg/", True),
    ("ck-pg:after_decision@3", "/tmp/x/ck-delta", False),
    ("ck-pg:after_decision@3", None, False),
    ("after_decision@3", "/tmp/x/ck-delta", True),
    ("ck-delta:after_commit@3, ck-pg:after_decision@3", "/tmp/ck-pg", True),
    ("s3a://b/ck:after_decision@3", "s3a://b/ck", False),  # a scope is a folder's name
])
def test_faults_scoped_to_a_query_by_its_checkpoint_folder(monkeypatch, spec, scope, armed):
    monkeypatch.setenv(faults.ENV, spec)
    assert faults._armed("after_decision", 3, None, scope) is armed


def test_fault_rendezvous_waits_for_every_party_then_returns(monkeypatch, tmp_path):
    """Two parties: the first parks until the second has reached its point (the kill follows,
    in inject); a party that never comes ends the wait after the timeout, saying so."""
    import threading

    monkeypatch.setenv(faults.RENDEZVOUS_ENV, f"{tmp_path}:2")
    done = threading.Event()
    first = threading.Thread(target=lambda: (faults._rendezvous("after_decision", 4, "/c/a"),
                                             done.set()))
    first.start()
    assert not done.wait(0.5), "the first party went on alone"
    faults._rendezvous("after_commit", 4, "/c/b")
    assert done.wait(5)
    assert sorted(p.read_text() for p in tmp_path.iterdir()) == ["a after_decision\n",
                                                                 "b after_commit\n"]
    monkeypatch.setattr(faults, "RENDEZVOUS_TIMEOUT_S", 0.2)
    faults._rendezvous("after_decision", 5, "/c/a")  # alone: returns after the timeout


def test_a_rendezvous_mark_is_never_seen_without_its_words(monkeypatch, tmp_path):
    """The parties count the marks and the last one kills the process group at once: a mark
    seen while its file is still empty (created, not yet written) made the crash matrix read
    an empty party. Every mark another party can count already holds what it says."""
    import builtins

    monkeypatch.setenv(faults.RENDEZVOUS_ENV, f"{tmp_path}:1")
    seen: list[str] = []
    real_open = builtins.open

    def watching_open(path, mode="r", *args, **kwargs):
        f = real_open(path, mode, *args, **kwargs)
        if "w" in mode and str(path).startswith(str(tmp_path)):
            # the moment after the file exists and before anything is written in it
            seen.extend(p.read_text() for p in tmp_path.iterdir()
                        if p.name.startswith("7.") and not p.name.endswith(".tmp"))
        return f

    monkeypatch.setattr(builtins, "open", watching_open)
    faults._rendezvous("after_commit", 7, "/c/a")
    monkeypatch.setattr(builtins, "open", real_open)
    assert "" not in seen, "a party could count a mark that did not say who it was yet"
    assert [p.read_text() for p in tmp_path.iterdir()] == ["a after_commit\n"]


def test_faults_inert_without_env(monkeypatch):
    monkeypatch.delenv(faults.ENV, raising=False)
    assert faults._armed("task_fail", 0, 0) is False
    faults.inject("task_fail", 0, 0, 0)  # no raise


def test_task_fail_raises_on_first_attempt_only(monkeypatch):
    monkeypatch.setenv(faults.ENV, "task_fail@1")
    with pytest.raises(faults.InjectedFault, match="batch 1 partition 5"):
        faults.inject("task_fail", 1, 5, attempt=0)
    faults.inject("task_fail", 1, 5, attempt=1)  # retried attempt: no raise
    faults.inject("task_fail", 2, 5, attempt=0)  # other batch: no raise


def test_every_point_is_known():
    assert set(faults.POINTS) == {
        "task_write", "task_fail", "after_precommit", "after_decision",
        "after_store_commit", "after_some_commits", "after_commit",
    }


def test_batch_log_line_counts_written_partitions(chk, caplog):
    store, writer = make(chk)
    messages = [
        PreparedPartition(0, 0, 0, h(0, 0), rows=3, bytes=30, write_ms=5.0),
        PreparedPartition(0, 1, 0, None, skipped=True, rows=0),
        PreparedPartition(0, 2, 0, h(0, 2), rows=4, bytes=40, write_ms=9.0),
    ]
    caplog.set_level(logging.INFO, logger="kafka_eos.sink")
    writer.commit(messages, 0)
    import json as _json

    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("batch committed ")]
    assert len(lines) == 1
    line = _json.loads(lines[0][len("batch committed "):])
    assert line["batch"] == 0 and line["rows"] == 7 and line["bytes"] == 70
    assert line["skipped_partitions"] == [1]
    assert line["slowest_partition"] == 2
    assert set(line["partitions"]) == {"0", "2"}


def test_relative_checkpoint_location_is_made_absolute_on_the_driver(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = SinkSettings.from_options("s", Options({"checkpointLocation": "ckpt/q1"}))
    assert settings.checkpoint_location == str(tmp_path / "ckpt" / "q1")
    s3 = SinkSettings.from_options("s", Options({"checkpointLocation": "s3a://bucket/ckpt"}))
    assert s3.checkpoint_location == "s3://bucket/ckpt"


def test_a_failed_log_write_after_precommit_aborts_the_prepared_handle(chk, task, monkeypatch):
    """A prepared transaction whose handle never reached the log is known to nobody: the task
    aborts it by its handle before failing (it would otherwise hold locks, or LSO, forever)."""
    store, writer = make(chk)
    task(3, 0)

    def broken(*args, **kwargs):
        raise OSError("the checkpoint store refused the write")

    monkeypatch.setattr(TransactionLog, "record_prepared", broken)
    with pytest.raises(OSError, match="refused"):
        writer.write(iter(_batches(2)))
    assert store.named("abort") == [("abort", [{"b": 3, "p": 0, "a": 0, "rows": 2}])]


def test_the_store_commit_fault_point_sits_before_the_committed_marker(chk, monkeypatch):
    """The crash point 'after a partition's store commit, before its committed marker'."""
    store, writer = make(chk)
    seen = []
    monkeypatch.setattr(
        faults, "inject",
        lambda point, batch, partition=None, attempt=0, scope=None: seen.append(
            (point, partition, sorted(TransactionLog(chk).state(batch).committed))
        ),
    )
    store.commits_per_partition = True
    writer.commit(msgs(1, [0, 1]), 1)
    assert [s for s in seen if s[0] == "after_store_commit"] == [
        ("after_store_commit", 0, []), ("after_store_commit", 1, [0]),
    ]


# -- no option silently ignored -------------------------------------------------------------


def test_every_sink_knows_the_templates_options_and_what_spark_passes():
    from connectors.core.options import Options
    from sinks.two_phase_commit import reject_unknown_options

    raw = {"checkpointlocation": "/ck", "deliveryguarantee": "none", "committimeout": "1s",
           "commitretries": "1", "minbatchestoretain": "3", "queryname": "q", "path": "/p",
           "mine": "1"}
    reject_unknown_options(Options(raw), ("mine",), format_name="x")
    with pytest.raises(OptionError, match=r"Option 'minbatchestoretian'.*the x sink.*did you mean 'minBatchesToRetain'"):
        reject_unknown_options(Options({"minbatchestoretian": "3"}), (), format_name="x")


# -- batch writes (df.write): the job in place of the micro-batch ------------------------------


class FakeJobStore(FakeStore):
    def abortJob(self, handles, partitions):
        self.calls.append(("abortJob", list(handles), partitions))


def make_job(guarantee=EXACTLY_ONCE, **store_kw):
    from sinks.two_phase_commit import TwoPhaseCommitBatchWriter

    settings = SinkSettings.for_batch_job("fake", Options({"deliveryGuarantee": guarantee}))
    store = FakeJobStore(settings, **store_kw)
    writer = store.batchWriter()
    assert isinstance(writer, TwoPhaseCommitBatchWriter)
    return store, writer


def test_a_batch_job_needs_no_checkpoint_and_gets_a_fresh_id_per_job():
    one = SinkSettings.for_batch_job("fake", Options({}))
    two = SinkSettings.for_batch_job("fake", Options({}))
    assert one.checkpoint_location is None and one.guarantee == EXACTLY_ONCE
    assert one.batch_job and one.job_id != two.job_id
    assert not SinkSettings.from_options("fake", Options({"checkpointLocation": "/c"})).batch_job
    with pytest.raises(ValueError, match="for_batch_job"):
        FakeStore(make_settings("/c")).batchWriter()


def test_a_batch_job_opens_the_store_when_pickled_for_its_tasks_and_never_recovers():
    store, writer = make_job()
    pickle.dumps(writer)
    pickle.dumps(writer)  # Spark pickles it twice: for the tasks and for the commit
    assert store.named("open", "cleanupAbandoned", "recoverAndAbort") == [("open",)]


def test_a_batch_jobs_tasks_prepare_and_hand_their_handle_to_the_driver(tmp_path, monkeypatch):
    import pyspark

    class Ctx:  # a batch job's task: no streaming.sql.batchId
        def getLocalProperty(self, key):
            return None

        def partitionId(self):
            return 3

        def attemptNumber(self):
            return 1

    monkeypatch.setattr(pyspark.TaskContext, "get", classmethod(lambda cls: Ctx()))
    monkeypatch.chdir(tmp_path)
    store, writer = make_job()
    pickle.dumps(writer)
    message = writer.write(iter([pa.record_batch({"v": [1, 2]})]))
    assert message.handle == {"b": 0, "p": 3, "a": 1, "rows": 2}
    assert store.named("begin", "preCommit", "commit") == [("begin", 0, 3, 1), ("preCommit", 0, 3, 1)]
    assert list(tmp_path.iterdir()) == []  # no transaction log anywhere


def test_a_batch_job_commit_makes_every_handle_visible_at_once():
    store, writer = make_job()
    writer.commit(msgs(0, [0, 1, 2]) + [PreparedPartition(0, 3, 0, None)])
    assert store.named("commit") == [("commit", 0, handles_of(msgs(0, [0, 1, 2])))]
    assert store.named("abortJob") == []


def test_a_batch_job_commit_retries_transient_errors():
    store, writer = make_job(fail_times=2)
    writer.commit(msgs(0, [0, 1]))
    assert len(store.named("commit")) == 3 and store.visible[0] == handles_of(msgs(0, [0, 1]))


def test_a_lost_partition_fails_the_job_naming_what_was_committed():
    store, writer = make_job(per_partition=True, lost={1})
    with pytest.raises(TransactionLost, match=r"partition\(s\) \[1\].*partition\(s\) \[0, 2\] were committed"):
        writer.commit(msgs(0, [0, 1, 2]))


def test_a_failed_batch_job_is_aborted_twice_the_second_time_for_late_tasks(monkeypatch):
    from sinks import two_phase_commit as tpc

    monkeypatch.setattr(tpc, "JOB_ABORT_RECHECK_S", 0.0)
    store, writer = make_job()
    messages = [msgs(0, [0])[0], None, None, msgs(0, [3])[0]]
    writer.abort(messages)
    assert store.named("abortJob") == [
        ("abortJob", [h(0, 0), h(0, 3)], 4),
        ("abortJob", [], 4),
    ]


def test_the_default_abort_job_aborts_the_reported_handles():
    store = FakeStore(SinkSettings.for_batch_job("fake", Options({})))
    store.abortJob([h(0, 1)], 4)
    assert store.aborted == [h(0, 1)]


@pytest.mark.parametrize("guarantee", [AT_LEAST_ONCE, NONE])
def test_at_least_once_batch_jobs_commit_in_the_tasks_and_abort_nothing(guarantee, monkeypatch):
    import pyspark

    from integration_tests.support.task_context import FakeTaskContext

    monkeypatch.setattr(pyspark.TaskContext, "get", classmethod(lambda cls: FakeTaskContext(0, 1, 0)))
    store, writer = make_job(guarantee)
    pickle.dumps(writer)
    writer.write(iter([pa.record_batch({"v": [1]})]))
    assert store.visible == {0: {1: {"b": 0, "p": 1, "a": 0, "rows": 1}}}
    writer.abort([None])
    writer.commit([])
    assert store.named("abortJob", "abort") == []
    assert len(store.named("commit")) == 1  # the task's own
