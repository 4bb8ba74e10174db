"""A Spark Connect client, the way Databricks shared and serverless clusters
run: the client holds no SparkContext and no JVM; it sends plans over gRPC, and the server runs
them, its own Python workers running this package's formats. A Connect session reads
`kafka-eos` and writes `delta-eos` and `kafka-eos` (availableNow, two micro-batches, one task
of each stream failing once after writing and retried), and the outputs hold every input record
exactly once (docs/spark-connect.md).

The session runs in a subprocess (`python -m integration_tests.demo.test_spark_connect SPEC RESULT`):
a process that already holds a classic SparkContext (a suite worker that ran another test)
would be handed that classic session by `SparkSession.builder.remote(...)`. In the subprocess a
local Spark driver starts with Spark's Connect plugin on a free port, which is what
`SparkSession.builder.remote("local[2]")` does, but there always on port 15002 (shared by every
process of the machine), and the client is `pyspark.sql.connect`'s `SparkSession` at
`sc://127.0.0.1:<port>`. The formats are found by PySpark's static lookup of the `pyspark_*`
modules on the server (the driver is started with `register=False`); `connectors.register()`
over Connect is exercised too.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from connectors.local.kafka_oracle import committed
from integration_tests.support.kafka_data import create_topic, produce, unique_topic
from integration_tests.support.processes import run_session
from sinks.faults import ENV as FAULTS_ENV
from sources.batch_metrics import SOURCE_METRICS_ENV
from sources.consumer_pool import STATS_ENV

PARTITIONS = 2
PER_PARTITION = 20
MAX_OFFSETS_PER_TRIGGER = 20  # 40 records: two micro-batches per stream
SESSION_TIMEOUT_S = 240


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def connect_session(spec: dict) -> dict:
    """In the subprocess: a driver with the Connect server, a Connect client, two streams."""
    from connectors.local.spark import local_spark

    started = time.monotonic()
    server = local_spark("kafka-eos-connect-server", master="local[2,4]", register=False, conf={
        "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(spec["port"]),
    })
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    spark = ConnectSession.builder.remote(f"sc://127.0.0.1:{spec['port']}").getOrCreate()
    out: dict = {"client_class": f"{type(spark).__module__}.{type(spark).__name__}",
                 "session_start_s": round(time.monotonic() - started, 1)}
    try:
        spark.sparkContext  # noqa: B018 (what a product call on the driver would hit)
        out["client_has_spark_context"] = True
    except Exception as e:  # PySparkNotImplementedError under Connect
        out["client_has_spark_context"] = False
        out["spark_context_error"] = type(e).__name__
    work = Path(spec["workdir"])

    def source():
        return (spark.readStream.format("kafka-eos")
                .option("kafka.bootstrap.servers", spec["bootstrap"])
                .option("subscribe", spec["in_topic"])
                .option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", str(MAX_OFFSETS_PER_TRIGGER))
                # a task per partition: the fault fails batch 1's task 1 (the default would
                # plan a batch of 50 records as one task)
                .option("targetTasksPerBatch", "8")
                .load())

    delta = (source().selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value",
                                 "partition", "offset")
             .writeStream.format("delta-eos")
             .option("path", str(work / "table"))
             .option("checkpointLocation", str(work / "cp-delta"))
             .trigger(availableNow=True).start())
    delta.awaitTermination()
    kafka = (source().selectExpr("key", "value")
             .writeStream.format("kafka-eos")
             .option("kafka.bootstrap.servers", spec["bootstrap"])
             .option("topic", spec["out_topic"])
             .option("checkpointLocation", str(work / "cp-kafka"))
             .trigger(availableNow=True).start())
    kafka.awaitTermination()
    out["batches"] = {name: sorted(p.batchId for p in q.recentProgress
                                   if p.numInputRows > 0)
                      for name, q in (("delta", delta), ("kafka", kafka))}
    # a batch read through the client, too
    out["batch_read_count"] = (spark.read.format("kafka-eos")
                               .option("kafka.bootstrap.servers", spec["bootstrap"])
                               .option("subscribe", spec["in_topic"]).load().count())
    import connectors

    connectors.register(spark)  # over Connect: spark.dataSource.register, no JVM access
    out["registered_over_connect"] = True
    spark.stop()
    server.stop()
    return out


@pytest.fixture(scope="module")
def observed(broker, tmp_path_factory) -> dict:
    bootstrap = broker.bootstrap_servers
    topics = {name: unique_topic(f"connect-{name}") for name in ("in", "out")}
    for topic in topics.values():
        create_topic(bootstrap, topic, PARTITIONS)
    produced = produce(bootstrap, topics["in"], PARTITIONS, PER_PARTITION)
    work = tmp_path_factory.mktemp("connect")
    spec = {"bootstrap": bootstrap, "workdir": str(work), "in_topic": topics["in"],
            "out_topic": topics["out"], "port": _free_port()}
    env = {**os.environ, FAULTS_ENV: "task_fail@1/1"}  # batch 1's task 1 of each stream
    for name in (STATS_ENV, SOURCE_METRICS_ENV):  # other tests' counters: not for this run
        env.pop(name, None)
    started = time.monotonic()
    out = run_session(sys.executable, "integration_tests.demo.test_spark_connect", spec, work,
                      env=env, timeout_s=SESSION_TIMEOUT_S, what="the Spark Connect session")
    print(f"\nSpark Connect session: {time.monotonic() - started:.0f} s")
    return {"result": out, "produced": produced, "topics": topics, "bootstrap": bootstrap,
            "table": str(work / "table"),
            "log": (work / "session.log").read_text(errors="replace")}


def test_the_client_is_a_spark_connect_client_without_a_spark_context(observed):
    r = observed["result"]
    assert r["client_class"] == "pyspark.sql.connect.session.SparkSession"
    assert r["client_has_spark_context"] is False
    assert r["registered_over_connect"] is True
    assert r["batch_read_count"] == PARTITIONS * PER_PARTITION


def test_both_streams_ran_two_micro_batches_and_retried_a_failed_task(observed):
    assert observed["result"]["batches"] == {"delta": [0, 1], "kafka": [0, 1]}
    # the injected failure happened (once per stream) and Spark retried it
    assert observed["log"].count("InjectedFault") >= 2


def test_delta_eos_written_through_connect_holds_every_record_once(observed):
    from deltalake import DeltaTable

    rows = DeltaTable(observed["table"]).to_pyarrow_table().to_pylist()
    seen = Counter((r["partition"], r["offset"], r["key"], r["value"]) for r in rows)
    produced = Counter((r.partition, r.offset, r.key.decode(), r.value.decode())
                       for r in observed["produced"])
    assert seen == produced


def test_kafka_eos_written_through_connect_holds_every_record_once(observed):
    out = committed(observed["bootstrap"], observed["topics"]["out"])
    seen = Counter((r.key, r.value) for r in out)
    produced = Counter((r.key, r.value) for r in observed["produced"])
    assert seen == produced


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    Path(argv[1]).write_text(json.dumps(connect_session(spec)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
