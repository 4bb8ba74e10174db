"""Kafka -> `kafka-eos` -> `postgres-eos` with the whole PostgreSQL server frozen for longer
than the connect timeout, mid-stream: each record once in the end. The kills at every protocol
point, row by row against the server's `pg_prepared_xacts`, the transaction log and the table,
are the shared crash matrix's (integration_tests/template/test_crash_matrix.py, its
`PostgresLane`).
"""

from __future__ import annotations

import time

import pytest

from integration_tests.support.crash_matrix import pg_table_rows, verify_postgres
from integration_tests.support.kafka_data import create_topic, produce, unique_topic
from integration_tests.support.processes import kill_group, run_pipeline, start_pipeline, wait_exit
from integration_tests.support.streaming import wait_for

PIPELINE = "integration_tests.support.pipelines.eos_pipeline"
PARTITIONS, PER_PARTITION = 3, 35


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


def test_postgres_frozen_longer_than_connect_timeout(postgres, pipeline):
    """The whole server SIGSTOPped for longer than the connect timeout, mid-stream, then
    resumed: the query rides it out (task retries, commit retries) or fails loudly, and a
    restart finishes the job; either way each record once."""
    args, paths, expected, table, _ = pipeline
    env = {"EOS_PG_URL": postgres.url(connect_timeout="2")}
    args = [*args, "--max-per-trigger", "10"]  # 9 batches: the freeze lands among them
    proc = start_pipeline(PIPELINE, *args, log_path=paths["log"], env=env)
    try:
        wait_for(lambda: len(pg_table_rows(postgres, table)) > 0, 180, "the first committed batch")
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
    verify_postgres(postgres, paths["checkpoint"], paths["log"], expected, table)
