"""One PySpark 4.2.0 session with delta-spark and Spark's Kafka connector beside this package's
formats: what `integration_tests/peers/test_peers_interop.py` runs in the peers' environment
(integration_tests/support/peers.py), observing, not judging. It writes with `delta-eos` and
`kafka-eos`, reads the results back with the peers (and with delta-rs), and leaves every
observation in a JSON file for the test to assert on.

    <peers' python> -m integration_tests.support.peers_session SPEC.json RESULT.json

SPEC: {"bootstrap", "workdir", "in_topic", "out_topic", "spark_out_topic", "partitions",
"max_offsets_per_trigger", "session"}: `in_topic` holds the test's input (keyed records, every partition), the two output
topics exist with `partitions` partitions. `KAFKA_EOS_FAULTS` (in the environment) makes one
task of each stream fail once after writing: Spark retries it, and the output must still hold
every record once. `session` is `peers` (the default: the peers' PySpark 4.2.0, every part) or
`main` (the main environment's PySpark 4.3 with Spark's 4.2.0 Kafka connector on `spark.jars`,
`integration_tests.support.peers.kafka_connector_spark`): the Kafka part only, delta-spark having no
release for Spark 4.3.

Nothing here imports pytest: the peers' environment has the package's runtime dependencies only.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

from integration_tests.support.peers import kafka_connector_spark, peer_spark

_T0 = time.monotonic()


def step(message: str) -> None:
    """A progress line in the session's log: where a hung session stopped."""
    print(f"[peers {time.monotonic() - _T0:6.1f}s] {message}", file=sys.stderr, flush=True)


#: The unpartitioned table: one batch job per file, disjoint id ranges (for data skipping).
FILES = 4
ROWS_PER_FILE = 50


def canonical(value: Any) -> Any:
    """A value both engines' rows reduce to: UTC ISO timestamps, decimal strings, dicts."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    if hasattr(value, "asDict"):  # a Spark Row (a tuple: before the lists)
        return canonical(value.asDict(recursive=True))
    if isinstance(value, dict):
        return {k: canonical(v) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    return value


def rows_of(records: list[Any]) -> list[Any]:
    return sorted((canonical(r) for r in records), key=lambda r: json.dumps(r, sort_keys=True))


def scan_files(df) -> int:
    """Run `df` and return the files its file scans read (the scans' `numFiles` metric), with
    adaptive execution off so that the executed plan is the one that ran."""
    df.collect()
    plan = df._jdf.queryExecution().executedPlan()

    def walk(node) -> int:
        total = 0
        metrics = node.metrics()
        if node.nodeName().startswith("Scan") and metrics.contains("numFiles"):
            total += int(metrics.apply("numFiles").value())
        children = node.children()
        for i in range(children.size()):
            total += walk(children.apply(i))
        return total

    return walk(plan)


def delta_observations(spark, path: str) -> dict:
    """A Delta table as delta-spark and delta-rs each see it."""
    from deltalake import DeltaTable

    table = DeltaTable(path)
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").collect()[0].asDict()
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()
    protocol = table.protocol()
    return {
        "delta_spark_rows": rows_of(spark.read.format("delta").load(path).collect()),
        "delta_rs_rows": rows_of(table.to_pyarrow_table().to_pylist()),
        "delta_spark_detail": {
            "numFiles": detail["numFiles"],
            "partitionColumns": list(detail["partitionColumns"]),
            "minReaderVersion": detail["minReaderVersion"],
            "minWriterVersion": detail["minWriterVersion"],
        },
        "delta_rs_files": len(table.file_uris()),
        "delta_rs_partition_columns": list(table.metadata().partition_columns),
        "delta_rs_protocol": [protocol.min_reader_version, protocol.min_writer_version],
        "delta_spark_history": sorted(
            [{"version": r["version"], "operation": r["operation"]} for r in history],
            key=lambda h: h["version"]),
        "delta_rs_history": sorted(
            [{"version": h["version"], "operation": h.get("operation")}
             for h in table.history()], key=lambda h: h["version"]),
    }


def unpartitioned_table(spark, workdir: Path) -> dict:
    """FILES batch jobs with `delta-eos` into one table, each one file of a disjoint id range;
    then delta-spark reads it, and filters on `id` with data skipping."""
    from pyspark.sql.types import (
        DecimalType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    schema = StructType([
        StructField("id", LongType(), False),
        StructField("name", StringType()),
        StructField("amount", DecimalType(18, 2)),
        StructField("ts", TimestampType()),
        StructField("attrs", StructType([StructField("n", IntegerType()),
                                         StructField("label", StringType())])),
    ])
    base = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    path = str(workdir / "unpartitioned")
    written = []
    for f in range(FILES):
        rows = []
        for i in range(f * ROWS_PER_FILE, (f + 1) * ROWS_PER_FILE):
            rows.append((
                i,
                # every 10th a large string (64 KiB), one null
                ("x" * 65536 + str(i)) if i % 10 == 0 else (None if i == 7 else f"name-{i}"),
                Decimal(i * 37).scaleb(-2),  # the column's scale: 0.00, 0.37, ...
                base + dt.timedelta(minutes=i, microseconds=i),
                {"n": i % 5, "label": f"l{i % 3}"},
            ))
        step(f"delta-eos batch job {f}")
        spark.createDataFrame(rows, schema).coalesce(1).write.format("delta-eos") \
            .mode("append").save(path)
        written.extend({"id": r[0], "name": r[1], "amount": r[2], "ts": r[3], "attrs": r[4]}
                       for r in rows)
    step("delta-spark and delta-rs read the unpartitioned table")
    out = delta_observations(spark, path)
    out["written_rows"] = rows_of(written)
    out["commits"] = FILES
    probe = 2 * ROWS_PER_FILE + 3  # in the third file's range only
    table = spark.read.format("delta").load(path)
    out["skipping"] = {
        "files_without_filter": scan_files(table),
        "files_for_one_id": scan_files(table.where(f"id = {probe}")),
        "rows_for_one_id": table.where(f"id = {probe}").count(),
    }
    return out


def partitioned_table(spark, spec: dict, workdir: Path) -> dict:
    """A `kafka-eos` stream into a `delta-eos` table partitioned by the Kafka partition, in
    `batches` micro-batches (availableNow); delta-spark reads it and prunes partitions."""
    from deltalake import DeltaTable

    path = str(workdir / "partitioned")
    query = (
        spark.readStream.format("kafka-eos")
        .option("kafka.bootstrap.servers", spec["bootstrap"])
        .option("subscribe", spec["in_topic"])
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(spec["max_offsets_per_trigger"]))
        .load()
        .selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value",
                    "partition", "offset", "timestamp")
        .writeStream.format("delta-eos")
        .option("path", path)
        .option("checkpointLocation", str(workdir / "cp-partitioned"))
        .option("partitionBy", "partition")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    step("delta-spark and delta-rs read the partitioned table")
    out = delta_observations(spark, path)
    table = spark.read.format("delta").load(path)
    out["batches"] = max(p["batchId"] for p in query.recentProgress) + 1
    out["pruning"] = {
        "files_without_filter": scan_files(table),
        "files_for_partition_0": scan_files(table.where("partition = 0")),
        "delta_rs_files_of_partition_0": sum(
            1 for uri in DeltaTable(path).file_uris() if "/partition=0/" in uri),
    }
    return out


def kafka_interop(spark, spec: dict, workdir: Path) -> dict:
    """A `kafka-eos` stream -> out_topic (one task fails once after writing and is retried);
    `format("kafka")` reads out_topic with read_committed and with read_uncommitted; the same
    input rows go through Spark's own Kafka sink (spark_out_topic) for the key -> partition
    comparison; both sources read the input topic."""
    step("a kafka-eos stream")
    query = (
        spark.readStream.format("kafka-eos")
        .option("kafka.bootstrap.servers", spec["bootstrap"])
        .option("subscribe", spec["in_topic"])
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(spec["max_offsets_per_trigger"]))
        # a task per partition: the fault fails batch 1's task 1 (the default would plan a
        # small batch as one task)
        .option("targetTasksPerBatch", "8")
        .load()
        .selectExpr("key", "value")
        .writeStream.format("kafka-eos")
        .option("kafka.bootstrap.servers", spec["bootstrap"])
        .option("topic", spec["out_topic"])
        .option("checkpointLocation", str(workdir / "cp-kafka"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()

    def spark_read(topic: str, isolation: str | None, fmt: str = "kafka", **extra: str):
        reader = (spark.read.format(fmt)
                  .option("kafka.bootstrap.servers", spec["bootstrap"])
                  .option("subscribe", topic)
                  .option("startingOffsets", "earliest")
                  .option("endingOffsets", "latest"))
        if isolation:
            reader = reader.option("kafka.isolation.level", isolation)
        for k, v in extra.items():
            reader = reader.option(k, v)
        return reader.load()

    step("format(\"kafka\") reads the kafka-eos output")
    columns = ["key", "value", "partition", "offset"]
    committed = spark_read(spec["out_topic"], "read_committed").select(*columns).collect()
    uncommitted = spark_read(spec["out_topic"], "read_uncommitted").select(*columns).collect()

    step("format(\"kafka\") writes the input rows")
    # Spark's own (at-least-once) Kafka sink, the same input rows
    spark_read(spec["in_topic"], None, fmt="kafka-eos").selectExpr("key", "value") \
        .write.format("kafka").option("kafka.bootstrap.servers", spec["bootstrap"]) \
        .option("topic", spec["spark_out_topic"]).save()
    by_spark_sink = spark_read(spec["spark_out_topic"], None).select(*columns).collect()

    step("both sources read the input topic")
    # both sources, the same batch read of the input topic, every column
    every = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType",
             "headers"]
    sources = {fmt: rows_of(spark_read(spec["in_topic"], None, fmt=fmt, includeHeaders="true")
                            .select(*every).collect())
               for fmt in ("kafka", "kafka-eos")}
    return {
        "batches": max(p["batchId"] for p in query.recentProgress) + 1,
        "read_committed": rows_of(committed),
        "read_uncommitted": rows_of(uncommitted),
        "spark_sink": rows_of(by_spark_sink),
        "input_by_format_kafka": sources["kafka"],
        "input_by_format_kafka_eos": sources["kafka-eos"],
    }


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    workdir = Path(spec["workdir"])
    started = time.monotonic()
    step("starting Spark")
    conf = {"spark.task.maxFailures": "4", "spark.sql.adaptive.enabled": "false"}
    parts = [("unpartitioned", lambda: unpartitioned_table(spark, workdir)),
             ("partitioned", lambda: partitioned_table(spark, spec, workdir)),
             ("kafka", lambda: kafka_interop(spark, spec, workdir))]
    if spec.get("session", "peers") == "peers":
        spark = peer_spark("kafka-eos-peers-interop", master="local[2,4]", conf={
            **conf,
            # delta-spark rebuilds a table's state in 50 tasks by default: 130 s for a 4-file
            # table on a loaded 2-core machine (measured)
            "spark.databricks.delta.snapshotPartitions": "2"})
    else:
        spark = kafka_connector_spark("kafka-eos-peers-interop-main", master="local[2,4]",
                                      conf=conf)
        parts = parts[-1:]
    import pyspark

    result: dict[str, Any] = {
        "pyspark": pyspark.__version__,
        "spark": spark.version,
        "session_start_s": round(time.monotonic() - started, 1),
    }
    timings = {}
    for name, run in parts:
        t = time.monotonic()
        step(name)
        result[name] = run()
        timings[name] = round(time.monotonic() - t, 1)
    result["timings_s"] = timings
    spark.stop()
    Path(argv[1]).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
