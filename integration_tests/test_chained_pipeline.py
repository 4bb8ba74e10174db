"""A chained pipeline, exactly once end to end: topic A -> Spark -> topic B (`kafka-eos` sink,
exactly-once) -> Spark (`kafka-eos` source) -> `delta-eos` table.

The second hop reads B with read_committed. The first hop is killed mid-stream and restarted,
so B holds aborted transactions the second hop must not see (real Apache Kafka hides them from
read_committed consumers).
"""

from __future__ import annotations

import signal

from integration_tests.delta_oracle import last_spark_batch, txn_versions
from integration_tests.kafka_data import create_topic, produce, unique_topic
from integration_tests.processes import log_tail, run_pipeline, start_pipeline, wait_exit
from sinks.faults import ENV
from integration_tests.streaming import run_to_end

PIPELINE = "integration_tests.pipelines.eos_pipeline"


def test_topic_to_topic_to_delta_exactly_once(spark, bootstrap, tmp_path):
    a, b = unique_topic("chainA"), unique_topic("chainB")
    create_topic(bootstrap, a, 3)
    create_topic(bootstrap, b, 3)
    expected = produce(bootstrap, a, 3, 80)
    first_hop = ["--bootstrap", bootstrap, "--topic", a, "--out-topic", b,
                 "--checkpoint", str(tmp_path / "ckpt1")]
    log = str(tmp_path / "hop1.log")
    proc = start_pipeline(PIPELINE, *first_hop, log_path=log, env={ENV: "after_some_commits@2"})
    assert wait_exit(proc, log) == -signal.SIGKILL, log_tail(log)
    run_pipeline(PIPELINE, *first_hop, log_path=log)

    table = str(tmp_path / "table")
    query = (
        spark.readStream.format("kafka-eos")
        .option("kafka.bootstrap.servers", bootstrap).option("subscribe", b)
        .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "70").load()
        .selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value",
                    "partition", "offset")
        .writeStream.format("delta-eos").option("path", table)
        .option("checkpointLocation", str(tmp_path / "ckpt2"))
        .trigger(availableNow=True).start()
    )
    run_to_end(query, 300)

    # Offsets differ between A and B, so records are matched by key and value (both unique).
    from deltalake import DeltaTable

    rows = DeltaTable(table).to_pyarrow_table().to_pylist()
    got = sorted((r["key"], r["value"]) for r in rows)
    want = sorted((r.key.decode(), r.value.decode()) for r in expected)
    assert len(got) == len(set(got)), "duplicates in the table"
    assert got == want, _where_they_differ(bootstrap, b, rows, got, want, tmp_path)
    (version,) = txn_versions(table).values()
    assert version == last_spark_batch(str(tmp_path / "ckpt2"))


def _where_they_differ(bootstrap: str, topic: str, rows: list[dict], got: list, want: list,
                       tmp_path) -> str:
    """Which records of B the table lacks or has too many of, where they are in B, and the
    second hop's batches: enough to tell a lost range from a lost transaction."""
    import os

    from connectors.testing.kafka_oracle import read_partition

    missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
    where = {}
    for p in range(3):
        log = read_partition(bootstrap, topic, p)
        for state in ("committed", "aborted", "open"):
            for r in getattr(log, state):
                where[(r.key.decode(), r.value.decode())] = (p, r.offset, state)
    read = sorted((r["partition"], r["offset"]) for r in rows)
    offsets_dir = tmp_path / "ckpt2" / "offsets"
    batches = [(n, (offsets_dir / n).read_text().splitlines()[-1])
               for n in sorted(os.listdir(offsets_dir), key=lambda n: int(n) if n.isdigit() else -1)
               if n.isdigit()]
    return (f"missing {[(m, where.get(m)) for m in missing]}; extra {extra}; "
            f"second hop read (partition, offset) {read}; its batches {batches}")
