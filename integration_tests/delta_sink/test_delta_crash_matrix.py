"""Kafka -> `kafka-eos` -> `delta-eos` killed after a decision whose files a VACUUM then
removed, on two executor JVMs. The kills at every protocol point, append and upsert, are the
shared crash matrix's (integration_tests/template/test_crash_matrix.py). SIGKILLs at random
moments of a pipeline writing to `delta-eos` (and `kafka-eos`) are the demo's chaos test
(integration_tests/demo/test_demo.py), verified record by record the same way.
"""

from __future__ import annotations

import signal

import pytest
from deltalake import DeltaTable

from integration_tests.support.crash_matrix import PACKED, verify_delta_append
from integration_tests.support.kafka_data import create_topic, produce, unique_topic
from integration_tests.support.processes import log_tail, run_pipeline, start_pipeline, wait_exit
from sinks.faults import ENV

PIPELINE = "integration_tests.support.pipelines.eos_pipeline"
PARTITIONS, PER_PARTITION = 3, 110


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
    verify_delta_append(paths["table"], paths["checkpoint"], expected)
