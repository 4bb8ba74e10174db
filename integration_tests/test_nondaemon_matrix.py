"""The crash matrices of `delta-eos` and `kafka-eos` once more with
`spark.python.use.daemon=false` (issue 11, item 5): Spark then starts each Python worker as
`python -m ...`, and the stack-walking role check that decided when to recover took the
writer built for a batch's tasks for "other", so recovery never ran. Recovery now runs when
Spark pickles the writer for tasks, whatever starts the workers.

One killed-and-restarted sequence per sink (one kill point per batch, the store-commit point
included) rather than a pipeline pair per point: the same rows at a third of the Spark starts.
The postgres-eos matrix runs both ways in test_postgres_crash_matrix.py.
"""

from __future__ import annotations

import os
import signal

from integration_tests.kafka_data import create_topic, produce, unique_topic
from integration_tests.processes import log_tail, run_pipeline, start_pipeline, wait_exit
from integration_tests.test_delta_crash_matrix import _verify as verify_delta
from integration_tests.test_kafka_crash_matrix import _verify as verify_kafka
from sinks.faults import ENV

PIPELINE = "integration_tests.pipelines.eos_pipeline"
PARTITIONS, PER_PARTITION = 3, 100  # 50 records a batch: batches 0..5

#: Batch k is killed at SEQUENCE[k - 1]; the last run goes to the end.
DELTA_SEQUENCE = ["task_write", "after_precommit", "after_decision", "after_store_commit", "after_commit"]
KAFKA_SEQUENCE = ["task_write", "after_decision", "after_store_commit", "after_some_commits", "after_commit"]


def _run_sequence(args: list[str], paths: dict, sequence: list[str]) -> None:
    for batch, point in enumerate(sequence, start=1):
        proc = start_pipeline(PIPELINE, *args, log_path=paths["log"], env={ENV: f"{point}@{batch}"})
        rc = wait_exit(proc, paths["log"])
        assert rc == -signal.SIGKILL, f"the fault at {point}@{batch} should have killed the run:\n{log_tail(paths['log'])}"
    run_pipeline(PIPELINE, *args, log_path=paths["log"])
    # The writer reached tasks through recovery (a task refuses one that did not).
    assert "without having recovered" not in log_tail(paths["log"], 10**8)


def test_delta_sequence_without_the_worker_daemon(bootstrap, tmp_path):
    topic = unique_topic("nd-delta")
    create_topic(bootstrap, topic, PARTITIONS)
    expected = produce(bootstrap, topic, PARTITIONS, PER_PARTITION)
    paths = {k: str(tmp_path / k) for k in ("checkpoint", "table")}
    paths["log"] = str(tmp_path / "pipeline.log")
    args = ["--bootstrap", bootstrap, "--topic", topic, "--checkpoint", paths["checkpoint"],
            "--table", paths["table"], "--sink-option", "orphanFileRetention=0s", "--no-daemon"]
    _run_sequence(args, paths, DELTA_SEQUENCE)
    verify_delta(paths, expected)


def test_kafka_sequence_without_the_worker_daemon(bootstrap, tmp_path):
    topic, out = unique_topic("nd-kin"), unique_topic("nd-kout")
    create_topic(bootstrap, topic, PARTITIONS)
    create_topic(bootstrap, out, PARTITIONS)
    expected = produce(bootstrap, topic, PARTITIONS, PER_PARTITION)
    paths = {"checkpoint": str(tmp_path / "ckpt"), "log": str(tmp_path / "pipeline.log")}
    args = ["--bootstrap", bootstrap, "--topic", topic, "--checkpoint", paths["checkpoint"],
            "--out-topic", out, "--no-daemon"]
    _run_sequence(args, paths, KAFKA_SEQUENCE)
    verify_kafka(bootstrap, paths, expected, out)
    assert os.path.isdir(os.path.join(paths["checkpoint"], "eos-sink"))
