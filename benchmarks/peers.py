"""Side by side with Spark's own Kafka source (issue 22, the peers lane's first pair): the same
topic read by `kafka-eos` and by `format("kafka")` (spark-sql-kafka-0-10 4.2.0), both into
Spark's no-op sink, in one warm PySpark 4.2.0 session on the same machine, alternating which
goes first; the best run of each is kept and their ratio reported.

    python -m benchmarks --peers [--quick] [--records N] [--value-sizes 100,1024]
                                 [--peers-partitions 4] [--repeats 3] [--output-dir DIR]

The parent (any Python with the package) starts the suite's broker, produces one topic per value
size and runs `python -m benchmarks.peers SPEC RESULT` in the peers' environment
(connectors/testing/peers.py: made once into the broker jars' cache); the figures go to
DIR/peers.json, a table to stdout. Both queries are availableNow over the whole topic, one task
per Kafka partition; each source keeps its own defaults (kafka-eos reads read_committed, Spark's
source read_uncommitted: the topic holds no transaction, so both read every record). The rate is
rows over the summed `triggerExecution` of the batches, as the other source figures
(benchmarks/source.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: The two sources compared, by format name.
SOURCES = ("kafka-eos", "kafka")


def read_topic(spark, fmt: str, bootstrap: str, topic: str, rows: int):
    from benchmarks.common import read_into_noop  # in the peers' interpreter

    return read_into_noop(spark, fmt, bootstrap, topic, rows)


def measure_in_session(spec: dict) -> dict:
    """In the peers' environment: every value size's runs, alternating the order."""
    from benchmarks.common import load_average, ratio
    from connectors.testing.peers import peer_spark

    started = time.monotonic()
    spark = peer_spark("kafka-eos-peers-benchmark", quick_start=spec["quick"])
    out: dict = {"session_start_s": round(time.monotonic() - started, 1),
                 "load_average": {"start": load_average()}, "by_value_size": {}}
    try:
        import pyspark

        out["pyspark"] = pyspark.__version__
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
    finally:
        spark.stop()
    out["load_average"]["end"] = load_average()
    return out


#: Issue 22's target for this pair.
TARGET = 0.8


def table(section: dict) -> str:
    lines = ["| value size | records | kafka-eos rows/s | format(\"kafka\") rows/s | ratio | "
             f"target >= {TARGET} |", "|---|---|---|---|---|---|"]
    for size, r in section["by_value_size"].items():
        label = f"{size} B" if int(size) < 1024 else f"{int(size) // 1024} KB"
        lines.append(f"| {label} | {r['records']:,} | {r['kafka_eos_rows_per_s']:,} | "
                     f"{r['spark_kafka_rows_per_s']:,} | {r['ratio']} | "
                     f"{'met' if r['ratio'] >= TARGET else 'missed'} |")
    return "\n".join(lines)


def run(args, argv: list[str] | None) -> int:
    """`python -m benchmarks --peers`: the broker here, the session in the peers' environment."""
    from benchmarks.common import machine, produce_fixed
    from connectors.testing import kafka_broker
    from connectors.testing.peers import peer_environment
    from integration_tests.kafka_data import create_topic, delete_topic, unique_topic

    started = time.time()

    def log(msg: str) -> None:
        print(f"[{time.time() - started:6.0f}s] {msg}", file=sys.stderr, flush=True)

    python, env = peer_environment()
    log(f"peers' environment: {python}")
    sizes = [int(s) for s in args.value_sizes.split(",")]
    partitions = args.peers_partitions
    per = max(1, args.records // partitions)
    out_dir = Path(args.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with kafka_broker() as broker, tempfile.TemporaryDirectory(prefix="peers-bench-") as work:
        bootstrap = broker.bootstrap_servers
        topics = {}
        for size in sizes:
            topic = unique_topic(f"bench-peers-{size}")
            create_topic(bootstrap, topic, partitions)
            produce_fixed(bootstrap, topic, partitions, per, size)
            topics[str(size)] = topic
        log(f"produced {per * partitions:,} records per value size into {partitions} partitions")
        spec = {"bootstrap": bootstrap, "topics": topics, "rows": per * partitions,
                "partitions": partitions, "repeats": args.repeats, "warmup": args.warmup,
                "quick": args.quick}
        spec_path, result_path = Path(work) / "spec.json", Path(work) / "result.json"
        spec_path.write_text(json.dumps(spec))
        log("source throughput: kafka-eos vs format(\"kafka\") into noop, PySpark 4.2.0")
        result = subprocess.run(
            [str(python), "-m", "benchmarks.peers", str(spec_path), str(result_path)],
            env=env, cwd=str(Path(__file__).resolve().parents[1]), timeout=3600)
        for topic in topics.values():
            delete_topic(bootstrap, topic)
        if result.returncode != 0:
            raise SystemExit(f"python -m benchmarks --peers: the peers' session failed (exit "
                             f"{result.returncode}); its output is above")
        section = json.loads(result_path.read_text())
        section.update({
            "command": "python -m benchmarks " + " ".join(sys.argv[1:] if argv is None else argv),
            "machine": machine(),
            "broker": broker.kind,
            "duration_s": round(time.time() - started),
        })
    json_path = out_dir / "peers.json"
    json_path.write_text(json.dumps({"source": section}, indent=2))
    print(table(section))
    print(f"wrote {json_path} in {section['duration_s']} s", file=sys.stderr)
    return 0


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    Path(argv[1]).write_text(json.dumps(measure_in_session(spec)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
