"""The crash matrix for Kafka -> `kafka-eos` source -> `kafka-eos` sink
(docs/design.md#crash-matrix),
checked record by record with the marker-applying oracle (connectors/local/kafka_oracle.py):
every input record exactly once among the committed output records, and no transaction left
open. SIGKILLs at random moments of a pipeline writing to `kafka-eos` (and `delta-eos`) are the
demo's chaos test (integration_tests/demo/test_demo.py), verified record by record the same way.
Plus: two queries with different prefixes on one topic. A zombie writer holding an open
transaction under a live query's id is fenced in integration_tests/kafka_sink/test_kafka_sink_reset.py (a
pipeline) and test_kafka_sink_commit.py (a task attempt, on both cluster generations).
"""

from __future__ import annotations

import collections
import os
import time

import pytest
from confluent_kafka import Producer

from integration_tests.support.kafka_data import create_topic, produce, unique_topic
from connectors.local.kafka_oracle import committed, read_partition
from integration_tests.support.processes import (
    WORKERS_LINE,
    kill_group,
    log_tail,
    run_kill_sequence,
    run_pipeline,
    start_pipeline,
    wait_exit,
)
from integration_tests.support.streaming import run_to_end, wait_for
from sinks.faults import ENV

PIPELINE = "integration_tests.support.pipelines.eos_pipeline"
#: 330 records at 50 per trigger: batches 0-6, so that the last run of the kill sequence has a
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
    return _pipeline(bootstrap, tmp_path)


def _pipeline(bootstrap, tmp_path):
    topic, out = unique_topic("kin"), unique_topic("kout")
    create_topic(bootstrap, topic, PARTITIONS)
    create_topic(bootstrap, out, PARTITIONS)
    expected = produce(bootstrap, topic, PARTITIONS, PER_PARTITION)
    paths = {"checkpoint": str(tmp_path / "ckpt"), "log": str(tmp_path / "pipeline.log")}
    args = ["--bootstrap", bootstrap, "--topic", topic, "--checkpoint", paths["checkpoint"],
            "--out-topic", out, *PACKED]
    return args, paths, expected, out


def assert_exactly_once_in_topic(bootstrap: str, out: str, expected) -> None:
    got = collections.Counter((r.key, r.value) for r in committed(bootstrap, out))
    want = collections.Counter((r.key, r.value) for r in expected)
    dupes = {k: n for k, n in got.items() if n > 1}
    assert not dupes, f"{len(dupes)} records committed more than once, e.g. {list(dupes)[:3]}"
    missing = sorted(set(want) - set(got))
    assert not missing, f"{len(missing)} records missing, e.g. {missing[:3]}"
    assert got == want
    for p in range(PARTITIONS):
        assert read_partition(bootstrap, out, p).open == [], f"open transaction left in {out}-{p}"


def _verify(bootstrap, paths, expected, out):
    assert_exactly_once_in_topic(bootstrap, out, expected)
    log_dir = os.path.join(paths["checkpoint"], "eos-sink")
    pending = [b for b in os.listdir(log_dir) if not os.path.exists(os.path.join(log_dir, b, "done"))]
    assert not pending, f"batches left pending in the transaction log: {pending}"


#: Batch k is killed at KILL_POINTS[k]; the run after each kill recovers it.
KILL_POINTS = [
    "task_write", "after_precommit", "after_decision", "after_store_commit", "after_some_commits",
    "after_commit",
]


#: Runs (0-based: run k is killed at KILL_POINTS[k]) whose Python workers start without Spark's
#: daemon (spark.python.use.daemon=false, workers started as `python -m ...`): one run, the
#: one that recovers after_decision (on 4.x: a decided batch lost behind the sink's back), the
#: recovery the old stack-walking role check never ran there. One such run per matrix: its batches cost
#: some 20 s each (a fresh Python per task), and the other recoveries' code is the same in
#: either mode. The other runs keep the daemon.
NO_DAEMON_RUNS = (3,)

#: On the second generation (Apache Kafka 3.9) the points whose recovery talks to the
#: transaction coordinator: fencing the undecided (InitProducerId), committing the decided
#: (EndTxn), finishing a half-committed batch (a repeated EndTxn answers NONE). The others (a
#: task's own writes, the log's markers after the commits) ask nothing of the coordinator that
#: differs between generations, and run on 4.x. Every run keeps the daemon: how workers start
#: does not depend on the cluster's generation. The role check a no-daemon run guards is the
#: shared template's (sinks/two_phase_commit.py: recovery runs when Spark pickles the tasks'
#: writer, however its workers start), run without the daemon by the Kafka 4.x and Delta append
#: matrices; here a no-daemon run would cost some 40 s of the suite's 40-minute budget for the
#: same code.
KILL_POINTS_V3 = ["after_precommit", "after_decision", "after_some_commits"]
NO_DAEMON_RUNS_V3: tuple[int, ...] = ()


def test_kill_at_every_protocol_point_then_restart(any_broker, tmp_path):
    """One kill point per batch, in one killed-and-restarted sequence, with the run that
    recovers after_decision started with spark.python.use.daemon=false on 4.x (NO_DAEMON_RUNS:
    there the old stack-walking role check never recovered, and a crash after a partition's
    EndTxn and before its committed marker duplicated that partition). On both cluster
    generations: Apache Kafka 4.x (transaction.version 2, every point) and 3.9 (the points
    whose recovery talks to the coordinator, KILL_POINTS_V3). The last run, which goes to the
    end, fails a task of its first new batch: Spark's retry of it must not duplicate either.

    On 4.x the batch killed after_decision is also lost behind the sink's back before its
    recovery: another producer initialises each of its transactional ids, which aborts its
    prepared transactions (what transaction.timeout.ms does, without waiting for it). The
    recovery must detect that, log it, and write the partitions again; the decided batches
    killed after_store_commit and after_some_commits keep the path that commits them."""
    bootstrap = any_broker.bootstrap_servers
    args, paths, expected, out = _pipeline(bootstrap, tmp_path)
    v3 = any_broker.node is not None and any_broker.node.generation.major == 3
    points, no_daemon = (KILL_POINTS_V3, NO_DAEMON_RUNS_V3) if v3 else (KILL_POINTS,
                                                                       NO_DAEMON_RUNS)
    prefix = unique_topic("lost")
    args = [*args, "--transactional-id-prefix", prefix]

    def nothing_twice(point: str, batch: int) -> None:
        got = collections.Counter((r.key, r.value) for r in committed(bootstrap, out))
        assert not [k for k, n in got.items() if n > 1], f"a record twice after {point}@{batch}"
        if point == "after_decision" and not v3:
            for p in range(PARTITIONS):  # abort the decided batch's transactions
                tid = f"{prefix}-{p}-0"  # <prefix>-<partition>-<attempt>
                Producer({"bootstrap.servers": bootstrap,
                          "transactional.id": tid}).init_transactions(30)

    # The last run also fails a task of its first new batch, which Spark retries.
    retried = len(points)
    run_kill_sequence(PIPELINE, *args, log_path=paths["log"], points=points,
                      first_batch=0, after_each_kill=nothing_twice,
                      no_daemon_runs=no_daemon, last_run_env={ENV: f"task_fail@{retried}/0"})
    log = log_tail(paths["log"], 10**8)
    assert f"injected task failure at batch {retried} partition 0" in log
    assert log.count(WORKERS_LINE.format("no-daemon")) == len(no_daemon)
    assert log.count(WORKERS_LINE.format("daemon")) == len(points) + 1 - len(no_daemon)
    assert "without having recovered" not in log
    assert PACKED_LINE in log, "the batches were not read by packed tasks"
    lost = f"batch {points.index('after_decision')}: partition(s) "
    assert (lost in log and "were lost before their commit" in log) != v3, log[-4000:]
    _verify(bootstrap, paths, expected, out)


def test_broker_frozen_longer_than_poll_timeout(bootstrap, freezable_broker, pipeline):
    args, paths, expected, out = pipeline
    args = [*args, "--poll-timeout-ms", "3000", "--max-per-trigger", "20"]
    proc = start_pipeline(PIPELINE, *args, log_path=paths["log"])
    try:
        wait_for(lambda: len(committed(bootstrap, out)) > 0, 180, "the first committed batch")
        freezable_broker.freeze()
        try:
            time.sleep(10)
        finally:
            freezable_broker.resume()
        rc = wait_exit(proc, paths["log"])
    finally:
        kill_group(proc)
    if rc != 0:
        run_pipeline(PIPELINE, *args, log_path=paths["log"])
    _verify(bootstrap, paths, expected, out)


def test_two_queries_with_different_prefixes_share_a_topic(spark, bootstrap, tmp_path):
    out = unique_topic("shared")
    create_topic(bootstrap, out, 2)
    expected, queries = [], []
    for name in ("a", "b"):
        topic = unique_topic(f"src{name}")
        create_topic(bootstrap, topic, 2)
        expected += produce(bootstrap, topic, 2, 60)
        queries.append(
            spark.readStream.format("kafka-eos")
            .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
            .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "30").load()
            .select("key", "value")
            .writeStream.format("kafka-eos")
            .option("kafka.bootstrap.servers", bootstrap).option("topic", out)
            .option("checkpointLocation", str(tmp_path / f"ckpt-{name}"))
            .trigger(availableNow=True).start()
        )
    for q in queries:
        run_to_end(q, 300)
    got = collections.Counter((r.key, r.value) for r in committed(bootstrap, out))
    assert got == collections.Counter((r.key, r.value) for r in expected)
