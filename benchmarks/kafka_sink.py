"""`kafka-eos` sink figures (docs/design.md#performance-method).

The sink is fed by Spark's own file source over pre-written Parquet (cheap, in the JVM), so the
figures are about the sink, not about the Kafka source:

* throughput, exactly-once, against raw idempotent confluent-kafka producers writing the same
  records with the same parallelism (one process per Spark task), timed from the first
  produce() to the end of flush();
* the same pipeline into a Python no-op sink (`bench-noop`): what Spark costs before any sink
  code runs;
* exactly-once against at-least-once at a 1-second processing-time trigger;
* the commit phase's latency per batch (driver: decision record, EndTxn per partition, done
  marker), from the sink's own batch lines.
"""

from __future__ import annotations

import tempfile

from benchmarks.common import (
    ParquetInput,
    batch_lines,
    file_stream,
    eo_vs_alo,
    in_processes,
    ratio,
    raw_produce,
    run_query,
    start,
)
from integration_tests.support.kafka_data import create_topic, delete_topic, unique_topic


def run_sink(spark, bootstrap: str, inp: ParquetInput, *, guarantee: str, partitions: int,
             files_per_trigger: int, trigger_s: float | None, noop: bool = False) -> dict:
    out = unique_topic(f"bench-out-{guarantee}")
    create_topic(bootstrap, out, partitions)
    prefix = f"bench-{out}"
    with tempfile.TemporaryDirectory() as ckpt:
        df = file_stream(spark, inp, files_per_trigger).select("key", "value")
        if noop:
            writer = df.writeStream.format("bench-noop")
        else:
            writer = (
                df.writeStream.format("kafka-eos")
                .option("kafka.bootstrap.servers", bootstrap).option("topic", out)
                .option("deliveryGuarantee", guarantee)
                .option("transactionalIdPrefix", prefix)
            )
        run = run_query(start(writer.option("checkpointLocation", ckpt), trigger_s=trigger_s),
                        inp.rows)
    delete_topic(bootstrap, out)
    lines = [] if noop else batch_lines(f"kafka-eos[{prefix}]")
    return {
        "rows_per_s": run.rows_per_s,
        "batches": run.batches,
        "commit_ms": [line["commit_ms"] for line in lines if line["rows"] > 0],
        "tasks": max((len(line["partitions"]) for line in lines), default=0),
    }


def measure(spark, bootstrap: str, inp: ParquetInput, *, partitions: int, files_per_batch: int,
            files_per_trigger_1s: int, value_bytes: int, repeats: int = 2,
            warmup: bool = True) -> dict:
    if warmup:  # not measured: workers, JIT, the broker's transaction coordinator
        run_sink(spark, bootstrap, inp, guarantee="exactly-once", partitions=partitions,
                 files_per_trigger=files_per_batch, trigger_s=None)

    big = dict(partitions=partitions, files_per_trigger=files_per_batch, trigger_s=None)
    noop = run_sink(spark, bootstrap, inp, guarantee="none", noop=True, **big)
    # Exactly-once against raw idempotent producers, one per Spark task, each writing the
    # files its task would; alternating, best of `repeats` each.
    eo_runs, raw_runs = [], []
    for _ in range(repeats):
        eo = run_sink(spark, bootstrap, inp, guarantee="exactly-once", **big)
        eo_runs.append(eo["rows_per_s"])
        out = unique_topic("bench-raw")
        create_topic(bootstrap, out, partitions)
        procs = max(1, eo["tasks"])
        shares = [inp.files[i::procs] for i in range(procs)]
        results = in_processes(raw_produce, [(bootstrap, out, share) for share in shares])
        delete_topic(bootstrap, out)
        assert sum(n for n, _ in results) == inp.rows
        raw_runs.append(inp.rows / max(s for _, s in results))
    raw, eo_best = max(raw_runs), max(eo_runs)

    # Exactly-once against at-least-once at a 1-second trigger, alternating, best of `repeats` each.
    small = dict(partitions=partitions, files_per_trigger=files_per_trigger_1s, trigger_s=1.0)
    eo_1s, alo_1s = [], []
    for _ in range(repeats):
        eo_1s.append(run_sink(spark, bootstrap, inp, guarantee="exactly-once", **small))
        alo_1s.append(run_sink(spark, bootstrap, inp, guarantee="at-least-once", **small))
    return {
        "records": inp.rows,
        "value_bytes": value_bytes,
        "topic_partitions": partitions,
        "spark_tasks": eo["tasks"],
        "batches": eo["batches"],
        "raw_producer_processes": procs,
        "raw_idempotent_producers_rows_per_s": round(raw),
        "exactly_once_rows_per_s": round(eo_best),
        "raw_idempotent_producers_runs": [round(r) for r in raw_runs],
        "exactly_once_runs": [round(r) for r in eo_runs],
        "python_noop_sink_rows_per_s": round(noop["rows_per_s"]),
        "ratio_vs_raw_producer": ratio(eo_best, raw),
        "ratio_noop_pipeline_vs_raw_producer": ratio(noop["rows_per_s"], raw),
        **eo_vs_alo(eo_1s, alo_1s, files_per_trigger_1s * inp.rows_per_file),
    }
