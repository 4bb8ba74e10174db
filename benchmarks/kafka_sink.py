"""`kafka-eos` sink figures as ratios in one run (DESIGN.md section 9):

* exactly-once against at-least-once throughput (same input, same pipeline);
* the commit phase's latency per batch (median, 95th percentile), from the sink's own
  per-batch log line (`commit_ms`: decision record, EndTxn per partition, done marker);
* a raw idempotent confluent-kafka producer writing the same records, for scale.

    python -m benchmarks.kafka_sink [--records 200000] [--partitions 2] [--value-bytes 100]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time

from confluent_kafka import Producer

from benchmarks.source_throughput import produce_fixed
from connectors.testing import kafka_broker, local_spark
from sinks.two_phase_commit import METRICS_ENV
from integration_tests.kafka_data import create_topic, unique_topic



METRICS_FILE = os.path.join(tempfile.mkdtemp(prefix="bench-kafka-"), "batches.jsonl")
os.environ[METRICS_ENV] = METRICS_FILE  # before Spark starts: its Python workers inherit it


def batch_lines(sink_prefix: str) -> list[dict]:
    with open(METRICS_FILE) as f:
        lines = [json.loads(line) for line in f]
    return [line for line in lines if line["sink"] == f"kafka-eos[{sink_prefix}]"]


def run_sink(spark, bs: str, src: str, guarantee: str, partitions: int, per_trigger: int) -> dict:
    out = unique_topic(f"bench-{guarantee}")
    create_topic(bs, out, partitions)
    prefix = f"bench-{guarantee}-{out}"
    with tempfile.TemporaryDirectory() as ckpt:
        query = (
            spark.readStream.format("kafka-eos")
            .option("kafka.bootstrap.servers", bs).option("subscribe", src)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(per_trigger)).load()
            .select("key", "value")
            .writeStream.format("kafka-eos")
            .option("kafka.bootstrap.servers", bs).option("topic", out)
            .option("deliveryGuarantee", guarantee).option("transactionalIdPrefix", prefix)
            .option("checkpointLocation", ckpt)
            .trigger(availableNow=True).start()
        )
        query.awaitTermination()
        progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    lines = batch_lines(prefix)
    commit_ms = [line["commit_ms"] for line in lines if line["rows"] > 0]
    rows = sum(p["numInputRows"] for p in progress)
    seconds = sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000
    return {"rows": rows, "rows_per_s": rows / seconds, "commit_ms": commit_ms}


def raw_producer(bs: str, records: int, partitions: int, size: int) -> float:
    out = unique_topic("bench-raw")
    create_topic(bs, out, partitions)
    p = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "linger.ms": 5})
    payload = b"x" * size
    t = time.perf_counter()
    for i in range(records):
        while True:
            try:
                p.produce(out, key=str(i).encode(), value=payload)
                break
            except BufferError:
                p.poll(0.05)
    p.flush(120)
    return records / (time.perf_counter() - t)


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--per-trigger", type=int, default=20_000)
    args = ap.parse_args()
    with kafka_broker() as broker:
        bs = broker.bootstrap_servers
        src = unique_topic("bench-src")
        create_topic(bs, src, args.partitions)
        produce_fixed(bs, src, args.partitions, args.records // args.partitions, args.value_bytes)
        spark = local_spark("bench-kafka-sink")
        run_sink(spark, bs, src, "exactly-once", args.partitions, args.per_trigger)  # warm-up
        eo = run_sink(spark, bs, src, "exactly-once", args.partitions, args.per_trigger)
        alo = run_sink(spark, bs, src, "at-least-once", args.partitions, args.per_trigger)
        spark.stop()
        raw = raw_producer(bs, eo["rows"], args.partitions, args.value_bytes)
    print(json.dumps({
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "broker": broker.kind,
        "records": eo["rows"],
        "partitions": args.partitions,
        "records_per_batch": args.per_trigger,
        "exactly_once_rows_per_s": round(eo["rows_per_s"]),
        "at_least_once_rows_per_s": round(alo["rows_per_s"]),
        "raw_idempotent_producer_rows_per_s": round(raw),
        "ratio_exactly_once_vs_at_least_once": round(eo["rows_per_s"] / alo["rows_per_s"], 3),
        "ratio_exactly_once_vs_raw_producer": round(eo["rows_per_s"] / raw, 3),
        "commit_phase_ms_median": round(statistics.median(eo["commit_ms"]), 1),
        "commit_phase_ms_p95": round(pct(eo["commit_ms"], 0.95), 1),
        "batches_measured": len(eo["commit_ms"]),
    }, indent=2))


if __name__ == "__main__":
    main()
