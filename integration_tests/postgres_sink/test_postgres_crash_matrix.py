"""The crash matrix (docs/design.md#crash-matrix) for Kafka -> `kafka-eos` -> `postgres-eos`,
against a real throwaway PostgreSQL, a real broker and real Spark pipelines killed with SIGKILL.

The rows of the matrix run as one sequence on one checkpoint, a row per micro-batch: run k of
the pipeline is killed (its whole process group, driver JVM included) at row k's point of the
commit protocol in batch k, and run k+1 starts by recovering it. At each kill the test checks
row by row:
* that the recovery of the previous row is complete: every input record of the batches before
  k is in the table exactly once, and no prepared transaction of theirs is left on the server;
* that the kill left what its point must leave: prepared transactions in `pg_prepared_xacts`,
  decision and committed records in the transaction log, rows visible in the table.
A prepared transaction rolled back behind the sink's back (the lost-transaction rule of
docs/design.md#commit-protocol) and a task failure that Spark retries ride along in the same
sequence. The last run goes to the end of the input; then every input record is in the table exactly once, checked by
source partition and offset with its key and value, no prepared transaction is left, every
batch of the transaction log is done, and the password appears nowhere in the pipeline's log.
(One sequence rather than one pipeline pair per row: 6 Spark start-ups instead of 14.)
"""

from __future__ import annotations

import collections
import json
import os
import signal
import time

import pytest

from integration_tests.support.postgres import prepared_transactions, query
from integration_tests.support.kafka_data import create_topic, produce, unique_topic
from integration_tests.support.processes import (
    WORKERS_LINE,
    kill_group,
    log_tail,
    run_pipeline,
    start_pipeline,
    wait_exit,
    workers_args,
)
from integration_tests.support.streaming import wait_for
from sinks.faults import ENV
from sinks.postgres import gid_batch, gid_prefix
from sinks.txn_log import TransactionLog

PIPELINE = "integration_tests.support.pipelines.eos_pipeline"
PARTITIONS, PER_PARTITION = 3, 35
PER_TRIGGER = 15  # 105 records, 5 per partition and batch: 7 batches, every task writes rows

#: Row k: the kill point in batch k, and what the recovery in run k+1 must do about it.
ROWS = [
    ("task_write", "killed while tasks write: nothing decided; recovery rolls back whatever "
                   "was prepared (logged or not), the replay writes the batch"),
    ("after_precommit", "every task prepared, no decision: recoverAndAbort rolls them back"),
    ("after_decision", "decided, nothing committed: recoverAndCommit commits them; one was "
                       "rolled back behind the sink's back meanwhile, so it is lost and the "
                       "replay rewrites that partition only"),
    ("after_store_commit", "partition 0's COMMIT PREPARED done, its committed marker not written: "
                           "recovery finds it committed (txid_status), commits the others"),
    ("after_some_commits", "one partition committed: recovery commits the other two"),
    ("after_commit", "all committed, Spark's commit log missing: the replay writes nothing"),
]
LOST_AFTER = "after_decision"


@pytest.fixture
def pipeline(postgres, bootstrap, tmp_path):
    topic = unique_topic("pgin")
    create_topic(bootstrap, topic, PARTITIONS)
    expected = produce(bootstrap, topic, PARTITIONS, PER_PARTITION)
    table = f"crash_{topic.replace('-', '_')}"
    paths = {"checkpoint": str(tmp_path / "ckpt"), "log": str(tmp_path / "pipeline.log")}
    args = ["--bootstrap", bootstrap, "--topic", topic, "--checkpoint", paths["checkpoint"],
            "--pg-table", table]
    env = {"EOS_PG_URL": postgres.url()}
    return args, paths, expected, table, env


# -- reading the server and the checkpoint, independently of the sink -----------------------


def table_rows(postgres, table: str) -> list[tuple]:
    """(partition, offset, key, value) of every row, duplicates kept; [] before the table exists."""
    exists = query(postgres, "SELECT to_regclass(%s) IS NOT NULL", (table,))[0][0]
    if not exists:
        return []
    return sorted(query(postgres, f'SELECT partition, "offset", key, value FROM {table}'))


def ours(postgres, checkpoint: str) -> dict[str, int]:
    """This pipeline's prepared transactions (gid -> batch), by its checkpoint's gid prefix."""
    prefix = gid_prefix(checkpoint)
    found = {gid: gid_batch(prefix, gid) for gid, _ in prepared_transactions(postgres)}
    return {gid: batch for gid, batch in found.items() if batch is not None}


def records_through(checkpoint: str, batch: int, expected) -> list[tuple]:
    """The input records of batches 0..`batch`, by the end offsets Spark logged for `batch`."""
    if batch < 0:
        return []
    with open(os.path.join(checkpoint, "offsets", str(batch))) as f:
        ends = json.loads(f.read().strip().splitlines()[-1])
    return sorted(
        (r.partition, r.offset, r.key.decode(), r.value.decode())
        for r in expected if r.offset < ends[r.topic][str(r.partition)]
    )


def assert_once(rows: list[tuple], want: list[tuple], what: str) -> None:
    counts = collections.Counter((p, o) for p, o, _, _ in rows)
    dupes = [k for k, n in counts.items() if n > 1]
    assert not dupes, f"{what}: {len(dupes)} records written more than once, e.g. {dupes[:5]}"
    missing = sorted(set(want) - set(rows))
    assert not missing, f"{what}: {len(missing)} records missing, e.g. {missing[:5]}"
    assert rows == want, what


# -- the checks -----------------------------------------------------------------------------


def check_recovered(postgres, paths, table, expected, batch: int, previous: str | None) -> None:
    """Batches before `batch` (the last of them recovered from `previous`) are in, once."""
    ckpt = paths["checkpoint"]
    before = records_through(ckpt, batch - 1, expected)
    what = f"after recovering from the kill at {previous}" if previous else "before any kill"
    # rows of the batch killed now are check_point's; these must all be there, once
    assert_once([r for r in table_rows(postgres, table) if r in set(before)], before, what)
    left = sorted(g for g, b in ours(postgres, ckpt).items() if b < batch)
    assert not left, f"{what}: prepared transactions of recovered batches left behind: {left}"


def check_point(postgres, paths, table, expected, point: str, batch: int) -> None:
    """What the server, the transaction log and Spark's commit log must hold right after the
    kill at `point` of `batch`, before recovery touches anything."""
    ckpt = paths["checkpoint"]
    state = TransactionLog(ckpt).state(batch)
    prepared = [g for g, b in ours(postgres, ckpt).items() if b == batch]
    rows = table_rows(postgres, table)
    before = records_through(ckpt, batch - 1, expected)  # committed by earlier batches
    through = records_through(ckpt, batch, expected)  # ... and by the killed one
    where = f"kill at {point} of batch {batch}"
    assert len(set(rows)) == len(rows), f"{where}: a record is in the table twice"
    assert set(before) <= set(rows) <= set(through), where
    assert not os.path.exists(os.path.join(ckpt, "commits", str(batch))), where
    if point == "task_write":  # killed inside a task: nothing of the batch decided or visible
        assert not state.decisions and rows == before, where
    elif point == "after_precommit":  # every task prepared; nothing decided or visible
        assert len(state.prepared) == PARTITIONS and not state.decisions, (where, state)
        assert len(prepared) == PARTITIONS and rows == before, (where, prepared)
    elif point == "after_decision":  # decided, nothing committed
        assert len(state.decided()) == PARTITIONS and not state.committed, (where, state)
        assert len(prepared) == PARTITIONS and rows == before, (where, prepared)
    elif point == "after_store_commit":  # partition 0 committed in the store, no marker yet
        assert not state.committed and len(state.decided()) == PARTITIONS, (where, state)
        assert len(prepared) == PARTITIONS - 1, (where, prepared)
        assert before != rows != through, where
    elif point == "after_some_commits":  # one partition committed, the others still prepared
        assert len(state.committed) == 1, (where, state)
        assert len(prepared) == PARTITIONS - 1, (where, prepared)
        assert before != rows != through, where
    elif point == "after_commit":  # all in; only Spark's own commit log is missing
        assert len(state.committed) == PARTITIONS and state.done, (where, state)
        assert prepared == [] and rows == through, (where, prepared)
    else:
        raise AssertionError(f"no check for {point}")


def verify(postgres, paths, expected, table) -> None:
    """The end state after the last recovery."""
    want = sorted((r.partition, r.offset, r.key.decode(), r.value.decode()) for r in expected)
    assert_once(table_rows(postgres, table), want, "at the end")
    assert ours(postgres, paths["checkpoint"]) == {}, "prepared transactions left behind"
    assert prepared_transactions(postgres) == []
    txlog = TransactionLog(paths["checkpoint"])
    assert txlog.pending() == [], f"batches left pending in the transaction log: {txlog.pending()}"
    assert postgres.password not in log_tail(paths["log"], 10**8), "the password leaked into the log"


# -- the matrix -----------------------------------------------------------------------------


#: Runs (run k is killed at ROWS[k]) whose Python workers start without Spark's daemon
#: (spark.python.use.daemon=false: `python -m ...`, which once hid from recovery the writer
#: built for a batch's tasks): none here, every run keeps the daemon. The role check a no-daemon
#: run guards is the shared template's (sinks/two_phase_commit.py: recovery runs when Spark
#: pickles the tasks' writer, however its workers start), run without the daemon by the Kafka
#: 4.x and Delta append matrices; here a no-daemon run would cost some 40 s of the suite's
#: 40-minute budget for the same code.
NO_DAEMON_RUNS: tuple[int, ...] = ()


def test_crash_matrix_row_by_row(postgres, pipeline):
    """Each row's kill, checked where it stopped and after the next run recovered it; the runs
    in NO_DAEMON_RUNS (none: see there) start their workers with spark.python.use.daemon=false."""
    args, paths, expected, table, env = pipeline
    args = [*args, "--max-per-trigger", str(PER_TRIGGER)]
    previous = None
    for batch, (point, _meaning) in enumerate(ROWS):
        proc = start_pipeline(PIPELINE, *args, *workers_args(batch, NO_DAEMON_RUNS),
                              log_path=paths["log"], env={**env, ENV: f"{point}@{batch}"})
        rc = wait_exit(proc, paths["log"])
        assert rc == -signal.SIGKILL, f"the fault at {point} should have killed the run:\n{log_tail(paths['log'])}"
        check_recovered(postgres, paths, table, expected, batch, previous)
        check_point(postgres, paths, table, expected, point, batch)
        if point == LOST_AFTER:  # an administrator rolls back one decided transaction
            (lost,) = [g for g, b in ours(postgres, paths["checkpoint"]).items()
                       if b == batch and g.endswith("-0-0")]  # partition 0, attempt 0
            query(postgres, f"ROLLBACK PREPARED '{lost}'")
        previous = point
    # The last run recovers the last row and runs to the end; a task of its first new batch
    # fails once, and Spark's retry (attempt 1: a gid of its own) writes the partition.
    run_pipeline(PIPELINE, *args, *workers_args(len(ROWS), NO_DAEMON_RUNS), log_path=paths["log"],
                 env={**env, ENV: f"task_fail@{len(ROWS)}/0"})
    log = log_tail(paths["log"], 10**8)
    assert log.count(WORKERS_LINE.format("no-daemon")) == len(NO_DAEMON_RUNS)
    assert log.count(WORKERS_LINE.format("daemon")) == len(ROWS) + 1 - len(NO_DAEMON_RUNS)
    assert f"injected task failure at batch {len(ROWS)} partition 0" in log
    assert "were lost before their commit" in log  # the rolled-back transaction, detected
    check_recovered(postgres, paths, table, expected, len(ROWS), previous)
    verify(postgres, paths, expected, table)


def test_postgres_frozen_longer_than_connect_timeout(postgres, pipeline):
    """The whole server SIGSTOPped for longer than the connect timeout, mid-stream, then
    resumed: the query rides it out (task retries, commit retries) or fails loudly, and a
    restart finishes the job; either way each record once."""
    args, paths, expected, table, _ = pipeline
    env = {"EOS_PG_URL": postgres.url(connect_timeout="2")}
    args = [*args, "--max-per-trigger", "10"]  # 9 batches: the freeze lands among them
    proc = start_pipeline(PIPELINE, *args, log_path=paths["log"], env=env)
    try:
        wait_for(lambda: len(table_rows(postgres, table)) > 0, 180, "the first committed batch")
        postgres.freeze()
        try:
            assert proc.poll() is None, "the pipeline ended before the freeze"
            time.sleep(6)  # three connect timeouts
        finally:
            postgres.resume()
        rc = wait_exit(proc, paths["log"])
    finally:
        kill_group(proc)
    if rc != 0:
        run_pipeline(PIPELINE, *args, log_path=paths["log"], env=env)
    verify(postgres, paths, expected, table)
