"""Spark's own Kafka connector (`format("kafka")`) and `kafka-eos` side by side, option by
option (docs/migrating-from-kafka.md): what `integration_tests/peers/test_peers_kafka.py` runs, one
Spark session, observing, not judging. Each case reads (or writes) the same topics with the
same options through both formats, in batch and in streaming (availableNow into a memory sink),
and leaves, per format, either the rows (every column) or the error it raised; the test
compares them.

    <python> -m integration_tests.support.peers_kafka_session SPEC.json RESULT.json

Runs in the peers' environment (PySpark 4.2.0, `peer_spark()`), or in the main one (PySpark
4.3) with the peers' Kafka connector jars (`spark-sql-kafka-0-10_2.13:4.2.0` and its
dependencies from the peers' jar cache) on `spark.jars`: SPEC's `"session"` says which.
SPEC's topics are made and filled by the test (integration_tests/peers/test_peers_kafka.py says
what each holds). Nothing here imports pytest.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from integration_tests.support.peers_session import rows_of, step

FORMATS = ("kafka", "kafka-eos")
EVERY = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]


def start_spark(kind: str):
    """`peers`: the peers' PySpark 4.2.0 session; `main`: a PySpark 4.3 session with Spark's
    4.2.0 Kafka connector on spark.jars."""
    conf = {"spark.task.maxFailures": "1", "spark.sql.adaptive.enabled": "false"}
    if kind == "peers":
        from integration_tests.support.peers import peer_spark

        return peer_spark("kafka-eos-peers-kafka", master="local[2]", conf=conf)
    from integration_tests.support.peers import kafka_connector_spark

    return kafka_connector_spark("kafka-eos-peers-kafka-main", master="local[2]", conf=conf)


def error_of(e: BaseException) -> str:
    """An error's type and message: its first line, then the lines that name an exception (a
    Python data source's own error is the last line of the worker's traceback); the JVM's
    stack frames left out."""
    lines = [line.strip() for line in str(e).strip().splitlines()]
    named = [line for line in lines[1:] if ("Error" in line or "Exception" in line)
             and not line.startswith("at ")]
    return "\n".join([f"{type(e).__name__}: {lines[0] if lines else ''}", *named])[:3000]


def outcome(run: Callable[[], dict]) -> dict:
    try:
        return run()
    except Exception as e:  # noqa: BLE001 (the error is the observation)
        return {"error": error_of(e)}


class Runner:
    def __init__(self, spark, spec: dict):
        self.spark = spark
        self.spec = spec
        self.workdir = Path(spec["workdir"])

    def _options(self, options: dict[str, str]) -> dict[str, str]:
        return {"kafka.bootstrap.servers": self.spec["bootstrap"], **options}

    def batch(self, fmt: str, options: dict[str, str], columns: list[str] = EVERY,
              partitions: bool = False) -> dict:
        df = self.spark.read.format(fmt).options(**self._options(options)).load()
        out: dict[str, Any] = {"columns": df.columns,
                               "rows": rows_of(df.select(*columns).collect())}
        if partitions:
            out["partitions"] = df.rdd.getNumPartitions()
        return out

    def stream(self, fmt: str, options: dict[str, str], columns: list[str] = EVERY,
               partitions: bool = False, processing_time: str | None = None) -> dict:
        """availableNow into a memory sink; with `partitions`, through foreachBatch instead,
        noting each micro-batch's Spark partitions. With `processing_time`, that trigger
        instead, until the first trigger that finds no new batch (`processAllAvailable`)."""
        name = f"m_{uuid.uuid4().hex[:10]}"
        writer = (self.spark.readStream.format(fmt).options(**self._options(options)).load()
                  .select(*columns).writeStream
                  .option("checkpointLocation", str(self.workdir / name)))
        writer = (writer.trigger(processingTime=processing_time) if processing_time
                  else writer.trigger(availableNow=True))
        batches: list[tuple[int, int, list]] = []
        if partitions:
            writer = writer.foreachBatch(lambda df, batch_id: batches.append(
                (batch_id, df.rdd.getNumPartitions(), df.collect())))
        else:
            writer = writer.format("memory").queryName(name)
        query = writer.start()
        if processing_time:
            try:
                query.processAllAvailable()
            finally:
                query.stop()
        else:
            query.awaitTermination()
        out: dict[str, Any] = {"batch_rows": [p["numInputRows"] for p in query.recentProgress
                                              if p["numInputRows"] > 0]}
        if partitions:
            out["rows"] = rows_of([row for _, _, rows in batches for row in rows])
            out["partitions"] = [n for _, n, rows in sorted(batches) if rows]
        else:
            out["rows"] = rows_of(self.spark.table(name).collect())
        return out

    def both(self, kind: str, options: dict[str, str], **kw) -> dict:
        run = self.batch if kind == "batch" else self.stream
        return {"kind": kind, "options": options,
                **{fmt: outcome(lambda fmt=fmt: run(fmt, options, **kw)) for fmt in FORMATS}}


def reading_cases(r: Runner, spec: dict) -> dict:
    """Every source option docs/migrating-from-kafka.md says behaves as Spark's."""
    t, t2, base = spec["topic"], spec["topic2"], spec["base_ms"]
    ts = base + 5 * spec["step_ms"] + spec["step_ms"] // 2  # between records 5 and 6
    hdr = {"includeHeaders": "true"}
    cases: dict[str, Callable[[], dict]] = {}

    def case(name: str, kind: str, options: dict[str, str], **kw) -> None:
        cases[name] = lambda: r.both(kind, options, **kw)

    for kind in ("batch", "stream"):
        case(f"{kind}_subscribe_earliest", kind,
             {"subscribe": t, "startingOffsets": "earliest", **hdr})
        case(f"{kind}_starting_offsets_json", kind,
             {"subscribe": t, **hdr,
              "startingOffsets": json.dumps({t: {"0": -2, "1": 3, "2": 7}})})
        case(f"{kind}_starting_timestamp", kind,
             {"subscribe": t, "startingTimestamp": str(ts), **hdr})
        case(f"{kind}_starting_offsets_by_timestamp", kind,
             {"subscribe": t, **hdr, "startingOffsetsByTimestamp": json.dumps(
                 {t: {"0": base, "1": ts, "2": base + 100 * spec["step_ms"]}}),
              "startingOffsetsByTimestampStrategy": "latest"})
        case(f"{kind}_subscribe_pattern", kind,
             {"subscribePattern": spec["pattern"], "startingOffsets": "earliest", **hdr})
        case(f"{kind}_assign", kind,
             {"assign": json.dumps({t: [0, 2], t2: [1]}), "startingOffsets": "earliest", **hdr})
        case(f"{kind}_without_headers", kind,
             {"subscribe": t, "startingOffsets": "earliest"}, columns=EVERY[:-1])
        case(f"{kind}_group_id", kind,
             {"subscribe": t, "startingOffsets": "earliest", "kafka.group.id": spec["group_id"],
              **hdr})
        case(f"{kind}_group_id_prefix", kind,
             {"subscribe": t, "startingOffsets": "earliest", "groupIdPrefix": "peers-prefix",
              **hdr})
        case(f"{kind}_consumer_options", kind,
             {"subscribe": t, "startingOffsets": "earliest", **hdr,
              "kafkaConsumer.pollTimeoutMs": "60000", "fetchOffset.numRetries": "5",
              "fetchOffset.retryIntervalMs": "20", "kafka.request.timeout.ms": "40000",
              "kafka.client.id": "peers-kafka-interop"})
        case(f"{kind}_read_committed_hides_aborted", kind,
             {"subscribe": spec["txn_topic"], "startingOffsets": "earliest",
              "kafka.isolation.level": "read_committed", **hdr})
        case(f"{kind}_fail_on_data_loss_false", kind,
             {"subscribe": spec["loss_topic"], "failOnDataLoss": "false", **hdr,
              "startingOffsets": json.dumps({spec["loss_topic"]: {"0": 1, "1": -2}})})
        case(f"{kind}_fail_on_data_loss_true", kind,
             {"subscribe": spec["loss_topic"], "failOnDataLoss": "true", **hdr,
              "startingOffsets": json.dumps({spec["loss_topic"]: {"0": 1, "1": -2}})})
        case(f"{kind}_by_timestamp_strategy_error", kind,
             {"subscribe": t, **hdr, "startingOffsetsByTimestamp": json.dumps(
                 {t: {"0": base, "1": base, "2": base + 100 * spec["step_ms"]}})})
        for refused in ("kafka.auto.offset.reset", "kafka.enable.auto.commit",
                        "kafka.key.deserializer", "kafka.value.deserializer",
                        "kafka.interceptor.classes"):
            value = {"kafka.auto.offset.reset": "earliest", "kafka.enable.auto.commit": "true",
                     "kafka.interceptor.classes": "com.example.Interceptor"}.get(
                         refused, "org.apache.kafka.common.serialization.StringDeserializer")
            case(f"{kind}_refused_{refused}", kind,
                 {"subscribe": t, "startingOffsets": "earliest", refused: value, **hdr})

    # precedence: startingTimestamp, then startingOffsetsByTimestamp, then startingOffsets
    for kind in ("batch", "stream"):
        case(f"{kind}_precedence_timestamp_first", kind,
             {"subscribe": t, **hdr, "startingTimestamp": str(ts),
              "startingOffsetsByTimestamp": json.dumps({t: {"0": base, "1": base, "2": base}}),
              "startingOffsets": "earliest"})
        case(f"{kind}_precedence_by_timestamp_before_offsets", kind,
             {"subscribe": t, **hdr, "startingOffsets": "earliest",
              "startingOffsetsByTimestamp": json.dumps({t: {"0": ts, "1": base, "2": ts}})})
    # batch reads only: the ending options
    case("batch_ending_offsets_json", "batch",
         {"subscribe": t, **hdr, "startingOffsets": json.dumps({t: {"0": 2, "1": -2, "2": -2}}),
          "endingOffsets": json.dumps({t: {"0": 8, "1": -1, "2": 4}})})
    case("batch_ending_timestamp", "batch",
         {"subscribe": t, "endingTimestamp": str(ts), **hdr})
    case("batch_ending_offsets_by_timestamp", "batch",
         {"subscribe": t, **hdr, "endingOffsetsByTimestamp": json.dumps(
             {t: {"0": ts, "1": base + 100 * spec["step_ms"], "2": base}})})
    case("batch_starting_offsets_latest_refused", "batch",
         {"subscribe": t, "startingOffsets": json.dumps({t: {"0": -1, "1": -2, "2": -2}}), **hdr})
    case("batch_ending_offsets_earliest_refused", "batch",
         {"subscribe": t, "endingOffsets": json.dumps({t: {"0": -2, "1": -1, "2": -1}}), **hdr})
    case("batch_min_partitions", "batch",
         {"subscribe": t, "minPartitions": "7", **hdr}, partitions=True)
    case("batch_max_records_per_partition", "batch",
         {"subscribe": t, "maxRecordsPerPartition": "4", **hdr}, partitions=True)
    case("batch_max_offsets_per_trigger_ignored", "batch",
         {"subscribe": t, "maxOffsetsPerTrigger": "5", **hdr})
    # streaming only: admission control; the ending options refused
    case("stream_max_offsets_per_trigger", "stream",
         {"subscribe": t, "startingOffsets": "earliest", "maxOffsetsPerTrigger": "8", **hdr})
    case("stream_refuses_min_offsets_above_max", "stream",
         {"subscribe": t, "startingOffsets": "earliest", "minOffsetsPerTrigger": "1000",
          "maxTriggerDelay": "1s", "maxOffsetsPerTrigger": "12", **hdr})
    case("stream_min_offsets_per_trigger", "stream",
         {"subscribe": t, "startingOffsets": "earliest", "minOffsetsPerTrigger": "1000",
          "maxTriggerDelay": "1s", **hdr})
    # ProcessingTime: does the first micro-batch wait for minOffsetsPerTrigger (1 h at most)?
    case("stream_min_offsets_per_trigger_first_batch", "stream",
         {"subscribe": t, "startingOffsets": "earliest", "minOffsetsPerTrigger": "1000",
          "maxTriggerDelay": "1h", **hdr}, processing_time="200 milliseconds")
    case("stream_min_partitions", "stream",
         {"subscribe": t, "startingOffsets": "earliest", "minPartitions": "7", **hdr},
         partitions=True)
    case("stream_max_records_per_partition", "stream",
         {"subscribe": t, "startingOffsets": "earliest", "maxRecordsPerPartition": "4", **hdr},
         partitions=True)
    for ending in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
        value = {"endingOffsets": "latest", "endingTimestamp": str(ts),
                 "endingOffsetsByTimestamp": json.dumps({t: {"0": ts, "1": ts, "2": ts}})}[ending]
        case(f"stream_refuses_{ending}", "stream",
             {"subscribe": t, "startingOffsets": "earliest", ending: value, **hdr})
    # read_uncommitted: the aborted records are in the log (format("kafka") shows them)
    cases["batch_read_uncommitted"] = lambda: {
        "kind": "batch", "kafka": outcome(lambda: r.batch("kafka", {
            "subscribe": spec["txn_topic"], "kafka.isolation.level": "read_uncommitted",
            **hdr}))}

    out = {}
    only = spec.get("only")
    for name, run in cases.items():
        if only and name not in only:
            continue
        step(name)
        t0 = time.monotonic()
        out[name] = run()
        out[name]["seconds"] = round(time.monotonic() - t0, 1)
    return out


def sink_case(r: Runner, spec: dict) -> dict:
    """The same rows, with `topic`, `key`, `value`, `partition` and `headers` columns and the
    `topic` option naming another topic, through both sinks (batch writes); read back by
    `format("kafka")` with read_committed."""
    from pyspark.sql import functions as F

    spark = r.spark
    n = 24
    df = (spark.range(n).select(
        F.lit(spec["sink_column_topic"]).alias("topic"),
        F.concat(F.lit("k"), (F.col("id") % 5).cast("string")).cast("binary").alias("key"),
        F.concat(F.lit("v"), F.col("id").cast("string")).cast("binary").alias("value"),
        (F.col("id") % 3).cast("int").alias("partition"),
        F.array(F.struct(F.lit("h").alias("key"),
                         F.col("id").cast("string").cast("binary").alias("value")))
        .alias("headers")))
    targets = {"kafka": spec["sink_topic_spark"], "kafka-eos": spec["sink_topic_eos"]}
    out: dict[str, Any] = {"written": n}
    for fmt, topic in targets.items():
        def write(fmt=fmt, topic=topic) -> dict:
            writer = (df.write.format(fmt).option("kafka.bootstrap.servers", spec["bootstrap"])
                      .option("topic", topic))
            if fmt == "kafka-eos":
                writer = writer.mode("append")
            writer.save()
            return {"rows": rows_of(
                r.batch("kafka", {"subscribe": topic, "includeHeaders": "true",
                                  "kafka.isolation.level": "read_committed"},
                        columns=["key", "value", "partition", "headers"])["rows"])}
        out[fmt] = outcome(write)
    out["column_topic_rows"] = len(r.batch("kafka", {"subscribe": spec["sink_column_topic"]},
                                           columns=["key"])["rows"])
    return out


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    started = time.monotonic()
    step(f"starting Spark ({spec['session']})")
    spark = start_spark(spec["session"])
    import pyspark

    result: dict[str, Any] = {"pyspark": pyspark.__version__, "spark": spark.version,
                              "session_start_s": round(time.monotonic() - started, 1)}
    runner = Runner(spark, spec)
    result["cases"] = reading_cases(runner, spec)
    step("sinks")
    result["sink"] = sink_case(runner, spec)
    result["total_s"] = round(time.monotonic() - started, 1)
    spark.stop()
    Path(argv[1]).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
