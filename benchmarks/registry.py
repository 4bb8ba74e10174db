"""Schema Registry Avro read throughput, as ratios in one run (docs/design.md#performance-method).

A 10-field record (long, strings, doubles, an int, a timestamp-micros, a boolean, a nullable
note) at about 200 B and 1 KB of Avro, written in the Confluent wire format to a topic of
`partitions` partitions, with its schema in the local registry. The same topic is read:

* by `kafka-eos` with `valueFormat=avro` into Spark's no-op sink;
* by `kafka-eos` as `binary` (the bytes, undecoded) into no-op;
* by Spark's own `from_avro` (spark-avro) on the bytes after the 5-byte header, applied to the
  binary read in the same session;
* by confluent-kafka's `AvroDeserializer` in a plain consumer loop (the raw client), one
  process per partition, each record turned into a dict.

Beside them, the decoders alone in this process on the same bytes: the fast path (polars),
the fastavro path it falls back to, and `AvroDeserializer` per record; and, cheaply, the same
for Protobuf and JSON Schema records of the same fields. Then the sink's Avro write
(benchmarks/registry_sink.py: against AvroSerializer and against bytes) and, end to end,
against a plain confluent-kafka producer loop with AvroSerializer.

    python -m benchmarks --only registry        (or python -m benchmarks.registry)

It starts its own broker and registry, unless KAFKA_BOOTSTRAP_SERVERS and SCHEMA_REGISTRY_URL
name them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import os
import statistics
import tempfile
import time

#: note length for records of about 200 B and 1 KB of Avro
SIZES = {"200B": 162, "1KB": 1078}
PAIRS = 3  # alternated measured rounds of the four readers; medians reported
RECORDS = 400_000  # per size (as --records): seconds per read, a batch's fixed cost small beside

AVRO_SCHEMA = {
    "type": "record", "name": "Event", "namespace": "bench",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "user", "type": "string"},
        {"name": "country", "type": "string"},
        {"name": "event", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "score", "type": "double"},
        {"name": "qty", "type": "int"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "flag", "type": "boolean"},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}


def record(i: int, note: int) -> dict:
    return {"id": i, "user": f"user-{i % 10007}", "country": ("NO", "SE", "DK", "FI", "DE")[i % 5],
            "event": "click" if i % 3 == 0 else "view", "amount": i / 7, "score": i % 1000 / 1000,
            "qty": i % 100, "ts": 1_704_067_200_000_000 + i * 1000, "flag": i % 2 == 0,
            "note": None if i % 10 == 0 else "x" * note}


def wire_records(schema_id: int, note: int, count: int) -> list[bytes]:
    import fastavro

    parsed = fastavro.parse_schema(AVRO_SCHEMA)
    header = b"\x00" + schema_id.to_bytes(4, "big")
    out = []
    for i in range(count):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, record(i, note))
        out.append(header + buf.getvalue())
    return out


def produce(bootstrap: str, topic: str, partitions: int, values: list[bytes]) -> None:
    """The records spread over the partitions, each ending with a single-record batch."""
    from benchmarks.common import produce_sealed

    per = len(values) // partitions
    produce_sealed(bootstrap, topic, partitions,
                   lambda p: ((None, v) for v in values[p * per:(p + 1) * per]))


def deserializer_loop(bootstrap: str, topic: str, partition: int, end: int,
                      registry_url: str) -> tuple[int, float]:
    """confluent-kafka's consumer and AvroDeserializer, the way a plain Python job reads the
    topic: each record's value to a dict, until the partition's end."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from benchmarks.common import raw_consume

    deserialize = AvroDeserializer(SchemaRegistryClient({"url": registry_url}))
    ctx = SerializationContext(topic, MessageField.VALUE)
    return raw_consume(bootstrap, topic, partition, end, each=lambda value: deserialize(value, ctx))


def spark_reads(spark, bootstrap: str, topic: str, rows: int, registry_url: str) -> dict:
    """The three Spark reads into no-op, one query each; rows/s from the query's progress."""
    from pyspark.sql.avro.functions import from_avro
    from pyspark.sql.functions import expr

    from benchmarks.common import run_query

    def read(extra: dict[str, str], spark_from_avro: bool = False) -> float:
        with tempfile.TemporaryDirectory() as ckpt:
            df = (spark.readStream.format("kafka-eos")
                  .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
                  .option("startingOffsets", "earliest").options(**extra).load())
            if spark_from_avro:
                df = df.select(from_avro(expr("substring(value, 6)"),
                                         json.dumps(AVRO_SCHEMA)).alias("value"))
            query = (df.writeStream.format("noop").option("checkpointLocation", ckpt)
                     .trigger(availableNow=True).start())
            return run_query(query, rows).rows_per_s

    avro = {"valueFormat": "avro", "schema.registry.url": registry_url}
    return {"avro": read(avro), "binary": read({}), "from_avro": read({}, spark_from_avro=True)}


def decoders_alone(values: list[bytes], registry_url: str, schema_id: int,
                   pairs: int = PAIRS) -> dict:
    """Rows/s of the decoders in this process, on Arrow batches of 10,000 records."""
    import pyarrow as pa
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from connectors.core.schema_registry.decoding import ReaderSchema
    from connectors.core.schema_registry.decoders import new_decoder
    from connectors.core.schema_registry.options import RegistryOptions

    opts = RegistryOptions.parse({"valueformat": "avro", "schema.registry.url": registry_url})
    reader = ReaderSchema("avro", "bench", schema_id, None, json.dumps(AVRO_SCHEMA))
    fast, fallback = new_decoder(opts, reader), new_decoder(opts, reader)
    fallback.fast = None
    batches = [pa.array(values[i:i + 10_000], pa.binary()) for i in range(0, len(values), 10_000)]
    deserialize = AvroDeserializer(SchemaRegistryClient({"url": registry_url}))
    ctx = SerializationContext("bench", MessageField.VALUE)

    def where(i: int) -> tuple[str, int, int]:
        return ("bench", 0, i)

    def timed(fn) -> float:
        started = time.perf_counter()
        fn()
        return len(values) / (time.perf_counter() - started)

    runs: dict[str, list[float]] = {"fast_path": [], "fastavro_path": [], "avro_deserializer": []}
    for _ in range(pairs):
        runs["fast_path"].append(timed(lambda: [fast.decode(b, where) for b in batches]))
        runs["fastavro_path"].append(timed(lambda: [fallback.decode(b, where) for b in batches]))
        runs["avro_deserializer"].append(timed(lambda: [deserialize(v, ctx) for v in values]))
    # the fast path must agree with the fallback on these records, or the figure means nothing
    assert fast.decode(batches[0], where).equals(fallback.decode(batches[0], where))
    return {k: round(statistics.median(v)) for k, v in runs.items()}


def other_formats_alone(registry_url: str, count: int, note: int, pairs: int = PAIRS) -> dict:
    """Protobuf and JSON Schema records of the same fields: kafka-eos's decoder against
    confluent-kafka's deserializer, in this process."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
    from confluent_kafka.schema_registry.protobuf import (ProtobufDeserializer,
                                                          ProtobufSerializer)
    from confluent_kafka.serialization import MessageField, SerializationContext

    from integration_tests.support.protobuf_messages import message_classes

    client = SchemaRegistryClient({"url": registry_url})
    topic = f"bench-fmt-{time.time_ns()}"
    ctx = SerializationContext(topic, MessageField.VALUE)
    rows = [record(i, note) for i in range(count)]
    out: dict[str, dict] = {}

    cls = message_classes("bench.proto", "bench", {"Event": [
        ("id", "int64", 1), ("user", "string", 2), ("country", "string", 3),
        ("event", "string", 4), ("amount", "double", 5), ("score", "double", 6),
        ("qty", "int32", 7), ("ts", "int64", 8), ("flag", "bool", 9),
        ("note", "string", 10, "optional")]})["Event"]
    serializer = ProtobufSerializer(cls, client, {"use.deprecated.format": False})
    values = [serializer(cls(**{k: v for k, v in r.items() if v is not None}), ctx) for r in rows]
    out["protobuf"] = _format_pair(
        "protobuf", f"{topic}-value", values, registry_url,
        ProtobufDeserializer(cls, {"use.deprecated.format": False}), ctx, pairs)

    json_schema = {"type": "object", "properties": {
        "id": {"type": "integer"}, "user": {"type": "string"}, "country": {"type": "string"},
        "event": {"type": "string"}, "amount": {"type": "number"}, "score": {"type": "number"},
        "qty": {"type": "integer"}, "ts": {"type": "integer"}, "flag": {"type": "boolean"},
        "note": {"type": ["string", "null"]}}}
    jtopic = topic + "-json"
    jctx = SerializationContext(jtopic, MessageField.VALUE)
    serializer = JSONSerializer(json.dumps(json_schema), client)
    values = [serializer(r, jctx) for r in rows]
    out["json_schema"] = _format_pair(
        "json-schema", f"{jtopic}-value", values, registry_url,
        JSONDeserializer(json.dumps(json_schema)), jctx, pairs)
    return out


def _format_pair(fmt: str, subject: str, values: list[bytes], registry_url: str, theirs,
                 ctx, pairs: int) -> dict:
    import pyarrow as pa

    from connectors.core.schema_registry.decoders import new_decoder
    from connectors.core.schema_registry.decoding import resolve_reader_schema
    from connectors.core.schema_registry.options import RegistryOptions

    opts = RegistryOptions.parse({"valueformat": fmt, "schema.registry.url": registry_url,
                                  "valuesubject": subject})
    decoder = new_decoder(opts, resolve_reader_schema(opts, None))
    batches = [pa.array(values[i:i + 10_000], pa.binary()) for i in range(0, len(values), 10_000)]
    ours_runs, theirs_runs = [], []
    for _ in range(pairs):
        started = time.perf_counter()
        for b in batches:
            decoder.decode(b, lambda i: ("bench", 0, i))
        ours_runs.append(len(values) / (time.perf_counter() - started))
        started = time.perf_counter()
        for v in values:
            theirs(v, ctx)
        theirs_runs.append(len(values) / (time.perf_counter() - started))
    ours, other = statistics.median(ours_runs), statistics.median(theirs_runs)
    return {"kafka_eos_decoder_rows_per_s": round(ours),
            "confluent_deserializer_rows_per_s": round(other),
            "ratio": round(ours / other, 2)}


def measure(spark, bootstrap: str, registry_url: str, *, records: int, partitions: int,
            note: int, warmup: bool = True, pairs: int = PAIRS) -> dict:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    from benchmarks.common import in_processes
    from integration_tests.support.kafka_data import create_topic, delete_topic, unique_topic

    topic = unique_topic(f"bench-avro-{note}")
    client = SchemaRegistryClient({"url": registry_url})
    schema_id = client.register_schema(f"{topic}-value",
                                       Schema(json.dumps(AVRO_SCHEMA), "AVRO"))
    per = records // partitions
    rows = per * partitions
    values = wire_records(schema_id, note, rows)
    create_topic(bootstrap, topic, partitions)
    produce(bootstrap, topic, partitions, values)
    jobs = [(bootstrap, topic, p, per, registry_url) for p in range(partitions)]
    if warmup:  # the broker's first read of fresh data, Spark's workers: not measured
        in_processes(deserializer_loop, jobs)
        spark_reads(spark, bootstrap, topic, rows, registry_url)
    runs: dict[str, list[float]] = {"avro": [], "binary": [], "from_avro": [], "loop": []}
    for _ in range(pairs):  # alternated, so that the machine's drift hits all alike
        for name, rate in spark_reads(spark, bootstrap, topic, rows, registry_url).items():
            runs[name].append(rate)
        results = in_processes(deserializer_loop, jobs)
        assert sum(n for n, _ in results) == rows, results
        runs["loop"].append(rows / max(s for _, s in results))
    delete_topic(bootstrap, topic)
    med = {k: statistics.median(v) for k, v in runs.items()}

    def paired(other: str) -> float:
        """The median of the runs' own ratios: on a shared machine the load drifts from one
        run to the next, less within one round of the four readers."""
        return round(statistics.median(a / b for a, b in zip(runs["avro"], runs[other])), 3)

    return {
        "records": rows, "partitions": partitions,
        "avg_record_bytes": round(sum(map(len, values)) / rows),
        "kafka_eos_avro_rows_per_s": round(med["avro"]),
        "kafka_eos_binary_rows_per_s": round(med["binary"]),
        "spark_from_avro_rows_per_s": round(med["from_avro"]),
        "avro_deserializer_loop_rows_per_s": round(med["loop"]),
        "runs": {k: [round(x) for x in v] for k, v in runs.items()},
        "ratio_avro_vs_binary": paired("binary"),
        "ratio_avro_vs_deserializer_loop": paired("loop"),
        "ratio_avro_vs_spark_from_avro": paired("from_avro"),
        "decoders_alone": decoders_alone(values[:min(rows, 50_000)], registry_url, schema_id,
                                         pairs),
    }


def producer_loop(bootstrap: str, topic: str, registry_url: str, schema_text: str,
                  rows: list[dict]) -> tuple[int, float]:
    """A plain confluent-kafka producer with AvroSerializer (idempotent, as the Kafka sink
    benchmark's raw producers): each dict serialized and produced, then flushed."""
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    serialize = AvroSerializer(SchemaRegistryClient({"url": registry_url}), schema_text)
    ctx = SerializationContext(topic, MessageField.VALUE)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 20})
    producer.produce(topic, serialize(rows[0], ctx))  # connection, producer id, schema id
    producer.flush(30)
    started = time.perf_counter()
    for row in rows:
        value = serialize(row, ctx)
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(300) != 0:
        raise RuntimeError("records not delivered")
    return len(rows), time.perf_counter() - started


def sink_rows(rows: int, note: int) -> list[dict]:
    """registry_sink.RECORD_SQL's rows, built here: collecting 100,000 1-KB rows through the
    driver ran its heap out beside the write benchmark's cached frames."""
    start = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    countries = ("NO", "SE", "DK", "FI", "DE")
    return [{"id": i, "user": f"user-{i % 10007}", "country": countries[i % 5],
             "event": "click" if i % 3 == 0 else "view", "amount": i / 7,
             "score": i % 1000 / 1000, "qty": i % 100,
             "ts": start + dt.timedelta(microseconds=i * 1000), "flag": i % 2 == 0,
             "note": "x" * note} for i in range(rows)]


def sink_write(spark, bootstrap: str, registry_url: str, note: int, rows: int,
               pairs: int = PAIRS) -> dict:
    """The sink's Avro write (benchmarks/registry_sink.py: its encoder against AvroSerializer,
    a batch write against bytes of the same size), and against a plain producer loop with
    AvroSerializer, one process per task of the write (two)."""
    from benchmarks import registry_sink
    from benchmarks.common import in_processes
    from connectors.core.schema_registry.spark_schemas import avro_schema
    from integration_tests.support.kafka_data import create_topic, delete_topic, unique_topic

    encode = registry_sink.encode_only(spark, registry_url, note, rows, pairs)
    write = registry_sink.end_to_end(spark, bootstrap, registry_url, note, rows,
                                     encode["avg_bytes"] - 5, pairs)
    df = spark.range(rows).selectExpr(registry_sink.RECORD_SQL.format(note=note))
    schema_text = json.dumps(avro_schema(df.schema["value"].dataType))
    dicts = sink_rows(rows, note)
    rates = []
    for _ in range(pairs):
        topic = unique_topic("bench-sr-loop")
        create_topic(bootstrap, topic, 2)
        half = len(dicts) // 2
        results = in_processes(producer_loop, [
            (bootstrap, topic, registry_url, schema_text, dicts[:half]),
            (bootstrap, topic, registry_url, schema_text, dicts[half:])])
        rates.append(sum(n for n, _ in results) / max(t for _, t in results))
        delete_topic(bootstrap, topic)
    loop = statistics.median(rates)
    return {"encode": encode, "write": write, "producer_loop_rows_per_s": round(loop),
            "ratio_sink_avro_vs_producer_loop": round(write["avro_rows_per_s"] / loop, 2)}


def run(bootstrap: str, registry_url: str, *, records: int, partitions: int,
        warmup: bool = True, sizes: dict[str, int] | None = None, pairs: int = PAIRS) -> dict:
    """Every size in one Spark session that has spark-avro's jar."""
    from connectors.local.spark import local_spark
    from integration_tests.support.spark_avro import spark_avro_jar

    spark = local_spark("kafka-eos-registry-benchmark", conf={"spark.jars": str(spark_avro_jar())},
                        quick_start=not warmup)
    results: dict = {}
    try:
        for size, note in (sizes or SIZES).items():
            results[size] = measure(spark, bootstrap, registry_url, records=records,
                                    partitions=partitions, note=note, warmup=warmup,
                                    pairs=pairs)
            results[size]["other_formats_alone"] = other_formats_alone(
                registry_url, min(records, 20_000), note, pairs)
            results[size]["sink"] = sink_write(spark, bootstrap, registry_url, note,
                                               min(records, 100_000), pairs)
            print(size, json.dumps(results[size]), flush=True)
    finally:
        spark.stop()
    return results


def table(section: dict) -> str:
    """The section as the rows of docs/performance.md's table."""
    lines = ["| size | avro rows/s | binary | from_avro | AvroDeserializer loop | avro/binary "
             "| avro/loop | avro/from_avro |", "|---|---|---|---|---|---|---|---|"]
    for size, r in section["sizes"].items():
        lines.append(
            f"| {size} ({r['avg_record_bytes']} B) | {r['kafka_eos_avro_rows_per_s']:,} "
            f"| {r['kafka_eos_binary_rows_per_s']:,} | {r['spark_from_avro_rows_per_s']:,} "
            f"| {r['avro_deserializer_loop_rows_per_s']:,} | {r['ratio_avro_vs_binary']} "
            f"| {r['ratio_avro_vs_deserializer_loop']} | {r['ratio_avro_vs_spark_from_avro']} |")
    lines += ["", "| size | sink write `valueFormat=avro` rows/s | bytes of that size | producer loop "
              "+ AvroSerializer | avro/bytes | avro/loop | sink encoder / AvroSerializer |",
              "|---|---|---|---|---|---|---|"]
    for size, r in section["sizes"].items():
        k = r["sink"]
        lines.append(
            f"| {size} ({k['encode']['avg_bytes']} B) | {k['write']['avro_rows_per_s']:,} "
            f"| {k['write']['binary_rows_per_s']:,} | {k['producer_loop_rows_per_s']:,} "
            f"| {k['write']['ratio']} | {k['ratio_sink_avro_vs_producer_loop']} "
            f"| {k['encode']['ratio']} |")
    return "\n".join(lines)


def run_section(args, argv: list[str] | None) -> int:
    """`python -m benchmarks --only registry`: this section alone, merged into an existing
    DIR/results.json (its other sections kept)."""
    import sys

    from benchmarks.common import (
        existing_results as _existing_results,
        write_json,
    )
    from benchmarks.common import load_average, section_header
    from integration_tests.support.brokers import kafka_broker
    from connectors.local.schema_registry import schema_registry

    json_path, results = _existing_results(args.output_dir)
    started = time.time()
    section = section_header(argv)
    given = os.environ.get("SCHEMA_REGISTRY_URL", "").strip()  # as KAFKA_BOOTSTRAP_SERVERS
    registry = contextlib.nullcontext(None) if given else schema_registry()
    with kafka_broker() as broker, registry as own:
        # --quick: one size, one run of each reader (checks that it all runs)
        section["sizes"] = run(broker.bootstrap_servers, given or own.url,
                               records=args.records, partitions=args.partitions,
                               warmup=args.warmup,
                               sizes=dict(list(SIZES.items())[:1]) if args.quick else None,
                               pairs=1 if args.quick else PAIRS)
    section["load_average"]["end"] = load_average()
    results["registry"] = section
    write_json(results, json_path)
    print(table(section))
    print(f"wrote {json_path} in {round(time.time() - started)} s", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    import argparse

    from integration_tests.support.brokers import kafka_broker
    from connectors.local.schema_registry import schema_registry

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=RECORDS)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    with kafka_broker() as broker, schema_registry() as registry:
        results = run(broker.bootstrap_servers, registry.url,
                      records=4_000 if args.quick else args.records,
                      partitions=args.partitions, warmup=not args.quick)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
