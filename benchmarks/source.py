"""`kafka-eos` source throughput against raw confluent-kafka consumers
(docs/design.md#performance-method).

The same topic is read by a `kafka-eos` streaming query into Spark's no-op sink (one task per
Kafka partition, availableNow, all of the topic in one micro-batch) and by one raw consumer
process per partition doing nothing but count what `consume()` hands over: the limit for any
Python source on this machine. Warm-ups first: the local broker serves the first read of freshly
produced data several times slower than later reads, and Spark's first batch starts its workers.
Beside them, the same query shape from `bench-ready-batches`, a Python source that yields
ready-made Arrow batches of the same schema and size: the ceiling of any Python source in Spark.
"""

from __future__ import annotations

import tempfile

from benchmarks.common import (in_processes, produce_fixed, ratio, raw_consume, read_into_noop,
                               run_query)
from integration_tests.support.kafka_data import create_topic, delete_topic, unique_topic


def spark_read(spark, bootstrap: str, topic: str, rows: int):
    return read_into_noop(spark, "kafka-eos", bootstrap, topic, rows)


def measure(spark, bootstrap: str, *, records: int, partitions: int, value_bytes: int,
            repeats: int = 2, warmup: bool = True) -> dict:
    topic = unique_topic(f"bench-src-{value_bytes}")
    create_topic(bootstrap, topic, partitions)
    per = records // partitions
    produce_fixed(bootstrap, topic, partitions, per, value_bytes)
    rows = per * partitions
    jobs = [(bootstrap, topic, p, per) for p in range(partitions)]

    if warmup:  # not measured
        in_processes(raw_consume, jobs)
        spark_read(spark, bootstrap, topic, rows)

    # Alternate raw and Spark so that drift in the machine's load hits both alike; best of each.
    arrow_rows = min(20_000, max(1, rows // partitions))
    if warmup:
        spark_ready_batches(spark, rows, partitions, arrow_rows, value_bytes)
    raw_rates, eos_rates, ready_rates = [], [], []
    for _ in range(repeats):
        ready_rates.append(
            spark_ready_batches(spark, rows, partitions, arrow_rows, value_bytes).rows_per_s)
        results = in_processes(raw_consume, jobs)
        assert sum(n for n, _ in results) == rows, results
        raw_rates.append(rows / max(s for _, s in results))
        eos_rates.append(spark_read(spark, bootstrap, topic, rows).rows_per_s)
    delete_topic(bootstrap, topic)
    raw, eos, ready = max(raw_rates), max(eos_rates), max(ready_rates)
    return {
        "records": rows,
        "partitions": partitions,
        "value_bytes": value_bytes,
        "raw_consumers_rows_per_s": round(raw),
        "kafka_eos_rows_per_s": round(eos),
        "raw_consumers_runs": [round(r) for r in raw_rates],
        "kafka_eos_runs": [round(r) for r in eos_rates],
        "ratio": ratio(eos, raw),
        # The ceiling of any Python source here: Spark fed ready-made Arrow batches.
        "python_ready_batches_source_rows_per_s": round(ready),
        "ratio_ready_batches_source_vs_raw_consumers": ratio(ready, raw),
    }


def spark_ready_batches(spark, rows: int, partitions: int, batch_rows: int, value_bytes: int):
    """The same shape of data from `bench-ready-batches` (no Kafka, no per-record work)."""
    per_task = max(1, rows // partitions // batch_rows)
    with tempfile.TemporaryDirectory() as ckpt:
        query = (
            spark.readStream.format("bench-ready-batches")
            .option("tasks", partitions).option("batchesPerTask", per_task)
            .option("rowsPerBatch", batch_rows).option("valueBytes", value_bytes)
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", ckpt)
            .trigger(availableNow=True)
            .start()
        )
        return run_query(query, per_task * partitions * batch_rows)
