"""delta-spark and `delta-eos` on the same Delta tables, in the peers'
PySpark 4.2.0 session (delta-spark 4.4.0): time travel across a log checkpoint delta-rs wrote,
timestamp and timestamp_ntz columns, tables delta-spark created (with its defaults, with
deletion vectors in use, with column mapping), and two writers on one table (a delta-spark
stream and a `delta-eos` stream) under delta-spark's OPTIMIZE and VACUUM LITE RETAIN 0 HOURS,
the whole session SIGKILLed at a `delta-eos` protocol point and restarted from the checkpoints.
(A FULL VACUUM RETAIN 0 HOURS deletes any writer's uncommitted files: docs/delta-sink.md.)

`integration_tests/support/peers_delta_session.py` writes and reads, in two subprocesses (the first
killed, the second restarting it); this module judges what they saw.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from integration_tests.support.peers import (
    DELTA_SPARK_VERSION,
    PYSPARK_VERSION,
    PeersUnavailable,
    peer_environment,
)
from integration_tests.support.kafka_data import create_topic, produce, unique_topic
from integration_tests.support.peers_delta_session import (
    CHECKPOINT_INTERVAL,
    EOS_WRITER,
    SPARK_WRITER,
    TIMESTAMP_VERSIONS,
    TRAVEL_VERSIONS,
)
from sinks.faults import ENV as FAULTS_ENV
from sources.batch_metrics import SOURCE_METRICS_ENV
from sources.consumer_pool import STATS_ENV

pytestmark = pytest.mark.peers

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 2
#: Records per partition of each writer's topic; MAX_OFFSETS_PER_TRIGGER a micro-batch: 6
#: batches of delta-spark, 8 of delta-eos (so that 5 remain after the kill, for the
#: maintenance to run beside)
PER_PARTITION = {"spark": 30, "eos": 40}
MAX_OFFSETS_PER_TRIGGER = 10
#: The first session is SIGKILLed here: `delta-eos` batch 3 decided, not yet committed.
KILL_AT = "after_decision@3"
SESSION_TIMEOUT_S = 480


def _run_session(python: Path, env: dict[str, str], work: Path, phase: str,
                 spec: dict) -> tuple[int | None, str, dict | None]:
    """One session in a process group of its own (the fault point kills the group); its exit
    code (None: timed out), its log, its result."""
    (work / f"spec-{phase}.json").write_text(json.dumps({**spec, "phase": phase}))
    log = work / f"session-{phase}.log"
    result = work / f"result-{phase}.json"
    with open(log, "w") as output:
        proc = subprocess.Popen(
            [str(python), "-m", "integration_tests.support.peers_delta_session",
             str(work / f"spec-{phase}.json"), str(result)],
            cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc: int | None = proc.wait(SESSION_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            rc = None
        try:  # what is left of the group (Spark's Python workers): never outlives the test
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    # the log without the JVM's stack frames: the Python traceback and Spark's messages
    text = "\n".join(line for line in log.read_text(errors="replace").splitlines()
                     if not line.lstrip().startswith("at ") and not line.startswith("\tat "))
    return rc, text, (
        json.loads(result.read_text()) if result.exists() else None)


@pytest.fixture(scope="module")
def observed(broker, tmp_path_factory) -> dict:
    try:
        python, env = peer_environment({"TZ": "UTC"})
    except PeersUnavailable as e:
        pytest.fail(f"the peers' environment (PySpark {PYSPARK_VERSION}, delta-spark "
                    f"{DELTA_SPARK_VERSION}, Spark's Kafka connector) cannot be had: {e}")
    for name in (STATS_ENV, SOURCE_METRICS_ENV, FAULTS_ENV):
        env.pop(name, None)
    bootstrap = broker.bootstrap_servers
    topics = {name: unique_topic(f"peers-delta-{name}") for name in ("spark", "eos")}
    produced = {}
    for name, topic in topics.items():
        create_topic(bootstrap, topic, PARTITIONS)
        produced[name] = produce(bootstrap, topic, PARTITIONS, PER_PARTITION[name])
    work = tmp_path_factory.mktemp("peers-delta")
    spec = {"bootstrap": bootstrap, "workdir": str(work), "spark_topic": topics["spark"],
            "eos_topic": topics["eos"], "max_offsets_per_trigger": MAX_OFFSETS_PER_TRIGGER}
    started = time.monotonic()
    rc, log, first = _run_session(python, {**env, FAULTS_ENV: KILL_AT}, work, "first", spec)
    if first is None or rc != -signal.SIGKILL:
        survived = work / "first-writers-survived.json"
        pytest.fail(f"the first session should have been killed at {KILL_AT} "
                    f"(exit {rc}); {survived.read_text() if survived.exists() else ''}\n"
                    f"its log ends:\n{log[-6000:]}")
    first_s = time.monotonic() - started
    rc, log, restart = _run_session(python, env, work, "restart", spec)
    if rc != 0 or restart is None:
        pytest.fail(f"the restarted session failed (exit {rc}); its log ends:\n{log[-6000:]}")
    print(f"\npeers' delta sessions: {first_s:.0f} s killed, "
          f"{time.monotonic() - started - first_s:.0f} s restarted (Spark starts "
          f"{first['session_start_s']} s, {restart['session_start_s']} s; "
          f"{first['timings_s']}, {restart['timings_s']})")
    return {"first": first, "restart": restart, "produced": produced, "log": log}


# -- time travel across delta-rs's checkpoint; timestamp and timestamp_ntz --------------------


def test_delta_rs_wrote_a_log_checkpoint_by_the_tables_interval(observed):
    t = observed["first"]["time_travel"]
    assert t["history_versions"] == list(range(TRAVEL_VERSIONS))
    # after every CHECKPOINT_INTERVAL-th commit (versions 1, 3, ...), as delta-spark does
    expected = [f"{v:020d}.checkpoint.parquet" for v in range(TRAVEL_VERSIONS)
                if (v + 1) % CHECKPOINT_INTERVAL == 0]
    assert expected and t["checkpoints"] == expected
    assert t["last_checkpoint"]["version"] == int(expected[-1][:20])


def test_delta_spark_time_travels_by_version_and_timestamp_across_the_checkpoint(observed):
    t = observed["first"]["time_travel"]
    expected = t["expected_by_version"]
    assert [len(rows) for rows in expected] == sorted({len(rows) for rows in expected})
    assert t["version_as_of"] == expected
    assert t["timestamp_as_of"] == {str(v): expected[v] for v in TIMESTAMP_VERSIONS}
    first_checkpoint = int(t["checkpoints"][0][:20])
    assert min(TIMESTAMP_VERSIONS) < first_checkpoint < max(TIMESTAMP_VERSIONS)
    assert t["delta_rs_version_as_of"] == expected


def test_delta_spark_reads_the_versions_from_the_delta_rs_checkpoint_alone(observed):
    t = observed["first"]["time_travel"]
    f = t["from_checkpoint"]
    assert f["version"] < TRAVEL_VERSIONS - 1  # versions after it too: checkpoint + commits
    assert f["rows_by_version"] == {str(v): t["expected_by_version"][v]
                                    for v in range(f["version"], TRAVEL_VERSIONS)}
    # the JSON commits before it are gone, and delta-spark says so: it used the checkpoint
    assert "DELTA" in f["before"] or "version" in f["before"].lower(), f["before"]


def test_timestamp_and_timestamp_ntz_read_back_identically_by_both_engines(observed):
    t = observed["first"]["time_travel"]
    latest = t["latest"]
    assert latest["delta_spark_rows"] == latest["delta_rs_rows"] == t["expected_by_version"][-1]
    assert t["types"]["delta_spark"] == {"id": "bigint", "ts": "timestamp",
                                         "ts_ntz": "timestamp_ntz", "name": "string"}
    assert t["types"]["delta_rs"]["ts"] == "timestamp[us, tz=UTC]"
    assert t["types"]["delta_rs"]["ts_ntz"] == "timestamp[us]"
    # what delta-spark needs of a table with a NOT NULL column (id) at writer version 7
    assert {"timestampNtz", "invariants"} <= set(t["protocol"]["tableFeatures"])


# -- tables delta-spark created ---------------------------------------------------------------


def test_delta_eos_appends_to_a_table_delta_spark_created_with_its_defaults(observed):
    t = observed["first"]["spark_created"]
    assert sorted(r["id"] for r in t["delta_spark_rows"]) == t["expected_ids"]
    assert t["delta_rs_rows"] == t["delta_spark_rows"]
    # delta-spark's CREATE TABLE and INSERT, the delta-eos batch job and stream batch, delta-spark
    assert t["history"][0] == "CREATE TABLE" and len(t["history"]) == 5


def test_delta_eos_appends_and_upserts_into_a_table_with_deletion_vectors_in_use(observed):
    t = observed["first"]["deletion_vectors"]
    assert t["deletion_vectors_in_log"] >= 1
    assert "deletionVectors" in t["protocol"]["tableFeatures"]
    assert (t["append"], t["upsert"]) == ("ok", "ok")
    # the rows the deletion vector masks stay deleted, through both engines
    assert t["delta_spark_rows"] == t["expected_rows"]
    assert t["delta_rs_rows"] == t["expected_rows"]
    # deltalake's Arrow reader refuses deletion vectors; its DataFusion reader reads them
    assert t["delta_rs_reader"] == "QueryBuilder"
    assert "deletionVectors" in t["delta_rs_arrow_error"]


def test_delta_eos_refuses_a_column_mapped_table_naming_the_feature(observed):
    t = observed["first"]["column_mapping"]
    assert t["protocol"]["properties"]["delta.columnMapping.mode"] == "name"
    for what in ("batch_job", "stream"):
        message = t[what]
        assert "Option 'path': delta-eos cannot append to the Delta table" in message, message
        assert "column mapping (table feature 'columnMapping', delta.columnMapping.mode=name)" \
            in message, message
    assert t["files_added"] == []
    assert [(r["id"], r["label"]) for r in t["delta_spark_rows"]] == [(1, "one")]


# -- two writers on one table, killed and restarted -------------------------------------------


def test_both_writers_were_killed_mid_stream_and_restarted(observed):
    w = observed["restart"]["writers"]
    before, after = w["committed_before_restart"], w["committed_after"]
    # the kill came at batch 3 of delta-eos, decided but not committed: Spark logged 0-2
    assert before["eos"] == [0, 1, 2]
    assert before["spark"], "the delta-spark stream committed nothing before the kill"
    for name in ("spark", "eos"):
        assert after[name][-1] > (before[name] or [-1])[-1], f"{name} did not run after restart"
    assert w["query_failures"] == {"spark": None, "eos": None}


def test_every_record_of_both_writers_is_in_the_table_once_read_by_both_engines(observed):
    w = observed["restart"]["writers"]
    expected = Counter()
    for writer, name in ((SPARK_WRITER, "spark"), (EOS_WRITER, "eos")):
        expected.update((writer, r.key.decode(), r.value.decode(), r.partition, r.offset)
                        for r in observed["produced"][name])
    assert len(expected) == PARTITIONS * sum(PER_PARTITION.values())
    seen = Counter((r["writer"], r["key"], r["value"], r["partition"], r["offset"])
                   for r in w["delta_spark_rows"])
    assert seen == expected, (f"duplicates {sorted((seen - expected).elements())[:5]}, missing "
                              f"{sorted((expected - seen).elements())[:5]}")
    assert w["delta_rs_rows"] == w["delta_spark_rows"]


def test_optimize_and_vacuum_ran_while_delta_eos_wrote(observed):
    w = observed["restart"]["writers"]
    commits = [c for c in w["eos_commit_ms"] if c >= w["restarted_ms"]]
    assert commits, "delta-eos committed nothing after the restart"
    # each operation, at least once, ran between delta-eos's first and last commit
    during = {m["op"] for m in w["maintenance"]
              if m["start_ms"] < commits[-1] and m["end_ms"] > commits[0]}
    assert during == {"OPTIMIZE", "VACUUM"}, (commits, w["maintenance"])
    assert {"OPTIMIZE", "VACUUM START", "VACUUM END"} <= set(w["operations"])
    assert all(m["outcome"] == "ok" for m in w["maintenance"]), w["maintenance"]
