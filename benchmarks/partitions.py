"""Per-batch cost against the partition count: does it grow with the data or with the topic's
width? `kafka-eos` beside Spark's own `format("kafka")` (spark-sql-kafka-0-10 4.2.0), in one
warm PySpark 4.2.0 session of the peers' environment (benchmarks/peers/lane.py), on the suite's
broker (real Apache Kafka from its Maven jars).

    python -m benchmarks --only partitions [--partition-counts 8,200,1000]
        [--records-per-partition 20] [--partition-batches 5] [--quick] [--output-dir DIR]

For each partition count, a topic of that many partitions holding the same records per
partition (100 B values), read from the earliest offsets with availableNow and
`maxOffsetsPerTrigger` a fifth of the topic (five micro-batches), by four pipelines, each on
its own checkpoint, their order reversed at every other count:

* `kafka-eos -> noop` and `format("kafka") -> noop`: the sources alone;
* `kafka-eos -> delta-eos`: the Delta sink, a fresh table;
* `kafka-eos -> kafka-eos`: the Kafka sink, exactly-once, into a fresh topic of the same width,
  each record to its input partition (a mirror);

and after them, no target: `kafka-eos` into noop with `targetTasksPerBatch=2` (one task per
core here, instead of the default sized by the batch's records), and the floor of any Python
source: the same batches, in as many tasks as kafka-eos's default plans for that many records
(`sources.task_packing.default_target_tasks`), from `bench-python-floor`, a Python source whose
tasks yield one ready-made Arrow batch each (what Spark's Python source path costs a batch,
reading nothing; its tasks freeze their worker's objects as kafka-eos's do).

Each pipeline's figures: the p50 of Spark's `triggerExecution` over its batches and each batch's
phases (`latestOffset`, `addBatch`, ...), the wall time from `start()` to the query's end, Spark
tasks per batch (the status tracker's stages of the query's job group), and for the sinks what a
commit carries: add actions per commit in the Delta table's `_delta_log` (the files of each
version written with the sink's `txn`), and Kafka transactions per commit in the sink's
transaction log (the handles of each batch's decision records, one per task's transaction). A
warm-up of the four at the smallest count comes first, unmeasured (`--quick`: none).

The section is merged into DIR/results.json (the others kept), its chart is DIR/partitions.png
(benchmarks/chart.py `draw_partitions`), its table and verdicts are printed
(benchmarks/partitions_report.py).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from benchmarks.partitions_report import BESIDE, FLOOR, PIPELINES, TWO_TASKS, p50

VALUE_BYTES = 100
#: Spark's progress phases reported per pipeline (p50 over the batches).
PHASES = ("latestOffset", "queryPlanning", "getBatch", "addBatch", "walCommit", "commitOffsets")


# -- the floor: a Python source that reads nothing ---------------------------------------------


class _Rows(InputPartition):
    def __init__(self, rows: int) -> None:
        self.rows = rows


class FloorReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """`rows` records in batches of `maxOffsetsPerTrigger`, each in `tasks` tasks yielding one
    ready-made Arrow batch of kafka-eos's schema: what a batch costs Spark's Python source path
    (the source process's calls, the Python tasks) when the source spends nothing on its data.
    Its tasks freeze their worker's objects as kafka-eos's do (connectors/core/worker_gc.py):
    without that, PySpark's collection after each task made this floor slower than kafka-eos
    (8 tasks a batch: 865 ms against 603 ms, one quick run)."""

    def __init__(self, options: dict) -> None:
        self.rows = int(options["rows"])
        self.per_batch = int(options["maxOffsetsPerTrigger"])
        self.tasks = int(options["tasks"])

    def initialOffset(self) -> dict:
        return {"n": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.per_batch)

    def prepareForTriggerAvailableNow(self) -> None:
        pass

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        cap = limit.max_rows if isinstance(limit, ReadMaxRows) else self.rows
        return {"n": min(self.rows, start["n"] + cap)}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        rows = end["n"] - start["n"]
        tasks = max(1, min(self.tasks, rows))
        return [_Rows(rows // tasks + (1 if i < rows % tasks else 0)) for i in range(tasks)]

    def read(self, partition: InputPartition):
        import pyarrow as pa

        from connectors.core.worker_gc import freeze_long_lived
        from sources.range_reader import TIMESTAMP_TYPE, arrow_schema

        freeze_long_lived()  # as kafka-eos's tasks do: PySpark's per-task collection stays cheap

        n, blob = partition.rows, b"x" * VALUE_BYTES  # type: ignore[attr-defined]
        yield pa.RecordBatch.from_arrays([
            pa.array([b"k%d" % i for i in range(n)], pa.binary()),
            pa.array([blob] * n, pa.binary()),
            pa.array(["t"] * n, pa.string()),
            pa.array([0] * n, pa.int32()),
            pa.array(range(n), pa.int64()),
            pa.array([0] * n, pa.int64()).cast(TIMESTAMP_TYPE),
            pa.array([0] * n, pa.int32()),
        ], schema=arrow_schema(False))

    def commit(self, end: dict) -> None:
        pass


class FloorSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bench-python-floor"

    def schema(self) -> str:
        from sources.range_reader import SPARK_SCHEMA_DDL

        return SPARK_SCHEMA_DDL

    def streamReader(self, schema) -> DataSourceStreamReader:
        return FloorReader(self.options)


def register_floor(spark) -> None:
    from pyspark import cloudpickle

    import benchmarks.partitions as me

    cloudpickle.register_pickle_by_value(me)  # workers need not import the benchmarks
    spark.dataSource.register(FloorSource)


# -- in the peers' environment ------------------------------------------------------------------


LABELS = {**PIPELINES, **BESIDE}


def order(i: int) -> list[str]:
    """The pipelines at the i-th count: as listed at even i, reversed at odd i; then those
    reported beside them."""
    names = list(PIPELINES)
    return (names if i % 2 == 0 else names[::-1]) + list(BESIDE)


def delta_commits(table: str) -> list[list[dict]]:
    """The add actions of each Delta version written by a streaming batch (a `txn` action in
    it), in version order: the files each commit made visible."""
    commits = []
    for path in sorted(glob.glob(os.path.join(table, "_delta_log", "*.json"))):
        with open(path) as f:
            actions = [json.loads(line) for line in f if line.strip()]
        if any("txn" in a for a in actions):
            commits.append([a["add"] for a in actions if "add" in a])
    return commits


def delta_rows(commits: list[list[dict]]) -> int:
    """Rows those files hold, by their statistics (no data read)."""
    return sum(json.loads(add["stats"])["numRecords"] for adds in commits for add in adds)


def kafka_transactions_per_commit(checkpoint: str) -> list[int]:
    """Transactions each batch's commit ended, from the sink's transaction log: the handles of
    the batch's decision records that name a transaction, per batch in order."""
    from sinks.txn_log import TransactionLog

    log = TransactionLog(checkpoint)
    return [sum(1 for h in log.state(b).decided().values() if "transactional_id" in h)
            for b in log.batches()]


def tasks_per_job(spark, run_id: str) -> list[int]:
    """Spark tasks of each of the query's jobs (the stream's job group is its run id): one job
    a batch for these sinks."""
    tracker = spark.sparkContext.statusTracker()
    per_job = []
    for job_id in sorted(tracker.getJobIdsForGroup(run_id)):
        job = tracker.getJobInfo(job_id)
        if job is None:
            continue
        stages = [tracker.getStageInfo(s) for s in job.stageIds]
        per_job.append(sum(s.numTasks for s in stages if s is not None))
    return per_job


def prefix_of(out_topic: str) -> str:
    """The Kafka sink's transactional id prefix (its batch lines are named for it)."""
    return f"bench-{out_topic}"


def _query(spark, name: str, bootstrap: str, topic: str, out: str, ckpt: str,
           max_per_trigger: int, rows: int):
    if name == FLOOR:
        from sources.task_packing import default_target_tasks

        df = (spark.readStream.format("bench-python-floor").option("rows", rows)
              .option("maxOffsetsPerTrigger", max_per_trigger)
              .option("tasks", default_target_tasks(max_per_trigger)).load())
        return (df.writeStream.format("noop").option("checkpointLocation", ckpt)
                .trigger(availableNow=True).start())
    source = "kafka" if name == "spark_kafka_noop" else "kafka-eos"
    reader = (spark.readStream.format(source).option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", max_per_trigger))
    if name == TWO_TASKS:
        reader = reader.option("targetTasksPerBatch", 2)
    df = reader.load()
    if name == "kafka_eos_delta_eos":
        writer = df.writeStream.format("delta-eos").option("path", out)
    elif name == "kafka_eos_kafka_eos":
        writer = (df.select("key", "value", "partition").writeStream.format("kafka-eos")
                  .option("kafka.bootstrap.servers", bootstrap).option("topic", out)
                  .option("transactionalIdPrefix", prefix_of(out)))
    else:
        writer = df.writeStream.format("noop")
    return writer.option("checkpointLocation", ckpt).trigger(availableNow=True).start()


def run_pipeline(spark, name: str, bootstrap: str, topic: str, *, partitions: int, rows: int,
                 batches: int, work: str, timeout_s: float = 3600) -> dict:
    """One availableNow query of `name` over the whole topic: its figures."""
    from benchmarks.common import batch_lines, load_average
    from integration_tests.support.kafka_data import create_topic, delete_topic, unique_topic

    ckpt = tempfile.mkdtemp(prefix="ckpt-", dir=work)
    out = tempfile.mkdtemp(prefix="table-", dir=work)
    out_topic = None
    if name == "kafka_eos_kafka_eos":
        out_topic = unique_topic("bench-partitions-out")
        create_topic(bootstrap, out_topic, partitions)
    load = load_average()
    try:
        started = time.perf_counter()
        query = _query(spark, name, bootstrap, topic, out_topic or out, ckpt,
                       max(1, rows // batches), rows)
        finished = query.awaitTermination(timeout_s)
        wall = time.perf_counter() - started
        if not finished:
            query.stop()
            raise TimeoutError(f"{name}: not done within {timeout_s:.0f} s")
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        progress = sorted((p for p in query.recentProgress if p["numInputRows"] > 0),
                          key=lambda p: p["batchId"])
        moved = sum(p["numInputRows"] for p in progress)
        if moved != rows:
            raise RuntimeError(f"{name}: the query moved {moved} rows, the topic holds {rows}")
        ms = [p["durationMs"]["triggerExecution"] for p in progress]
        res: dict = {
            "label": LABELS[name],
            "batches": len(progress),
            "rows": moved,
            "trigger_execution_ms": ms,
            "trigger_execution_ms_p50": p50(ms),
            "phases_ms_p50": {ph: p50([p["durationMs"][ph] for p in progress
                                       if ph in p["durationMs"]]) for ph in PHASES},
            "wall_s": round(wall, 2),
            "trigger_execution_s_sum": round(sum(ms) / 1000, 2),
            "load_average": {"start": load, "end": load_average()},
        }
        tasks = tasks_per_job(spark, str(query.runId))
        res["tasks_per_batch" if len(tasks) == len(progress) else "tasks_per_job"] = tasks
        if name == "kafka_eos_delta_eos":
            commits = delta_commits(out)
            res["files_per_commit"] = [len(adds) for adds in commits]
            res["sink_rows"] = delta_rows(commits)
        if name == "kafka_eos_kafka_eos":
            prefix = prefix_of(out_topic)
            res["transactions_per_commit"] = kafka_transactions_per_commit(ckpt)
            res["sink_rows"] = sum(line["rows"] for line in batch_lines(f"kafka-eos[{prefix}]"))
        if res.get("sink_rows", rows) != rows:  # exactly-once: every row written, once
            raise RuntimeError(f"{name}: the sink wrote {res['sink_rows']} rows of {rows}")
        return res
    finally:
        shutil.rmtree(ckpt, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
        if out_topic:
            delete_topic(bootstrap, out_topic)


def measure_in_session(spec: dict) -> dict:
    """In the peers' environment: every count's four pipelines, in one warm session."""
    from benchmarks.common import load_average, metrics_file
    from benchmarks.peers.lane import SESSION_CONF
    from integration_tests.support.peers import peer_spark

    metrics_file()  # before Spark starts: its Python workers inherit the variable
    started = time.monotonic()

    def log(msg: str) -> None:
        print(f"[partitions {time.monotonic() - started:6.0f}s] {msg}", file=sys.stderr,
              flush=True)

    spark = peer_spark("kafka-eos-partitions-benchmark", quick_start=spec["quick"],
                       conf=SESSION_CONF)
    register_floor(spark)
    out: dict = {"session_start_s": round(time.monotonic() - started, 1),
                 "load_average": {"start": load_average()}, "by_partitions": {}}
    log(f"session started in {out['session_start_s']} s")
    work = tempfile.mkdtemp(prefix="partitions-session-")
    common = {"batches": spec["batches"], "work": work}
    try:
        import pyspark

        out["pyspark"] = pyspark.__version__
        if spec.get("warmup_topic"):  # not measured: workers, JIT, the broker's page cache
            w = spec["warmup_topic"]
            for name in LABELS:
                run_pipeline(spark, name, spec["bootstrap"], w["topic"],
                             partitions=w["partitions"], rows=w["rows"], **common)
            log("warm-up done")
        for i, t in enumerate(spec["topics"]):
            count = t["partitions"]
            runs: dict = {}
            for name in order(i):
                begin = time.monotonic()
                try:
                    runs[name] = run_pipeline(spark, name, spec["bootstrap"], t["topic"],
                                              partitions=count, rows=t["rows"], **common)
                except Exception as e:  # reported; the other pipelines still run
                    runs[name] = {"label": LABELS[name],
                                  "error": f"{type(e).__name__}: {str(e)[:1500]}"}
                    log(f"  {count} partitions, {name}: FAILED {str(e)[:300]}")
                    continue
                r = runs[name]
                tasks = r.get("tasks_per_batch", r.get("tasks_per_job"))
                log(f"  {count} partitions, {name}: p50 {r['trigger_execution_ms_p50']} ms over "
                    f"{r['batches']} batches, wall {r['wall_s']} s, tasks {tasks} "
                    f"({time.monotonic() - begin:.0f} s)")
            out["by_partitions"][str(count)] = {n: runs[n] for n in LABELS if n in runs}
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    out["load_average"]["end"] = load_average()
    return out


# -- the parent ---------------------------------------------------------------------------------


def run(args, argv: list[str] | None) -> int:
    """`python -m benchmarks --only partitions`: the broker and the topics here, the session in
    the peers' environment; the section merged into DIR/results.json."""
    from benchmarks.common import (
        code_version as _code_version,
        existing_results as _existing_results,
        write_json,
    )
    from benchmarks.chart import draw_partitions
    from benchmarks.common import command_line, load_average, machine, produce_fixed
    from benchmarks.partitions_report import evaluate, parse_counts, table
    from integration_tests.support.brokers import kafka_broker
    from integration_tests.support.peers import peer_environment
    from integration_tests.support.kafka_data import create_topic, delete_topic, unique_topic

    started = time.time()

    def log(msg: str) -> None:
        print(f"[{time.time() - started:6.0f}s] {msg}", file=sys.stderr, flush=True)

    counts = parse_counts(args.partition_counts)
    per = args.records_per_partition
    python, env = peer_environment()
    log(f"peers' environment: {python}; partition counts {counts}, {per} records each")
    json_path, results = _existing_results(args.output_dir)
    command = command_line(argv)
    load_start = load_average()
    with kafka_broker() as broker, tempfile.TemporaryDirectory(prefix="partitions-") as work:
        bootstrap = broker.bootstrap_servers
        topics, made = [], []
        try:
            for count in counts:
                topic = unique_topic(f"bench-partitions-{count}")
                create_topic(bootstrap, topic, count)
                made.append(topic)
                produce_fixed(bootstrap, topic, count, per, VALUE_BYTES)
                topics.append({"topic": topic, "partitions": count, "rows": count * per})
            log(f"produced {per} records into each partition of {len(counts)} topics")
            warmup = None
            if args.warmup:
                warmup = dict(topics[0])  # another read of the smallest topic
            spec = {"bootstrap": bootstrap, "topics": topics, "batches": args.partition_batches,
                    "quick": args.quick, "warmup_topic": warmup}
            spec_path, result_path = Path(work) / "spec.json", Path(work) / "result.json"
            spec_path.write_text(json.dumps(spec))
            result = subprocess.run(
                [str(python), "-m", "benchmarks.partitions", str(spec_path), str(result_path)],
                env=env, cwd=str(Path(__file__).resolve().parents[1]), timeout=6 * 3600)
        finally:
            for topic in made:
                delete_topic(bootstrap, topic)
        if result.returncode != 0:
            raise SystemExit(f"python -m benchmarks --only partitions: the peers' session failed "
                             f"(exit {result.returncode}); its output is above")
        session = json.loads(result_path.read_text())
        broker_kind = broker.kind
    section = {
        "command": command,
        "machine": machine(),
        "code": _code_version(),
        "broker": broker_kind,
        "pyspark": session["pyspark"],
        "session_start_s": session["session_start_s"],
        "records_per_partition": per,
        "value_bytes": VALUE_BYTES,
        "batches": args.partition_batches,
        "partition_counts": counts,
        "by_partitions": session["by_partitions"],
        "load_average": {"start": load_start, "session": session["load_average"],
                         "end": load_average()},
        "duration_s": round(time.time() - started),
    }
    section["targets"] = evaluate(section)
    results["partitions"] = section
    write_json(results, json_path)
    png = os.path.join(args.output_dir, "partitions.png")
    draw_partitions(section, png)
    print(table(section))
    print(f"wrote {json_path} and {png} in {section['duration_s']} s", file=sys.stderr)
    return 0


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    Path(argv[1]).write_text(json.dumps(measure_in_session(spec)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
