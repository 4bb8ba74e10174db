"""A new user's first batch: how long a fresh session's first `kafka-eos -> delta-eos` query
takes to its first committed batch, beside a `rate -> noop` query's first batch in the same
session (Spark's own floor: no Python at all). Each repeat is a fresh process, as a user's
job is, with Spark's default JVM options (not the suite's quick-start ones).

    python -m benchmarks.first_batch [--repeats 3] [--bootstrap-servers HOST:PORT]

Prints one JSON line per repeat and their medians. Without --bootstrap-servers it starts the
suite's broker (Apache Kafka from its Maven jars) once for all repeats.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def _first_progress(query, timeout_s: float = 300) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for p in query.recentProgress:
            if p["batchId"] == 0 and p["numInputRows"] > 0 or p["batchId"] >= 1:
                return p
        time.sleep(0.05)
    raise TimeoutError("no first batch")


def one_session(bootstrap: str, topic: str, work: str) -> dict:
    """In this (fresh) process: a session, rate -> noop, then kafka-eos -> delta-eos."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    t0 = time.monotonic()
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    session_s = time.monotonic() - t0

    started = time.monotonic()
    q = (spark.readStream.format("rate").option("rowsPerSecond", 100).load()
         .writeStream.format("noop").trigger(processingTime="1 second").start())
    p = _first_progress(q)
    rate_first = {"start_to_batch_s": time.monotonic() - started,
                  "trigger_ms": p["durationMs"]["triggerExecution"]}
    q.stop()

    started = time.monotonic()
    q = (spark.readStream.format("kafka-eos").option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", topic).option("startingOffsets", "earliest").load()
         .selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value")
         .writeStream.format("delta-eos").option("path", os.path.join(work, "table"))
         .option("checkpointLocation", os.path.join(work, "ck"))
         .trigger(processingTime="1 second").start())
    p = _first_progress(q)
    eos_first = {"start_to_batch_s": time.monotonic() - started,
                 "trigger_ms": p["durationMs"]["triggerExecution"], "rows": p["numInputRows"]}
    q.stop()
    spark.stop()
    return {"session_s": session_s, "rate_noop": rate_first, "kafka_eos_delta_eos": eos_first}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.first_batch", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bootstrap-servers")
    ap.add_argument("--session", nargs=3, metavar=("BOOTSTRAP", "TOPIC", "WORK"),
                    help=argparse.SUPPRESS)  # one repeat, in a fresh process
    args = ap.parse_args(argv)
    if args.session:
        print(json.dumps(one_session(*args.session)), flush=True)
        return 0

    import contextlib

    import uuid

    from confluent_kafka.admin import AdminClient, NewTopic

    from benchmarks.common import produce_fixed
    from integration_tests.support.brokers import kafka_broker

    with contextlib.ExitStack() as stack:
        bootstrap = args.bootstrap_servers or stack.enter_context(kafka_broker()).bootstrap_servers
        topic = f"first-batch-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
        produce_fixed(bootstrap, topic, 2, 500, 100)
        runs = []
        for _ in range(args.repeats):
            work = tempfile.mkdtemp(prefix="first-batch-")
            out = subprocess.run([sys.executable, "-m", "benchmarks.first_batch", "--session",
                                  bootstrap, topic, work], capture_output=True, text=True,
                                 check=True, timeout=900)
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(json.dumps(runs[-1]), flush=True)

    def med(path: tuple[str, ...]) -> float:
        values = []
        for r in runs:
            v = r
            for k in path:
                v = v[k]
            values.append(v)
        return round(statistics.median(values), 2)

    print(json.dumps({"median": {
        "session_s": med(("session_s",)),
        "rate_noop_start_to_batch_s": med(("rate_noop", "start_to_batch_s")),
        "rate_noop_trigger_ms": med(("rate_noop", "trigger_ms")),
        "kafka_eos_delta_eos_start_to_batch_s": med(("kafka_eos_delta_eos", "start_to_batch_s")),
        "kafka_eos_delta_eos_trigger_ms": med(("kafka_eos_delta_eos", "trigger_ms")),
    }}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
