"""Source throughput as a ratio against raw confluent-kafka consumers, in one run
(DESIGN.md section 9): never an absolute figure alone.

    python -m benchmarks.source_throughput [--records 400000] [--partitions 2] [--value-bytes 100]

Prints a JSON document: rows/s of a `kafka-eos` streaming read into Spark's no-op sink (from
the query's own progress: input rows over trigger time), rows/s of one raw consumer reading all
partitions, and of one raw consumer process per partition (the same parallelism as Spark's
tasks), and the ratios.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import tempfile
import time

from confluent_kafka import Consumer, Producer, TopicPartition

from connectors.kafka_client import consumer_conf
from connectors.testing import kafka_broker, local_spark
from integration_tests.kafka_data import create_topic, unique_topic


def produce_fixed(bootstrap: str, topic: str, partitions: int, per_partition: int, size: int) -> None:
    """Fill each partition, ending it with a single-record batch (DESIGN.md section 6)."""
    producer = Producer({
        "bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
        "compression.type": "none", "queue.buffering.max.messages": 1_000_000,
    })
    payload = b"x" * size
    for p in range(partitions):
        for i in range(per_partition - 1):
            while True:
                try:
                    producer.produce(topic, value=payload, key=str(i).encode(), partition=p)
                    break
                except BufferError:
                    producer.poll(0.05)
    producer.flush(120)
    for p in range(partitions):
        producer.produce(topic, value=payload, partition=p)
    producer.flush(120)


def raw_read(bootstrap: str, tps: list[tuple[str, int, int]]) -> tuple[int, float]:
    """Count what consume() hands over until every partition reaches its end offset."""
    consumer = Consumer(consumer_conf({"bootstrap.servers": bootstrap}))
    consumer.assign([TopicPartition(t, p, 0) for t, p, _ in tps])
    remaining = {(t, p): end for t, p, end in tps}
    n = 0
    start = time.perf_counter()
    while remaining:
        for m in consumer.consume(10_000, timeout=1.0):
            if m.error():
                continue
            n += 1
            key = (m.topic(), m.partition())
            if key in remaining and m.offset() >= remaining[key] - 1:
                del remaining[key]
    elapsed = time.perf_counter() - start
    consumer.close()
    return n, elapsed


def _raw_worker(args):
    return raw_read(*args)


def spark_read(spark, bootstrap: str, topic: str) -> tuple[int, float, float]:
    with tempfile.TemporaryDirectory() as ckpt:
        wall = time.perf_counter()
        query = (
            spark.readStream.format("kafka-eos")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", os.path.join(ckpt, "c"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        wall = time.perf_counter() - wall
        progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    rows = sum(p["numInputRows"] for p in progress)
    trigger_s = sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000
    return rows, trigger_s, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=400_000)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--value-bytes", type=int, default=100)
    args = ap.parse_args()
    with kafka_broker() as broker:
        bs = broker.bootstrap_servers
        topic = unique_topic("bench")
        create_topic(bs, topic, args.partitions)
        per = args.records // args.partitions
        produce_fixed(bs, topic, args.partitions, per, args.value_bytes)
        tps = [(topic, p, per) for p in range(args.partitions)]

        # Warm-ups, not measured: the broker's first read of fresh data is several times
        # slower than later ones, and Spark's first batch starts workers and JIT-compiles.
        raw_read(bs, tps)
        spark = local_spark("bench-source")
        spark_read(spark, bs, topic)

        raw_n, raw_s = raw_read(bs, tps)
        with mp.get_context("spawn").Pool(args.partitions) as pool:
            results = pool.map(_raw_worker, [(bs, [tp]) for tp in tps])
        par_n = sum(n for n, _ in results)
        par_busy = max(s for _, s in results)
        rows, trigger_s, wall = spark_read(spark, bs, topic)
        raw_n2, raw_s2 = raw_read(bs, tps)  # again after Spark: the broker did not drift
        spark.stop()

    assert raw_n == par_n == rows == raw_n2 == per * args.partitions, (raw_n, par_n, rows)
    result = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "broker": broker.kind,
        "records": rows,
        "partitions": args.partitions,
        "value_bytes": args.value_bytes,
        "raw_single_consumer_rows_per_s": round(raw_n / raw_s),
        "raw_single_consumer_rows_per_s_after_spark": round(raw_n2 / raw_s2),
        "raw_consumer_per_partition_rows_per_s": round(par_n / par_busy),
        "kafka_eos_rows_per_s": round(rows / trigger_s),
        "kafka_eos_rows_per_s_incl_query_start": round(rows / wall),
        "ratio_vs_single_consumer": round((rows / trigger_s) / (raw_n / raw_s), 3),
        "ratio_vs_consumer_per_partition": round((rows / trigger_s) / (par_n / par_busy), 3),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
