"""The main job, as a user runs it: `python -m connectors demo`, its local broker (Apache Kafka
from its Maven jars, as on any machine with Java), real Spark, SIGKILLs of the pipeline's process
group, and the demo's own verification, which must find every produced event exactly once in the
Delta table and in the Kafka topic."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from deltalake import DeltaTable



def assert_every_sink_exactly_once(run, *, produced: int, kills: int) -> dict:
    """The demo's own verdict (verification.json): every sink holds each produced record once."""
    verdict = json.loads((run / "verification.json").read_text())
    assert verdict["produced"] == produced and verdict["kills"] == kills
    for sink in verdict["sinks"]:
        assert (sink["rows"], sink["duplicates"], sink["missing"], sink["unexpected"]) == (
            produced, 0, 0, 0), sink
    return verdict

def test_demo_with_chaos_verifies_exactly_once(tmp_path: Path):
    proc = subprocess.run(
        [sys.executable, "-m", "connectors", "demo", "--records", "3000", "--rate", "300",
         "--partitions", "3", "--chaos", "1", "--seed", "11", "--output-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=840,
    )
    runs = list(tmp_path.glob("run-*"))
    log = (runs[0] / "pipeline.log").read_text(errors="replace")[-3000:] if runs else ""
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}\n{log}"
    assert "PASSED: every record exactly once in both sinks." in proc.stdout
    # Java and the suite's cached jars are here: the demo's broker is Apache Kafka itself
    assert "Kafka: Apache Kafka 4.4.0 (one KRaft node, from its Maven jars) at " in proc.stdout
    assert "chaos: SIGKILL of the pipeline's process group (1 of 1; in flight: " in proc.stdout
    # the first kill is followed by `kafka-eos inspect` of both checkpoints
    for query in ("delta", "kafka"):
        assert f"$ kafka-eos inspect {runs[0] / 'checkpoints' / query} --summary" in proc.stdout
    assert proc.stdout.count("a restart would:") == 2, proc.stdout[:4000]

    (run,) = runs
    verdict = assert_every_sink_exactly_once(run, produced=3000, kills=1)
    assert all(sink["batches"] >= 1 for sink in verdict["sinks"])
    # The table is a real Delta table a user can open: independent of the demo's own reader.
    table = DeltaTable(str(run / "events-delta")).to_pyarrow_table(columns=["event_id"])
    ids = table.column("event_id").to_pylist()
    assert sorted(ids) == list(range(3000))


def test_demo_reports_an_unreachable_cluster_in_one_line(tmp_path: Path):
    proc = subprocess.run(
        [sys.executable, "-m", "connectors", "demo", "--bootstrap-servers", "127.0.0.1:1",
         "--output-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 3
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "kafka-eos demo: error: cannot reach Kafka at 127.0.0.1:1"), proc.stderr
    assert not list(tmp_path.glob("run-*"))  # nothing left behind for a run that never started


def test_demo_on_the_embedded_broker_smoke(tmp_path: Path):
    """The embedded broker's smoke lane (the rest of the suite runs on Apache Kafka): the demo
    a user without Java's Maven jars gets, `pip install` and nothing else. Its verdict comes
    from the marker-aware oracle, since that broker's read_committed hides no aborted record."""
    proc = subprocess.run(
        [sys.executable, "-m", "connectors", "demo", "--broker", "embedded", "--records", "1000",
         "--rate", "0", "--partitions", "2", "--output-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}"
    assert "PASSED: every record exactly once in both sinks." in proc.stdout
    assert "Apache Kafka" not in proc.stdout.split("Kafka:", 1)[1].splitlines()[0], proc.stdout
    (run,) = tmp_path.glob("run-*")
    assert_every_sink_exactly_once(run, produced=1000, kills=0)


UPSERT_SEED = 8  # its kill lands 3.5 s after the pipeline's queries started: mid-stream


def test_demo_upsert_with_chaos_ends_with_the_fold(tmp_path: Path, bootstrap: str):
    """`demo --upsert`, small, on a given cluster (the suite's broker, --bootstrap-servers): Debezium-style change events (late
    changes, deletes, updates older than their key's delete delivered at the end) into
    delta-eos upsert mode, the pipeline SIGKILLed once and restarted; the demo's own verdict
    must find the table exactly the fold of the changes, and so must this test, reading the
    input topic back itself and folding it with the crash matrix's independent fold."""
    from connectors.local.kafka_oracle import committed
    from integration_tests.support.crash_matrix import fold

    records = 2000  # 4 batches of 500 and the drain: about a minute with two Spark starts
    proc = subprocess.run(
        [sys.executable, "-m", "connectors", "demo", "--upsert", "--bootstrap-servers", bootstrap,
         "--records", str(records), "--rate", "0", "--partitions", "2",
         "--max-offsets-per-trigger", "500", "--chaos", "1", "--seed", str(UPSERT_SEED),
         "--output-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )
    runs = list(tmp_path.glob("run-*"))
    log = (runs[0] / "pipeline.log").read_text(errors="replace")[-3000:] if runs else ""
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}\n{log}"
    assert "PASSED: the table is exactly the fold of the change stream." in proc.stdout
    assert "chaos: SIGKILL of the pipeline's process group (1 of 1; in flight: " in proc.stdout
    # --bootstrap-servers: the path the Docker Compose demo takes (here: the suite's broker)
    assert f"Kafka: {bootstrap}" in proc.stdout
    (run,) = runs
    assert {"checkpoints", "customers-delta", "pipeline.log", "verification.json"} <= {
        p.name for p in run.iterdir()}
    verdict = json.loads((run / "verification.json").read_text())
    assert (verdict["mode"], verdict["produced"], verdict["kills"]) == ("upsert", records, 1)
    (check,) = verdict["sinks"]
    assert check["ok"]
    assert [check[k] for k in ("duplicate_keys", "missing", "resurrected", "stale",
                               "batches_applied_twice", "batches_not_in_table")] == [0] * 6
    stream = check["stream"]
    # what the run was about, counted by the demo from the delivered stream
    assert stream["changes"] == records and stream["deletes"] > 0 and stream["recreated"] > 0
    assert stream["late"] > 0 and stream["late_after_delete"] > 0
    assert check["batches"] >= 2 and 0 < check["keys_expected"] < stream["keys"]

    # Independently of the demo's verifier: the input topic read back, folded by the crash
    # matrix's fold, against the table as deltalake reads it.
    events = []
    for r in committed(bootstrap, verdict["input_topic"]):
        e = json.loads(r.value)
        image = e["after"] or e["before"]
        events.append((image["id"], e["source"]["lsn"], e["op"],
                       e["after"]["name"] if e["after"] else None))
    assert len(events) == records
    table = DeltaTable(str(run / "customers-delta")).to_pyarrow_table(
        columns=["id", "lsn", "name"]).to_pylist()
    assert len({r["id"] for r in table}) == len(table)
    assert {r["id"]: (r["lsn"], r["name"]) for r in table} == fold(events)
    import pyarrow as pa

    columns = pa.schema(DeltaTable(str(run / "customers-delta")).schema().to_arrow()).names
    assert sorted(columns) == sorted(  # `op` is an exceptColumn; no hidden column leaked
        ["id", "name", "email", "ts_ms", "lsn", "source_partition", "source_offset"])


def test_demo_avro_through_the_schema_registry(tmp_path: Path, bootstrap: str,
                                               schema_registry_url: str):
    """`demo --format avro`, small, on the suite's broker and registry: events written by
    confluent-kafka's AvroSerializer, read with valueFormat=avro, written to Kafka as Avro by
    the sink, one SIGKILL and restart; the demo's verdict (its Kafka side decoded with
    AvroDeserializer) must find every event exactly once in both sinks, and so must this test,
    decoding both topics itself and matching each output record to its input record."""
    import struct

    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from connectors.local.kafka_oracle import committed

    records = 1500
    proc = subprocess.run(
        [sys.executable, "-m", "connectors", "demo", "--format", "avro",
         "--schema-registry-url", schema_registry_url, "--bootstrap-servers", bootstrap,
         "--records", str(records), "--rate", "0", "--partitions", "2",
         "--max-offsets-per-trigger", "500", "--chaos", "1", "--seed", "5",
         "--output-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )
    runs = list(tmp_path.glob("run-*"))
    log = (runs[0] / "pipeline.log").read_text(errors="replace")[-3000:] if runs else ""
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}\n{log}"
    assert "PASSED: every record exactly once in both sinks." in proc.stdout
    assert f"Schema Registry: {schema_registry_url}" in proc.stdout
    (run,) = runs
    verdict = assert_every_sink_exactly_once(run, produced=records, kills=1)
    source, output = verdict["input_topic"], verdict["output_topic"]
    assert verdict["format"] == "avro"
    ids = verdict["schema_ids"]
    assert set(ids) == {f"{source}-value", f"{output}-value"}

    # Both topics hold the Confluent wire format: magic byte 0, then the subject's schema id.
    def decoded(topic: str) -> dict[tuple[int, int], dict]:
        registry = SchemaRegistryClient({"url": schema_registry_url})
        deserialize = AvroDeserializer(registry)
        context = SerializationContext(topic, MessageField.VALUE)
        out = {}
        for r in committed(bootstrap, topic):
            assert struct.unpack(">bI", r.value[:5]) == (0, ids[f"{topic}-value"])
            out[(r.partition, r.offset)] = deserialize(r.value, context)
        return out

    events, enriched = decoded(source), decoded(output)
    assert len(events) == len(enriched) == records
    for row in enriched.values():
        event = events[(row["source_partition"], row["source_offset"])]
        assert (row["event_id"], row["user_id"], row["action"], row["amount_cents"],
                row["event_time"]) == (event["event_id"], event["user_id"],
                                       event["action"].upper(), round(event["amount"] * 100),
                                       event["event_time"])
    assert sorted(r["event_id"] for r in enriched.values()) == list(range(records))
    # the Avro timestamp-millis arrived in Delta as a timestamp, as from_avro maps it
    import pyarrow as pa

    schema = pa.schema(DeltaTable(str(run / "events-delta")).schema().to_arrow())
    assert pa.types.is_timestamp(schema.field("event_time").type)
