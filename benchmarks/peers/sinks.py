"""The sinks beside the peers, in the peers' PySpark 4.2.0 session:

* `kafka-eos` exactly-once against Spark's `format("kafka")` sink (at-least-once);
* `delta-eos` against delta-spark's streaming `format("delta")` sink: rows/s over large
  batches, and per-batch time as the table grows to `batches` small batches.

Both sinks of a pair are fed the same rows by Spark's file source over pre-written Parquet
(benchmarks/common.py, as benchmarks/kafka_sink.py does), availableNow, so the figures are about
the sinks. Pairs alternate which goes first; the best run of each is kept. The rate is rows over
the summed `triggerExecution` of the batches (benchmarks/common.run_query), the wall time of
each query beside it.
"""

from __future__ import annotations

import shutil
import tempfile
import time

from confluent_kafka import Consumer, TopicPartition

from benchmarks.common import (
    ParquetInput,
    batch_lines,
    file_stream,
    load_average,
    median,
    ratio,
    run_query,
    start,
)
from benchmarks.peers.report import window_p50s
from integration_tests.support.kafka_data import create_topic, delete_topic, unique_topic

KAFKA_SINKS = ("kafka-eos", "kafka")
DELTA_SINKS = ("delta-eos", "delta")


def alternating(formats: tuple[str, str], repeats: int):
    for r in range(repeats):
        yield from (formats if r % 2 == 0 else formats[::-1])


def _end_offsets(bootstrap: str, topic: str, partitions: int) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"peers-count-{topic}"})
    try:
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                   for p in range(partitions))
    finally:
        c.close()


# -- Kafka --------------------------------------------------------------------------------------


def kafka_run(spark, bootstrap: str, inp: ParquetInput, fmt: str, *, partitions: int,
              files_per_trigger: int) -> dict:
    """One availableNow query of the file source into `fmt` (kafka-eos exactly-once, Spark's
    kafka, or the Python no-op `bench-noop`), on a fresh output topic."""
    out = unique_topic(f"bench-peers-out-{fmt}")
    create_topic(bootstrap, out, partitions)
    prefix = f"bench-{out}"
    try:
        with tempfile.TemporaryDirectory() as ckpt:
            df = file_stream(spark, inp, files_per_trigger).select("key", "value")
            writer = df.writeStream.format(fmt)
            if fmt == "kafka-eos":
                writer = (writer.option("kafka.bootstrap.servers", bootstrap)
                          .option("topic", out).option("deliveryGuarantee", "exactly-once")
                          .option("transactionalIdPrefix", prefix))
            elif fmt == "kafka":
                writer = writer.option("kafka.bootstrap.servers", bootstrap).option("topic", out)
            run = run_query(start(writer.option("checkpointLocation", ckpt), trigger_s=None),
                            inp.rows)
        if fmt != "bench-noop":  # every row reached the topic (kafka-eos: plus its markers)
            written = _end_offsets(bootstrap, out, partitions)
            if written < inp.rows:
                raise RuntimeError(f"{fmt}: {written} records in {out}, expected {inp.rows}")
    finally:
        delete_topic(bootstrap, out)
    lines = batch_lines(f"kafka-eos[{prefix}]") if fmt == "kafka-eos" else []
    return {"rows_per_s": run.rows_per_s, "wall_s": run.wall_s, "batches": run.batches,
            "commit_ms": [line["commit_ms"] for line in lines if line["rows"] > 0]}


def measure_kafka(spark, bootstrap: str, inputs: dict[str, ParquetInput], *, partitions: int,
                  files_per_batch: int, repeats: int, warmup: bool, log=print) -> dict:
    from benchmarks import noop_sink

    noop_sink.register(spark)
    by_size: dict = {}
    for size, inp in inputs.items():
        kw = dict(partitions=partitions, files_per_trigger=files_per_batch)
        if warmup:  # not measured: workers, the transaction coordinator, the JIT
            for fmt in KAFKA_SINKS:
                kafka_run(spark, bootstrap, inp, fmt, **kw)
        runs: dict[str, list[dict]] = {fmt: [] for fmt in KAFKA_SINKS}
        for fmt in alternating(KAFKA_SINKS, repeats):
            runs[fmt].append(kafka_run(spark, bootstrap, inp, fmt, **kw))
        noop = kafka_run(spark, bootstrap, inp, "bench-noop", **kw)
        eos = max(r["rows_per_s"] for r in runs["kafka-eos"])
        spk = max(r["rows_per_s"] for r in runs["kafka"])
        commit = [ms for r in runs["kafka-eos"] for ms in r["commit_ms"]]
        by_size[size] = {
            "rows": inp.rows, "value_bytes": int(size), "topic_partitions": partitions,
            "rows_per_batch": files_per_batch * inp.rows_per_file,
            "batches": runs["kafka-eos"][0]["batches"],
            "kafka_eos_rows_per_s": round(eos), "spark_kafka_rows_per_s": round(spk),
            "ratio": ratio(eos, spk),
            "kafka_eos_runs": [round(r["rows_per_s"]) for r in runs["kafka-eos"]],
            "spark_kafka_runs": [round(r["rows_per_s"]) for r in runs["kafka"]],
            "kafka_eos_wall_s": [round(r["wall_s"], 2) for r in runs["kafka-eos"]],
            "spark_kafka_wall_s": [round(r["wall_s"], 2) for r in runs["kafka"]],
            "python_noop_rows_per_s": round(noop["rows_per_s"]),
            "kafka_eos_commit_ms_median": round(median(commit), 1) if commit else None,
        }
        log(f"  kafka sink {size} B: kafka-eos {round(eos):,} rows/s, format(\"kafka\") "
            f"{round(spk):,} rows/s, ratio {by_size[size]['ratio']}")
    return {"guarantees": {"kafka-eos": "exactly-once", "kafka": "at-least-once (Spark's only)"},
            "by_value_size": by_size}


# -- Delta --------------------------------------------------------------------------------------


def _delta_writer(df, fmt: str, out: str, ckpt: str):
    return df.writeStream.format(fmt).option("path", out).option("checkpointLocation", ckpt)


def _rows_in(path: str) -> int:
    from deltalake import DeltaTable

    return DeltaTable(path).to_pyarrow_dataset().count_rows()


def delta_run(spark, work: str, inp: ParquetInput, fmt: str, *, files_per_trigger: int) -> dict:
    out = tempfile.mkdtemp(prefix=f"table-{fmt}-", dir=work)
    try:
        with tempfile.TemporaryDirectory(dir=work) as ckpt:
            writer = _delta_writer(file_stream(spark, inp, files_per_trigger), fmt, out, ckpt)
            run = run_query(start(writer, trigger_s=None), inp.rows)
        rows = _rows_in(out)
        if rows != inp.rows:
            raise RuntimeError(f"{fmt}: {rows} rows in the table, expected {inp.rows}")
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return {"rows_per_s": run.rows_per_s, "wall_s": run.wall_s, "batches": run.batches}


def measure_delta(spark, work: str, inputs: dict[str, ParquetInput], *, files_per_batch: int,
                  repeats: int, warmup: bool, log=print) -> dict:
    by_size: dict = {}
    for size, inp in inputs.items():
        if warmup:
            for fmt in DELTA_SINKS:
                delta_run(spark, work, inp, fmt, files_per_trigger=files_per_batch)
        runs: dict[str, list[dict]] = {fmt: [] for fmt in DELTA_SINKS}
        for fmt in alternating(DELTA_SINKS, repeats):
            runs[fmt].append(delta_run(spark, work, inp, fmt, files_per_trigger=files_per_batch))
        eos = max(r["rows_per_s"] for r in runs["delta-eos"])
        spk = max(r["rows_per_s"] for r in runs["delta"])
        by_size[size] = {
            "rows": inp.rows, "value_bytes": int(size),
            "rows_per_batch": files_per_batch * inp.rows_per_file,
            "batches": runs["delta-eos"][0]["batches"],
            "delta_eos_rows_per_s": round(eos), "spark_delta_rows_per_s": round(spk),
            "ratio": ratio(eos, spk),
            "delta_eos_runs": [round(r["rows_per_s"]) for r in runs["delta-eos"]],
            "spark_delta_runs": [round(r["rows_per_s"]) for r in runs["delta"]],
            "delta_eos_wall_s": [round(r["wall_s"], 2) for r in runs["delta-eos"]],
            "spark_delta_wall_s": [round(r["wall_s"], 2) for r in runs["delta"]],
        }
        log(f"  delta sink {size} B: delta-eos {round(eos):,} rows/s, format(\"delta\") "
            f"{round(spk):,} rows/s, ratio {by_size[size]['ratio']}")
    return {"by_value_size": by_size}


def long_run_one(spark, work: str, inp: ParquetInput, fmt: str, label: str) -> dict:
    """One sink over `len(inp.files)` batches of one file each into one growing table."""
    out = tempfile.mkdtemp(prefix=f"long-{fmt}-", dir=work)
    load_start = load_average()
    try:
        with tempfile.TemporaryDirectory(dir=work) as ckpt:
            writer = _delta_writer(file_stream(spark, inp, 1), fmt, out, ckpt)
            run = run_query(start(writer, trigger_s=None), inp.rows,
                            timeout_s=60 + 30 * len(inp.files))
            progress, wall = run.progress, run.wall_s
        rows = _rows_in(out)
        if rows != inp.rows:
            raise RuntimeError(f"{fmt}: {rows} rows in the table, expected {inp.rows}")
        lines = batch_lines(f"delta-eos[{out}]") if fmt == "delta-eos" else []
    finally:
        shutil.rmtree(out, ignore_errors=True)
    trig = [p["durationMs"]["triggerExecution"] for p in progress]
    add = [p["durationMs"].get("addBatch", 0) for p in progress]
    res = {
        "label": label, "batches": len(progress),
        "rows_per_s": round(inp.rows / (sum(trig) / 1000)) if trig else None,
        "wall_s": round(wall, 1),
        "trigger_execution_ms": {**window_p50s(trig), "series": trig},
        "add_batch_ms": {**window_p50s(add), "series": add},
        "load_average": {"start": load_start, "end": load_average()},
    }
    if lines:
        commit = [ln["commit_ms"] for ln in sorted(lines, key=lambda ln: ln["batch"])
                  if ln["rows"] > 0]
        res["commit_ms"] = {**window_p50s(commit), "series": commit}
    return res


def measure_delta_long_run(spark, work: str, inp: ParquetInput, *, log=print) -> dict:
    """delta-eos and delta-spark, one after the other, each into a table of its own growing
    by one small batch per file of `inp`."""
    out: dict = {"batches": len(inp.files), "rows_per_batch": inp.rows_per_file,
                 "value_bytes": int(inp.table.column("value")[0].as_py().__len__())}
    for fmt, key, label in (("delta-eos", "delta_eos", "delta-eos"),
                            ("delta", "spark_delta", "format(\"delta\")")):
        t = time.time()
        out[key] = long_run_one(spark, work, inp, fmt, label)
        r = out[key]
        log(f"  long run {fmt}: {r['rows_per_s']} rows/s, triggerExecution p50 "
            f"{r['trigger_execution_ms']['early_p50']} -> {r['trigger_execution_ms']['late_p50']}"
            f" ms ({time.time() - t:.0f} s)")
    out["ratio"] = ratio(out["delta_eos"]["rows_per_s"], out["spark_delta"]["rows_per_s"])
    return out
