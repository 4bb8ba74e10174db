"""Batch writes (`df.write`) of kafka-eos and delta-eos on the two-phase-commit template: the
tasks prepare, the job's commit makes everything visible at once; a job whose task fails
leaves nothing visible and nothing prepared behind. Real Spark, real broker, real Delta."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from connectors.local.kafka_oracle import committed, read_partition
from integration_tests.support.kafka_data import create_topic, unique_topic
from sinks.delta import DeltaEosDataSource
from sinks.kafka.data_source import KafkaSinkDataSource
from sinks.two_phase_commit import JOB_BATCH_ID, PreparedPartition, TaskInfo

ROWS = 4000
#: Python workers start slowly on a loaded machine: the failing task waits this long first.
FAIL_AFTER_S = 8.0
PARTITIONS = 4  # spark.range(..., numPartitions): rows p*1000 .. p*1000+999 in task p


def _frame(spark, *, fail_at: int | None = None):
    """ROWS rows in PARTITIONS write tasks. `fail_at`: the task holding that row raises there,
    FAIL_AFTER_S late, so the other tasks have written and prepared by then (a Python UDF
    hands a task's rows to the writer only once it has gone through them all)."""

    @F.udf(LongType())
    def through(i):
        if i == fail_at:
            time.sleep(FAIL_AFTER_S)
            raise RuntimeError(f"injected failure at row {i}")
        return i

    return (
        spark.range(0, ROWS, numPartitions=PARTITIONS)
        .select(through("id").alias("id"))
        .selectExpr("id", "CAST(id AS STRING) AS key", "concat('v', CAST(id AS STRING)) AS value")
    )


# -- kafka-eos --------------------------------------------------------------------------------


def _kafka_save(df, bootstrap, topic, **options):
    writer = (
        df.select("key", "value").write.format("kafka-eos").mode("append")
        .option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
    )
    for k, v in options.items():
        writer = writer.option(k, v)
    writer.save()


def test_a_kafka_batch_write_becomes_visible(spark, bootstrap):
    topic = unique_topic("kbatch")
    create_topic(bootstrap, topic, 3)
    _kafka_save(_frame(spark), bootstrap, topic)
    got = committed(bootstrap, topic)
    assert sorted(r.value for r in got) == sorted(f"v{i}".encode() for i in range(ROWS))
    for p in range(3):  # every transaction ended: nothing open, nothing aborted
        part = read_partition(bootstrap, topic, p)
        assert part.open == [] and part.aborted == []


def test_a_failed_kafka_batch_job_leaves_nothing_visible_or_open(spark, bootstrap):
    topic = unique_topic("kbfail")
    create_topic(bootstrap, topic, 3)
    # Task 1 fails at its first row; task 0 has written and prepared its transaction by then.
    df = _frame(spark, fail_at=1000)
    with pytest.raises(Exception, match="injected failure at row 1000"):
        _kafka_save(df, bootstrap, topic)
    assert committed(bootstrap, topic) == []
    parts = [read_partition(bootstrap, topic, p) for p in range(3)]
    assert sum(len(p.aborted) for p in parts) >= 1000  # task 0's rows went out, and were aborted
    assert [p.open for p in parts] == [[], [], []]  # no transaction left open


def test_kafka_batch_refuses_overwrite_and_streaming_options(spark, bootstrap):
    df = _frame(spark)
    with pytest.raises(Exception, match=r"Option 'mode'.*overwrite.*append"):
        df.select("value").write.format("kafka-eos").mode("overwrite") \
            .option("kafka.bootstrap.servers", bootstrap).option("topic", "t").save()
    with pytest.raises(Exception, match=r"Option 'checkpointlocation'.*batch write"):
        _kafka_save(df, bootstrap, "t", checkpointLocation="/tmp/ck")


# -- delta-eos --------------------------------------------------------------------------------


def _delta_save(df, path, **options):
    writer = df.write.format("delta-eos").mode("append")
    for k, v in options.items():
        writer = writer.option(k, v)
    writer.save(path)


def test_a_delta_batch_write_becomes_visible_in_one_commit(spark, tmp_path):
    path = str(tmp_path / "t")
    _delta_save(_frame(spark), path)
    table = DeltaTable(path)
    assert table.version() == 0
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == list(range(ROWS))
    _delta_save(_frame(spark).where("id < 10"), path)
    table = DeltaTable(path)
    assert table.version() == 1  # one commit per job
    assert table.to_pyarrow_table().num_rows == ROWS + 10
    assert len(table.history()) == 2


def test_a_failed_delta_batch_job_adds_no_version_and_leaves_no_files(spark, tmp_path):
    path = tmp_path / "t"
    _delta_save(_frame(spark).where("id < 10"), str(path))
    before = sorted(p.name for p in path.glob("*.parquet"))
    df = _frame(spark, fail_at=1000)
    with pytest.raises(Exception, match="injected failure at row 1000"):
        _delta_save(df, str(path))
    table = DeltaTable(str(path))
    assert table.version() == 0
    assert table.to_pyarrow_table().num_rows == 10
    assert sorted(p.name for p in path.rglob("*.parquet")) == before


def test_delta_batch_refuses_overwrite_naming_the_mode(spark, tmp_path):
    with pytest.raises(Exception, match=r"Option 'mode'.*'overwrite' is refused.*append"):
        _frame(spark).write.format("delta-eos").mode("overwrite").save(str(tmp_path / "t"))
    with pytest.raises(Exception, match=r"Option 'appid'.*batch write"):
        _delta_save(_frame(spark), str(tmp_path / "t"), appId="a")
    assert not (tmp_path / "t").exists()


# -- what Spark does not report: the store's own clean-up of a failed job --------------------
# A task still writing when its job fails returns its handle to nobody (seen with PySpark 4.3:
# its message is None in abort). These drive the batch writer's steps directly, as Spark's
# worker would, against the real broker and a real table.


def _rows(n: int, start: int = 0) -> pa.RecordBatch:
    ids = list(range(start, start + n))
    return pa.RecordBatch.from_pydict({
        "id": pa.array(ids, pa.int64()),
        "key": [str(i) for i in ids],
        "value": [f"v{i}" for i in ids],
    })


SCHEMA = StructType([StructField("id", LongType()), StructField("key", StringType()),
                     StructField("value", StringType())])


def _prepare_unreported(writer, partition: int, start: int) -> None:
    """A task of the job writes and prepares; its handle never reaches the driver."""
    sink = writer.sink
    txn = sink.beginTransaction(TaskInfo(JOB_BATCH_ID, partition, 0))
    sink.invoke(txn, _rows(20, start))
    sink.preCommit(txn)


def test_a_failed_kafka_job_aborts_transactions_spark_never_reported(bootstrap):
    topic = unique_topic("kbunrep")
    create_topic(bootstrap, topic, 2)
    writer = KafkaSinkDataSource(
        {"kafka.bootstrap.servers": bootstrap, "topic": topic}).writer(SCHEMA, False)
    writer.prepare_for_tasks()
    _prepare_unreported(writer, 2, 0)
    # a task that begins only after the first clean-up pass: the second one finds it
    writer._between_abort_passes = lambda: _prepare_unreported(writer, 3, 100)
    assert len([r for p in range(2) for r in read_partition(bootstrap, topic, p).open]) == 20

    writer.abort([None] * 4)

    parts = [read_partition(bootstrap, topic, p) for p in range(2)]
    assert [r for p in parts for r in p.committed] == []
    assert [r for p in parts for r in p.open] == []
    assert sorted(int(r.key) for p in parts for r in p.aborted) == list(range(20)) + list(range(100, 120))


def test_a_failed_delta_job_deletes_files_spark_never_reported(tmp_path):
    path = tmp_path / "t"
    writer = DeltaEosDataSource({"path": str(path)}).writer(SCHEMA, False)
    writer.prepare_for_tasks()
    _prepare_unreported(writer, 2, 0)
    writer._between_abort_passes = lambda: _prepare_unreported(writer, 3, 100)
    assert len(list(path.rglob("*.parquet"))) == 1

    writer.abort([None] * 4)

    assert list(path.rglob("*.parquet")) == []
    assert not (path / "_delta_log").exists()


def test_an_abort_after_a_delta_job_commit_landed_keeps_its_rows(tmp_path):
    """Spark aborts a job whose commit raised: the commit may have landed all the same."""
    path = tmp_path / "t"
    writer = DeltaEosDataSource({"path": str(path)}).writer(SCHEMA, False)
    writer.prepare_for_tasks()
    sink = writer.sink
    txn = sink.beginTransaction(TaskInfo(JOB_BATCH_ID, 0, 0))
    sink.invoke(txn, _rows(20))
    message = PreparedPartition(JOB_BATCH_ID, 0, 0, sink.preCommit(txn), rows=20)
    writer.commit([message])
    writer._between_abort_passes = lambda: None

    writer.abort([message])

    assert DeltaTable(str(path)).to_pyarrow_table().num_rows == 20
    assert len(list(path.rglob("*.parquet"))) == 1


def test_an_empty_delta_job_creates_a_missing_table_and_adds_no_version_to_one(tmp_path):
    path = tmp_path / "t"
    for expected_version in (0, 0):
        writer = DeltaEosDataSource({"path": str(path)}).writer(SCHEMA, False)
        writer.prepare_for_tasks()
        writer.commit([PreparedPartition(JOB_BATCH_ID, 0, 0, None)])
        table = DeltaTable(str(path))
        assert table.version() == expected_version and table.to_pyarrow_table().num_rows == 0
        assert table.schema().to_arrow().names == ["id", "key", "value"]
