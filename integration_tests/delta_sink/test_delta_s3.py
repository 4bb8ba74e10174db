"""Kafka -> `kafka-eos` -> `delta-eos` with the table on S3 (a real S3 protocol server, moto),
killed twice at protocol points and restarted: every record in the table exactly once.

One killed-and-restarted pipeline sequence (the checkpoint stays on local disk: Spark's own
s3a:// needs Hadoop's jars from Maven, docs/design.md#production-conditions), with credentials from
`storage.AWS_*` sink options only and no AWS variable anywhere in the pipeline's environment:
the tasks' Parquet files (pyarrow) and the Delta commits (delta-rs) both reach the bucket
through the options. (Credentials from the standard AWS environment, with an s3a:// path, are
test_delta_operations.py's S3 pipeline.)
The table is read back with deltalake and polars through the same storage options.
"""

from __future__ import annotations

import json
import os

import polars as pl
import pyarrow.fs as pafs
import pytest
from deltalake import DeltaTable

from connectors.core.paths import resolve_location
from integration_tests.support.s3 import s3_server, without_aws_env
from integration_tests.support.delta_oracle import assert_records_once, last_spark_batch
from integration_tests.support.kafka_data import create_topic, produce, unique_topic
from integration_tests.support.processes import log_tail, run_kill_sequence

PIPELINE = "integration_tests.support.pipelines.eos_pipeline"
PARTITIONS, PER_PARTITION = 3, 60  # 180 records; 40 per trigger: 5 batches
#: Batch k is killed at KILL_POINTS[k - 1]; the run after each kill recovers it.
KILL_POINTS = ["after_decision", "after_precommit"]


@pytest.fixture(scope="module")
def s3():
    """moto's S3 server; this process's AWS environment is not pointed at it: each scenario
    says what its pipeline gets."""
    with s3_server(set_env=False) as server:
        yield server


@pytest.fixture
def no_aws_env(monkeypatch):
    """Nothing in this process's environment (so nothing in the pipeline's) names AWS."""
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)


def _source(bootstrap):
    topic = unique_topic("delta-s3")
    create_topic(bootstrap, topic, PARTITIONS)
    return topic, produce(bootstrap, topic, PARTITIONS, PER_PARTITION)


def _run(bootstrap, tmp_path, topic, table, *, env, sink_options=()):
    checkpoint = str(tmp_path / "ckpt")
    log_path = str(tmp_path / "pipeline.log")
    args = ["--bootstrap", bootstrap, "--topic", topic, "--checkpoint", checkpoint,
            "--table", table, "--max-per-trigger", "40",
            "--sink-option", "orphanFileRetention=0s"]
    for item in sink_options:
        args += ["--sink-option", item]
    run_kill_sequence(PIPELINE, *args, log_path=log_path, points=KILL_POINTS, env=env)
    return checkpoint, log_path


def _txn_versions(uri: str, storage_options: dict[str, str]) -> dict[str, int]:
    """appId -> highest `txn` version, read from the JSON commits in the bucket."""
    loc = resolve_location("path", uri, storage_options)
    versions: dict[str, int] = {}
    selector = pafs.FileSelector(f"{loc.path}/_delta_log", allow_not_found=True)
    for info in sorted(loc.fs.get_file_info(selector), key=lambda i: i.path):
        if not info.path.endswith(".json"):
            continue
        with loc.fs.open_input_stream(info.path) as f:
            for line in f.read().decode().splitlines():
                action = json.loads(line) if line.strip() else {}
                if "txn" in action:
                    app, version = action["txn"]["appId"], action["txn"]["version"]
                    versions[app] = max(version, versions.get(app, -1))
    return versions


def _verify(s3, uri: str, checkpoint: str, log_path: str, expected) -> None:
    """Every produced record in the table once (by partition and offset, with its key and
    value); the sink's txn version is Spark's last batch; polars agrees; no orphan left."""
    opts = s3.storage_options
    table = DeltaTable(uri, storage_options=opts)
    t = table.to_pyarrow_table(columns=["partition", "offset", "key", "value"])
    got = list(zip(*(t.column(c).to_pylist() for c in ["partition", "offset", "key", "value"])))
    assert_records_once(got, expected, log_tail(log_path))

    versions = _txn_versions(uri, opts)
    assert len(versions) == 1, f"one app id expected in the table's txn actions: {versions}"
    (version,) = versions.values()
    assert version == last_spark_batch(checkpoint) == table.transaction_version(next(iter(versions)))
    assert pl.read_delta(uri, storage_options=opts).height == len(expected)  # another reader agrees

    bucket = uri[len("s3://"):].split("/", 1)[0]
    referenced = {u.rsplit("/", 1)[-1] for u in table.file_uris()}
    stored = {k.rsplit("/", 1)[-1] for k in s3.list_keys(bucket, "t/") if k.endswith(".parquet")}
    assert stored == referenced, f"orphans left in the bucket: {sorted(stored - referenced)}"
    leftover = [b for b in os.listdir(os.path.join(checkpoint, "eos-sink")) if b.isdigit()]
    assert all(os.path.exists(os.path.join(checkpoint, "eos-sink", b, "done")) for b in leftover), \
        f"batches left pending in the transaction log: {leftover}"


def test_s3_table_with_credentials_from_storage_options_only(bootstrap, s3, tmp_path, no_aws_env):
    assert not [n for n in without_aws_env() if n.startswith("AWS_")]
    topic, expected = _source(bootstrap)
    bucket = s3.create_bucket()
    sink_options = [f"storage.{k}={v}" for k, v in s3.storage_options.items()]
    checkpoint, log_path = _run(bootstrap, tmp_path, topic, f"s3://{bucket}/t", env={},
                                sink_options=sink_options)
    _verify(s3, f"s3://{bucket}/t", checkpoint, log_path, expected)
    # The secret went nowhere near the pipeline's log.
    assert s3.storage_options["AWS_SECRET_ACCESS_KEY"] not in log_tail(log_path, 10**8)


def test_an_unsafe_s3_commit_configuration_fails_the_query_at_start(spark, tmp_path):
    """A real query: the refusal (sinks/delta/storage.py) names the storage option, before
    anything reaches the bucket (none exists: nothing is contacted)."""
    query = None
    with pytest.raises(Exception, match=r"Option 'storage\.AWS_S3_ALLOW_UNSAFE_RENAME'") as e:
        query = (
            spark.readStream.format("rate").option("rowsPerSecond", "1").load()
            .writeStream.format("delta-eos")
            .option("path", "s3a://no-such-bucket-eos/t")
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .option("storage.AWS_S3_ALLOW_UNSAFE_RENAME", "true")
            .option("storage.AWS_SECRET_ACCESS_KEY", "s3cret-never-shown-7f3a")
            .option("storage.AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
    if query is not None:
        query.stop()
    assert "s3cret-never-shown-7f3a" not in str(e.value)
