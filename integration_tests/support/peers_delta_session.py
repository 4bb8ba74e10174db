"""delta-spark and `delta-eos` on the same Delta tables, in one PySpark 4.2.0 session of the
peers' environment: what `integration_tests/peers/test_peers_delta.py` runs,
observing, not judging. Every observation goes to a JSON file for the test to assert on.

    <peers' python> -m integration_tests.support.peers_delta_session SPEC.json RESULT.json

SPEC: {"phase", "bootstrap", "workdir", "spark_topic", "eos_topic", "max_offsets_per_trigger"}.

* phase "first": the tables of one writer at a time (time travel across a log checkpoint
  delta-rs wrote, timestamp and timestamp_ntz columns, a table delta-spark created with its
  defaults, tables with deletion vectors in use and with column mapping), written to RESULT at
  once; then the two writers: a delta-spark stream (`format("kafka")` -> `format("delta")`,
  `spark_topic`) and a `delta-eos` stream (`kafka-eos`, `eos_topic`) append to one table while
  the driver runs delta-spark's OPTIMIZE and VACUUM LITE RETAIN 0 HOURS, until the fault point in
  `KAFKA_EOS_FAULTS` (a `delta-eos` protocol point) SIGKILLs the whole session.
* phase "restart": both writers restart from their checkpoints and run to the end of their
  input (availableNow) while OPTIMIZE and VACUUM keep running; then both engines read it.

Nothing here imports pytest: the peers' environment has the package's runtime dependencies only.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

from integration_tests.support.peers import peer_spark
from integration_tests.support.peers_session import rows_of, step
from sinks.faults import ENV as FAULTS_ENV
from sinks.faults import PGID_ENV

#: The time-travel table: one `delta-eos` batch job per version, a log checkpoint every 2.
TRAVEL_VERSIONS = 4
TRAVEL_ROWS = 5
CHECKPOINT_INTERVAL = 2
#: The versions read by timestampAsOf (every version is read by versionAsOf).
TIMESTAMP_VERSIONS = (0, 2)
#: The shared table's columns: who wrote the row, and the Kafka record it holds.
SHARED_COLUMNS = "writer STRING, key STRING, value STRING, partition INT, offset BIGINT"
SPARK_WRITER, EOS_WRITER = "delta-spark", "delta-eos"


def error_text(e: BaseException) -> str:
    """What a user sees of a failed query or job: Spark's message (with the Python traceback
    of the data source's error inside it)."""
    return f"{type(e).__name__}: {e}"


def read_both(spark, path: str) -> dict:
    """The rows of the table's current version through delta-spark and through delta-rs: its
    Arrow reader, or where that refuses the table (deletion vectors), its DataFusion one."""
    from deltalake import DeltaTable, QueryBuilder

    out: dict[str, Any] = {"delta_spark_rows": rows_of(spark.read.format("delta").load(path)
                                                       .collect())}
    table = DeltaTable(path)
    try:
        out["delta_rs_rows"] = rows_of(table.to_pyarrow_table().to_pylist())
        out["delta_rs_reader"] = "to_pyarrow_table"
    except Exception as e:  # an engine that cannot read a table says so: an observation
        out["delta_rs_arrow_error"] = error_text(e)
        import pyarrow as pa

        rows = pa.table(QueryBuilder().register("t", table).execute("SELECT * FROM t")
                        .read_all()).to_pylist()
        out["delta_rs_rows"] = rows_of(rows)
        out["delta_rs_reader"] = "QueryBuilder"
    return out


def protocol_of(spark, path: str) -> dict:
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").collect()[0].asDict()
    return {"minReaderVersion": detail["minReaderVersion"],
            "minWriterVersion": detail["minWriterVersion"],
            "tableFeatures": sorted(detail.get("tableFeatures") or []),
            "properties": dict(detail["properties"] or {})}


def log_actions(path: str) -> list[dict]:
    """Every action of the table's JSON commits, in order (the log's own word)."""
    log = Path(path) / "_delta_log"
    actions = []
    for commit in sorted(log.glob("*.json")):
        actions.extend(json.loads(line) for line in commit.read_text().splitlines() if line)
    return actions


def json_stream(spark, directory: Path, rows: list[dict], schema: str):
    """A stream of `rows`, from one JSON file (the file source honours availableNow: the
    rate source falls back to one batch, of no rows)."""
    directory.mkdir(parents=True)
    (directory / "part-0.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return spark.readStream.format("json").schema(schema).load(str(directory))


# -- one writer at a time -------------------------------------------------------------------


def time_travel(spark, workdir: Path) -> dict:
    """TRAVEL_VERSIONS `delta-eos` batch jobs (a timestamp and a timestamp_ntz column) into a
    table with delta.checkpointInterval=2, so delta-rs writes a log checkpoint; delta-spark
    then reads every version by versionAsOf and by timestampAsOf, and a copy of the table whose
    JSON commits up to the checkpoint are deleted (so only delta-rs's checkpoint tells it)."""
    from deltalake import DeltaTable
    from pyspark.sql.types import (
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampNTZType,
        TimestampType,
    )

    schema = StructType([
        StructField("id", LongType(), False),
        StructField("ts", TimestampType()),
        StructField("ts_ntz", TimestampNTZType()),
        StructField("name", StringType()),
    ])
    path = str(workdir / "travel")
    utc = dt.timezone.utc
    # wall-clock values a time zone would shift, before 1970, microseconds, the year 9999, null
    ntz_values = [dt.datetime(1969, 12, 31, 23, 59, 59, 999999), dt.datetime(2026, 3, 29, 2, 30),
                  dt.datetime(9999, 12, 31, 23, 59, 59, 123456), dt.datetime(1900, 1, 1), None]
    written: list[list[dict]] = []

    def shift(value: dt.datetime | None, days: int) -> dt.datetime | None:
        return value + dt.timedelta(days=days) if value and value.year < 9999 else value

    for v in range(TRAVEL_VERSIONS):
        rows = [(v * TRAVEL_ROWS + i,
                 None if i == 4 else dt.datetime(2026, 1, 1, tzinfo=utc)
                 + dt.timedelta(days=v, hours=i, microseconds=i),
                 shift(ntz_values[i], v),
                 f"v{v}-{i}") for i in range(TRAVEL_ROWS)]
        step(f"delta-eos batch job {v} (time travel)")
        spark.createDataFrame(rows, schema).coalesce(1).write.format("delta-eos") \
            .mode("append").option("delta.checkpointInterval", str(CHECKPOINT_INTERVAL)) \
            .save(path)
        written.append([{"id": r[0], "ts": r[1], "ts_ntz": r[2], "name": r[3]} for r in rows])
        time.sleep(1.1)  # commit timestamps a second apart: timestampAsOf picks each one
    log = Path(path) / "_delta_log"
    out: dict[str, Any] = {
        "checkpoints": sorted(p.name for p in log.glob("*.checkpoint*.parquet")),
        "last_checkpoint": json.loads((log / "_last_checkpoint").read_text())
        if (log / "_last_checkpoint").exists() else None,
        "expected_by_version": [rows_of([r for batch in written[:v + 1] for r in batch])
                                for v in range(TRAVEL_VERSIONS)],
    }
    step("delta-spark time travel")
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()
    stamps = {r["version"]: r["timestamp"] for r in history}
    def reader():  # a DataFrameReader keeps its options: a new one for each read
        return spark.read.format("delta")

    out["history_versions"] = sorted(stamps)
    out["version_as_of"] = [rows_of(reader().option("versionAsOf", v).load(path).collect())
                            for v in range(TRAVEL_VERSIONS)]
    out["timestamp_as_of"] = {  # one version before the first checkpoint, one after it
        str(v): rows_of(reader().option("timestampAsOf", stamps[v].isoformat(sep=" "))
                        .load(path).collect()) for v in TIMESTAMP_VERSIONS}
    out["latest"] = read_both(spark, path)
    table = DeltaTable(path)
    out["delta_rs_version_as_of"] = []
    for v in range(TRAVEL_VERSIONS):
        table.load_as_version(v)
        out["delta_rs_version_as_of"].append(rows_of(table.to_pyarrow_table().to_pylist()))
    out["types"] = {
        "delta_spark": {f.name: f.dataType.simpleString()
                        for f in spark.read.format("delta").load(path).schema.fields},
        "delta_rs": {f.name: str(f.type)
                     for f in DeltaTable(path).to_pyarrow_table().schema},
    }
    out["protocol"] = protocol_of(spark, path)
    # A copy of the table without the JSON commits before delta-rs's first checkpoint: the
    # versions from it on can only be rebuilt from that checkpoint (delta-spark's time travel
    # needs each version's own commit file, so those stay).
    first = min((int(name[:20]) for name in out["checkpoints"]), default=None)
    if first is not None:
        copy = workdir / "travel-from-checkpoint"
        shutil.copytree(path, copy)
        for commit in (copy / "_delta_log").glob("*.json"):
            if int(commit.name.split(".")[0]) < first:
                commit.unlink()
        step("delta-spark reads a log that starts at delta-rs's checkpoint")
        out["from_checkpoint"] = {
            "version": first,
            "rows_by_version": {str(v): rows_of(reader().option("versionAsOf", v)
                                                .load(str(copy)).collect())
                                for v in range(first, TRAVEL_VERSIONS)},
        }
        try:  # a version before the checkpoint has no log left: delta-spark must refuse it
            reader().option("versionAsOf", first - 1).load(str(copy)).collect()
            out["from_checkpoint"]["before"] = "read"
        except Exception as e:
            out["from_checkpoint"]["before"] = error_text(e)[:300]
    return out


def spark_created_table(spark, workdir: Path) -> dict:
    """A table delta-spark created with its defaults (CREATE TABLE ... USING delta) and wrote
    to; `delta-eos` appends a batch job and a stream batch; both engines read it."""
    path = str(workdir / "spark-created")
    spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT, name STRING, amount DECIMAL(10,2)) "
              "USING delta")
    spark.sql(f"INSERT INTO delta.`{path}` VALUES (1, 'one', 1.10), (2, NULL, 2.20)")
    protocol = protocol_of(spark, path)
    step("delta-eos appends to a table delta-spark created")
    spark.sql("SELECT CAST(id AS BIGINT) AS id, concat('eos-', id) AS name, "
              "CAST(id / 10 AS DECIMAL(10,2)) AS amount FROM range(10, 15)") \
        .write.format("delta-eos").mode("append").save(path)
    streamed = [{"id": 100 + i, "name": "stream", "amount": i} for i in range(3)]
    query = (json_stream(spark, workdir / "in-spark-created", streamed,
                         "id BIGINT, name STRING, amount DECIMAL(10,2)")
             .writeStream.format("delta-eos").option("path", path)
             .option("checkpointLocation", str(workdir / "cp-spark-created"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    spark.sql(f"INSERT INTO delta.`{path}` VALUES (3, 'after', 3.30)")  # delta-spark again
    out = read_both(spark, path)
    out["protocol_at_creation"] = protocol
    out["expected_ids"] = sorted([1, 2, 3, *range(10, 15), *(r["id"] for r in streamed)])
    out["history"] = [r["operation"] for r in spark.sql(
        f"DESCRIBE HISTORY delta.`{path}`").orderBy("version").collect()]
    return out


def deletion_vector_table(spark, workdir: Path) -> dict:
    """A table with deletion vectors in use (a DELETE that wrote one), then a `delta-eos`
    append and a `delta-eos` upsert stream (mergeKeys) that updates rows of the file the
    deletion vector masks: what each engine reads."""
    path = str(workdir / "deletion-vectors")
    spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT, seq BIGINT, name STRING) USING delta "
              "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    spark.range(0, 20).selectExpr("id", "0L AS seq", "concat('n', id) AS name").coalesce(1) \
        .write.format("delta").mode("append").save(path)
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id % 3 = 0")
    dvs = [a["add"]["deletionVector"] for a in log_actions(path)
           if "add" in a and a["add"].get("deletionVector")]
    expected = {i: {"id": i, "seq": 0, "name": f"n{i}"} for i in range(20) if i % 3}
    step("delta-eos appends to a table with a deletion vector")
    out: dict[str, Any] = {"deletion_vectors_in_log": len(dvs),
                           "protocol": protocol_of(spark, path)}
    try:
        spark.range(100, 105).selectExpr("id", "0L AS seq", "concat('eos', id) AS name") \
            .write.format("delta-eos").mode("append").save(path)
        expected.update({i: {"id": i, "seq": 0, "name": f"eos{i}"} for i in range(100, 105)})
        out["append"] = "ok"
    except Exception as e:
        out["append"] = error_text(e)
    # updates of rows in the masked file (1, 4), a deleted id written again (3), a new one
    changes = [{"id": i, "seq": 5, "name": f"upsert{i}"} for i in (1, 3, 4, 200)]
    query = (json_stream(spark, workdir / "in-deletion-vectors", changes,
                         "id BIGINT, seq BIGINT, name STRING")
             .writeStream.format("delta-eos").option("path", path)
             .option("checkpointLocation", str(workdir / "cp-deletion-vectors"))
             .option("mergeKeys", "id").option("sequenceBy", "seq")
             .trigger(availableNow=True).start())
    try:
        query.awaitTermination()
        expected.update({c["id"]: c for c in changes})
        out["upsert"] = "ok"
    except Exception as e:
        out["upsert"] = error_text(e)
    out.update(read_both(spark, path))
    out["expected_rows"] = rows_of(list(expected.values()))
    return out


def column_mapping_table(spark, workdir: Path) -> dict:
    """A table with column mapping in `name` mode (and a renamed column): a `delta-eos` batch
    job and a stream must be refused before writing anything."""
    path = str(workdir / "column-mapping")
    spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT, name STRING) USING delta "
              "TBLPROPERTIES ('delta.columnMapping.mode' = 'name')")
    spark.sql(f"INSERT INTO delta.`{path}` VALUES (1, 'one')")
    spark.sql(f"ALTER TABLE delta.`{path}` RENAME COLUMN name TO label")
    before = sorted(os.listdir(path))
    out: dict[str, Any] = {"protocol": protocol_of(spark, path)}
    step("delta-eos appends to a column-mapped table")
    try:
        spark.sql("SELECT 2L AS id, 'two' AS label").write.format("delta-eos") \
            .mode("append").save(path)
        out["batch_job"] = "ok"
    except Exception as e:
        out["batch_job"] = error_text(e)
    query = (spark.readStream.format("rate").load().selectExpr("value AS id", "'s' AS label")
             .writeStream.format("delta-eos").option("path", path)
             .option("checkpointLocation", str(workdir / "cp-column-mapping"))
             .trigger(availableNow=True).start())
    try:
        query.awaitTermination()
        out["stream"] = "ok"
    except Exception as e:
        out["stream"] = error_text(e)
    out["files_added"] = sorted(set(os.listdir(path)) - set(before))
    out.update(read_both(spark, path))
    return out


# -- two writers on one table ---------------------------------------------------------------


def start_writers(spark, spec: dict, workdir: Path, *, to_the_end: bool):
    """The delta-spark stream and the `delta-eos` stream, each on its own topic and
    checkpoint, appending to the shared table."""
    path = str(workdir / "shared")

    def source(fmt: str, topic: str):
        return (spark.readStream.format(fmt)
                .option("kafka.bootstrap.servers", spec["bootstrap"])
                .option("subscribe", topic)
                .option("startingOffsets", "earliest")
                .option("maxOffsetsPerTrigger", str(spec["max_offsets_per_trigger"]))
                .load())

    def rows(df, writer: str):
        return df.selectExpr(f"'{writer}' AS writer", "CAST(key AS STRING) AS key",
                             "CAST(value AS STRING) AS value", "CAST(partition AS INT) AS partition",
                             "CAST(offset AS BIGINT) AS offset")

    def trigger(writer):
        return writer.trigger(availableNow=True) if to_the_end else \
            writer.trigger(processingTime="500 milliseconds")

    theirs = trigger(rows(source("kafka", spec["spark_topic"]), SPARK_WRITER).writeStream
                     .format("delta").queryName("delta_spark_writer")
                     .option("checkpointLocation", str(workdir / "cp-shared-spark"))).start(path)
    ours = trigger(rows(source("kafka-eos", spec["eos_topic"]), EOS_WRITER).writeStream
                   .format("delta-eos").queryName("delta_eos_writer")
                   .option("path", path)
                   .option("checkpointLocation", str(workdir / "cp-shared-eos"))
                   .option("orphanFileRetention", "0s")).start()
    return path, theirs, ours


def maintain_while(spark, path: str, active, record: list[dict]) -> None:
    """delta-spark's OPTIMIZE and VACUUM LITE RETAIN 0 HOURS, each in a thread of its own, again
    and again while `active()` (so each overlaps the `delta-eos` batches, however long the other
    takes); each run recorded with its wall-clock interval and its outcome.

    LITE: the files the log removed (OPTIMIZE's inputs), at once. A FULL VACUUM with a
    retention shorter than a batch deletes any writer's files not yet committed: seen in this
    lane, a `delta-eos` batch decided before the kill lost its files to a VACUUM whose snapshot
    predated the restarted query's commit of it (docs/delta-sink.md)."""

    def loop(sql: str) -> None:
        while active():
            started = time.time()
            try:
                spark.sql(sql).collect()
                outcome = "ok"
            except Exception as e:  # a conflict of the maintenance itself: recorded
                outcome = error_text(e)[:500]
            record.append({"op": sql.split()[0], "outcome": outcome,
                           "start_ms": int(started * 1000), "end_ms": int(time.time() * 1000)})
            time.sleep(0.2)

    threads = [threading.Thread(target=loop, args=(sql,), daemon=True)
               for sql in (f"VACUUM delta.`{path}` LITE RETAIN 0 HOURS",
                           f"OPTIMIZE delta.`{path}`")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def eos_commit_times(path: str) -> list[int]:
    """When each of `delta-eos`'s batch commits landed (its commitInfo's timestamp)."""
    return sorted(a["commitInfo"]["timestamp"] for a in log_actions(path)
                  if "commitInfo" in a and "kafka_eos.batch" in json.dumps(a["commitInfo"]))


def committed_batches(checkpoint: Path) -> list[int]:
    commits = checkpoint / "commits"
    return sorted(int(n) for n in os.listdir(commits) if n.isdigit()) if commits.exists() else []


def first_writers(spark, spec: dict, workdir: Path) -> None:
    """Both writers and the maintenance until the fault point kills the session."""
    spark.sql(f"CREATE TABLE delta.`{workdir / 'shared'}` ({SHARED_COLUMNS}) USING delta")
    path, theirs, ours = start_writers(spark, spec, workdir, to_the_end=False)
    maintenance: list[dict] = []
    maintain_while(spark, path, lambda: ours.isActive, maintenance)
    # Only reached if the fault point did not kill the session: say what happened instead.
    (workdir / "first-writers-survived.json").write_text(json.dumps({
        "maintenance": maintenance,
        "eos_exception": str(ours.exception()),
        "spark_exception": str(theirs.exception()) if not theirs.isActive else None,
    }))


def restarted_writers(spark, spec: dict, workdir: Path) -> dict:
    """Both writers restarted from their checkpoints, to the end of their input, with the
    maintenance running while `delta-eos` writes; then both engines read the table."""
    from deltalake import DeltaTable

    before = {"spark": committed_batches(workdir / "cp-shared-spark"),
              "eos": committed_batches(workdir / "cp-shared-eos")}
    restarted_ms = int(time.time() * 1000)
    path, theirs, ours = start_writers(spark, spec, workdir, to_the_end=True)
    maintenance: list[dict] = []
    maintain_while(spark, path, lambda: ours.isActive, maintenance)
    failures = {}
    for name, query in (("spark", theirs), ("eos", ours)):
        try:
            query.awaitTermination()
            failures[name] = None
        except Exception as e:
            failures[name] = error_text(e)[:3000]
    step("both engines read the shared table")
    out = read_both(spark, path)
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()
    out.update({
        "committed_before_restart": before,
        "restarted_ms": restarted_ms,
        "committed_after": {"spark": committed_batches(workdir / "cp-shared-spark"),
                            "eos": committed_batches(workdir / "cp-shared-eos")},
        "maintenance": maintenance,
        "eos_commit_ms": eos_commit_times(path),
        "query_failures": failures,
        "operations": sorted({r["operation"] for r in history}),
        "delta_rs_history_versions": len(DeltaTable(path).history()),
        "txn": {},
    })
    for a in log_actions(path):
        if "txn" in a:
            out["txn"][a["txn"]["appId"]] = max(a["txn"]["version"],
                                                 out["txn"].get(a["txn"]["appId"], -1))
    out["checkpoints"] = sorted(p.name for p in (Path(path) / "_delta_log")
                                .glob("*.checkpoint*.parquet"))
    return out


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    workdir = Path(spec["workdir"])
    # A fault point in any of Spark's Python workers kills this whole session (sinks/faults.py)
    os.environ[PGID_ENV] = str(os.getpgrp())
    conf = {"spark.task.maxFailures": "4",
            "spark.sql.adaptive.enabled": "false",
            "spark.databricks.delta.snapshotPartitions": "2",
            "spark.databricks.delta.retentionDurationCheck.enabled": "false",
            # VACUUM lists the table in this many tasks (10,000 by default: minutes on 2 cores)
            "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
            f"spark.executorEnv.{PGID_ENV}": os.environ[PGID_ENV]}
    if os.environ.get(FAULTS_ENV):
        conf[f"spark.executorEnv.{FAULTS_ENV}"] = os.environ[FAULTS_ENV]
    started = time.monotonic()
    step(f"starting Spark ({spec['phase']})")
    spark = peer_spark("kafka-eos-peers-delta", master="local[2,4]", conf=conf)
    result: dict[str, Any] = {"session_start_s": round(time.monotonic() - started, 1)}
    timings = {}
    if spec["phase"] == "first":
        parts = [("time_travel", lambda: time_travel(spark, workdir)),
                 ("spark_created", lambda: spark_created_table(spark, workdir)),
                 ("deletion_vectors", lambda: deletion_vector_table(spark, workdir)),
                 ("column_mapping", lambda: column_mapping_table(spark, workdir))]
    else:
        parts = [("writers", lambda: restarted_writers(spark, spec, workdir))]
    for name, run in parts:
        t = time.monotonic()
        step(name)
        result[name] = run()
        timings[name] = round(time.monotonic() - t, 1)
    result["timings_s"] = timings
    Path(argv[1]).write_text(json.dumps(result))
    if spec["phase"] == "first":
        step("two writers, until the fault point kills the session")
        first_writers(spark, spec, workdir)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
