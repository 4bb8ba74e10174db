"""`--only kafka-sink-main`: the Kafka sink beside Spark's, in the package's own PySpark.

The peers' `kafka-sink` section (benchmarks/peers/sinks.py) runs in the peers' PySpark 4.2.0
session, where delta-spark loads. Spark's Kafka connector also loads in a PySpark 4.3 session
(its 4.2.0 jar on the 4.3 JVM: integration_tests.support.peers.kafka_connector_spark), and the
Python data-source path differs between the two PySpark versions. This section runs the same
measure, `kafka-eos` exactly once against `format("kafka")` at least once, fed the same rows by
Spark's file source, in the main environment's session. The JVMs keep C2 unless `--quick`, as
the peers' session does.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time


def run(args: argparse.Namespace, argv: list[str] | None) -> int:
    """Measured into DIR/results.json under `kafka_sink_main_session`, its other sections
    kept."""
    from benchmarks.common import (
        existing_results,
        load_average,
        metrics_file,
        section_header,
        write_json,
        write_parquet_input,
    )

    metrics_file()  # before Spark starts: its Python workers inherit the variable
    import pyspark

    from benchmarks.peers.sinks import measure_kafka
    from integration_tests.support.brokers import kafka_broker
    from integration_tests.support.peers import kafka_connector_spark

    json_path, results = existing_results(args.output_dir)
    started = time.time()

    def log(msg: str) -> None:
        print(f"[{time.time() - started:6.0f}s] {msg}", file=sys.stderr, flush=True)

    sizes = [int(s) for s in args.value_sizes.split(",")]
    work = tempfile.mkdtemp(prefix="kafka-sink-main-")
    section: dict = section_header(argv, pyspark=pyspark.__version__)
    try:
        inputs = {str(size): write_parquet_input(work, args.records, size, args.rows_per_file)
                  for size in sizes}
        with kafka_broker() as broker:
            spark = kafka_connector_spark("kafka-eos-benchmarks-kafka-sink",
                                          quick_start=args.quick)
            try:
                section["broker"] = broker.kind
                section.update(measure_kafka(
                    spark, broker.bootstrap_servers, inputs, partitions=args.peers_partitions,
                    files_per_batch=max(1, args.batch_rows // args.rows_per_file),
                    repeats=args.repeats, warmup=args.warmup, log=log))
            finally:
                spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    section["load_average"]["end"] = load_average()
    results["kafka_sink_main_session"] = section
    write_json(results, json_path)
    for size, r in section["by_value_size"].items():
        print(f"kafka sink {size} B, PySpark {section['pyspark']}: kafka-eos "
              f"{r['kafka_eos_rows_per_s']:,} rows/s (runs {r['kafka_eos_runs']}), "
              f"format(\"kafka\") {r['spark_kafka_rows_per_s']:,} (runs "
              f"{r['spark_kafka_runs']}): ratio {r['ratio']}")
    print(f"wrote {json_path} in {round(time.time() - started)} s", file=sys.stderr)
    return 0
