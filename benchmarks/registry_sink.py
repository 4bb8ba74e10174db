"""The `kafka-eos` sink's Avro write, as ratios in one run (docs/design.md#performance-method).

A 10-field record at about 200 B and 1 KB of Avro:

* serialization alone, in one process: the sink's encoder (an Arrow struct column to wire-format
  bytes, fastavro's schemaless writer per row) against confluent-kafka's own `AvroSerializer`
  called per row on the same rows (as a Python loop or a UDF would), Arrow-to-dicts included;
* end to end, a batch write (`df.write.format("kafka-eos")`, exactly-once, two tasks) of the
  rows with `valueFormat=avro` against values of the Avro payload's size already as bytes
  (`value` binary: what the sink writes without a registry format), each from a cached
  DataFrame in one Spark session.

    python -m benchmarks.registry_sink [--rows N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

ROWS = 200_000
#: timed (binary, avro) write pairs per size; the median ratio is reported
PAIRS = 3
#: note length for records of about 200 B and 1 KB of Avro
SIZES = {"200B": 110, "1KB": 920}

RECORD_SQL = """struct(
    id,
    concat('user-', CAST(id % 10007 AS STRING)) AS user,
    element_at(array('NO', 'SE', 'DK', 'FI', 'DE'), CAST(id % 5 + 1 AS INT)) AS country,
    IF(id % 3 = 0, 'click', 'view') AS event,
    CAST(id AS DOUBLE) / 7 AS amount,
    CAST(id % 1000 AS DOUBLE) / 1000 AS score,
    CAST(id % 100 AS INT) AS qty,
    timestamp_micros(1704067200000000 + id * 1000) AS ts,
    id % 2 = 0 AS flag,
    repeat('x', {note}) AS note
) AS value"""


def encode_only(spark, registry_url: str, note: int, rows: int, pairs: int = PAIRS) -> dict:
    """Rows/s of the sink's encoder and of confluent-kafka's AvroSerializer on the same rows."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from connectors.core.schema_registry.encoding import EncodingPlan, encoder_for
    from connectors.core.schema_registry.spark_schemas import avro_schema

    df = spark.range(rows).selectExpr(RECORD_SQL.format(note=note))
    table = df.toArrow()
    column = table.column("value").combine_chunks()
    schema_text = json.dumps(avro_schema(df.schema["value"].dataType))
    client = SchemaRegistryClient({"url": registry_url})
    subject = f"bench-encode-{note}-{time.time_ns()}-value"
    schema_id = client.register_schema(subject, Schema(schema_text, "AVRO"))
    encoder = encoder_for(EncodingPlan("value", "avro", subject, schema_id, schema_text, True))
    batch = 10_000  # the sink sees Arrow batches of Spark's maxRecordsPerBatch (10,000)
    serializer = AvroSerializer(client, schema_text, conf={"auto.register.schemas": True})
    ctx = SerializationContext(subject[:-len("-value")], MessageField.VALUE)
    sizes = 0

    def ours() -> None:
        nonlocal sizes
        sizes = 0
        for offset in range(0, rows, batch):
            sizes += sum(len(b) for b in encoder.encode(column.slice(offset, batch)))

    def theirs() -> None:
        for offset in range(0, rows, batch):
            for record in column.slice(offset, batch).to_pylist():
                serializer(record, ctx)

    ratios, our_rates, their_rates = [], [], []
    for _ in range(pairs):  # alternated, as the writes below
        started = time.perf_counter()
        ours()
        our_rates.append(rows / (time.perf_counter() - started))
        started = time.perf_counter()
        theirs()
        their_rates.append(rows / (time.perf_counter() - started))
        ratios.append(our_rates[-1] / their_rates[-1])
    return {"avg_bytes": round(sizes / rows),
            "kafka_eos_rows_per_s": round(statistics.median(our_rates)),
            "confluent_serializer_rows_per_s": round(statistics.median(their_rates)),
            "ratio": round(statistics.median(ratios), 2)}


def end_to_end(spark, bootstrap: str, registry_url: str, note: int, rows: int,
               payload_bytes: int, pairs: int = PAIRS) -> dict:
    """Rows/s of a batch write with valueFormat=avro, and of values of the Avro payload's
    size already as bytes (what the sink writes without a registry format)."""
    from integration_tests.support.kafka_data import create_topic, delete_topic, unique_topic

    records = spark.range(rows).selectExpr(RECORD_SQL.format(note=note))
    frames = {"avro": records.repartition(2).cache(),
              "binary": spark.range(rows).selectExpr(
                  f"CAST(repeat('x', {payload_bytes}) AS BINARY) AS value").repartition(2)
              .cache()}
    for frame in frames.values():
        frame.count()
    rates: dict[str, list[float]] = {"binary": [], "avro": []}
    # alternated, after one untimed pair (the Python workers' first imports): on a shared
    # machine the load changes from one write to the next, so each pair gives a ratio and
    # the median of PAIRS is reported
    for i in range(pairs + 1):
        for name in ("binary", "avro"):
            topic = unique_topic(f"bench-sr-{name}")
            create_topic(bootstrap, topic, 2)
            writer = (frames[name].write.format("kafka-eos").mode("append")
                      .option("kafka.bootstrap.servers", bootstrap).option("topic", topic))
            if name == "avro":
                writer = writer.option("valueFormat", "avro").option("schema.registry.url",
                                                                       registry_url)
            started = time.perf_counter()
            writer.save()
            if i:
                rates[name].append(rows / (time.perf_counter() - started))
            delete_topic(bootstrap, topic)
    for frame in frames.values():  # a later size's frames must not share the heap with these
        frame.unpersist()
    ratios = [a / b for a, b in zip(rates["avro"], rates["binary"])]
    return {"binary_rows_per_s": round(statistics.median(rates["binary"])),
            "avro_rows_per_s": round(statistics.median(rates["avro"])),
            "ratio": round(statistics.median(ratios), 2),
            "ratios": [round(r, 2) for r in ratios]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=ROWS)
    args = parser.parse_args(argv)

    from integration_tests.support.brokers import kafka_broker
    from connectors.local.spark import local_spark
    from connectors.local.schema_registry import schema_registry

    results: dict = {}
    with kafka_broker() as broker, schema_registry() as registry:
        spark = local_spark("kafka-eos-registry-sink-benchmark")
        try:
            for size, note in SIZES.items():
                encode = encode_only(spark, registry.url, note, args.rows)
                results[size] = {
                    "encode": encode,
                    "sink": end_to_end(spark, broker.bootstrap_servers, registry.url, note,
                                       args.rows, encode["avg_bytes"] - 5),
                }
                print(size, json.dumps(results[size]), flush=True)
        finally:
            spark.stop()
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
