"""The demo's Spark job: Kafka -> `kafka-eos` source -> parse and enrich -> two exactly-once
sinks, a `delta-eos` table and a `kafka-eos` topic (one streaming query each, each with its own
checkpoint). With `--upsert`: Kafka -> `kafka-eos` -> the Debezium envelopes turned into the
sink's input with `selectExpr` (as docs/delta-sink.md shows) -> one `delta-eos` query in upsert
mode (mergeKeys id, sequenceBy the source's lsn, deletes where op = 'd').

It writes the ready file once both queries have started, and runs as its own process group so that `--chaos` can SIGKILL all of it (driver JVM included)
and restart it on the same checkpoints. It runs on a processing-time trigger until the demo
creates the stop file; it then stops both queries and drains what is left with
`Trigger.AvailableNow` on the same checkpoints, in the same JVM, and exits 0.

    python -m connectors.demo.pipeline --bootstrap-servers B --input-topic T \\
        (--output-topic O | --upsert) --table PATH --checkpoints DIR --stop-file FILE

With `--value-format avro` the input's values are Avro in the Confluent wire format: the
source decodes them (`valueFormat=avro`) and the Kafka sink writes Avro too, its schema
registered under `<output topic>-value`; the registry's URL comes in the environment variable
KAFKA_EOS_DEMO_SCHEMA_REGISTRY_URL (it may hold a password).

A secured cluster's client settings (`--kafka-config`) come in the environment variable
KAFKA_EOS_DEMO_KAFKA_CONFIG (JSON, librdkafka names), never in argv; they become the source's
and the sink's `kafka.*` options.
"""

from __future__ import annotations

import argparse
import os
import time

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from connectors import kafka_config_file
from connectors.core.kafka.format import FORMAT_NAME as KAFKA_EOS
from connectors.demo import avro as demo_avro
from connectors.demo.avro import FORMATS, OUTPUT_RECORD
from connectors.demo.changes import ENVELOPE_TYPE
from sinks.delta.options import FORMAT_NAME as DELTA_EOS

DRAIN_MAX_OFFSETS = 50_000

EVENT_SCHEMA = StructType(
    [
        StructField("event_id", LongType()),
        StructField("user_id", LongType()),
        StructField("action", StringType()),
        StructField("amount", DoubleType()),
        StructField("event_time", StringType()),
    ]
)


def enrich(events: DataFrame, value_format: str = "json") -> DataFrame:
    """The demo's transformation: parse the JSON value (with `avro`, the source has decoded it
    into a struct already), add the amount in cents and lineage."""
    event = (F.col("value") if value_format == "avro"
             else F.from_json(F.col("value").cast("string"), EVENT_SCHEMA))
    parsed = events.select(
        event.alias("e"),
        F.col("partition").alias("source_partition"),
        F.col("offset").alias("source_offset"),
    )
    return parsed.select(
        "e.event_id",
        "e.user_id",
        F.upper("e.action").alias("action"),
        F.round(F.col("e.amount") * 100).cast("long").alias("amount_cents"),
        F.to_timestamp("e.event_time").alias("event_time"),
        "source_partition",
        "source_offset",
    )


#: `--upsert`: the upsert mode's options (docs/delta-sink.md#upsert-mode-change-data).
UPSERT_OPTIONS = {"mergeKeys": "id", "sequenceBy": "lsn", "applyAsDeletes": "op = 'd'",
                  "exceptColumns": "op"}


def debezium_changes(records: DataFrame) -> DataFrame:
    """Debezium's JSON envelope -> the upsert sink's input: the row's columns from `after` (the
    key from `before` for a delete), the op, the source's log position as the sequence, and
    the Kafka position of the change (lineage the verification checks)."""
    return records.selectExpr(
        f"from_json(CAST(value AS STRING), '{ENVELOPE_TYPE}') AS e", "partition", "offset"
    ).selectExpr(
        "coalesce(e.after.id, e.before.id) AS id", "e.after.name AS name",
        "e.after.email AS email", "e.op AS op", "e.ts_ms AS ts_ms", "e.source.lsn AS lsn",
        "partition AS source_partition", "offset AS source_offset",
    )


def start_queries(
    spark: SparkSession, args: argparse.Namespace, *, drain: bool
) -> list[StreamingQuery]:
    # The drain catches up in few, larger batches: each batch costs a commit per partition.
    limit = max(args.max_offsets_per_trigger, DRAIN_MAX_OFFSETS) if drain else args.max_offsets_per_trigger

    # --kafka-config's settings (TLS, SASL), as the connectors' kafka.* options
    security = {f"kafka.{k}": v for k, v in args.kafka_config.items()}
    # --format avro: values in the Confluent wire format, schemas in the registry
    avro = args.value_format == "avro"
    registry = ({"valueFormat": "avro", "schema.registry.url": args.schema_registry_url}
                if avro else {})

    def source() -> DataFrame:
        return (
            spark.readStream.format(KAFKA_EOS)
            .options(**security)
            .options(**registry)
            .option("kafka.bootstrap.servers", args.bootstrap_servers)
            .option("subscribe", args.input_topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(limit))
            .load()
        )

    def enriched() -> DataFrame:
        return enrich(source(), args.value_format)

    def trigger(writer):
        if drain:
            return writer.trigger(availableNow=True)
        return writer.trigger(processingTime=f"{args.trigger_ms} milliseconds")

    if args.upsert:
        upsert = trigger(
            debezium_changes(source())
            .writeStream.format(DELTA_EOS)
            .queryName("demo-delta-upsert")
            .options(**UPSERT_OPTIONS)
            .option("path", args.table)
            .option("checkpointLocation", os.path.join(args.checkpoints, "delta"))
        ).start()
        return [upsert]

    delta = trigger(
        enriched()
        .writeStream.format(DELTA_EOS)
        .queryName("demo-delta")
        .option("path", args.table)
        .option("checkpointLocation", os.path.join(args.checkpoints, "delta"))
    ).start()
    rows = enriched()
    value = F.struct(*rows.columns)
    kafka = trigger(
        rows.select(
            F.col("user_id").cast("string").alias("key"),
            (value if avro else F.to_json(value)).alias("value"),
        )
        .writeStream.format(KAFKA_EOS)
        .queryName("demo-kafka")
        .options(**security)
        # the sink derives the record's Avro schema from the struct and registers it
        .options(**registry, **({"valueRecordName": OUTPUT_RECORD} if avro else {}))
        .option("kafka.bootstrap.servers", args.bootstrap_servers)
        .option("topic", args.output_topic)
        .option("checkpointLocation", os.path.join(args.checkpoints, "kafka"))
    ).start()
    return [delta, kafka]


def _stop_between_batches(query: StreamingQuery, wait_s: float = 30.0) -> None:
    """Stop `query` once its trigger is idle (up to `wait_s`). A stop in the middle of a batch
    is safe (nothing of the batch is committed; the drain replays it) but Spark logs it as
    ERROR lines with a TaskKilledException's stack trace per task, which read as a failure in
    the demo's log; between batches a stop is silent, and no batch is done twice."""
    deadline = time.monotonic() + wait_s
    while query.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.05)
    query.stop()


def _await_all(queries: list[StreamingQuery]) -> None:
    for q in queries:
        q.awaitTermination()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap-servers", required=True)
    ap.add_argument("--input-topic", required=True)
    ap.add_argument("--output-topic")
    ap.add_argument("--upsert", action="store_true",
                    help="change events into one delta-eos query in upsert mode")
    ap.add_argument("--table", required=True)
    ap.add_argument("--checkpoints", required=True)
    ap.add_argument("--stop-file", required=True)
    ap.add_argument("--ready-file", required=True)
    ap.add_argument("--trigger-ms", type=int, default=1000)
    ap.add_argument("--max-offsets-per-trigger", type=int, default=5000)
    ap.add_argument("--master", default="local[2,4]")  # 4 attempts: a failed task is retried
    ap.add_argument("--value-format", choices=FORMATS, default="json",
                    help="avro: values in the Confluent wire format (the registry's URL in "
                         f"the environment variable {demo_avro.ENV})")
    args = ap.parse_args()
    if not (args.upsert or args.output_topic):
        ap.error("--output-topic is required (or --upsert)")
    # The registry URL may hold a password: in the environment, never argv; out of it before
    # Spark starts.
    args.schema_registry_url = demo_avro.from_env()
    if args.value_format == "avro" and not args.schema_registry_url:
        ap.error(f"--value-format avro needs the registry's URL in {demo_avro.ENV}")
    # Kafka client settings come in the environment (never argv), and are taken out of it
    # before Spark starts, so that its JVM and Python workers do not inherit them.
    args.kafka_config = kafka_config_file.from_env()

    from connectors import enable_structured_logs
    from connectors.local.spark import local_spark

    enable_structured_logs()  # before Spark starts: its Python workers inherit the choice
    spark = local_spark("kafka-eos-demo", master=args.master, conf={"spark.task.maxFailures": "4"})
    queries = start_queries(spark, args, drain=False)
    with open(args.ready_file, "w") as f:  # the demo's chaos waits for this: batches now run
        f.write(str(os.getpid()))
    # Stop once asked to, and once every query has run a trigger: a query stopped while its
    # source is still starting leaves Spark waiting for the source's Python runner to time out.
    while not (os.path.exists(args.stop_file) and all(q.lastProgress for q in queries)):
        for q in queries:
            if q.exception() is not None:  # a failed query fails the job: the demo shows why
                raise q.exception()
        time.sleep(0.3)
    for q in queries:
        _stop_between_batches(q)
    _await_all(start_queries(spark, args, drain=True))
    spark.stop()


if __name__ == "__main__":
    main()
