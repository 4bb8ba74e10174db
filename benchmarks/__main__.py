"""Benchmarks of kafka-eos and delta-eos as ratios against the raw clients, in one run
(docs/performance.md), on the suite's broker: real Apache Kafka from its Maven jars unless
KAFKA_BOOTSTRAP_SERVERS (or a Docker engine) says otherwise.

    python -m benchmarks                       # the full run (about 10 minutes on 2 cores)
    python -m benchmarks --quick               # tiny inputs: checks that it all runs
    python -m benchmarks --output-dir DIR      # where results.json and chart.png go
    python -m benchmarks --peers               # kafka-eos / delta-eos vs format("kafka") and
                                               # format("delta"), PySpark 4.2.0: source, latency,
                                               # both sinks (benchmarks/peers/; a section
                                               # alone: --peers-only latency)
    python -m benchmarks --delta-long-run [--batches 1000]
                                               # delta-eos over 1,000 batches (about 12 minutes
                                               # on 2 cores; no broker, no Spark): merged into
                                               # DIR/results.json, its other sections kept
    python -m benchmarks --only upsert-scale   # delta-eos upsert mode: 1,000,000 changes on
                                               # 100,000 keys into 10,000,000 rows, against an
                                               # append (a few minutes; no broker, no Spark):
                                               # merged into DIR/results.json likewise
    python -m benchmarks --only partitions     # per-batch cost at 8, 200 and 1,000 partitions:
                                               # kafka-eos into noop, delta-eos and kafka-eos
                                               # beside format("kafka") -> noop, in the peers'
                                               # PySpark 4.2.0 session (benchmarks/partitions.py;
                                               # merged into DIR/results.json, chart in
                                               # DIR/partitions.png)
    python -m benchmarks --only cluster        # the source and both sinks on a Spark
                                               # standalone cluster of separate hosts (network
                                               # namespaces; root), one worker then two: rows/s
                                               # per executor core (benchmarks/cluster.py)
    python -m benchmarks --only registry       # Schema Registry Avro read against binary,
                                               # AvroDeserializer and from_avro; Protobuf and
                                               # JSON Schema decoders (benchmarks/registry.py;
                                               # merged into DIR/results.json likewise)

For each value size (100 B and 1 KB by default) it measures:
  * the kafka-eos source into Spark's no-op sink against raw confluent-kafka consumers, one
    process per partition, counting what consume() hands over;
  * the kafka-eos sink, exactly-once, against raw idempotent producers (one per Spark task);
  * the delta-eos sink, exactly-once, against one write_deltalake of the same Arrow data;
  * exactly-once against at-least-once for both sinks at a 1-second trigger, and the commit
    phase's latency per batch (median, p95);
and once, the peak memory of a Python worker reading 1 million 1-KB records; and
benchmarks/latency.py (`--only latency` on its own, merged into DIR/results.json like the long
run; about 4 minutes): per-batch p50/p90 of five pipelines side by side in one Spark session at
200 records/s and a 1 s trigger, their ratio to Spark's floor (rate -> noop) and the end-to-end
latency (produce to visibility) of the two exactly-once pipelines; its chart is DIR/latency.png.
`--delta-long-run` (or `--only delta-long-run`, on its own or with the others) measures
benchmarks/delta_long_run.py: the delta-eos commit time and a full read after batch 10 and after
batch 1,000, against write_deltalake appends in the same run. It is not part of the default run
(about 12 minutes for its five configurations); a run without it keeps the long run's section
of the results.json it overwrites. `--only upsert-scale` (benchmarks/upsert_scale.py) is not
part of the default run either: one upsert batch's tasks and commit (time, rows/s, peak RSS)
against an append of the same rows, write_deltalake and delta-rs's MERGE alone.
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


def _throughput_options(ap: argparse.ArgumentParser) -> None:
    """The options of the throughput sections (source, kafka, delta, memory), and --only."""
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
    ap.add_argument("--only", default="source,kafka,delta,memory,latency",
                    help="comma-separated subset of source,kafka,delta,memory,latency,"
                         "delta-long-run,upsert-scale,partitions,registry,cluster,"
                         "kafka-sink-main; latency, delta-long-run, upsert-scale, partitions, "
                         "registry, cluster and kafka-sink-main (the Kafka sink beside Spark's in "
                         "this PySpark) alone are merged into an existing results.json")


def _latency_options(ap: argparse.ArgumentParser) -> None:
    """The options of the latency section."""
    ap.add_argument("--latency-batches", type=int, default=30,
                    help="measured micro-batches per pipeline of the latency section (default 30)")
    ap.add_argument("--latency-warmup", type=int, default=3,
                    help="micro-batches per pipeline before those measured (default 3)")
    ap.add_argument("--latency-rate", type=int, default=200,
                    help="records/s the latency section's producer writes (default 200)")
    ap.add_argument("--latency-pipelines", default=None,
                    help="comma-separated subset of the latency section's pipelines (default all)")
    ap.add_argument("--latency-source-option", action="append", default=[], metavar="KEY=VALUE",
                    help="an extra kafka-eos source option for the latency section (repeatable)")


def _long_run_options(ap: argparse.ArgumentParser) -> None:
    """The options of the delta-eos long run and the upsert-scale batch."""
    ap.add_argument("--delta-long-run", action="store_true",
                    help="only the delta-eos long run (same as --only delta-long-run); its "
                         "figures are merged into an existing results.json, the rest kept")
    ap.add_argument("--batches", type=int, default=1000,
                    help="micro-batches of the delta-eos long run (default 1000)")
    ap.add_argument("--long-run-rows", type=int, default=1000,
                    help="rows per micro-batch of the delta-eos long run (default 1000)")
    ap.add_argument("--upsert-table-rows", type=int, default=10_000_000,
                    help="rows of the table the upsert-scale batch is merged into "
                         "(default 10000000)")
    ap.add_argument("--upsert-changes", type=int, default=1_000_000,
                    help="changes in the upsert-scale batch (default 1000000)")
    ap.add_argument("--upsert-keys", type=int, default=100_000,
                    help="keys those changes are on (default 100000)")


def _partitions_options(ap: argparse.ArgumentParser) -> None:
    """The options of --only partitions."""
    ap.add_argument("--partition-counts", default="8,200,1000",
                    help="topic widths of --only partitions (default 8,200,1000)")
    ap.add_argument("--records-per-partition", type=int, default=20,
                    help="records in each partition of those topics (default 20)")
    ap.add_argument("--partition-batches", type=int, default=5,
                    help="micro-batches each --only partitions query reads its topic in "
                         "(maxOffsetsPerTrigger = the topic's records / this; default 5)")


def _peers_options(ap: argparse.ArgumentParser) -> None:
    """The options of the peers lane (--peers)."""
    ap.add_argument("--peers", action="store_true",
                    help="only the peers lane (benchmarks/peers/lane.py): kafka-eos and delta-eos "
                         "against Spark's format(\"kafka\") and delta-spark's format(\"delta\") "
                         "(source, latency, both sinks), in a PySpark 4.2.0 session of the "
                         "peers' environment (made once in the broker jars' cache); figures to "
                         "DIR/peers.json, chart DIR/peers.png")
    ap.add_argument("--peers-partitions", type=int, default=4,
                    help="Kafka partitions of the peers lane's topics (default 4)")
    ap.add_argument("--peers-only", default="source,latency,kafka-sink,delta-sink",
                    help="comma-separated subset of the --peers sections: source,latency,"
                         "kafka-sink,delta-sink (default all); they replace their sections of "
                         "an existing DIR/peers.json, the others kept")
    ap.add_argument("--peers-delta-batches", type=int, default=1000,
                    help="batches of the --peers Delta sinks' long run into a growing table "
                         "(default 1000; at least 20)")
    ap.add_argument("--peers-delta-rows", type=int, default=100,
                    help="rows per batch of that long run (default 100)")


def _check(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Values the parser's types cannot refuse, refused with the option's name."""
    if args.batches < 20:
        ap.error("--batches: the long run needs at least 20 (its first and last 10)")
    if args.peers_delta_batches < 20:
        ap.error("--peers-delta-batches: the long run needs at least 20 (batches 10-19 and the "
                 "last 10)")
    if args.peers_delta_rows < 1:
        ap.error("--peers-delta-rows: at least 1")
    if args.records_per_partition < 1 or args.partition_batches < 1:
        ap.error("--records-per-partition, --partition-batches: at least 1")
    from benchmarks.partitions_report import parse_counts
    from benchmarks.peers.report import parse_sections

    try:
        parse_sections(args.peers_only)
        parse_counts(args.partition_counts)
    except ValueError as e:
        ap.error(str(e))


def _shrink_for_quick(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--quick: tiny inputs, one repeat (seconds, not minutes)."""
    args.repeats = 1
    args.records = 4_000
    args.rows_per_file = 1_000
    args.batch_rows = 2_000
    args.trigger_rows = 2_000
    args.memory_records = 8_000
    args.arrow_batch_rows = 1_000
    args.batches = min(args.batches, 20)
    args.peers_delta_batches = min(args.peers_delta_batches, 20)
    args.peers_delta_rows = min(args.peers_delta_rows, 10)
    args.long_run_rows = min(args.long_run_rows, 100)
    args.latency_batches = min(args.latency_batches, 3)
    args.latency_warmup = min(args.latency_warmup, 1)
    args.upsert_table_rows = min(args.upsert_table_rows, 20_000)
    args.upsert_changes = min(args.upsert_changes, 5_000)
    args.upsert_keys = min(args.upsert_keys, 500)
    if args.partition_counts == ap.get_default("partition_counts"):
        args.partition_counts = "2,8"
    args.records_per_partition = min(args.records_per_partition, 5)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _throughput_options(ap)
    _latency_options(ap)
    _long_run_options(ap)
    _partitions_options(ap)
    _peers_options(ap)
    ap.add_argument("--quick", action="store_true",
                    help="tiny inputs (seconds, not minutes): checks the benchmark runs, "
                         "the figures mean nothing")
    ap.add_argument("--output-dir", default="benchmark-results",
                    help="directory for results.json and chart.png (default ./benchmark-results)")
    args = ap.parse_args(argv)
    _check(ap, args)
    if args.delta_long_run:
        args.only = "delta-long-run"
    args.warmup = not args.quick
    if args.quick:
        _shrink_for_quick(ap, args)
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


def long_run_only(args: argparse.Namespace, argv: list[str] | None) -> int:
    """The delta-eos long run alone (no broker, no Spark): its section replaces the one in an
    existing results.json, whose other sections are kept."""
    from benchmarks import delta_long_run
    from benchmarks.common import existing_results, load_average, section_header, write_json
    from benchmarks.report import long_run_table

    json_path, results = existing_results(args.output_dir)
    started = time.time()
    work = tempfile.mkdtemp(prefix="delta-long-run-")
    section = section_header(argv)
    try:
        section.update(_long_run(args, work, delta_long_run, started))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    section["load_average"]["end"] = load_average()
    section["duration_s"] = round(time.time() - started)
    results["delta_long_run"] = section
    write_json(results, json_path)
    print(long_run_table(section))
    print(f"wrote {json_path} in {section['duration_s']} s", file=sys.stderr)
    return 0


def upsert_scale_only(args: argparse.Namespace, argv: list[str] | None) -> int:
    """delta-eos upsert mode at scale alone (no broker, no Spark): its section replaces the
    one in an existing results.json, whose other sections are kept."""
    from benchmarks import upsert_scale
    from benchmarks.common import existing_results, load_average, section_header, write_json

    json_path, results = existing_results(args.output_dir)
    started = time.time()

    def log(msg: str) -> None:
        print(f"[{time.time() - started:6.0f}s] {msg}", file=sys.stderr, flush=True)

    work = tempfile.mkdtemp(prefix="upsert-scale-")
    section = section_header(argv)
    try:
        section.update(upsert_scale.measure(
            work, table_rows=args.upsert_table_rows, n_changes=args.upsert_changes,
            keys=args.upsert_keys, log=log))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    section["load_average"]["end"] = load_average()
    results["upsert_scale"] = section
    write_json(results, json_path)
    print(upsert_scale.table(section))
    print(f"wrote {json_path} in {round(time.time() - started)} s", file=sys.stderr)
    return 0


def _long_run(args: argparse.Namespace, work: str, module, started: float) -> dict:
    def log(msg: str) -> None:
        print(f"[{time.time() - started:6.0f}s] {msg}", file=sys.stderr, flush=True)

    log(f"delta-eos long run, {args.batches} batches of {args.long_run_rows} rows")
    return module.measure(work, batches=args.batches, rows_per_batch=args.long_run_rows,
                          partitions=args.partitions, log=log)


def _latency(args: argparse.Namespace, spark, bootstrap: str, work: str, log) -> dict:
    from benchmarks import latency
    from benchmarks.common import load_average

    n = len(args.latency_pipelines.split(",")) if args.latency_pipelines else len(latency.PIPELINES)
    log(f"latency: {n} pipelines, {args.latency_warmup} + "
        f"{args.latency_batches} batches each, {args.latency_rate} records/s")
    section = {"load_average": {"start": load_average()}}
    started = time.time()
    section.update(latency.measure(
        spark, bootstrap, work, batches=args.latency_batches, warmup=args.latency_warmup,
        rate=args.latency_rate, partitions=args.partitions,
        pipelines=args.latency_pipelines.split(",") if args.latency_pipelines else None,
        source_options=dict(o.split("=", 1) for o in args.latency_source_option), log=log))
    section["load_average"]["end"] = load_average()
    section["duration_s"] = round(time.time() - started)
    return section


def _latency_targets(results: dict) -> None:
    """The latency verdicts, and beside them the Kafka sink's exactly-once vs at-least-once
    figure at a 1 s trigger from the throughput section of the same results.json."""
    section = results.get("latency")
    if not section:
        return
    from benchmarks.latency import evaluate

    targets = evaluate(section["pipelines"])
    for name, t in results.get("targets", {}).items():
        if name.startswith("kafka_sink_exactly_once_vs_at_least_once"):
            targets[name] = dict(t, measured_in="by_value_size")
    section["targets"] = targets


def latency_only(args: argparse.Namespace, argv: list[str] | None, only: set[str]) -> int:
    """The latency section alone (and the long run if asked): merged into an existing
    results.json, whose other sections are kept."""
    from benchmarks.chart import draw_latency
    from benchmarks.common import existing_results, metrics_file, section_header, write_json
    from benchmarks.report import latency_table

    metrics_file()
    from integration_tests.support.brokers import kafka_broker
    from connectors.local.spark import local_spark

    json_path, results = existing_results(args.output_dir)
    started = time.time()

    def log(msg: str) -> None:
        print(f"[{time.time() - started:6.0f}s] {msg}", file=sys.stderr, flush=True)

    work = tempfile.mkdtemp(prefix="latency-")
    try:
        with kafka_broker() as broker:
            spark = local_spark("kafka-eos-benchmarks", quick_start=args.quick)  # C2 unless --quick
            try:
                section = section_header(argv, broker=broker.kind)
                section.update(_latency(args, spark, broker.bootstrap_servers, work, log))
            finally:
                spark.stop()
        results["latency"] = section
        if "delta-long-run" in only:
            from benchmarks import delta_long_run

            results["delta_long_run"] = _long_run(args, work, delta_long_run, started)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _latency_targets(results)
    write_json(results, json_path)
    draw_latency(results["latency"], os.path.join(args.output_dir, "latency.png"))
    print(latency_table(results["latency"]))
    print(f"wrote {json_path} and latency.png in {round(time.time() - started)} s",
          file=sys.stderr)
    return 0


def _by_value_size(args: argparse.Namespace, spark, bs: str, work: str, sizes: list[int],
                   only: set[str], results: dict, log) -> None:
    """The source's and the sinks' throughput at each value size, into results."""
    from benchmarks import delta_sink, kafka_sink, source
    from benchmarks.common import load_average, write_parquet_input

    files_per_batch = max(1, args.batch_rows // args.rows_per_file)
    files_per_trigger = max(1, args.trigger_rows // args.rows_per_file)
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


def _write_results(args: argparse.Namespace, results: dict, only: set[str],
                   started: float) -> int:
    """Targets evaluated; results.json written, keeping the sections measured alone before;
    the charts drawn; the verdicts printed."""
    from benchmarks.chart import draw, draw_latency
    from benchmarks.common import load_average, write_json

    results["load_average"]["end"] = load_average()
    results["duration_s"] = round(time.time() - started)
    results["targets"] = evaluate(results["by_value_size"])
    json_path = os.path.join(args.output_dir, "results.json")
    if os.path.exists(json_path):
        with open(json_path) as f:  # sections measured by their own command: kept
            previous = json.load(f)
        for key in ("delta_long_run", "latency", "upsert_scale", "partitions", "registry",
                    "cluster"):
            if key not in results and key in previous:
                results[key] = previous[key]
    _latency_targets(results)
    write_json(results, json_path)
    chart_path = os.path.join(args.output_dir, "chart.png")
    if only >= {"source", "kafka", "delta", "memory"}:
        draw(results, chart_path)
    if "latency" in results:
        draw_latency(results["latency"], os.path.join(args.output_dir, "latency.png"))
    print(json.dumps(results["targets"], indent=2))
    if "latency" in results:
        from benchmarks.report import latency_table

        print(latency_table(results["latency"]))  # as `--only latency` prints it
        print(json.dumps(results["latency"]["targets"], indent=2))
    print(f"wrote {json_path} and {chart_path} in {results['duration_s']} s", file=sys.stderr)
    return 0


def _run_alone(args: argparse.Namespace, argv: list[str] | None, only: set[str]) -> int | None:
    """The sections that run on their own (the peers lane, the long runs, partitions, latency),
    their exit status; None when the asked sections run together."""
    if args.peers:
        from benchmarks.peers import lane as peers

        return peers.run(args, argv)
    if only == {"delta-long-run"}:
        return long_run_only(args, argv)
    if only == {"upsert-scale"}:
        return upsert_scale_only(args, argv)
    if only == {"registry"}:
        from benchmarks import registry

        return registry.run_section(args, argv)
    if "registry" in only:
        raise SystemExit("python -m benchmarks: --only registry runs on its own (in a Spark "
                         "session with spark-avro's jar)")
    if "upsert-scale" in only:
        raise SystemExit("python -m benchmarks: --only upsert-scale runs on its own (it needs "
                         "neither the broker nor Spark)")
    if only == {"cluster"}:
        from benchmarks import cluster

        return cluster.run_section(args, argv)
    if "cluster" in only:
        raise SystemExit("python -m benchmarks: --only cluster runs on its own (a Spark "
                         "standalone cluster in network namespaces)")
    if "kafka-sink-main" in only:
        if only != {"kafka-sink-main"}:
            raise SystemExit("python -m benchmarks: --only kafka-sink-main runs on its own")
        from benchmarks import kafka_sink_main
        return kafka_sink_main.run(args, argv)
    if only == {"partitions"}:
        from benchmarks import partitions

        return partitions.run(args, argv)
    if "partitions" in only:
        raise SystemExit("python -m benchmarks: --only partitions runs on its own (in the "
                         "peers' PySpark 4.2.0 session)")
    if "latency" in only and only <= {"latency", "delta-long-run"}:
        return latency_only(args, argv, only)
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    only = set(args.only.split(","))
    alone = _run_alone(args, argv, only)
    if alone is not None:
        return alone
    return run_together(args, argv, only)


def run_together(args: argparse.Namespace, argv: list[str] | None, only: set[str]) -> int:
    """The throughput sections (and latency, memory, the long run when asked with them) on one
    broker and one Spark session; results.json keeps the sections measured alone before."""
    sizes = [int(s) for s in args.value_sizes.split(",")]

    from benchmarks.common import load_average, metrics_file, section_header

    metrics_file()  # before Spark starts: its Python workers inherit the variable
    from benchmarks import memory, noop_sink
    from connectors.local.spark import local_spark
    from integration_tests.support.brokers import kafka_broker

    os.makedirs(args.output_dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="kafka-eos-bench-")
    started = time.time()
    results: dict = section_header(argv) | {
        "parameters": {k: v for k, v in vars(args).items() if k not in ("output_dir",)},
        "by_value_size": {},
    }

    def log(msg: str) -> None:
        print(f"[{time.time() - started:6.0f}s] {msg}", file=sys.stderr, flush=True)

    try:
        with kafka_broker() as broker:
            bs = broker.bootstrap_servers
            results["broker"] = broker.kind
            spark = local_spark("kafka-eos-benchmarks", quick_start=args.quick)  # C2 unless --quick
            noop_sink.register(spark)
            try:
                _by_value_size(args, spark, bs, work, sizes, only, results, log)
                if "latency" in only:
                    results["latency"] = {"command": results["command"], "broker": broker.kind,
                                          "machine": results["machine"],
                                          **_latency(args, spark, bs, work, log)}
                    results["load_average"]["after latency"] = load_average()
            finally:
                spark.stop()
            if "memory" in only:
                log(f"worker memory, {args.memory_records} x {args.memory_value_bytes} B")
                results["worker_memory"] = memory.measure(
                    bs, records=args.memory_records, value_bytes=args.memory_value_bytes,
                    batch_rows=args.arrow_batch_rows)
                log(f"  {results['worker_memory']}")
        if "delta-long-run" in only:
            from benchmarks import delta_long_run

            results["delta_long_run"] = _long_run(args, work, delta_long_run, started)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    return _write_results(args, results, only, started)


if __name__ == "__main__":
    sys.exit(main())
