"""`delta-eos` under operators' habits: switching deliveryGuarantee on a
checkpoint, two queries with similar appIds on one table, a reset checkpoint, an explicit
appId reused across a reset. Each scenario is one or two real queries into a real table; the
check is record by record (topic, partition, offset), and the table must stay readable."""

from __future__ import annotations

import collections
import shutil

import pytest
from deltalake import DeltaTable

from integration_tests.support.delta_oracle import orphan_files, txn_versions
from integration_tests.support.kafka_data import create_topic, produce, unique_topic
from integration_tests.support.streaming import earliest_stream


def _topic(bootstrap: str, per_partition: int = 40) -> tuple[str, list]:
    topic = unique_topic("dops")
    create_topic(bootstrap, topic, 2)
    return topic, produce(bootstrap, topic, 2, per_partition)


def _run(spark, bootstrap, topic, table, checkpoint, **options):
    """One availableNow query, 30 records a batch (several batches); its exception or None."""
    writer = (
        earliest_stream(spark, bootstrap, topic, "30")
        .selectExpr("topic", "partition", "offset", "CAST(value AS STRING) AS value")
        .writeStream.format("delta-eos")
        .option("path", table)
        .option("checkpointLocation", checkpoint)
        .option("orphanFileRetention", "0s")  # clean-up deletes at once what it takes for orphans
    )
    for k, v in options.items():
        writer = writer.option(k, v)
    query = writer.trigger(availableNow=True).start()
    try:
        query.awaitTermination(300)
    except Exception as e:  # the query failed: what it failed with is the result
        return e
    return query.exception()


def _assert_table_holds_exactly(table: str, expected: list) -> None:
    rows = DeltaTable(table).to_pyarrow_table(columns=["topic", "partition", "offset"]).to_pylist()
    got = collections.Counter((r["topic"], r["partition"], r["offset"]) for r in rows)
    want = collections.Counter((r.topic, r.partition, r.offset) for r in expected)
    dupes = [k for k, n in got.items() if n > 1]
    assert not dupes, f"{len(dupes)} records written twice, e.g. {dupes[:3]}"
    missing = sorted(set(want) - set(got))
    assert not missing, f"{len(missing)} records missing, e.g. {missing[:3]}"
    assert got == want
    assert orphan_files(table) == []


def test_switching_at_least_once_to_exactly_once_keeps_committed_files(spark, bootstrap, tmp_path):
    """At-least-once commits carry no txn action: the old clean-up took every earlier file for
    abandoned and deleted files the table references ("Object ... not found" on read)."""
    topic, first = _topic(bootstrap)
    table, ckpt = str(tmp_path / "t"), str(tmp_path / "ck")
    assert _run(spark, bootstrap, topic, table, ckpt, deliveryGuarantee="at-least-once") is None
    second = produce(bootstrap, topic, 2, 20, start_index=40)
    assert _run(spark, bootstrap, topic, table, ckpt, deliveryGuarantee="exactly-once") is None
    _assert_table_holds_exactly(table, first + second)


def test_two_queries_whose_app_ids_share_their_tail_append_to_one_table(spark, bootstrap, tmp_path):
    """`orders-eu-to-bronze-events` and `orders-us-to-bronze-events` share their last 16
    characters: the second query's first start used to delete the first one's files."""
    (eu, eu_records), (us, us_records) = _topic(bootstrap), _topic(bootstrap)
    table = str(tmp_path / "bronze")
    assert _run(spark, bootstrap, eu, table, str(tmp_path / "ck-eu"), appId="orders-eu-to-bronze-events") is None
    assert _run(spark, bootstrap, us, table, str(tmp_path / "ck-us"), appId="orders-us-to-bronze-events") is None
    _assert_table_holds_exactly(table, eu_records + us_records)


def test_a_reset_checkpoint_is_a_new_writer(spark, bootstrap, tmp_path):
    """Delete the checkpoint and start a new query on the same path: its batches 0..N must be
    written, not skipped because the table says the old query's batch N is in."""
    (old, old_records), (new, new_records) = _topic(bootstrap), _topic(bootstrap)
    table, ckpt = str(tmp_path / "t"), str(tmp_path / "ck")
    assert _run(spark, bootstrap, old, table, ckpt) is None
    shutil.rmtree(ckpt)
    assert _run(spark, bootstrap, new, table, ckpt) is None
    _assert_table_holds_exactly(table, old_records + new_records)
    assert len(txn_versions(table)) == 2  # two writers: one txn app id each


def test_an_explicit_app_id_reused_after_a_reset_is_refused(spark, bootstrap, tmp_path):
    """An explicit appId keeps its meaning across a reset; the table already holds its batches
    0..N, so the new query would skip them: it fails at start, naming the option."""
    (old, old_records), (new, _) = _topic(bootstrap), _topic(bootstrap)
    table, ckpt = str(tmp_path / "t"), str(tmp_path / "ck")
    assert _run(spark, bootstrap, old, table, ckpt, appId="bronze-events") is None
    shutil.rmtree(ckpt)
    error = _run(spark, bootstrap, new, table, ckpt, appId="bronze-events")
    assert error is not None
    assert "Option 'appId'" in str(error) and "reset" in str(error)
    _assert_table_holds_exactly(table, old_records)  # nothing written, nothing skipped


def test_files_of_superseded_attempts_of_a_committed_batch_are_orphans(tmp_path):
    """A failed or speculative attempt's files of a batch that was committed by another
    attempt are referenced by no version: removed once older than orphanFileRetention. The
    committed attempt's files, and files of other writers, stay."""
    import pyarrow as pa

    from connectors.core.options import Options
    from sinks.delta import DeltaOptions, DeltaSink
    from sinks.two_phase_commit import SinkSettings, TaskInfo

    schema = pa.schema([("x", pa.int64())])
    opts = Options({"path": str(tmp_path / "t"), "checkpointLocation": str(tmp_path / "ck"),
                    "appId": "orders", "orphanFileRetention": "0s"})
    settings = SinkSettings.from_options("delta-eos", opts)
    sink = DeltaSink(settings, DeltaOptions.parse(opts, settings), schema)
    other_opts = Options({**opts.raw(), "appid": "orders-2"})
    other = DeltaSink(settings, DeltaOptions.parse(other_opts, settings), schema)

    def prepare(s: DeltaSink, attempt: int, batch: int = 0):
        txn = s.beginTransaction(TaskInfo(batch, 0, attempt))
        s.invoke(txn, pa.record_batch({"x": [attempt]}, schema=schema))
        return s.preCommit(txn)

    winner, loser = prepare(sink, 1), prepare(sink, 0)  # attempt 0 lost the race
    foreign = prepare(other, 0)  # another writer's uncommitted file
    sink.commit(0, {0: winner})
    sink.cleanupAbandoned()
    files = {p.name for p in (tmp_path / "t").glob("*.parquet")}
    assert winner["adds"][0]["file"] in files
    assert loser["adds"][0]["file"] not in files
    assert foreign["adds"][0]["file"] in files
    assert DeltaTable(str(tmp_path / "t")).to_pyarrow_table().column("x").to_pylist() == [1]


def test_a_young_orphan_is_left_alone(tmp_path):
    """Within orphanFileRetention a file may still be in a task's hands: kept."""
    import pyarrow as pa

    from connectors.core.options import Options
    from sinks.delta import DeltaOptions, DeltaSink
    from sinks.two_phase_commit import SinkSettings, TaskInfo

    schema = pa.schema([("x", pa.int64())])
    opts = Options({"path": str(tmp_path / "t"), "checkpointLocation": str(tmp_path / "ck"),
                    "appId": "young", "orphanFileRetention": "1h"})
    settings = SinkSettings.from_options("delta-eos", opts)
    sink = DeltaSink(settings, DeltaOptions.parse(opts, settings), schema)
    txn = sink.beginTransaction(TaskInfo(0, 0, 0))
    sink.invoke(txn, pa.record_batch({"x": [1]}, schema=schema))
    handle = sink.preCommit(txn)
    sink.cleanupAbandoned()
    assert (tmp_path / "t" / handle["adds"][0]["file"]).exists()


def test_a_table_on_s3a_through_a_killed_and_restarted_pipeline(bootstrap, tmp_path):
    """The table at s3a:// (what Hadoop-based Spark users write) on a real S3 protocol server:
    the pipeline killed while tasks write, restarted: every record once, no orphan left in the
    bucket. (The checkpoint stays local: Spark's own s3a:// needs Hadoop's jars from Maven.)"""
    from integration_tests.support.s3 import s3_server
    from integration_tests.support.processes import log_tail, run_pipeline, start_pipeline, wait_exit
    from sinks.faults import ENV

    topic, expected = _topic(bootstrap, 50)
    with s3_server() as s3:
        bucket = s3.create_bucket()
        log_path = str(tmp_path / "pipeline.log")
        args = ["--bootstrap", bootstrap, "--topic", topic, "--checkpoint", str(tmp_path / "ck"),
                "--table", f"s3a://{bucket}/t", "--max-per-trigger", "30",
                "--sink-option", "orphanFileRetention=0s"]
        pipeline = "integration_tests.support.pipelines.eos_pipeline"
        proc = start_pipeline(pipeline, *args, log_path=log_path, env={ENV: "task_write@2"})
        assert wait_exit(proc, log_path) < 0, log_tail(log_path)
        run_pipeline(pipeline, *args, log_path=log_path)
        rows = DeltaTable(f"s3://{bucket}/t").to_pyarrow_table(columns=["partition", "offset"]).to_pylist()
        got = collections.Counter((r["partition"], r["offset"]) for r in rows)
        assert got == collections.Counter((r.partition, r.offset) for r in expected)
        referenced = {f.split("/")[-1] for f in DeltaTable(f"s3://{bucket}/t").file_uris()}
        stored = {k.split("/")[-1] for k in s3.list_keys(bucket, "t/") if k.endswith(".parquet")}
        assert stored == referenced, f"orphans left in the bucket: {sorted(stored - referenced)}"
