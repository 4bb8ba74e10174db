"""Benchmarks of kafka-eos and delta-eos as ratios against the raw clients, in one run
(DESIGN.md section 9), on the embedded broker unless KAFKA_BOOTSTRAP_SERVERS says otherwise.

    python -m benchmarks                       # the full run (about 10 minutes on 2 cores)
    python -m benchmarks --quick               # tiny inputs: checks that it all runs
    python -m benchmarks --output-dir DIR      # where results.json and chart.png go

For each value size (100 B and 1 KB by default) it measures:
  * the kafka-eos source into Spark's no-op sink against raw confluent-kafka consumers, one
    process per partition, counting what consume() hands over;
  * the kafka-eos sink, exactly-once, against raw idempotent producers (one per Spark task);
  * the delta-eos sink, exactly-once, against one write_deltalake of the same Arrow data;
  * exactly-once against at-least-once for both sinks at a 1-second trigger, and the commit
    phase's latency per batch (median, p95);
and once, the peak memory of a Python worker reading 1 million 1-KB records.
The sinks are fed by Spark's file source over pre-written Parquet, so their figures are about
the sinks; the same pipelines into no-op sinks are reported beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

TARGETS = {
    # name: (path into a size's results, comparison, target)
    "source_vs_raw_consumers": (("source", "ratio"), ">=", 0.9),
    "kafka_sink_vs_raw_idempotent_producers": (("kafka_sink", "ratio_vs_raw_producer"), ">=", 0.5),
    "delta_sink_vs_write_deltalake": (("delta_sink", "ratio_vs_write_deltalake"), ">=", 0.7),
    "kafka_sink_exactly_once_vs_at_least_once": (
        ("kafka_sink", "trigger_1s", "ratio_exactly_once_vs_at_least_once"), ">=", 0.85),
    "delta_sink_exactly_once_vs_at_least_once": (
        ("delta_sink", "trigger_1s", "ratio_exactly_once_vs_at_least_once"), ">=", 0.85),
    "kafka_commit_phase_median_ms": (("kafka_sink", "commit_phase_ms", "median"), "<=", 50),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--records", type=int, default=400_000,
                    help="records per value size for the throughput figures (default 400000)")
    ap.add_argument("--value-sizes", default="100,1024",
                    help="comma-separated value sizes in bytes (default 100,1024)")
    ap.add_argument("--partitions", type=int, default=2,
                    help="Kafka partitions = Spark tasks = raw client processes (default 2)")
    ap.add_argument("--rows-per-file", type=int, default=10_000,
                    help="rows per input Parquet file of the sink benchmarks (default 10000)")
    ap.add_argument("--batch-rows", type=int, default=100_000,
                    help="rows per micro-batch of the sinks' throughput runs (default 100000)")
    ap.add_argument("--trigger-rows", type=int, default=20_000,
                    help="rows per micro-batch at the 1-second trigger (default 20000)")
    ap.add_argument("--memory-records", type=int, default=1_000_000,
                    help="records of the worker memory figure (default 1000000)")
    ap.add_argument("--memory-value-bytes", type=int, default=1024)
    ap.add_argument("--arrow-batch-rows", type=int, default=20_000,
                    help="the source's arrowBatchRows for the memory figure (default 20000)")
    ap.add_argument("--repeats", type=int, default=2,
                    help="measured runs of each side, alternating; the best of each is kept")
    ap.add_argument("--only", default="source,kafka,delta,memory",
                    help="comma-separated subset of source,kafka,delta,memory")
    ap.add_argument("--quick", action="store_true",
                    help="tiny inputs (seconds, not minutes): checks the benchmark runs, "
                         "the figures mean nothing")
    ap.add_argument("--output-dir", default="benchmark-results",
                    help="directory for results.json and chart.png (default ./benchmark-results)")
    args = ap.parse_args(argv)
    args.warmup = not args.quick
    if args.quick:
        args.repeats = 1
        args.records = 4_000
        args.rows_per_file = 1_000
        args.batch_rows = 2_000
        args.trigger_rows = 2_000
        args.memory_records = 8_000
        args.arrow_batch_rows = 1_000
    return args


def _get(d: dict, path: tuple):
    for k in path:
        d = d[k]
    return d


def evaluate(by_size: dict) -> dict:
    out = {}
    for name, (path, op, target) in TARGETS.items():
        for size, res in by_size.items():
            try:
                value = _get(res, path)
            except KeyError:
                continue
            met = value >= target if op == ">=" else value <= target
            out[f"{name}[{size}]"] = {"value": value, "target": f"{op} {target}", "met": met}
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    only = set(args.only.split(","))
    sizes = [int(s) for s in args.value_sizes.split(",")]

    from benchmarks.common import load_average, machine, metrics_file, write_parquet_input

    metrics_file()  # before Spark starts: its Python workers inherit the variable
    from benchmarks import delta_sink, kafka_sink, memory, noop_sink, source
    from benchmarks.chart import draw
    from connectors.testing import kafka_broker, local_spark

    os.makedirs(args.output_dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="kafka-eos-bench-")
    started = time.time()
    results: dict = {
        "command": "python -m benchmarks " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": machine(),
        "load_average": {"start": load_average()},
        "parameters": {k: v for k, v in vars(args).items() if k not in ("output_dir",)},
        "by_value_size": {},
    }
    files_per_batch = max(1, args.batch_rows // args.rows_per_file)
    files_per_trigger = max(1, args.trigger_rows // args.rows_per_file)

    def log(msg: str) -> None:
        print(f"[{time.time() - started:6.0f}s] {msg}", file=sys.stderr, flush=True)

    try:
        with kafka_broker() as broker:
            bs = broker.bootstrap_servers
            results["broker"] = broker.kind
            spark = local_spark("kafka-eos-benchmarks")
            noop_sink.register(spark)
            try:
                for size in sizes:
                    res: dict = {}
                    label = f"{size} B" if size < 1024 else f"{size // 1024} KB"
                    if "source" in only:
                        log(f"source, {label} values")
                        res["source"] = source.measure(
                            spark, bs, records=args.records, partitions=args.partitions,
                            value_bytes=size, repeats=args.repeats, warmup=args.warmup)
                        log(f"  {res['source']}")
                    if only & {"kafka", "delta"}:
                        inp = write_parquet_input(work, args.records, size, args.rows_per_file)
                    if "kafka" in only:
                        log(f"kafka-eos sink, {label} values")
                        res["kafka_sink"] = kafka_sink.measure(
                            spark, bs, inp, partitions=args.partitions,
                            files_per_batch=files_per_batch,
                            files_per_trigger_1s=files_per_trigger, value_bytes=size,
                            repeats=args.repeats, warmup=args.warmup)
                        log(f"  {res['kafka_sink']}")
                    if "delta" in only:
                        log(f"delta-eos sink, {label} values")
                        res["delta_sink"] = delta_sink.measure(
                            spark, work, inp, files_per_batch=files_per_batch,
                            files_per_trigger_1s=files_per_trigger, value_bytes=size,
                            repeats=args.repeats, warmup=args.warmup)
                        log(f"  {res['delta_sink']}")
                    results["by_value_size"][label] = res
                    results["load_average"][f"after {label}"] = load_average()
            finally:
                spark.stop()
            if "memory" in only:
                log(f"worker memory, {args.memory_records} x {args.memory_value_bytes} B")
                results["worker_memory"] = memory.measure(
                    bs, records=args.memory_records, value_bytes=args.memory_value_bytes,
                    batch_rows=args.arrow_batch_rows)
                log(f"  {results['worker_memory']}")
    finally:
        shutil.rmtree(work, ignore_errors=True)

    results["load_average"]["end"] = load_average()
    results["duration_s"] = round(time.time() - started)
    results["targets"] = evaluate(results["by_value_size"])
    json_path = os.path.join(args.output_dir, "results.json")
    with open(json_path, "w") as f:
        json.dump(results, f, indent=2)
    chart_path = os.path.join(args.output_dir, "chart.png")
    if only >= {"source", "kafka", "delta", "memory"}:
        draw(results, chart_path)
    print(json.dumps(results["targets"], indent=2))
    print(f"wrote {json_path} and {chart_path} in {results['duration_s']} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
