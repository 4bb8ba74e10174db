"""The crash matrix for Kafka -> `kafka-eos` -> `delta-eos` (docs/design.md#crash-matrix).

Each case kills the whole pipeline (SIGKILL of its process group, driver JVM included) at one
point of the commit protocol, restarts it on the same checkpoint and runs it to the end of the
input; then every input record must be in the table exactly once, checked by source partition
and offset (and key and value), and the table's `txn` version for the sink's app id must equal
Spark's last committed batch id.

SIGKILLs at random moments of a pipeline writing to `delta-eos` (and `kafka-eos`) are the demo's
chaos test (integration_tests/demo/test_demo.py), verified record by record the same way. A broker
frozen longer than the source's poll timeout is the Kafka crash matrix's test: the outage meets
the source, which is the same whatever the sink.
"""

from __future__ import annotations

import os
import signal

import polars as pl
import pytest
from deltalake import DeltaTable

from integration_tests.support.delta_oracle import (
    assert_exactly_once,
    last_spark_batch,
    orphan_files,
    table_records,
    txn_versions,
)
from integration_tests.support.kafka_data import create_topic, produce, unique_topic
from integration_tests.support.processes import (
    WORKERS_LINE,
    run_kill_sequence,
    log_tail,
    run_pipeline,
    start_pipeline,
    wait_exit,
)
from sinks.faults import ENV

PIPELINE = "integration_tests.support.pipelines.eos_pipeline"
#: 330 records; 50 per trigger: batches 0-6, so that the last run of the kill sequence has a
#: batch of its own to run (and fail a task of) after the last killed one.
PARTITIONS, PER_PARTITION = 3, 110
#: Packed tasks (docs/source.md#tasks-sized-by-data-not-by-partitions): each batch's 3 ranges
#: are read by 2 Spark tasks, one of them reading 2 partitions, so every kill point is
#: recovered with a Spark partition that carries several input partitions (the sink decides per
#: (batch, Spark partition): a replay must put the same ranges in the same Spark partition).
PACKED = ["--source-option", "targetTasksPerBatch=2"]
#: What the source's batch metrics line (in the pipeline's log) says of such a batch.
PACKED_LINE = '"tasks": 2'


@pytest.fixture
def pipeline(bootstrap, tmp_path):
    topic = unique_topic("delta")
    create_topic(bootstrap, topic, PARTITIONS)
    expected = produce(bootstrap, topic, PARTITIONS, PER_PARTITION)
    paths = {
        "checkpoint": str(tmp_path / "ckpt"),
        "table": str(tmp_path / "table"),
        "log": str(tmp_path / "pipeline.log"),
    }
    args = [
        "--bootstrap", bootstrap, "--topic", topic,
        "--checkpoint", paths["checkpoint"], "--table", paths["table"],
        # Files of killed tasks are removed at the next start, not an hour later.
        "--sink-option", "orphanFileRetention=0s",
        *PACKED,
    ]
    return args, paths, expected


def _verify(paths, expected) -> None:
    assert_exactly_once(paths["table"], expected)
    versions = txn_versions(paths["table"])
    assert len(versions) == 1, f"one app id expected in the table's txn actions: {versions}"
    (version,) = versions.values()
    assert version == last_spark_batch(paths["checkpoint"])
    assert pl.read_delta(paths["table"]).height == len(expected)  # another reader agrees
    assert orphan_files(paths["table"]) == [], "files of aborted attempts were left behind"
    leftover = [b for b in os.listdir(os.path.join(paths["checkpoint"], "eos-sink")) if b.isdigit()]
    assert all(
        os.path.exists(os.path.join(paths["checkpoint"], "eos-sink", b, "done")) for b in leftover
    ), f"batches left pending in the transaction log: {leftover}"


#: Batch k is killed at KILL_POINTS[k - 1]; the run after each kill recovers it.
KILL_POINTS = ["task_write", "after_precommit", "after_decision", "after_store_commit", "after_commit"]


#: Runs (0-based: run k is killed at KILL_POINTS[k]) whose Python workers start without Spark's
#: daemon (spark.python.use.daemon=false, workers started as `python -m ...`): one run, the
#: one that recovers after_decision (commit the decided), the recovery the old stack-walking
#: role check never ran there. One such run per matrix: its batches cost some 20 s each (a
#: fresh Python per task), and the other recoveries' code is the same in either mode. The
#: other runs keep the daemon.
NO_DAEMON_RUNS = (3,)


def test_kill_at_every_protocol_point_then_restart(pipeline):
    """One kill point per batch, in one killed-and-restarted sequence, with the run that
    recovers after_decision started with spark.python.use.daemon=false (NO_DAEMON_RUNS).
    The last run, which goes to the end, fails a task of its first new batch: Spark's retry
    must leave neither a duplicate nor an orphan file."""
    args, paths, expected = pipeline

    def nothing_twice(point: str, batch: int) -> None:
        rows = _safe_records(paths["table"])
        assert len({(p, o) for p, o, _, _ in rows}) == len(rows), f"a record twice after {point}@{batch}"

    # The last run also fails a task of its first new batch, which Spark retries.
    retried = 1 + len(KILL_POINTS)
    run_kill_sequence(PIPELINE, *args, log_path=paths["log"], points=KILL_POINTS,
                      after_each_kill=nothing_twice, no_daemon_runs=NO_DAEMON_RUNS,
                      last_run_env={ENV: f"task_fail@{retried}/0"})
    log = log_tail(paths["log"], 10**8)
    assert f"injected task failure at batch {retried} partition 0" in log
    assert "without having recovered" not in log
    assert PACKED_LINE in log, "the batches were not read by packed tasks"
    assert log.count(WORKERS_LINE.format("no-daemon")) == len(NO_DAEMON_RUNS)
    assert log.count(WORKERS_LINE.format("daemon")) == len(KILL_POINTS) + 1 - len(NO_DAEMON_RUNS)
    _verify(paths, expected)


def test_decided_batch_whose_files_were_vacuumed_is_written_again_by_separate_executors(pipeline):
    """The query stays down after a decision; a VACUUM removes the batch's files (nothing
    references them yet). Recovery must not commit add actions for missing files (the replay
    would then skip the batch): the batch is lost, and the replay writes it again. Both runs
    use two executor JVMs (local-cluster): nothing may depend on state local to the driver's
    process."""
    args, paths, expected = pipeline
    args = [*args, "--master", "local-cluster[2,1,1024]"]
    proc = start_pipeline(PIPELINE, *args, log_path=paths["log"], env={ENV: "after_decision@2"})
    assert wait_exit(proc, paths["log"]) == -signal.SIGKILL, log_tail(paths["log"])
    removed = DeltaTable(paths["table"]).vacuum(
        retention_hours=0, enforce_retention_duration=False, dry_run=False, full=True
    )
    assert any("-b2-" in f for f in removed), f"the VACUUM should remove batch 2's files: {removed}"
    run_pipeline(PIPELINE, *args, log_path=paths["log"])
    assert "data file(s) of decided batch 2 are gone" in log_tail(paths["log"], 10**7)
    _verify(paths, expected)


def _safe_records(path):
    try:
        return table_records(path)
    except Exception:  # no table yet
        return []
