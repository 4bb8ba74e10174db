"""Kafka -> `kafka-eos` source -> `kafka-eos` sink through a broker frozen longer than the
source's poll timeout, checked record by record with the marker-applying oracle
(connectors/local/kafka_oracle.py): every input record exactly once among the committed output
records, and no transaction left open. The kills at every protocol point, on both cluster
generations, are the shared crash matrix's (integration_tests/template/test_crash_matrix.py).
SIGKILLs at random moments of a pipeline writing to `kafka-eos` (and `delta-eos`) are the
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

from connectors.local.kafka_oracle import committed
from integration_tests.support.kafka_data import create_topic, produce, unique_topic
from integration_tests.support.crash_matrix import PACKED, assert_exactly_once_in_topic
from integration_tests.support.processes import kill_group, run_pipeline, start_pipeline, wait_exit
from integration_tests.support.streaming import run_to_end, wait_for

PIPELINE = "integration_tests.support.pipelines.eos_pipeline"
PARTITIONS, PER_PARTITION = 3, 110


@pytest.fixture
def pipeline(bootstrap, tmp_path):
    topic, out = unique_topic("kin"), unique_topic("kout")
    create_topic(bootstrap, topic, PARTITIONS)
    create_topic(bootstrap, out, PARTITIONS)
    expected = produce(bootstrap, topic, PARTITIONS, PER_PARTITION)
    paths = {"checkpoint": str(tmp_path / "ckpt"), "log": str(tmp_path / "pipeline.log")}
    args = ["--bootstrap", bootstrap, "--topic", topic, "--checkpoint", paths["checkpoint"],
            "--out-topic", out, *PACKED]
    return args, paths, expected, out


def _verify(bootstrap, paths, expected, out):
    assert_exactly_once_in_topic(bootstrap, out, expected)
    log_dir = os.path.join(paths["checkpoint"], "eos-sink")
    pending = [b for b in os.listdir(log_dir) if not os.path.exists(os.path.join(log_dir, b, "done"))]
    assert not pending, f"batches left pending in the transaction log: {pending}"


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
