"""Side by side with what users run today: delta-spark reads the tables
`delta-eos` writes, and Spark's own Kafka connector reads `kafka-eos` output exactly once, on
both PySpark versions the package supports. The small lane of the default run; the option-by-option
and two-writer lanes (test_peers_kafka.py, test_peers_delta.py) are opt-in (`-m peers`).

A subprocess per session (`integration_tests/support/peers_session.py` writes and reads, this test
judges what it saw), on the suite's broker:
* PySpark 4.2.0 (the newest Spark whose jars Maven Central serves and that delta-spark
  supports) with delta-spark 4.4.0 and `spark-sql-kafka-0-10` 4.2.0 beside this package's
  formats, in the peers' environment, made once into the cache the broker's jars live in
  (integration_tests/support/peers.py). It is also the package's own proof of running on PySpark 4.2
  (its sources, both sinks, registration by PySpark's static lookup of the `pyspark_*` modules).
* PySpark 4.3 (this interpreter) with the same Kafka connector jars on `spark.jars`: the Kafka
  part only (no delta-spark release loads in Spark 4.3).
Where the environment or jars cannot be had the test fails, naming what is missing: CI
machines reach PyPI and Maven Central, so a skip would hide a broken lane.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter

import pytest

from connectors.local.kafka_oracle import committed, read_partition
from integration_tests.support.peers import (
    DELTA_SPARK_VERSION,
    PYSPARK_VERSION,
    PeersUnavailable,
    peer_environment,
    peers_jars,
)
from integration_tests.support.kafka_data import create_topic, produce, unique_topic
from integration_tests.support.processes import run_session
from integration_tests.support.peers_session import FILES, ROWS_PER_FILE
from sinks.faults import ENV as FAULTS_ENV
from sources.batch_metrics import SOURCE_METRICS_ENV
from sources.consumer_pool import STATS_ENV

PARTITIONS = 4
PER_PARTITION = 25
MAX_OFFSETS_PER_TRIGGER = 50  # 100 records: two micro-batches per stream
#: The session takes about a minute; a hung one fails the lane well within the suite's budget.
SESSION_TIMEOUT_S = 420


def _observe(kind: str, broker, tmp_path_factory) -> dict:
    """Run the session of `kind` (`peers`: PySpark 4.2.0, every part; `main`: PySpark 4.3, the
    Kafka part) on fresh topics and return what it observed."""
    extra = {
        # batch 1's task 1 of each stream fails once after writing, and is retried
        FAULTS_ENV: "task_fail@1/1",
        "TZ": "UTC",
    }
    try:
        if kind == "peers":
            python, env = peer_environment(extra)
        else:
            peers_jars()
            python, env = sys.executable, {**os.environ, **extra}
    except PeersUnavailable as e:
        pytest.fail(f"the peers' environment (PySpark {PYSPARK_VERSION}, delta-spark "
                    f"{DELTA_SPARK_VERSION}, Spark's Kafka connector) cannot be had: {e}")
    for name in (STATS_ENV, SOURCE_METRICS_ENV):  # other tests' counters: not for this run
        env.pop(name, None)
    bootstrap = broker.bootstrap_servers
    topics = {name: unique_topic(f"peers-{name}") for name in ("in", "out", "spark-out")}
    for topic in topics.values():
        create_topic(bootstrap, topic, PARTITIONS)
    produced = produce(bootstrap, topics["in"], PARTITIONS, PER_PARTITION, headers=True)
    work = tmp_path_factory.mktemp(f"peers-{kind}")
    spec = {"bootstrap": bootstrap, "workdir": str(work), "in_topic": topics["in"],
            "out_topic": topics["out"], "spark_out_topic": topics["spark-out"],
            "partitions": PARTITIONS, "max_offsets_per_trigger": MAX_OFFSETS_PER_TRIGGER,
            "session": kind}
    started = time.monotonic()
    out = run_session(python, "integration_tests.support.peers_session", spec, work, env=env,
                      timeout_s=SESSION_TIMEOUT_S, what=f"the peers' session ({kind})")
    print(f"\npeers' session ({kind}): {time.monotonic() - started:.0f} s (Spark start "
          f"{out['session_start_s']} s; {out['timings_s']})")
    return {"result": out, "produced": produced, "topics": topics, "bootstrap": bootstrap}


@pytest.fixture(scope="module")
def observed(broker, tmp_path_factory) -> dict:
    """The PySpark 4.2.0 session: delta-spark and Spark's Kafka connector."""
    return _observe("peers", broker, tmp_path_factory)


@pytest.fixture(scope="module", params=["peers", "main"], ids=["pyspark-4.2", "pyspark-4.3"])
def kafka_observed(request, broker, tmp_path_factory) -> dict:
    """The Kafka part on each PySpark version: the 4.2.0 session's, and a 4.3 session's."""
    if request.param == "peers":
        return request.getfixturevalue("observed")
    return _observe("main", broker, tmp_path_factory)


def test_the_sessions_are_pyspark_4_2_and_4_3_with_the_package_found_by_pyspark_itself(
        kafka_observed):
    result = kafka_observed["result"]
    expected = PYSPARK_VERSION if "unpartitioned" in result else "4.3"
    assert result["pyspark"].startswith(expected) and result["spark"].startswith(expected)


def test_delta_spark_reads_an_unpartitioned_delta_eos_table_as_delta_rs_does(observed):
    t = observed["result"]["unpartitioned"]
    assert len(t["written_rows"]) == FILES * ROWS_PER_FILE
    assert t["delta_spark_rows"] == t["written_rows"]
    assert t["delta_rs_rows"] == t["written_rows"]
    detail = t["delta_spark_detail"]
    assert detail["numFiles"] == t["delta_rs_files"] == FILES
    assert detail["partitionColumns"] == t["delta_rs_partition_columns"] == []
    assert [detail["minReaderVersion"], detail["minWriterVersion"]] == t["delta_rs_protocol"]
    # one commit per batch job, the same versions and operations through both engines
    assert t["delta_spark_history"] == t["delta_rs_history"]
    versions = [h["version"] for h in t["delta_spark_history"]]
    assert versions == list(range(len(versions))) and len(versions) >= t["commits"]


def test_delta_spark_skips_files_by_the_statistics_delta_eos_wrote(observed):
    skipping = observed["result"]["unpartitioned"]["skipping"]
    assert skipping == {"files_without_filter": FILES, "files_for_one_id": 1,
                        "rows_for_one_id": 1}


def test_delta_spark_reads_a_partitioned_table_a_delta_eos_stream_wrote(observed):
    t = observed["result"]["partitioned"]
    assert t["batches"] == 2
    expected = sorted((r.key.decode(), r.value.decode(), r.partition, r.offset)
                      for r in observed["produced"])
    assert len(expected) == PARTITIONS * PER_PARTITION
    seen = sorted((r["key"], r["value"], r["partition"], r["offset"])
                  for r in t["delta_spark_rows"])
    assert seen == expected  # every record once, after a retried task
    assert t["delta_spark_rows"] == t["delta_rs_rows"]  # timestamps included
    detail = t["delta_spark_detail"]
    assert detail["partitionColumns"] == t["delta_rs_partition_columns"] == ["partition"]
    assert detail["numFiles"] == t["delta_rs_files"]
    assert [detail["minReaderVersion"], detail["minWriterVersion"]] == t["delta_rs_protocol"]
    assert t["delta_spark_history"] == t["delta_rs_history"]
    assert len(t["delta_spark_history"]) >= t["batches"]
    pruning = t["pruning"]
    assert pruning["files_without_filter"] == t["delta_rs_files"]
    assert 0 < pruning["files_for_partition_0"] == pruning["delta_rs_files_of_partition_0"] \
        < pruning["files_without_filter"]


def test_format_kafka_read_committed_reads_kafka_eos_output_exactly_once(kafka_observed):
    k = kafka_observed["result"]["kafka"]
    assert k["batches"] == 2  # the injected task failure was in batch 1
    produced = Counter((r.key.hex(), r.value.hex()) for r in kafka_observed["produced"])
    seen = Counter((r["key"], r["value"]) for r in k["read_committed"])
    assert seen == produced, (
        f"duplicates {sorted((seen - produced).elements())[:5]}, missing "
        f"{sorted((produced - seen).elements())[:5]}")
    # what the marker-aware oracle counts as committed, at the same offsets
    oracle = committed(kafka_observed["bootstrap"], kafka_observed["topics"]["out"])
    assert sorted((r.partition, r.offset) for r in oracle) == sorted(
        (r["partition"], r["offset"]) for r in k["read_committed"])
    # The retried task's first attempt was aborted before its records left the producer
    # (measured: read_uncommitted showed none of them); read_committed hiding aborted records
    # that are in the log: test_peers_kafka.py::test_read_committed_hides_records_of_a_
    # transaction_aborted_in_the_log.
    bootstrap, out = kafka_observed["bootstrap"], kafka_observed["topics"]["out"]
    aborted = sum(len(read_partition(bootstrap, out, p).aborted) for p in range(PARTITIONS))
    assert len(k["read_uncommitted"]) == len(k["read_committed"]) + aborted


def test_keyed_rows_land_on_the_same_partitions_through_both_kafka_sinks(kafka_observed):
    k = kafka_observed["result"]["kafka"]
    ours = {r["key"]: r["partition"] for r in k["read_committed"]}
    spark = {r["key"]: r["partition"] for r in k["spark_sink"]}
    assert len(spark) == len(k["spark_sink"]) == PARTITIONS * PER_PARTITION
    assert ours == spark
    assert len(set(ours.values())) > 1  # the keys spread: a comparison, not a constant


def test_both_sources_read_the_same_rows_in_every_column(kafka_observed):
    k = kafka_observed["result"]["kafka"]
    assert len(k["input_by_format_kafka"]) == PARTITIONS * PER_PARTITION
    assert all(row["headers"] for row in k["input_by_format_kafka"])
    assert k["input_by_format_kafka_eos"] == k["input_by_format_kafka"]
