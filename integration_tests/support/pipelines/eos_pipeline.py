"""Kafka -> `kafka-eos` source -> `delta-eos`, `kafka-eos` or `postgres-eos` sink, as its own
process so that the crash matrix can SIGKILL it (driver JVM included) and restart it on the same
checkpoint.

    python -m integration_tests.support.pipelines.eos_pipeline --bootstrap B --topic T --checkpoint C \\
        (--table PATH | --out-topic TOPIC | --pg-table NAME) [--mode drain|continuous] \\
        [--master local[2,4]] [--guarantee G] [--sink-option KEY=VALUE ...] \\
        [--source-option KEY=VALUE ...] [--no-daemon] [--changes] [--also QUERY-ARGS ...]

`--also` starts one more query in the same Spark application, with arguments of its own (the
same options as above but `--master` and `--no-daemon`, which are the application's); repeat it
for more. The pipeline ends when every query has: the crash matrix runs every sink's row of a
kill point in one Spark start (sinks/faults.py's rendezvous).

`--changes`: the topic holds JSON change events `{"id", "seq", "op", "v"}` and the table sinks
get those four columns (for delta-eos's upsert mode: its options come as --sink-option
mergeKeys=id ...), instead of one row per record with its source position.

`--pg-table` writes to PostgreSQL at the libpq URL in the environment variable EOS_PG_URL (an
environment variable, not an argument: it holds a password, and argv is public). For the same
reason the `kafka.*` security options of a secured cluster (source and Kafka sink) come as a
JSON object in EOS_KAFKA_OPTIONS (or the variable `--kafka-options-env` names, per query).

Fault points come from KAFKA_EOS_FAULTS (sinks/faults.py); this script names its own process
group in KAFKA_EOS_KILL_PGID so that a fault inside a Python worker kills the whole pipeline.
"""

import argparse
import json
import os
import sys
import time

from sinks.faults import ENV, PGID_ENV, RENDEZVOUS_ENV

ap = argparse.ArgumentParser()
ap.add_argument("--bootstrap", required=True)
ap.add_argument("--topic", required=True)
ap.add_argument("--checkpoint", required=True)
sink = ap.add_mutually_exclusive_group(required=True)
sink.add_argument("--table", help="delta-eos: the table's path")
sink.add_argument("--out-topic", help="kafka-eos: the output topic")
sink.add_argument("--pg-table", help="postgres-eos: the table (URL from $EOS_PG_URL)")
ap.add_argument("--mode", choices=["drain", "continuous"], default="drain")
ap.add_argument("--trigger-ms", type=int, default=300,
                help="continuous mode's processing-time trigger interval")
ap.add_argument("--master", default="local[2,4]")  # 4 task attempts: a failed task is retried
ap.add_argument("--driver-host", default=None,
                help="a cluster master (spark://...): the address executors reach the driver "
                     "at; the session is then built as a user's job builds it, with nothing of "
                     "the test harness (connectors.local.spark) and no PYSPARK_* set here")
ap.add_argument("--max-per-trigger", default="50")
ap.add_argument("--poll-timeout-ms", default="20000")
ap.add_argument("--guarantee", default="exactly-once")
ap.add_argument("--commit-timeout", default="60s",
                help="the sink's commitTimeout; empty: the sink's own default")
ap.add_argument("--transactional-id-prefix", default=None)
ap.add_argument("--kafka-options-env", default="EOS_KAFKA_OPTIONS",
                help="the environment variable holding this query's kafka.* options as JSON")
ap.add_argument("--sink-option", action="append", default=[], metavar="KEY=VALUE",
                help="an extra option of the sink (repeatable)")
ap.add_argument("--source-option", action="append", default=[], metavar="KEY=VALUE",
                help="an extra option of the kafka-eos source (repeatable), e.g. "
                     "targetTasksPerBatch=2 for packed tasks")
ap.add_argument("--changes", action="store_true",
                help="rows are the JSON change events {id, seq, op, v} of the topic's values")
ap.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                help="a setting of the Spark application (repeatable)")
ap.add_argument("--no-daemon", action="store_true",
                help="spark.python.use.daemon=false: workers start as `python -m ...`")


def split_queries(argv: list[str]) -> list[list[str]]:
    """The command line's queries: the arguments before the first `--also`, then each
    `--also`'s."""
    queries: list[list[str]] = [[]]
    for arg in argv:
        if arg == "--also":
            queries.append([])
        else:
            queries[-1].append(arg)
    return queries


queries = [ap.parse_args(q) for q in split_queries(sys.argv[1:])]
args = queries[0]
for later in queries[1:]:
    if later.no_daemon or later.spark_conf or later.master != ap.get_default("master"):
        ap.error("--master, --spark-conf and --no-daemon are the application's: give them "
                 "before the first --also")

os.environ[PGID_ENV] = str(os.getpgrp())
conf = {
    "spark.task.maxFailures": "4",
    f"spark.executorEnv.{PGID_ENV}": os.environ[PGID_ENV],
}
for name in (ENV, RENDEZVOUS_ENV):
    if os.environ.get(name):
        conf[f"spark.executorEnv.{name}"] = os.environ[name]
if args.no_daemon:
    conf["spark.python.use.daemon"] = "false"
conf.update(item.partition("=")[::2] for item in args.spark_conf)
from integration_tests.support.processes import (  # noqa: E402
    CONNECT_BACK,
    RESTART_LINE,
    WORKERS_LINE,
)

print(WORKERS_LINE.format("no-daemon" if args.no_daemon else "daemon"), end="", flush=True)

if args.driver_host:
    from pyspark.sql import SparkSession  # noqa: E402

    builder = (SparkSession.builder.master(args.master).appName("eos-pipeline")
               .config("spark.driver.host", args.driver_host)
               .config("spark.driver.bindAddress", args.driver_host)
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2"))
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    print(f"PYSPARK_PYTHON={os.environ.get('PYSPARK_PYTHON')!r} "
          f"executors' Python: {spark.sparkContext.pythonExec!r}", flush=True)
else:
    from connectors.local.spark import local_spark  # noqa: E402  (after the environment is set)

    spark = local_spark("eos-pipeline", master=args.master, conf=conf)


def start(args: argparse.Namespace):
    """Start one query of the command line; the query."""
    kafka_options = json.loads(os.environ.get(args.kafka_options_env, "{}"))
    events = (
        spark.readStream.format("kafka-eos")
        .options(**kafka_options)
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", args.max_per_trigger)
        .option("kafkaConsumer.pollTimeoutMs", args.poll_timeout_ms)
        .options(**dict(item.partition("=")[::2] for item in args.source_option))
        .load()
    )
    # The table sinks get one row per record, with its source position for the oracles; or, with
    # --changes, the change event each record's value holds.
    if args.changes:
        rows = events.selectExpr(
            "from_json(CAST(value AS STRING), 'id BIGINT, seq BIGINT, op STRING, v STRING') AS c"
        ).selectExpr("c.id AS id", "c.seq AS seq", "c.op AS op", "c.v AS v")
    else:
        rows = events.selectExpr(
            "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value",
            "partition", "offset", "timestamp",
        )
    if args.pg_table:
        writer = (
            rows.writeStream.format("postgres-eos")
            .option("url", os.environ["EOS_PG_URL"])
            .option("table", args.pg_table)
        )
    elif args.table:
        writer = rows.writeStream.format("delta-eos").option("path", args.table)
    else:
        writer = (
            events.select("key", "value")
            .writeStream.format("kafka-eos")
            .options(**kafka_options)
            .option("kafka.bootstrap.servers", args.bootstrap)
            .option("topic", args.out_topic)
        )
        if args.transactional_id_prefix:
            writer = writer.option("transactionalIdPrefix", args.transactional_id_prefix)
    writer = (
        writer.option("checkpointLocation", args.checkpoint)
        .option("deliveryGuarantee", args.guarantee)
    )
    if args.commit_timeout:
        writer = writer.option("commitTimeout", args.commit_timeout)
    for item in args.sink_option:
        key, _, value = item.partition("=")
        writer = writer.option(key, value)
    if args.mode == "drain":
        query = writer.trigger(availableNow=True).start()
    else:
        query = writer.trigger(processingTime=f"{args.trigger_ms} milliseconds").start()
    return query


#: A query's status until its sources are created (Spark's StreamExecution: its first status,
#: then the one it gives while it builds its sources, the Python source runner among them).
INITIALIZING = ("Initializing StreamExecution", "Initializing sources")


def wait_sources_created(query, timeout_s: float = 180) -> None:
    """Until the query's sources are created, its Python source runner connected (or failed
    to), or the query has ended. Spark starts that runner as a simple worker and gives it a
    fixed 10 s to connect back (PythonWorkerFactory): the queries of one application start one
    after the other's runner has connected, not all at once (five at once on two loaded cores
    missed it twice). Waiting on for the first batch instead serialized the queries' starts (the
    crash matrix took 990-1,160 s with that wait, 565 s before it, 2026-11-28); a runner that
    misses the window later is `supervise`'s."""
    deadline = time.monotonic() + timeout_s
    while query.isActive and time.monotonic() < deadline:
        if query.status["message"] not in INITIALIZING:
            return
        time.sleep(0.2)


#: How many times a query is started when a Python runner of its driver misses that window.
START_ATTEMPTS = 8


def missed_connect_back(query) -> bool:
    """Whether the query ended because a Python runner Spark started for it on the driver
    missed the fixed 10 s connect-back."""
    if query.isActive:
        return False
    error = query.exception()
    return error is not None and CONNECT_BACK in str(error)


def start_up(query_args: argparse.Namespace):
    """Start one query and wait for its sources; started again, on its checkpoint, when Spark's
    Python source runner missed the 10 s connect-back. Even one after the other, the crash
    matrix's fifth query missed it under CI's load (run of 2026-11-28 18:45): Spark's start-up,
    before any of the sinks' work, which a restart on the checkpoint is how a job's supervisor
    answers."""
    for attempt in range(1, START_ATTEMPTS + 1):
        query = start(query_args)
        wait_sources_created(query)
        if attempt == START_ATTEMPTS or not missed_connect_back(query):
            return query
        print(RESTART_LINE.format(query_args.checkpoint), flush=True)
    return query


def supervise(started: list) -> None:
    """Until every query has ended; a query that ends on a missed connect-back later, from a
    runner Spark starts for a batch (the read planner, the sink's commit), is started again
    on its checkpoint too: CI's no-daemon run of the crash matrix lost its upsert query so,
    after its source was up (2026-11-28 22:25). Any other failure ends the pipeline with it."""
    running = list(zip(queries, started))
    restarts = {query_args.checkpoint: 0 for query_args in queries}
    while running:
        still = []
        for query_args, query in running:
            if query.isActive:
                still.append((query_args, query))
            elif missed_connect_back(query) and restarts[query_args.checkpoint] < START_ATTEMPTS:
                restarts[query_args.checkpoint] += 1
                print(RESTART_LINE.format(query_args.checkpoint), flush=True)
                still.append((query_args, start_up(query_args)))
            else:
                query.awaitTermination()  # raises the query's error, if it had one
        running = still
        time.sleep(0.5)


supervise([start_up(q) for q in queries])
spark.stop()
