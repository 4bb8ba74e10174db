"""A query started at `earliest` on a deep backlog: what its first batches cost and what its
processes hold, with a given maxOffsetsPerTrigger or none (one batch of everything).

    python -m benchmarks.deep_backlog [--records 5000000] [--partitions 4]
        [--max-offsets-per-trigger N|none] [--batches 3] [--bootstrap-servers HOST:PORT]

`kafka-eos -> noop` in a local[2] session, the resident memory of the driver JVM and of every
Python process under it sampled from /proc every 50 ms
(integration_tests/support/process_memory.py).
Prints one JSON document: per batch its rows and `triggerExecution`, per process role its peak
RSS and growth over a fresh Python with a worker's imports. Without --bootstrap-servers it
starts the suite's broker (Apache Kafka from its Maven jars). The suite's
integration_tests/source/test_deep_backlog.py asserts the bounds; this shows whether the memory
follows the batch size (compare a bounded run with `none`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import time

VALUE = b"0123456789abcdef"


def run(bootstrap: str, records: int, partitions: int, limit: int | None,
        batches: int) -> dict:
    from connectors.core.kafka.client import KafkaMetadata
    from connectors.local.spark import local_spark
    from integration_tests.support.kafka_data import (create_topic, delete_topic, produce_backlog,
                                              unique_topic)
    from integration_tests.support.process_memory import MemorySampler, import_baseline_kb

    topic = unique_topic("bench-deep")
    per_partition = records // partitions
    create_topic(bootstrap, topic, partitions)
    try:
        began = time.monotonic()
        produce_backlog(bootstrap, topic, partitions, per_partition, VALUE)
        produce_s = time.monotonic() - began
        meta = KafkaMetadata({"bootstrap.servers": bootstrap})
        try:
            latest = meta.latest([(topic, p) for p in range(partitions)])
        finally:
            meta.close()
        assert set(latest.values()) == {per_partition}, latest
        spark = local_spark("bench-deep-backlog")
        jvm_pid = int(spark.sparkContext._jvm.ProcessHandle.current().pid())
        baseline_kb = import_baseline_kb()
        reader = (spark.readStream.format("kafka-eos").option("kafka.bootstrap.servers", bootstrap)
                  .option("subscribe", topic).option("startingOffsets", "earliest"))
        if limit:
            reader = reader.option("maxOffsetsPerTrigger", str(limit))
        with tempfile.TemporaryDirectory() as ckpt, MemorySampler(jvm_pid) as memory:
            query = (reader.load().writeStream.format("noop").option("checkpointLocation", ckpt)
                     .trigger(processingTime="1 second").start())
            try:
                while len([p for p in query.recentProgress if p["numInputRows"]]) < batches:
                    if query.exception() is not None:
                        raise RuntimeError(str(query.exception()))
                    time.sleep(0.2)
            finally:
                query.stop()
        progress = [p for p in query.recentProgress if p["numInputRows"]][:batches]
        spark.stop()
    finally:
        delete_topic(bootstrap, topic)

    def role(name: str) -> dict:
        found = memory.by_role(name)
        return {"peak_rss_mb": sorted(p.peak_kb // 1024 for p in found),
                "growth_mb": sorted((p.peak_kb - max(p.first_kb, baseline_kb)) // 1024
                                    for p in found)}

    jvm = memory.by_role("jvm")[0]
    return {
        "records": records, "partitions": partitions, "value_bytes": len(VALUE),
        "max_offsets_per_trigger": limit, "produce_s": round(produce_s, 1),
        "batches": [{"rows": p["numInputRows"],
                     "trigger_ms": p["durationMs"]["triggerExecution"],
                     "latest_offset_ms": p["durationMs"].get("latestOffset")} for p in progress],
        "imports_mb": baseline_kb // 1024,
        "task_workers": role("task worker"),
        "stream_reader": role("stream reader"),
        "driver_jvm_mb": {"before": jvm.first_kb // 1024, "peak": jvm.peak_kb // 1024},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=5_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--max-offsets-per-trigger", default="400000",
                    help="records a batch, or 'none': one batch of the whole backlog")
    ap.add_argument("--batches", type=int, default=3)
    ap.add_argument("--bootstrap-servers")
    args = ap.parse_args(argv)
    limit = None if args.max_offsets_per_trigger == "none" else int(args.max_offsets_per_trigger)
    batches = 1 if limit is None else args.batches
    with contextlib.ExitStack() as stack:
        bootstrap = args.bootstrap_servers
        if not bootstrap:
            from integration_tests.support.brokers import kafka_broker

            bootstrap = stack.enter_context(kafka_broker()).bootstrap_servers
        result = run(bootstrap, args.records, args.partitions, limit, batches)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
