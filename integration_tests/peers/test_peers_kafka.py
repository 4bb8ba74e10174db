"""`kafka-eos` beside Spark's own Kafka connector, option by option: every
row of docs/migrating-from-kafka.md that says "the same" is read (or written) through both
formats with the same options, in batch reads and in streaming ones (availableNow into a
memory sink), and both must give the same rows in every column, or both refuse. Also:
`format("kafka")` with read_committed and `kafka-eos` both hide records of a transaction that
was aborted after they reached the log.

One subprocess, one Spark session per PySpark version (`integration_tests/support/peers_kafka_session.py`
observes, this module judges): PySpark 4.2.0 in the peers' environment
(integration_tests/support/peers.py), and PySpark 4.3 (this interpreter) with the same
`spark-sql-kafka-0-10_2.13:4.2.0` jars on `spark.jars` (Maven Central has no 4.3 build; Spark
4.3 loads the 4.2.0 connector). Where the peers' environment or jars cannot be had the test
fails, naming what is missing (as test_peers_interop.py does).
"""

from __future__ import annotations

import os
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from integration_tests.support.peers import (
    PYSPARK_VERSION,
    PeersUnavailable,
    peer_environment,
    peers_jars,
)
from integration_tests.support.kafka_data import create_topic
from integration_tests.support.processes import run_session
from sources.batch_metrics import SOURCE_METRICS_ENV
from sources.consumer_pool import STATS_ENV

pytestmark = pytest.mark.peers

PARTITIONS = 3
PER_PARTITION = 10
STEP_MS = 1000
SESSION_TIMEOUT_S = 900
#: Cases only one format can run: not compared.
UNPAIRED = {"batch_read_uncommitted"}
#: Where the two formats read the same rows but split them differently (Spark tasks, or
#: micro-batches): docs/migrating-from-kafka.md says how, the tests below check it.
DIFFERENT_SPLITS = {"batch_min_partitions", "stream_min_partitions",
                    "batch_max_records_per_partition", "stream_max_offsets_per_trigger"}
#: Spark's source ignores endingTimestamp in a streaming query (it checks endingOffsets and
#: endingOffsetsByTimestamp only); kafka-eos refuses it as the other ending options.
SPARK_IGNORES = {"stream_refuses_endingTimestamp"}
#: Spark's delay clock for minOffsetsPerTrigger starts at 0 (its first micro-batch after a
#: start never waits); kafka-eos's starts with the query.
FIRST_BATCH_WAITS = {"stream_min_offsets_per_trigger_first_batch"}


def _produce_timestamped(bootstrap: str, topic: str, partitions: int, per_partition: int,
                         base_ms: int) -> None:
    """Record i of partition p: key k{p}-{i}, two headers, CreateTime base + i*STEP_MS + p."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for p in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, key=f"k{p}-{i}".encode(), value=f"v{p}-{i}".encode(),
                             partition=p, timestamp=base_ms + i * STEP_MS + p,
                             headers=[("i", str(i).encode()), ("dup", b"a"), ("dup", b"b")])
    assert producer.flush(30) == 0


def _produce_with_an_aborted_transaction(bootstrap: str, topic: str) -> dict[str, list]:
    """Committed, aborted (flushed to the log before the abort), committed again, on both
    partitions; returns the values of each."""
    producer = Producer({"bootstrap.servers": bootstrap,
                         "transactional.id": f"peers-kafka-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    values: dict[str, list] = {"committed": [], "aborted": []}
    for name, n, commit in (("first", 4, True), ("aborted", 3, False), ("last", 2, True)):
        producer.begin_transaction()
        for p in range(2):
            for i in range(n):
                value = f"{name}-{p}-{i}".encode()
                producer.produce(topic, key=f"k{p}".encode(), value=value, partition=p,
                                 headers=[("txn", name.encode())])
                values["committed" if commit else "aborted"].append(value.hex())
        assert producer.flush(30) == 0  # in the log before the outcome
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    return values


def _make_topics(bootstrap: str) -> dict:
    run = uuid.uuid4().hex[:8]
    prefix = f"peerskafka-{run}"
    spec = {"topic": f"{prefix}-a", "topic2": f"{prefix}-b", "pattern": f"{prefix}-(a|b)",
            "txn_topic": f"peerskafka-txn-{run}", "loss_topic": f"peerskafka-loss-{run}",
            "sink_topic_spark": f"peerskafka-sink-spark-{run}",
            "sink_topic_eos": f"peerskafka-sink-eos-{run}",
            "sink_column_topic": f"peerskafka-sink-column-{run}",
            "group_id": f"peerskafka-group-{run}", "step_ms": STEP_MS,
            "base_ms": (int(time.time()) - 3600) * 1000}
    create_topic(bootstrap, spec["topic"], PARTITIONS)
    create_topic(bootstrap, spec["topic2"], 2)
    for name in ("txn_topic", "loss_topic"):
        create_topic(bootstrap, spec[name], 2)
    for name in ("sink_topic_spark", "sink_topic_eos", "sink_column_topic"):
        create_topic(bootstrap, spec[name], PARTITIONS)
    _produce_timestamped(bootstrap, spec["topic"], PARTITIONS, PER_PARTITION, spec["base_ms"])
    _produce_timestamped(bootstrap, spec["topic2"], 2, 4, spec["base_ms"])
    _produce_timestamped(bootstrap, spec["loss_topic"], 2, PER_PARTITION, spec["base_ms"])
    spec["txn_values"] = _produce_with_an_aborted_transaction(bootstrap, spec["txn_topic"])
    # retention's work, done now: partition 0 of the loss topic starts at offset 4
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(spec["loss_topic"], 0, 4)]).values():
        future.result(timeout=30)
    return spec


def _session(kind: str) -> tuple[str, dict[str, str]]:
    try:
        if kind == "peers":
            python, env = peer_environment({"TZ": "UTC"})
            return str(python), env
        peers_jars()
    except PeersUnavailable as e:
        pytest.fail(f"Spark's Kafka connector (PySpark {PYSPARK_VERSION}'s peers) cannot be "
                    f"had: {e}")
    return sys.executable, {**os.environ, "TZ": "UTC"}


@pytest.fixture(scope="module", params=["peers", "main"], ids=["pyspark-4.2", "pyspark-4.3"])
def observed(request, broker, tmp_path_factory) -> dict:
    kind = request.param
    python, env = _session(kind)
    for name in (STATS_ENV, SOURCE_METRICS_ENV):  # other tests' counters: not for this run
        env.pop(name, None)
    bootstrap = broker.bootstrap_servers
    spec = {**_make_topics(bootstrap), "bootstrap": bootstrap, "session": kind}
    work = tmp_path_factory.mktemp(f"peers-kafka-{kind}")
    spec["workdir"] = str(work)
    if os.environ.get("PEERS_KAFKA_ONLY"):  # a developer's subset of the cases
        spec["only"] = os.environ["PEERS_KAFKA_ONLY"].split(",")
    started = time.monotonic()
    out = run_session(python, "integration_tests.support.peers_kafka_session", spec, work, env=env,
                      timeout_s=SESSION_TIMEOUT_S, what=f"the Kafka interop session ({kind})")
    print(f"\nKafka interop session ({kind}, PySpark {out['pyspark']}): "
          f"{time.monotonic() - started:.0f} s (Spark start {out['session_start_s']} s)")
    return {"result": out, "spec": spec, "kind": kind}


def _case(observed, name: str) -> dict:
    cases = observed["result"]["cases"]
    only = observed["spec"].get("only")
    if only and name not in only:
        pytest.skip(f"{name} not among the cases PEERS_KAFKA_ONLY selects (a developer's subset)")
    assert name in cases, f"the session did not report case {name}: {sorted(cases)}"
    return cases[name]


def test_the_sessions_are_pyspark_4_2_and_4_3(observed):
    r = observed["result"]
    expected = PYSPARK_VERSION if observed["kind"] == "peers" else "4.3"
    assert r["pyspark"].startswith(expected) and r["spark"].startswith(expected)


def test_every_option_gives_the_same_rows_or_the_same_refusal_through_both_sources(observed):
    """Each case: both formats gave rows (every column, the same ones, in the same number of
    Spark partitions where observed), or both raised."""
    differences = []
    for name, case in observed["result"]["cases"].items():
        if name in UNPAIRED or name in SPARK_IGNORES or name in FIRST_BATCH_WAITS:
            continue
        spark, ours = case["kafka"], case["kafka-eos"]
        if "error" in spark or "error" in ours:
            if not ("error" in spark and "error" in ours):
                differences.append(f"{name}: format(\"kafka\") {spark.get('error', 'read')}"
                                   f" / kafka-eos {ours.get('error', 'read')}")
            continue
        keys = ["columns", "rows"] + ([] if name in DIFFERENT_SPLITS
                                      else ["partitions", "batch_rows"])
        for key in keys:
            if spark.get(key) != ours.get(key):
                detail = (f"{len(spark['rows'])} / {len(ours['rows'])} rows" if key == "rows"
                          else f"{spark.get(key)} / {ours.get(key)}")
                differences.append(f"{name}: {key} differ ({detail})")
    assert differences == []


def test_the_compared_reads_are_not_empty(observed):
    """A comparison of two empty results, or of two errors where rows were meant, shows
    nothing: the cases that read say so."""
    for name, case in observed["result"]["cases"].items():
        if name in UNPAIRED or "refuse" in name or name.endswith("_true") \
                or name.endswith("strategy_error"):
            continue
        assert "rows" in case["kafka"], f"{name}: {case['kafka']}"
        assert case["kafka"]["rows"], name


def test_the_refusals_are_refusals_naming_the_option(observed):
    """Both formats refuse, and kafka-eos's error names the option it refuses."""
    for name, case in observed["result"]["cases"].items():
        if "refuse" not in name:
            continue
        option = case["options"]
        ours = case["kafka-eos"].get("error", "")
        assert "OptionError: Option '" in ours, (name, ours)
        named = ours.split("OptionError: Option '", 1)[1].split("'", 1)[0]
        assert named in option, (name, ours)
        if name in SPARK_IGNORES:
            continue
        assert "error" in case["kafka"], (name, case["kafka"])


def test_spark_reads_past_ending_timestamp_in_a_stream_where_kafka_eos_refuses_it(observed):
    case = _case(observed, "stream_refuses_endingTimestamp")
    everything = _case(observed, "stream_subscribe_earliest")["kafka"]["rows"]
    assert case["kafka"].get("rows") == everything  # Spark ignored the option
    assert "endingTimestamp" in case["kafka-eos"]["error"]


def test_min_partitions_is_a_minimum_for_kafka_eos_and_approximate_for_spark(observed):
    """Spark's KafkaOffsetRangeCalculator rounds each partition's share: 3 partitions of 10
    records with minPartitions=7 give it 2 tasks each, 6; kafka-eos gives the range with the
    most records per task one more, 7."""
    for kind in ("batch", "stream"):
        case = _case(observed, f"{kind}_min_partitions")
        ours = case["kafka-eos"]["partitions"]
        ours = ours if isinstance(ours, int) else max(ours)
        spark = case["kafka"]["partitions"]
        spark = spark if isinstance(spark, int) else max(spark)
        assert ours == 7, kind
        assert PARTITIONS <= spark <= ours, kind


def test_max_records_per_partition_splits_streams_alike_and_batch_reads_only_in_kafka_eos(
        observed):
    """4 records per task at most: 3 tasks per partition of 10. Spark 4.2's batch read ignores
    the option (one task per Kafka partition); its streams apply it as kafka-eos does."""
    stream = _case(observed, "stream_max_records_per_partition")
    assert stream["kafka"]["partitions"] == stream["kafka-eos"]["partitions"] == [3 * PARTITIONS]
    batch = _case(observed, "batch_max_records_per_partition")
    assert batch["kafka-eos"]["partitions"] == 3 * PARTITIONS
    assert batch["kafka"]["partitions"] == PARTITIONS


def test_timestamps_and_offsets_start_where_the_records_say(observed):
    """Beyond agreeing with each other: the timestamp case starts at record 6 of each partition
    (the test's timestamps), the JSON offsets case at the offsets it names."""
    spec = observed["spec"]
    rows = _case(observed, "batch_starting_timestamp")["kafka-eos"]["rows"]
    assert sorted({r["offset"] for r in rows}) == list(range(6, PER_PARTITION))
    assert len(rows) == PARTITIONS * (PER_PARTITION - 6)
    rows = _case(observed, "batch_starting_offsets_json")["kafka-eos"]["rows"]
    firsts = {p: min(r["offset"] for r in rows if r["partition"] == p) for p in range(PARTITIONS)}
    assert firsts == {0: 0, 1: 3, 2: 7}
    assert {r["topic"] for r in _case(observed, "batch_subscribe_pattern")["kafka"]["rows"]} \
        == {spec["topic"], spec["topic2"]}


def test_read_committed_hides_records_of_a_transaction_aborted_in_the_log(observed):
    values = observed["spec"]["txn_values"]
    uncommitted = _case(observed, "batch_read_uncommitted")["kafka"]["rows"]
    # the aborted records are in the log: a read_uncommitted reader gets them
    assert set(values["aborted"]) <= {r["value"] for r in uncommitted}
    for kind in ("batch", "stream"):
        case = _case(observed, f"{kind}_read_committed_hides_aborted")
        for fmt in ("kafka", "kafka-eos"):
            seen = sorted(r["value"] for r in case[fmt]["rows"])
            assert seen == sorted(values["committed"]), (kind, fmt)


def test_max_offsets_per_trigger_bounds_every_batch_of_both_and_kafka_eos_fills_it(observed):
    """At most 8 records a batch through both. Spark floors each partition's share (3 equal
    partitions: 2 each, 6 a batch); kafka-eos shares the 8 by largest remainder, so its batches
    hold 8 until the last."""
    case = _case(observed, "stream_max_offsets_per_trigger")
    limit = int(case["options"]["maxOffsetsPerTrigger"])
    total = PARTITIONS * PER_PARTITION
    for fmt in ("kafka", "kafka-eos"):
        batches = case[fmt]["batch_rows"]
        assert sum(batches) == total and max(batches) <= limit, fmt
    ours = case["kafka-eos"]["batch_rows"]
    assert ours[:-1] == [limit] * (len(ours) - 1)
    assert len(case["kafka"]["batch_rows"]) >= len(ours)


def test_trigger_available_now_reads_everything_whatever_min_offsets_per_trigger(observed):
    """minOffsetsPerTrigger above what the topic holds: an availableNow run reads it all
    through both (kafka-eos read nothing before the fix in sources/kafka_source.py)."""
    case = _case(observed, "stream_min_offsets_per_trigger")
    everything = _case(observed, "stream_subscribe_earliest")["kafka"]["rows"]
    assert case["kafka"]["rows"] == everything
    assert case["kafka-eos"]["rows"] == everything


def test_the_first_micro_batch_waits_for_min_offsets_per_trigger_in_kafka_eos_only(observed):
    """ProcessingTime, minOffsetsPerTrigger above what the topic holds, maxTriggerDelay 1 h,
    until the first trigger without a new batch: Spark's first micro-batch reads what is there
    at once; kafka-eos's waits (for the records or the delay), so nothing is read yet."""
    case = _case(observed, "stream_min_offsets_per_trigger_first_batch")
    everything = _case(observed, "stream_subscribe_earliest")["kafka"]["rows"]
    assert case["kafka"]["rows"] == everything
    assert case["kafka-eos"]["rows"] == [] and case["kafka-eos"]["batch_rows"] == []


def test_nothing_is_committed_to_the_named_consumer_group(observed):
    spec = observed["spec"]
    _case(observed, "batch_group_id")
    consumer = Consumer({"bootstrap.servers": spec["bootstrap"], "group.id": spec["group_id"]})
    try:
        offsets = consumer.committed(
            [TopicPartition(spec["topic"], p) for p in range(PARTITIONS)], timeout=30)
    finally:
        consumer.close()
    assert [tp.offset for tp in offsets] == [-1001] * PARTITIONS  # OFFSET_INVALID: none


def test_both_sinks_write_the_same_records_to_the_option_topic(observed):
    sink = observed["result"]["sink"]
    assert "rows" in sink["kafka"], sink["kafka"]
    assert len(sink["kafka"]["rows"]) == sink["written"]
    assert sink["kafka-eos"] == sink["kafka"]
    assert sink["column_topic_rows"] == 0  # the `topic` option overrode the column
