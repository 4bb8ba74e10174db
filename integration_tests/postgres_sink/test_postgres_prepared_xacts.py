"""`postgres-eos` leaves no prepared transaction behind, against a real throwaway PostgreSQL.

A prepared transaction outlives its session: leaked, it holds locks, holds back VACUUM and takes
one of the server's `max_prepared_transactions` slots. These tests drive the sink's steps, and
the template's writer around them, in this process (a fake TaskContext stands in for Spark's
tasks; "planning" is what Spark does before every batch's tasks: `prepare_for_tasks()`, i.e.
open, recovery, clean-up), and read `pg_prepared_xacts` and the table back independently.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import psycopg
import pyarrow as pa
import pytest

from connectors.core.options import Options
from integration_tests.support.postgres import postgres_server, prepared_transactions, query
from integration_tests.support.task_context import task  # noqa: F401  (a fixture)
from sinks.postgres import FORMAT_NAME, PostgresOptions, PostgresSink, make_gid
from sinks.two_phase_commit import PreparedPartition, SinkSettings, TaskInfo, TwoPhaseCommitWriter
from sinks.txn_log import TransactionLog

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string())])


def rows(*keys: int) -> pa.RecordBatch:
    return pa.record_batch({"k": list(keys), "v": [f"v{k}" for k in keys]}, schema=SCHEMA)


def make_sink(url: str, checkpoint: str, table: str) -> PostgresSink:
    # Spark's `metadata`, written on the driver as a query starts: a task that does not see it
    # refuses the checkpoint as another host's (CheckpointNotShared)
    os.makedirs(checkpoint, exist_ok=True)
    metadata = os.path.join(checkpoint, "metadata")
    if not os.path.exists(metadata):
        with open(metadata, "w") as f:
            f.write('{"id":"%s"}' % uuid.uuid4())
    opts = Options({"url": url, "table": table, "checkpointLocation": checkpoint})
    settings = SinkSettings.from_options(FORMAT_NAME, opts)
    return PostgresSink(settings, PostgresOptions.parse(opts, settings), SCHEMA)


def prepare(sink: PostgresSink, batch: int, partition: int, attempt: int, *keys: int) -> dict:
    """One task's phase one, the sink's steps only (no log record): its handle."""
    txn = sink.beginTransaction(TaskInfo(batch, partition, attempt))
    sink.invoke(txn, rows(*keys))
    return sink.preCommit(txn)


def gids(server) -> set[str]:
    return {gid for gid, _ in prepared_transactions(server)}


def prepare_foreign(server, gid: str) -> str:
    """A prepared transaction of another client."""
    with psycopg.connect(server.url()) as conn:
        conn.execute("SELECT 1")
        conn.execute(f"PREPARE TRANSACTION '{gid}'")
    return gid


def roll_back(server, wanted: set[str]) -> None:
    """Leave the shared server as found: other tests assert that nothing is prepared."""
    for gid in wanted & gids(server):
        query(server, f"ROLLBACK PREPARED '{gid}'")


def keys_in(server, table: str) -> list[int]:
    return sorted(k for (k,) in query(server, f"SELECT k FROM {table}"))


@pytest.fixture
def sink(postgres, tmp_path) -> Iterator[PostgresSink]:
    yield make_sink(postgres.url(), str(tmp_path / "ckpt"), f"t_{uuid.uuid4().hex[:10]}")
    roll_back(postgres, gids(postgres))  # even when the test failed: the server is shared


def planned(sink: PostgresSink) -> TwoPhaseCommitWriter:
    """The writer Spark ships to a batch's tasks, after the planning that precedes them."""
    writer = TwoPhaseCommitWriter(sink)
    writer.prepare_for_tasks()
    return writer


# -- a task that fails after PREPARE ---------------------------------------------------------


def test_abort_transaction_rolls_back_a_prepared_transaction(postgres, sink):
    """preCommit prepared (and closed the task's connection): abortTransaction still rolls the
    transaction back, by gid on a connection of its own, and leaves nothing visible."""
    sink.open()
    txn = sink.beginTransaction(TaskInfo(4, 1, 0))
    sink.invoke(txn, rows(1, 2))
    handle = sink.preCommit(txn)
    assert txn.prepared and txn.conn.closed and handle["gid"] in gids(postgres)
    sink.abortTransaction(txn)
    assert handle["gid"] not in gids(postgres)
    assert keys_in(postgres, sink.options.table) == []


def test_a_failed_log_write_after_prepare_leaves_no_prepared_transaction(postgres, sink, task, monkeypatch):
    """The task prepared, then could not log its handle: nobody would ever know of that
    prepared transaction, so the failing task must roll it back before it fails."""
    writer = planned(sink)

    def refused(*args, **kwargs):
        raise OSError("the checkpoint store refused the write")

    monkeypatch.setattr(TransactionLog, "record_prepared", refused)
    task(0, 0, 0)
    with pytest.raises(OSError, match="refused"):
        writer.write(iter([rows(1, 2, 3)]))
    gid = make_gid(sink.options.gid_prefix, 0, 0, 0)
    assert gid not in gids(postgres), "the failed task left its prepared transaction behind"
    assert keys_in(postgres, sink.options.table) == []


# -- what no decision names: rolled back at the next batch's planning -----------------------


def test_a_speculative_loser_that_prepares_after_the_commit_is_rolled_back_at_the_next_batch(
    postgres, sink, task
):
    """Batch 3: attempt 0 of partition 0 wins and is committed; a speculative attempt 1 of the
    same partition, started before the commit, prepares only after it (so after the driver's
    clean-up of superseded attempts). The planning of batch 4, in the same worker process,
    rolls it back; the winner's rows stay, once."""
    writer = planned(sink)  # batch 3's planning
    task(3, 0, 0)
    winner = writer.write(iter([rows(1, 2)]))

    def loser_rows() -> Iterator[pa.RecordBatch]:
        TwoPhaseCommitWriter(sink).commit([winner], 3)  # the driver commits meanwhile
        yield rows(1, 2)

    task(3, 0, 1)
    loser = writer.write(loser_rows())
    assert isinstance(loser, PreparedPartition) and loser.handle is not None
    assert loser.handle["gid"] in gids(postgres)  # prepared after the batch was committed

    planned(sink)  # batch 4's planning
    assert loser.handle["gid"] not in gids(postgres), "the speculative loser's transaction leaked"
    assert keys_in(postgres, sink.options.table) == [1, 2]


def test_a_restart_commits_what_was_decided_and_rolls_back_only_the_rest(postgres, sink, task, tmp_path):
    """A run killed after its decision for batch 7, restarted in the same worker process
    (Spark's Python daemon outlives a query run). Left on the server: the two decided
    transactions, a logged speculative attempt, an attempt killed before its log write, an old
    batch's transaction no log names, another query's and another client's. The restart's
    planning commits the decided ones (clean-up must not roll them back) and rolls back the
    other three of this query; what is not this query's is left alone."""
    writer = planned(sink)  # the first run's planning of batch 7
    decided = []
    for partition, keys in ((0, (1, 2)), (1, (3, 4))):
        task(7, partition, 0)
        decided.append(writer.write(iter([rows(*keys)])))
    TransactionLog(sink.settings.checkpoint_location).record_decision(
        7, {m.partition: m.handle for m in decided}
    )  # ... and the driver is killed before any COMMIT PREPARED
    task(7, 1, 1)
    logged_loser = writer.write(iter([rows(3, 4)]))
    unlogged = prepare(sink, 7, 0, 2, 1, 2)  # killed between PREPARE and its log write
    old = prepare(sink, 2, 0, 0, 99)  # an old batch's, in no log at all
    other_query = make_sink(postgres.url(), str(tmp_path / "other"), sink.options.table)
    others = {prepare(other_query, 7, 0, 0, 500)["gid"], prepare_foreign(postgres, "someone-else-1")}
    ours = {m.handle["gid"] for m in decided} | {logged_loser.handle["gid"], unlogged["gid"], old["gid"]}
    restarted = make_sink(postgres.url(), sink.settings.checkpoint_location, sink.options.table)
    planned(restarted)

    left = gids(postgres)
    assert not ours & left, f"left prepared: {sorted(ours & left)}"
    assert others <= left
    assert keys_in(postgres, sink.options.table) == [1, 2, 3, 4]  # the decided ones, once


# -- max_prepared_transactions too small for the batch's write tasks -------------------------


@pytest.fixture(scope="module")
def three_slots():
    """A server of its own with max_prepared_transactions = 3."""
    from integration_tests.support.postgres import unavailable_reason

    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    with postgres_server(max_prepared_transactions=3) as server:
        yield server


def test_a_prepare_beyond_max_prepared_transactions_names_both_numbers(three_slots, tmp_path):
    """Another client holds one of 3 slots; batch 0's partitions 0 and 1 take the other two; the
    PREPARE of partition 2 fails with an error naming the limit (3) and the write tasks the
    batch has at least (3), not retried as a commit error, leaving nothing of its own."""
    from sinks.postgres import TooManyPreparedTransactions

    server = three_slots
    sink = make_sink(server.url(), str(tmp_path / "ckpt"), "limited")
    sink.open()
    prepare_foreign(server, "someone-else-2")
    try:
        first = [prepare(sink, 0, p, 0, p) for p in (0, 1)]
        txn = sink.beginTransaction(TaskInfo(0, 2, 0))
        sink.invoke(txn, rows(2))
        with pytest.raises(TooManyPreparedTransactions) as info:
            sink.preCommit(txn)
        sink.abortTransaction(txn)
        text = str(info.value)
        assert "max_prepared_transactions = 3" in text and "at least 3 write tasks" in text, text
        assert "2 by this batch" in text and "1 by other clients" in text, text
        assert server.password not in text
        assert not sink.isTransient(info.value)
        assert gids(server) == {h["gid"] for h in first} | {"someone-else-2"}
        sink.abort(first)
        assert gids(server) == {"someone-else-2"}
    finally:
        roll_back(server, gids(server))
