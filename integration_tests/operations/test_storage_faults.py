"""Object storage that fails for a while.

A `delta-eos` query commits to a table on `s3a://` through a fault-injecting proxy in front of
the suite's S3 server (moto; integration_tests/support/s3_faults.py): 503 SlowDown and 500
InternalError answers, connections reset before and after moto handled the request, answers
held past the client's timeout (the request took effect, the client never learns it), and a
30 s outage mid-stream. After each: every record in the table exactly once, each batch's `txn`
action in exactly one commit, every file the Delta log names in the bucket and no data file it
does not name, and the sink's transaction log settled and consistent with the table.

Spark cannot keep its checkpoint (where the sink's transaction log lives) on s3a:// here
(Hadoop's S3 jars come from Maven, docs/design.md#production-conditions): the Spark pipelines
keep it on local disk, and `test_the_sink_protocol_with_its_transaction_log_on_failing_storage`
runs the sink's protocol in this process, the transaction log and the table in one bucket
behind the same proxy, two of its Delta commits landing while delta-rs is told they failed.

What failed before the sink retried its own storage steps (sinks/storage_retries.py
with_storage_retries, used by sinks/txn_log.py, sinks/query_identity.py, sinks/delta/sink.py and
upsert.py; docs/operations.md#object-storage-outages):
* the 30 s outage: the query ended within a second of it, at batch 2's planning
  (QueryStartFailed: "OSError: When getting information for key 't/_delta_log/
  00000000000000000000.json' ... NETWORK_CONNECTION during HeadObject operation: curlCode: 56
  ... Connection reset by peer"); only a restart after the outage finished the stream;
* the protocol with its log on S3 under the fault mix: the query failed at planning 4 times in
  4 batches ("OSError: AWS Error INTERNAL_FAILURE during GetObject operation: Failed to flush
  response stream (eof: 0, bad: 1)": a read of the checkpoint that pyarrow's client does not
  retry), each time replaying the batch from a restart.
The Spark pipeline under the fault mix rode through before as well (pyarrow's and delta-rs's
own retries, the commit's retries, Spark's task retries).
"""

from __future__ import annotations

import collections
import json
import logging
import os
import pickle
import time
import uuid

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from integration_tests.support.s3 import s3_server
from integration_tests.support.task_context import FakeTaskContext
from integration_tests.support.delta_oracle import assert_records_once, last_spark_batch
from integration_tests.support.kafka_data import Record, create_topic, produce, unique_topic
from integration_tests.support.processes import log_tail, start_pipeline, wait_exit
from integration_tests.support.s3_faults import S3FaultProxy
from sinks.txn_log import LOG_DIR, TransactionLog

PIPELINE = "integration_tests.support.pipelines.eos_pipeline"
#: The fault mix: 20% errors (503 SlowDown, 500 InternalError), 5% resets (half before moto
#: saw the request, half after it answered), 2% answers held past the clients' timeouts.
MIX = {"error_rate": 0.2, "reset_rate": 0.05, "delay_rate": 0.02, "delay_s": 4.0}
#: delta-rs's per-request timeout for these tests (object_store's `timeout`, 30 s by default),
#: below MIX's delay_s so that a held answer times out as it would against a real store;
#: pyarrow's own is about 3 s (the AWS SDK's).
CLIENT_TIMEOUT = "storage.timeout=3s"
OUTAGE_S = 30.0


@pytest.fixture(scope="module")
def s3():
    """moto's S3 server; this process's AWS environment is not pointed at it."""
    with s3_server(set_env=False) as server:
        yield server


@pytest.fixture
def proxy(s3):
    with S3FaultProxy(s3.endpoint, seed=30) as p:
        yield p


# -- what must hold after any of it ---------------------------------------------------------------


def _txn_commits(s3, bucket: str) -> dict[str, list[int]]:
    """appId -> the txn versions of the table's JSON commits, in log order (read from moto)."""
    client = s3._client()
    versions: dict[str, list[int]] = collections.defaultdict(list)
    for key in sorted(k for k in s3.list_keys(bucket, "t/_delta_log/") if k.endswith(".json")):
        for line in client.get_object(Bucket=bucket, Key=key)["Body"].read().decode().splitlines():
            action = json.loads(line) if line.strip() else {}
            if "txn" in action:
                versions[action["txn"]["appId"]].append(action["txn"]["version"])
    return dict(versions)


def _assert_table(s3, bucket: str, expected, last_batch: int, context: str = "") -> set[str]:
    """Every record once; each batch 0..last_batch in exactly one commit; the log names no
    file that is missing and the bucket holds no data file the log does not name. Returns the
    files the table references (relative to the table)."""
    table = DeltaTable(f"s3://{bucket}/t", storage_options=s3.storage_options)
    t = table.to_pyarrow_table(columns=["partition", "offset", "key", "value"])
    got = list(zip(*(t.column(c).to_pylist() for c in ["partition", "offset", "key", "value"])))
    assert_records_once(got, expected, context)
    commits = _txn_commits(s3, bucket)
    assert len(commits) == 1, f"one appId expected in the txn actions: {commits}"
    (versions,) = commits.values()
    assert versions == list(range(last_batch + 1)), f"txn versions in log order: {versions}"
    prefix = f"s3://{bucket}/t/"
    referenced = {u[len(prefix):] for u in table.file_uris()}
    stored = {k[len("t/"):] for k in s3.list_keys(bucket, "t/") if k.endswith(".parquet")}
    assert referenced <= stored, f"the log names missing files: {sorted(referenced - stored)}"
    assert stored == referenced, f"orphans left in the bucket: {sorted(stored - referenced)}"
    return referenced


def _assert_log_settled(txlog: TransactionLog, referenced: set[str] | None = None) -> None:
    """No batch pending; each retained batch done and decided once (no run of it failed),
    and (given the table's files) every file it decided is one the table holds."""
    assert txlog.pending() == [], f"batches left pending in the transaction log: {txlog.pending()}"
    assert txlog.batches(), "no batch retained in the transaction log"
    for b in txlog.batches():
        state = txlog.state(b)
        assert state.done and len(state.decisions) == 1, f"batch {b}: {state}"
        if referenced is not None:
            decided = {a["file"] for h in state.decided().values() for a in h["adds"]}
            assert decided <= referenced, f"batch {b} decided files the table lacks: {decided - referenced}"


# -- a Spark pipeline, Kafka -> delta-eos on s3a:// through the proxy -----------------------------


def _source(bootstrap, partitions: int, per_partition: int):
    topic = unique_topic("s3-faults")
    create_topic(bootstrap, topic, partitions)
    return topic, produce(bootstrap, topic, partitions, per_partition)


def _args(bootstrap, topic, checkpoint, bucket, per_trigger, *sink_options):
    args = ["--bootstrap", bootstrap, "--topic", topic, "--checkpoint", checkpoint,
            "--table", f"s3a://{bucket}/t", "--max-per-trigger", str(per_trigger),
            "--sink-option", "orphanFileRetention=0s"]
    for item in sink_options:
        args += ["--sink-option", item]
    return args


def _storage_warnings(log_path: str) -> list[str]:
    with open(log_path, errors="replace") as f:
        return [line.strip() for line in f if "storage: " in line and "WARNING" in line]


def test_a_query_on_s3a_rides_through_errors_resets_and_timeouts(bootstrap, s3, proxy, tmp_path):
    topic, expected = _source(bootstrap, 3, 25)  # 75 records, 20 a batch: batches 0-3
    bucket = s3.create_bucket()
    checkpoint, log_path = str(tmp_path / "ck"), str(tmp_path / "pipeline.log")
    proxy.set_faults(**MIX)
    started = time.monotonic()
    proc = start_pipeline(PIPELINE, *_args(bootstrap, topic, checkpoint, bucket, 20, CLIENT_TIMEOUT),
                          log_path=log_path, env=proxy.env)
    rc = wait_exit(proc, log_path, 400)
    proxy.set_faults()
    counts = proxy.snapshot()
    print(f"\nfault mix, Spark pipeline: rc={rc} in {time.monotonic() - started:.1f} s; "
          f"faults {counts}; {len(_storage_warnings(log_path))} storage retry warning(s)")
    assert rc == 0, f"the query did not ride through:\n{log_tail(log_path, 12000)}"
    # Faults really happened, of every kind, to this query's requests.
    assert counts["requests"] >= 100, counts
    assert counts["error_503"] + counts["error_500"] >= 0.15 * counts["requests"] - 10, counts
    assert counts["reset_before"] >= 1 and counts["reset_after"] >= 1 and counts["delay"] >= 1, counts
    referenced = _assert_table(s3, bucket, expected, last_spark_batch(checkpoint), log_tail(log_path))
    assert last_spark_batch(checkpoint) == 3
    _assert_log_settled(TransactionLog(checkpoint), referenced)


def test_a_30_s_outage_mid_stream(bootstrap, s3, proxy, tmp_path):
    """Every request refused (reset or 503) for 30 s, from the moment Spark logged batch 1
    committed: nothing of batch 1 is left to do on S3 then, and batch 2's planning (the sink's
    open() and recovery) is the next to meet the unavailable store, then its tasks and its
    commit. Before the sink retried its own storage steps, the query ended at that planning at
    once (QueryStartFailed); it waits the outage out now."""
    topic, expected = _source(bootstrap, 3, 30)  # 90 records, 20 a batch: batches 0-4
    bucket = s3.create_bucket()
    checkpoint, log_path = str(tmp_path / "ck"), str(tmp_path / "pipeline.log")
    proc = start_pipeline(PIPELINE, *_args(bootstrap, topic, checkpoint, bucket, 20),
                          log_path=log_path, env=proxy.env)
    seen: dict[int, float] = {}  # batch -> when Spark's commit log entry appeared
    deadline = time.monotonic() + 400
    while proc.poll() is None and time.monotonic() < deadline:
        _commit_times(checkpoint, seen)
        if proxy.outage_started is None and 1 in seen:
            proxy.outage(True)
        if proxy.in_outage and time.monotonic() - proxy.outage_started >= OUTAGE_S:
            proxy.outage(False)
        time.sleep(0.01)
    if proxy.in_outage:
        proxy.outage(False)
    rc = wait_exit(proc, log_path, 10)
    _commit_times(checkpoint, seen)
    counts = proxy.snapshot()
    assert proxy.outage_started is not None, f"batch 2 never started:\n{log_tail(log_path)}"
    refused = [t for t, kind, _ in proxy.events if kind in ("outage_503", "outage_reset")]
    before = max(t for t in seen.values() if t <= proxy.outage_started)
    after = min((t for t in seen.values() if t > proxy.outage_started), default=float("nan"))
    warnings = _storage_warnings(log_path)
    print(f"\n30 s outage: rc={rc}; no batch committed for {after - before:.1f} s (outage "
          f"{OUTAGE_S:.0f} s from {proxy.outage_started - before:.1f} s after batch 1's "
          f"commit, first request refused {(refused or [float('nan')])[0] - proxy.outage_started:.2f} s "
          f"into it); faults {counts}; {len(warnings)} storage retry warning(s), e.g. "
          f"{warnings[:1]}")
    assert counts.get("outage_503", 0) >= 3 and counts.get("outage_reset", 0) >= 3, \
        f"the outage refused too few requests: {counts}"
    assert rc == 0, f"the query did not ride through the outage:\n{log_tail(log_path, 12000)}"
    assert any("storage: delta-eos[" in w for w in warnings), \
        f"the outage missed batch 2's planning: {warnings[:3]}"
    # The correctness bound only: commits stopped for the outage (it had an effect). How
    # much longer the stall ran is the host's speed as much as the retries', and is printed.
    stall = after - before
    assert stall >= OUTAGE_S - 2, f"stalled {stall:.1f} s, shorter than the {OUTAGE_S:.0f} s outage"
    referenced = _assert_table(s3, bucket, expected, last_spark_batch(checkpoint), log_tail(log_path))
    assert last_spark_batch(checkpoint) == 4
    _assert_log_settled(TransactionLog(checkpoint), referenced)


def _commit_times(checkpoint: str, seen: dict[int, float]) -> None:
    now = time.monotonic()
    try:
        names = os.listdir(os.path.join(checkpoint, "commits"))
    except FileNotFoundError:
        return
    for n in names:
        if n.isdigit() and int(n) not in seen:
            seen[int(n)] = now


# -- the sink's protocol in this process, its transaction log on the same storage ---------------

ARROW_SCHEMA = pa.schema([("partition", pa.int32()), ("offset", pa.int64()),
                          ("key", pa.string()), ("value", pa.string())])
TASK_ATTEMPTS = 4  # spark.task.maxFailures, as in the pipelines


class _RetryWarnings(logging.Handler):
    """The sink's storage retry warnings (sinks.storage_retries.with_storage_retries), and its
    commit retries (the template's, within commitTimeout)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []
        self.commits: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("storage: ") or ": storage: " in message:
            self.lines.append(message[:200])
        elif "commit of batch" in message:
            self.commits.append(message[:300])


class S3Query:
    """A streaming query's sink side without Spark, its checkpoint and its table in one bucket:
    per micro-batch a fresh writer pickled for its tasks (open() and recovery run there), each
    partition's task retried up to TASK_ATTEMPTS times, the driver's commit, then Spark's
    commit log entry. A failure that would end a Spark query restarts it from the checkpoint
    (a new writer: recovery) and replays the batch; each restart is kept with its error."""

    def __init__(self, s3, bucket: str, monkeypatch, **options: str) -> None:
        from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

        self.s3, self.bucket, self.monkeypatch = s3, bucket, monkeypatch
        self.options = {"path": f"s3a://{bucket}/t", "checkpointlocation": f"s3a://{bucket}/ck",
                        "orphanfileretention": "0s", "committimeout": "60s",
                        **{k.lower(): v for k, v in options.items()}}
        self.schema = StructType([StructField("partition", IntegerType()),
                                  StructField("offset", LongType()),
                                  StructField("key", StringType()), StructField("value", StringType())])
        self.restarts: list[str] = []
        self.task_failures: list[str] = []
        # What Spark writes when a query first starts (Spark's own I/O: straight to moto).
        s3._client().put_object(Bucket=bucket, Key="ck/metadata",
                                Body=json.dumps({"id": str(uuid.uuid4())}).encode())

    def _task(self, batch_id: int, partition: int, attempt: int) -> None:
        import pyspark

        ctx = FakeTaskContext(batch_id, partition, attempt)
        self.monkeypatch.setattr(pyspark.TaskContext, "get", classmethod(lambda cls: ctx))

    def run_batch(self, batch_id: int, partitions: list[pa.RecordBatch], max_runs: int = 10) -> None:
        from sinks.delta.data_source import DeltaEosDataSource

        for _ in range(max_runs):
            try:
                writer = DeltaEosDataSource(self.options).streamWriter(self.schema, False)
                shipped = pickle.loads(pickle.dumps(writer))  # open() and recovery run here
            except Exception as e:  # noqa: BLE001  (the query fails at planning)
                self.restarts.append(f"batch {batch_id}, planning: {type(e).__name__}: {e}")
                continue
            messages = []
            for p, rows in enumerate(partitions):
                for attempt in range(TASK_ATTEMPTS):
                    self._task(batch_id, p, attempt)
                    try:
                        messages.append(shipped.write(iter([rows])))
                        break
                    except Exception as e:  # noqa: BLE001  (Spark retries the task)
                        self.task_failures.append(f"batch {batch_id} p{p} a{attempt}: {e}")
            if len(messages) < len(partitions):
                self.restarts.append(f"batch {batch_id}: a task failed {TASK_ATTEMPTS} times")
                try:
                    writer.abort(messages, batch_id)
                except Exception:  # noqa: BLE001  (as in Spark: the query ends anyway)
                    pass
                continue
            try:
                writer.commit(messages, batch_id)
            except Exception as e:  # noqa: BLE001  (the query fails; a restart replays it)
                self.restarts.append(f"batch {batch_id}, commit: {type(e).__name__}: {e}")
                continue
            # Spark's commit log entry (Spark's own I/O, not under test: straight to moto).
            self.s3._client().put_object(Bucket=self.bucket, Key=f"ck/commits/{batch_id}",
                                         Body=b"v1\n{}")
            return
        raise AssertionError(f"batch {batch_id} did not commit in {max_runs} runs:\n"
                             + "\n".join(self.restarts[-5:]))


def _batches(n_batches: int, partitions: int, per_partition: int):
    """Per batch, one Arrow batch per partition; and the Records they hold, for the oracle."""
    batches, records = [], []
    for b in range(n_batches):
        batch = []
        for p in range(partitions):
            rows = [{"partition": p, "offset": b * per_partition + i,
                     "key": f"k{p}-{b}-{i}", "value": f"v{p}-{b}-{i}"} for i in range(per_partition)]
            batch.append(pa.RecordBatch.from_pylist(rows, schema=ARROW_SCHEMA))
            records += [Record("t", r["partition"], r["offset"], r["key"].encode(), r["value"].encode())
                        for r in rows]
        batches.append(batch)
    return batches, records


def test_the_sink_protocol_with_its_transaction_log_on_failing_storage(s3, proxy, monkeypatch):
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    for k, v in proxy.env.items():  # pyarrow (data files, the log) and delta-rs: via the proxy
        monkeypatch.setenv(k, v)
    bucket = s3.create_bucket()
    key, _, value = CLIENT_TIMEOUT.partition("=")
    query = S3Query(s3, bucket, monkeypatch, **{key: value})
    batches, records = _batches(4, 3, 5)
    # Two commits that land while delta-rs is told they failed (it does not retry a
    # create-if-absent PUT): batch b is the table's version b (batch 0 creates the table).
    proxy.fail_next("_delta_log/00000000000000000001.json", "reset_after", method="PUT")
    proxy.fail_next("_delta_log/00000000000000000003.json", "delay", method="PUT",
                    delay_s=MIX["delay_s"])
    retries = _RetryWarnings()
    logging.getLogger("kafka_eos").addHandler(retries)  # the sink's loggers propagate to it
    proxy.set_faults(**MIX)
    started = time.monotonic()
    try:
        for b, partitions in enumerate(batches):
            query.run_batch(b, partitions)
    finally:
        proxy.set_faults()
        logging.getLogger("kafka_eos").removeHandler(retries)
    counts = proxy.snapshot()
    print(f"\nfault mix, the protocol with its log on S3: {len(batches)} batches in "
          f"{time.monotonic() - started:.1f} s; faults {counts}; query restarts "
          f"{query.restarts}; task attempts failed {len(query.task_failures)} "
          f"{query.task_failures[:2]}; the sink's storage retries {len(retries.lines)}, e.g. "
          f"{retries.lines[:2]}; commit retries {retries.commits}")
    assert counts["requests"] >= 200, counts
    assert proxy.pending_one_shots() == [], "a commit's PUT never came"
    for b in (1, 3):  # told it failed, retried, found in the table: committed once (below)
        assert any(f"commit of batch {b} failed (attempt 1)" in c for c in retries.commits), \
            retries.commits
    assert counts["reset_before"] >= 1 and counts["reset_after"] >= 1 and counts["delay"] >= 1, counts
    assert not query.restarts, "the query failed (a restart replayed the batch):\n" + "\n".join(query.restarts)
    referenced = _assert_table(s3, bucket, records, len(batches) - 1)
    # The log, read back directly from moto, as a restarted driver would.
    for k, v in s3.env.items():
        monkeypatch.setenv(k, v)
    txlog = TransactionLog(f"s3a://{bucket}/ck")
    _assert_log_settled(txlog, referenced)
    keys = s3.list_keys(bucket, f"ck/{LOG_DIR}/")
    assert not [k for k in keys if ".tmp-" in k], "a temporary name on an object store"
