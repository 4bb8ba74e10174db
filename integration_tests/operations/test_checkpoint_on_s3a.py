"""Spark's own checkpoint on `s3a://`, on the suite's S3 server (moto): Hadoop's S3A filesystem
given to a session by integration_tests/support/s3a.py (hadoop-aws and the AWS SDK modules it
loads, on `spark.jars`).

A stateful streaming query (rate -> count per key -> noop) runs three micro-batches with
`checkpointLocation=s3a://<bucket>/ck`, stops, and runs again from the same checkpoint. The
offset log, the commit log, the query's metadata and the state store's files must be objects in
the bucket (listed with boto3, not through Hadoop): the state files are written by the tasks,
so the executors' S3A is exercised too, not only the driver's. The second run must keep the
query id the checkpoint's `metadata` holds and go on from the batch after the first run's last.
On `local-cluster[1,1,1024]`, whose executor is a JVM of its own with PySpark's jars only (as on a standalone cluster's other hosts): it must have fetched every
S3A jar from the driver (`spark.jars`), and its tasks wrote the state files.

The session runs in a subprocess (`python -m integration_tests.operations.test_checkpoint_on_s3a
SPEC RESULT`): `spark.jars` counts only when a JVM starts, and this process's shared session
(conftest.py's `spark`) may already run without them.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from integration_tests.support.processes import run_session
from integration_tests.support.s3 import ACCESS_KEY_ID, SECRET_ACCESS_KEY, s3_server

BATCHES_PER_RUN = 3
SESSION_TIMEOUT_S = 300


def _run_until(spark, checkpoint: str, batches: int) -> dict:
    """Start the query on `checkpoint`, let it complete `batches` micro-batches, stop it."""
    from pyspark.sql.functions import col

    query = (spark.readStream.format("rate").option("rowsPerSecond", "20").load()
             .groupBy((col("value") % 3).alias("k")).count()
             .writeStream.format("noop").outputMode("update")
             .option("checkpointLocation", checkpoint)
             .trigger(processingTime="500 milliseconds").start())
    deadline = time.monotonic() + 120
    try:
        while len({p["batchId"] for p in query.recentProgress}) < batches:
            if query.exception() is not None or not query.isActive:
                raise RuntimeError(f"the query ended: {query.exception()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"fewer than {batches} batches in 120 s")
            time.sleep(0.2)
    finally:
        query.stop()
    return {"id": query.id, "run_id": query.runId,
            "batches": sorted({p["batchId"] for p in query.recentProgress})}


def checkpoint_session(spec: dict) -> dict:
    """In the subprocess: a session with S3A, two runs of one query on the s3a checkpoint."""
    from connectors.local.spark import local_spark
    from integration_tests.support.s3a import s3a_spark_conf

    conf = s3a_spark_conf(spec["endpoint"], spec["access_key"], spec["secret_key"])
    started = time.monotonic()
    spark = local_spark("kafka-eos-s3a-checkpoint", master=spec["master"], conf=conf,
                        register=False)
    out: dict = {"session_start_s": round(time.monotonic() - started, 1)}
    checkpoint = f"s3a://{spec['bucket']}/ck"
    app_id = spark.sparkContext.applicationId
    try:
        out["runs"] = [_run_until(spark, checkpoint, BATCHES_PER_RUN) for _ in range(2)]
    finally:
        spark.stop()
    if spec["master"].startswith("local-cluster"):
        out["executor_jars"] = _executor_jars(app_id)
    return out


def _executor_jars(app_id: str) -> list[str]:
    """The jars the separate executor JVMs of a local-cluster master fetched from the driver and
    added to their class loaders, read from their logs; the logs' directory (the in-process
    worker's, under SPARK_HOME/work) is removed after."""
    import re
    import shutil

    from pyspark.find_spark_home import _find_spark_home

    app = Path(_find_spark_home()) / "work" / app_id
    added = re.compile(r"Adding file:\S*/([^/\s]+\.jar) to class loader")
    try:
        return sorted({m.group(1) for log in app.glob("*/stderr")
                       for m in added.finditer(log.read_text(errors="replace"))})
    finally:
        shutil.rmtree(app, ignore_errors=True)


#: local-cluster: the tasks run in a separate executor JVM started by a standalone worker with
#: PySpark's jars only, as on a cluster's other hosts, which gets the S3A jars from the driver
#: through `spark.jars`; the driver's S3A writes the offsets and commits, the executor's the
#: state. (A local[2] run, the same S3A in one JVM, proved nothing this one does not.)
MASTERS = ("local-cluster[1,1,1024]",)


@pytest.fixture(scope="module", params=MASTERS)
def observed(request, tmp_path_factory) -> dict:
    from integration_tests.support.s3a import S3AUnavailable, s3a_jars

    try:
        s3a_jars()  # fetched here, once, so that a failure says what is missing
    except S3AUnavailable as e:
        pytest.skip(f"Hadoop's S3A connector cannot be fetched here (Java, Maven Central): {e}")
    work = tmp_path_factory.mktemp("s3a-checkpoint")
    with s3_server(set_env=False) as s3:
        bucket = s3.create_bucket()
        spec = {"endpoint": s3.endpoint, "access_key": ACCESS_KEY_ID,
                "secret_key": SECRET_ACCESS_KEY, "bucket": bucket, "master": request.param}
        started = time.monotonic()
        out = run_session(sys.executable, "integration_tests.operations.test_checkpoint_on_s3a",
                          spec, work, env=_session_env(), timeout_s=SESSION_TIMEOUT_S,
                          what="the session with its checkpoint on s3a")
        print(f"\ns3a checkpoint session on {request.param}: {time.monotonic() - started:.0f} s")
        keys = s3.list_keys(bucket, "ck/")
    return {"result": out, "keys": keys, "master": request.param}


def _session_env() -> dict[str, str]:
    """This process's environment less AWS_*: the session's S3A gets its endpoint and keys
    from the Spark settings only."""
    from integration_tests.support.s3 import without_aws_env

    return without_aws_env()


def test_the_checkpoint_is_in_the_bucket(observed):
    keys = set(observed["keys"])
    for key in ("ck/metadata", "ck/offsets/0", "ck/commits/0", "ck/offsets/2", "ck/commits/2"):
        assert key in keys, f"{key} is not in the bucket: {sorted(keys)}"
    # The state store's files are written by the tasks: the executors' S3A, not only the driver's.
    assert any(k.startswith("ck/state/0/") for k in keys), sorted(keys)


def test_the_restarted_query_goes_on_from_the_checkpoint(observed):
    first, second = observed["result"]["runs"]
    assert first["batches"][0] == 0
    assert second["id"] == first["id"]  # the checkpoint's metadata, read back from the bucket
    assert second["run_id"] != first["run_id"]
    assert second["batches"][0] == first["batches"][-1] + 1, (first, second)
    assert f"ck/commits/{second['batches'][-1]}" in observed["keys"]


def test_separate_executors_get_the_s3a_jars_through_spark_jars(observed):
    assert observed["master"].startswith("local-cluster")  # an executor JVM of its own
    from integration_tests.support.s3a import s3a_jars

    assert set(observed["result"]["executor_jars"]) == {j.name for j in s3a_jars()}


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    Path(argv[1]).write_text(json.dumps(checkpoint_session(spec)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
