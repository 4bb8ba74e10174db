"""The driver of `python -m benchmarks --only cluster` (benchmarks/cluster.py): one Spark
application on the standalone cluster, started as a user's client-mode job (nothing PYSPARK_*
set), that reads the input topic once through into each sink in turn and prints each query's
figures from its own progress as one JSON line.

    python -m benchmarks.cluster_job --master spark://H:P --driver-host H --bootstrap B
        --topic T --rows N --work s3a://bucket/prefix [--spark-conf KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import uuid

from benchmarks.common import run_query

MARK = "CLUSTER-RESULT "


def main() -> None:
    ap = argparse.ArgumentParser()
    for name in ("--master", "--driver-host", "--bootstrap", "--topic", "--work"):
        ap.add_argument(name, required=True)
    ap.add_argument("--rows", type=int, required=True)
    ap.add_argument("--max-per-trigger", type=int, required=True)
    ap.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()

    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(args.master).appName("benchmarks-cluster")
               .config("spark.driver.host", args.driver_host)
               .config("spark.driver.bindAddress", args.driver_host)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false"))
    for item in args.spark_conf:
        key, _, value = item.partition("=")
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    for sink in ("noop", "delta-eos", "kafka-eos"):
        tag = uuid.uuid4().hex[:8]
        events = (spark.readStream.format("kafka-eos")
                  .option("kafka.bootstrap.servers", args.bootstrap)
                  .option("subscribe", args.topic)
                  .option("startingOffsets", "earliest")
                  .option("maxOffsetsPerTrigger", str(args.max_per_trigger))
                  .load())
        if sink == "noop":
            writer = events.writeStream.format("noop")
        elif sink == "delta-eos":
            writer = (events.selectExpr("key", "value", "partition", "offset")
                      .writeStream.format("delta-eos").option("path", f"{args.work}/t-{tag}"))
        else:
            writer = (events.select("key", "value").writeStream.format("kafka-eos")
                      .option("kafka.bootstrap.servers", args.bootstrap)
                      .option("topic", f"{args.topic}-out"))
        query = (writer.option("checkpointLocation", f"{args.work}/ck-{sink}-{tag}")
                 .trigger(availableNow=True).start())
        run = run_query(query, args.rows, timeout_s=1800)
        print(MARK + json.dumps({
            "sink": sink, "rows": run.rows, "batches": run.batches,
            "trigger_s": round(run.trigger_s, 3), "wall_s": round(run.wall_s, 3),
            "rows_per_s": round(run.rows_per_s, 1),
        }), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
