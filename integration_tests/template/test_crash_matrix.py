"""The crash matrix (docs/design.md#crash-matrix) of every sink, in one killed-and-restarted
sequence: Kafka -> `kafka-eos` -> `kafka-eos` on Apache Kafka 4.x and on 3.9, `delta-eos`
append, `delta-eos` upsert and `postgres-eos`, each a query of one pipeline process
(integration_tests/support/crash_matrix.py has the lanes and their checks).

Run k of the pipeline is SIGKILLed, its whole process group with the driver JVM, once every
lane is parked at its point of batch k (sinks/faults.py's rendezvous): task_write,
after_precommit, after_decision, after_store_commit, after_some_commits (Delta, which commits a
batch at once, parks after its store commit again), after_commit. Run k+1 recovers every lane
from its own checkpoint. After each kill each lane checks what its point must have left; after
the last run, which goes to the end of the input and fails a task of its first new batch
(Spark retries it), each checks that every input record is in its output exactly once, with
nothing left open, prepared or pending. The run that recovers after_decision starts its Python
workers without Spark's daemon.

One Spark start per row for every sink, instead of one per row and sink: the five matrices
cost 7 pipeline runs instead of 30.
"""

from __future__ import annotations

import signal

import pytest

from integration_tests.support.crash_matrix import (
    NO_DAEMON_RUNS,
    PACKED_LINE,
    PIPELINE,
    POINTS,
    TASK_FAIL_BATCH,
    DeltaLane,
    KafkaLane,
    PostgresLane,
    UpsertLane,
)
from integration_tests.support.processes import (
    WORKERS_LINE,
    log_tail,
    run_pipeline,
    start_pipeline,
    wait_exit,
    workers_args,
)
from sinks.faults import ENV, RENDEZVOUS_ENV

#: Enough task slots for every lane's tasks to park at task_write at once (5 lanes, up to 3
#: tasks each), 4 attempts per task (a failed task is retried).
MASTER = "local[16,4]"
#: A Python worker started without Spark's daemon keeps the 15 s authentication timeout on its
#: socket for good (pyspark.worker_util.get_sock_file_to_executor): a writer whose input stalls
#: 15 s dies with "TimeoutError: timed out". Five queries starting fresh Pythons for every task
#: on two loaded cores stalled that long (run 2 of 2026-11-28, docs/testing.md); the timeout
#: is a start-up guard, not what the matrix tests.
SOCKET_TIMEOUT = "180s"


@pytest.mark.timeout(1800)  # 7 pipeline runs of five queries: some 6 minutes on a quiet host
def test_every_sink_killed_at_every_protocol_point_then_restarted(broker, broker_v3, postgres,
                                                                  tmp_path):
    log = str(tmp_path / "pipeline.log")
    lanes = [
        KafkaLane("ck-kafka4", tmp_path, broker),
        KafkaLane("ck-kafka39", tmp_path, broker_v3),
        DeltaLane("ck-delta", tmp_path, broker.bootstrap_servers),
        UpsertLane("ck-upsert", tmp_path, broker.bootstrap_servers),
        PostgresLane("ck-pg", tmp_path, broker.bootstrap_servers, postgres, log),
    ]
    args = ["--master", MASTER,
            "--spark-conf", f"spark.python.authenticate.socketTimeout={SOCKET_TIMEOUT}"]
    for i, lane in enumerate(lanes):
        args += [*([] if i == 0 else ["--also"]), *lane.query_args()]
    env = {"EOS_PG_URL": postgres.url()}

    for batch in range(len(POINTS)):
        meeting = tmp_path / f"rendezvous-{batch}"
        meeting.mkdir()
        spec = ",".join(f"{lane.name}:{lane.point(batch)}@{batch}" for lane in lanes)
        # the application's options (--no-daemon) before the first query's
        proc = start_pipeline(PIPELINE, *workers_args(batch, NO_DAEMON_RUNS), *args,
                              log_path=log, env={**env, ENV: spec,
                                                 RENDEZVOUS_ENV: f"{meeting}:{len(lanes)}"})
        rc = wait_exit(proc, log)
        assert rc == -signal.SIGKILL, f"run {batch} should have been killed:\n{log_tail(log)}"
        parked = sorted(p.read_text().strip() for p in meeting.iterdir())
        assert parked == sorted(f"{lane.name} {lane.point(batch)}" for lane in lanes), (
            f"{parked}\n{log_tail(log)}")
        for lane in lanes:
            lane.after_kill(lane.point(batch), batch)

    # The last run recovers the last row and runs to the end; a task of its first new batch
    # fails once in every lane, and Spark's retry (attempt 1) writes the partition.
    run_pipeline(PIPELINE, *workers_args(len(POINTS), NO_DAEMON_RUNS), *args, log_path=log,
                 env={**env, ENV: f"task_fail@{TASK_FAIL_BATCH}/0"})
    text = log_tail(log, 10**9)
    assert "fault rendezvous timed out" not in text
    assert text.count(WORKERS_LINE.format("no-daemon")) == len(NO_DAEMON_RUNS)
    assert text.count(WORKERS_LINE.format("daemon")) == len(POINTS) + 1 - len(NO_DAEMON_RUNS)
    assert "without having recovered" not in text
    assert PACKED_LINE in text, "the batches were not read by packed tasks"
    for lane in lanes:
        assert (f"injected task failure at batch {TASK_FAIL_BATCH} partition 0 ({lane.name})"
                in text), f"{lane.name}: no task failure injected"
        lane.verify(text)
