"""Side by side with the peers: `kafka-eos` and `delta-eos` against Spark's own
`format("kafka")` (spark-sql-kafka-0-10 4.2.0) and delta-spark's `format("delta")` (4.4.0), in
one warm PySpark 4.2.0 session on the same Apache Kafka broker, each pair on the same input,
alternating which goes first where a pair runs more than once.

    python -m benchmarks --peers [--quick] [--peers-only source,latency,kafka-sink,delta-sink]
        [--records N] [--value-sizes 100,1024] [--peers-partitions 4] [--repeats 2]
        [--latency-batches 30] [--latency-rate 200] [--peers-delta-batches 1000]
        [--peers-delta-rows 100] [--output-dir DIR]

Sections (`--peers-only` runs a subset; they replace their sections of an existing
DIR/peers.json, the others are kept):

* `source`: each topic read by `kafka-eos` and by `format("kafka")` into Spark's no-op sink
  (availableNow, one task per Kafka partition; each source keeps its own defaults: kafka-eos
  reads read_committed, Spark's source read_uncommitted; the topic holds no transaction). The
  rate is rows over the summed `triggerExecution`, as the other source figures;
* `latency` (benchmarks/peers/latency.py): `kafka-eos -> delta-eos` in both read modes against
  `format("kafka") -> format("delta")`, 200 records/s, a 1 s trigger;
* `kafka-sink`, `delta-sink` (benchmarks/peers/sinks.py): rows/s from the same Parquet, and
  both Delta sinks' per-batch time as a table grows to `--peers-delta-batches` batches.

The parent (any Python with the package) starts the suite's broker, produces the source's topics
and runs `python -m benchmarks.peers.lane SPEC RESULT` in the peers' environment
(integration_tests/support/peers.py: made once into the broker jars' cache). Figures and every
target's verdict (benchmarks/peers/report.py `TARGETS`) go to DIR/peers.json, a table per
section to stdout, a chart to DIR/peers.png (benchmarks/chart.py `draw_peers`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: The two sources compared, by format name.
SOURCES = ("kafka-eos", "kafka")
#: delta-spark rebuilds a snapshot's state in 50 tasks by default: on local[2] that is
#: scheduling, not work (docs/peers.md); the peers lane's setting, in delta-spark's favour.
SESSION_CONF = {"spark.databricks.delta.snapshotPartitions": "2"}


# -- in the peers' environment ------------------------------------------------------------------


def read_topic(spark, fmt: str, bootstrap: str, topic: str, rows: int):
    from benchmarks.common import read_into_noop  # in the peers' interpreter

    return read_into_noop(spark, fmt, bootstrap, topic, rows)


def measure_source(spark, spec: dict) -> dict:
    """Every value size's runs, alternating the order; the best of each kept."""
    from benchmarks.common import ratio

    out: dict = {"by_value_size": {}}
    for size, topic in spec["topics"].items():
        rows = spec["rows"]
        runs: dict[str, list[float]] = {fmt: [] for fmt in SOURCES}
        walls: dict[str, list[float]] = {fmt: [] for fmt in SOURCES}
        if spec["warmup"]:  # not measured: workers, consumers, the broker's page cache
            for fmt in SOURCES:
                read_topic(spark, fmt, spec["bootstrap"], topic, rows)
        for r in range(spec["repeats"]):
            order = SOURCES if r % 2 == 0 else SOURCES[::-1]
            for fmt in order:
                run = read_topic(spark, fmt, spec["bootstrap"], topic, rows)
                runs[fmt].append(run.rows_per_s)
                walls[fmt].append(run.wall_s)
        eos, spark_rate = max(runs["kafka-eos"]), max(runs["kafka"])
        out["by_value_size"][size] = {
            "records": rows,
            "partitions": spec["partitions"],
            "kafka_eos_rows_per_s": round(eos),
            "spark_kafka_rows_per_s": round(spark_rate),
            "kafka_eos_runs": [round(x) for x in runs["kafka-eos"]],
            "spark_kafka_runs": [round(x) for x in runs["kafka"]],
            "kafka_eos_wall_s": [round(x, 2) for x in walls["kafka-eos"]],
            "spark_kafka_wall_s": [round(x, 2) for x in walls["kafka"]],
            "ratio": ratio(eos, spark_rate),
        }
    return out


def _section(spark, name: str, spec: dict, work: str, log) -> dict:
    from benchmarks.peers import latency as peers_latency, sinks as peers_sinks
    from benchmarks.common import write_parquet_input

    if name == "source":
        return measure_source(spark, spec)
    if name == "latency":
        lat = spec["latency"]
        return peers_latency.measure(
            spark, spec["bootstrap"], work, batches=lat["batches"], warmup=lat["warmup"],
            rate=lat["rate"], partitions=lat["partitions"], repeats=lat["repeats"], log=log)
    s = spec["sinks"]
    inputs = {size: write_parquet_input(work, s["records"], int(size), s["rows_per_file"])
              for size in spec["sizes"]}
    common = {"files_per_batch": s["files_per_batch"], "repeats": spec["repeats"],
              "warmup": spec["warmup"], "log": log}
    if name == "kafka-sink":
        return peers_sinks.measure_kafka(spark, spec["bootstrap"], inputs,
                                         partitions=spec["partitions"], **common)
    out = peers_sinks.measure_delta(spark, work, inputs, **common)
    g = spec["long_run"]
    log(f"delta sinks over {g['batches']} batches of {g['rows_per_batch']} rows")
    growing = write_parquet_input(Path(work, "long-run").as_posix(),
                                  g["batches"] * g["rows_per_batch"], g["value_bytes"],
                                  g["rows_per_batch"])
    out["long_run"] = peers_sinks.measure_delta_long_run(spark, work, growing, log=log)
    return out


def measure_in_session(spec: dict) -> dict:
    """In the peers' environment: the sections asked for, in one warm session."""
    from benchmarks.common import load_average, metrics_file
    from benchmarks.peers.report import section_key
    from integration_tests.support.peers import peer_spark

    metrics_file()  # before Spark starts: its Python workers inherit the variable
    started = time.monotonic()

    def log(msg: str) -> None:
        print(f"[peers {time.monotonic() - started:6.0f}s] {msg}", file=sys.stderr, flush=True)

    spark = peer_spark("kafka-eos-peers-benchmark", quick_start=spec["quick"], conf=SESSION_CONF)
    out: dict = {"session_start_s": round(time.monotonic() - started, 1),
                 "load_average": {"start": load_average()}}
    log(f"session started in {out['session_start_s']} s")
    work = tempfile.mkdtemp(prefix="peers-session-")
    try:
        import pyspark

        out["pyspark"] = pyspark.__version__
        for name in spec["sections"]:
            t, load = time.monotonic(), load_average()
            log(f"section {name}")
            res = _section(spark, name, spec, work, log)
            res["load_average"] = {"start": load, "end": load_average()}
            res["duration_s"] = round(time.monotonic() - t)
            out[section_key(name)] = res
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    out["load_average"]["end"] = load_average()
    return out


# -- the parent ---------------------------------------------------------------------------------


def spec_for(args, bootstrap: str, topics: dict[str, str], sections: list[str]) -> dict:
    """What the session measures, from `python -m benchmarks --peers`'s arguments."""
    per = max(1, args.records // args.peers_partitions)
    return {
        "bootstrap": bootstrap, "topics": topics, "rows": per * args.peers_partitions,
        "partitions": args.peers_partitions, "repeats": args.repeats, "warmup": args.warmup,
        "quick": args.quick, "sections": sections,
        "sizes": [s.strip() for s in args.value_sizes.split(",")],
        "latency": {"batches": args.latency_batches, "warmup": args.latency_warmup,
                    "rate": args.latency_rate, "partitions": args.partitions,
                    "repeats": args.repeats},
        "sinks": {"records": args.records, "rows_per_file": args.rows_per_file,
                  "files_per_batch": max(1, args.batch_rows // args.rows_per_file)},
        "long_run": {"batches": args.peers_delta_batches,
                     "rows_per_batch": args.peers_delta_rows, "value_bytes": 100},
    }


def run(args, argv: list[str] | None) -> int:
    """`python -m benchmarks --peers`: the broker here, the session in the peers' environment."""
    from benchmarks.chart import draw_peers
    from benchmarks.common import (
        code_version,
        command_line,
        load_average,
        machine,
        produce_fixed,
        write_json,
    )
    from benchmarks.peers.report import evaluate, parse_sections, section_key, tables
    from integration_tests.support.brokers import kafka_broker
    from integration_tests.support.peers import peer_environment
    from integration_tests.support.kafka_data import create_topic, delete_topic, unique_topic

    started = time.time()

    def log(msg: str) -> None:
        print(f"[{time.time() - started:6.0f}s] {msg}", file=sys.stderr, flush=True)

    sections = parse_sections(args.peers_only)
    python, env = peer_environment()
    log(f"peers' environment: {python}; sections: {', '.join(sections)}")
    out_dir = Path(args.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / "peers.json"
    results = json.loads(json_path.read_text()) if json_path.exists() else {}
    command = command_line(argv)
    load_start = load_average()
    with kafka_broker() as broker, tempfile.TemporaryDirectory(prefix="peers-bench-") as work:
        bootstrap = broker.bootstrap_servers
        topics: dict[str, str] = {}
        if "source" in sections:
            per = max(1, args.records // args.peers_partitions)
            for size in (s.strip() for s in args.value_sizes.split(",")):
                topic = unique_topic(f"bench-peers-{size}")
                create_topic(bootstrap, topic, args.peers_partitions)
                produce_fixed(bootstrap, topic, args.peers_partitions, per, int(size))
                topics[size] = topic
            log(f"produced {per * args.peers_partitions:,} records per value size into "
                f"{args.peers_partitions} partitions")
        spec_path, result_path = Path(work) / "spec.json", Path(work) / "result.json"
        spec_path.write_text(json.dumps(spec_for(args, bootstrap, topics, sections)))
        try:
            result = subprocess.run(
                [str(python), "-m", "benchmarks.peers.lane", str(spec_path), str(result_path)],
                env=env, cwd=str(Path(__file__).resolve().parents[1]), timeout=6 * 3600)
        finally:
            for topic in topics.values():
                delete_topic(bootstrap, topic)
        if result.returncode != 0:
            raise SystemExit(f"python -m benchmarks --peers: the peers' session failed (exit "
                             f"{result.returncode}); its output is above")
        session = json.loads(result_path.read_text())
        broker_kind = broker.kind
    for name in sections:
        key = section_key(name)
        results[key] = dict(session[key], command=command, broker=broker_kind)
    results.update({
        "command": command,
        "machine": machine(),
        "code": code_version(),
        "broker": broker_kind,
        "pyspark": session.get("pyspark"),
        "session_start_s": session.get("session_start_s"),
        "load_average": {"start": load_start, "session": session["load_average"],
                         "end": load_average()},
        "duration_s": round(time.time() - started),
    })
    results["targets"] = evaluate(results)
    write_json(results, str(json_path))
    png = out_dir / "peers.png"
    draw_peers(results, str(png))
    print(tables(results))
    print(f"wrote {json_path} and {png} in {results['duration_s']} s", file=sys.stderr)
    return 0


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    Path(argv[1]).write_text(json.dumps(measure_in_session(spec)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
