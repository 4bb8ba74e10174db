"""Per-batch and end-to-end latency beside the peers: `kafka-eos -> delta-eos` in
both read modes against `format("kafka") -> format("delta")`, in one PySpark 4.2.0 session.

The machinery is benchmarks/latency.py's: a producer thread stamps each record with its produce
time at `rate` records/s, each run reads a fresh input topic from its latest offsets (the
producer moves to it before the query starts), `warmup` batches pass unmeasured, then `batches`
are measured at a 1 s processing-time trigger: p50 / p99 of Spark's `triggerExecution`, and end
to end the time from produce to the `_delta_log/<version>.json` mtime of the first version
holding the record (the same for delta-rs and delta-spark tables). Beside them, the time from
`start()` to the first batch committed (its trigger's start plus its `triggerExecution`).

Each of `repeats` rounds runs the three pipelines, the order reversed every other round; the
per-batch and end-to-end figures pool the rounds, the first-batch time is the median of them.
"""

from __future__ import annotations

import shutil
import tempfile
import time

from benchmarks.common import load_average, median, pct, ratio
from benchmarks.latency import (
    ProduceLog,
    TrickleProducer,
    delta_visibility,
    end_to_end_latency,
    iso_seconds,
    per_batch_latency,
    run_batches,
    window_seqs,
)
from integration_tests.support.kafka_data import create_topic, delete_topic, unique_topic

#: name -> (label, source format, kafka-eos readMode or None, sink format)
PIPELINES = {
    "kafka_eos_delta_eos": ("kafka-eos -> delta-eos (readMode=tasks)", "kafka-eos", "tasks",
                            "delta-eos"),
    "driver_kafka_eos_delta_eos": ("kafka-eos readMode=driver -> delta-eos", "kafka-eos",
                                   "driver", "delta-eos"),
    "spark_kafka_delta": ("format(\"kafka\") -> format(\"delta\")", "kafka", None, "delta"),
}
#: The reference every kafka-eos pipeline's p50 is divided by.
REFERENCE = "spark_kafka_delta"


def round_order(r: int) -> list[str]:
    """The pipelines in round r: as listed in even rounds, reversed in odd ones."""
    names = list(PIPELINES)
    return names if r % 2 == 0 else names[::-1]


def first_batch_s(progress: list[dict], started: float) -> float | None:
    """From start() (epoch s) to the end of the first batch that ran (`addBatch` present: an
    idle trigger reports progress too) -- its trigger's start plus its triggerExecution."""
    ran = sorted((p for p in progress if "addBatch" in p.get("durationMs", {})),
                 key=lambda p: p["batchId"])
    if not ran:
        return None
    p = ran[0]
    finished = iso_seconds(p["timestamp"]) + p["durationMs"]["triggerExecution"] / 1000
    return round(finished - started, 2)


def _query(spark, name: str, bootstrap: str, topic: str, out_path: str, ckpt: str,
           trigger_s: float):
    _, source, mode, sink = PIPELINES[name]
    reader = (spark.readStream.format(source).option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "latest"))
    if mode == "driver":
        reader = reader.option("readMode", "driver")
    return (reader.load().writeStream.format(sink).option("path", out_path)
            .option("checkpointLocation", ckpt)
            .trigger(processingTime=f"{trigger_s:g} seconds").start())


def _one_run(spark, name: str, bootstrap: str, producer: TrickleProducer, work: str, *,
             partitions: int, warmup: int, batches: int, trigger_s: float,
             inputs: list[str]) -> dict:
    topic = unique_topic("bench-peers-latency-in")
    create_topic(bootstrap, topic, partitions)
    inputs.append(topic)
    producer.topic = topic
    ckpt = tempfile.mkdtemp(prefix="ckpt-", dir=work)
    out_path = tempfile.mkdtemp(prefix="out-", dir=work)
    load_start = load_average()
    try:
        started = time.time()
        query = _query(spark, name, bootstrap, topic, out_path, ckpt, trigger_s)
        run = run_batches(query, warmup=warmup, batches=batches,
                   timeout_s=120 + (warmup + batches) * trigger_s * 10)
        early = query.recentProgress  # kept by the query object after stop()
        return {"progress": run["progress"], "window": run["window"],
                "first_batch_s": first_batch_s(list(early) + run["progress"], started),
                "visible": delta_visibility(out_path),
                "load_average": {"start": load_start, "end": load_average()}}
    finally:
        shutil.rmtree(out_path, ignore_errors=True)
        shutil.rmtree(ckpt, ignore_errors=True)


def summarize(label: str, runs: list[dict], produced: dict[int, int]) -> dict:
    """Pool the rounds of one pipeline: per-batch p50/p99, end to end p50/p99, first batch."""
    progress = [p for r in runs for p in r["progress"]]
    out = {"label": label, **per_batch_latency(progress)}
    ms = out["trigger_execution_ms"]
    out["trigger_execution_ms_p99"] = pct(ms, 0.99)
    out["rounds"] = len(runs)
    firsts = [r["first_batch_s"] for r in runs if r["first_batch_s"] is not None]
    out["first_batch_s"] = firsts
    out["first_batch_s_median"] = round(median(firsts), 2) if firsts else None
    out["load_average"] = [r["load_average"] for r in runs]
    lat, records, missing = [], 0, 0
    for r in runs:
        expected = window_seqs(produced, tuple(r["window"]))
        visible = r["visible"]
        pairs = [visible[s] for s in sorted(expected) if s in visible]
        e = end_to_end_latency(pairs, tuple(r["window"]), expected, set(visible))
        lat += e["latency_ms"]
        records += e["records"]
        missing += e["missing"]
    out["end_to_end"] = {"records": records, "missing": missing,
                         "p50_ms": round(pct(lat, 0.5), 1), "p99_ms": round(pct(lat, 0.99), 1),
                         "max_ms": round(max(lat), 1) if lat else None}
    return out


def measure(spark, bootstrap: str, work: str, *, batches: int = 30, warmup: int = 3,
            rate: int = 200, partitions: int = 2, trigger_s: float = 1.0, value_bytes: int = 100,
            repeats: int = 2, log=print) -> dict:
    inputs: list[str] = []
    first = unique_topic("bench-peers-latency-in")
    create_topic(bootstrap, first, partitions)
    inputs.append(first)
    producer = TrickleProducer(bootstrap, first, partitions, rate, value_bytes)
    producer.start()
    runs: dict[str, list[dict]] = {name: [] for name in PIPELINES}
    errors: dict[str, list[str]] = {}
    try:
        for r in range(repeats):
            for name in round_order(r):
                t = time.time()
                try:
                    res = _one_run(spark, name, bootstrap, producer, work, partitions=partitions,
                                   warmup=warmup, batches=batches, trigger_s=trigger_s,
                                   inputs=inputs)
                except Exception as e:  # reported; the other pipelines still run
                    errors.setdefault(name, []).append(f"{type(e).__name__}: {str(e)[:1500]}")
                    log(f"  {name}: FAILED {type(e).__name__}: {str(e)[:400]}")
                    continue
                runs[name].append(res)
                ms = [p["durationMs"]["triggerExecution"] for p in res["progress"]]
                log(f"  round {r + 1} {name}: p50 {pct(ms, 0.5)} ms over {len(ms)} batches, "
                    f"first batch {res['first_batch_s']} s ({time.time() - t:.0f} s)")
    finally:
        producer.stop()
    produced: dict[int, int] = {}
    for topic in inputs:
        produced.update(ProduceLog.read(bootstrap, topic, partitions))
        delete_topic(bootstrap, topic)
    pipelines: dict = {}
    for name, (label, _, mode, _) in PIPELINES.items():
        if not runs[name]:
            pipelines[name] = {"label": label, "error": "; ".join(errors.get(name, ["no run"]))}
            continue
        pipelines[name] = summarize(label, runs[name], produced)
        pipelines[name]["read_mode"] = mode
        if name in errors:
            pipelines[name]["failed_runs"] = errors[name]
    pipelines[REFERENCE].pop("read_mode", None)
    ref = pipelines[REFERENCE]
    versus: dict = {}
    for name, res in pipelines.items():
        if name == REFERENCE or "error" in res or "error" in ref:
            continue
        versus[res["read_mode"]] = {
            "pipeline": name,
            "batch_p50_ratio": ratio(res["trigger_execution_ms_p50"],
                                     ref["trigger_execution_ms_p50"]),
            "batch_p99_ratio": ratio(res["trigger_execution_ms_p99"],
                                     ref["trigger_execution_ms_p99"]),
            "end_to_end_p50_ratio": ratio(res["end_to_end"]["p50_ms"],
                                          ref["end_to_end"]["p50_ms"]),
            "first_batch_ratio": (ratio(res["first_batch_s_median"], ref["first_batch_s_median"])
                                  if res["first_batch_s_median"] and ref["first_batch_s_median"]
                                  else None),
        }
    return {"rate_records_per_s": rate, "partitions": partitions, "trigger_s": trigger_s,
            "value_bytes": value_bytes, "warmup_batches": warmup, "measured_batches": batches,
            "repeats": repeats, "produced": producer.produced,
            "produce_errors": producer.errors, "pipelines": pipelines, "versus_spark": versus}
