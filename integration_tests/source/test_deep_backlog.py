"""A query started at `earliest` on a topic of 5,000,000 records, on the suite's broker: the
first batch is planned from offsets alone (no record of the backlog read to plan it), every
batch takes exactly maxOffsetsPerTrigger records, and neither the task workers nor the
driver's Python hold more than a bounded part of the backlog. Only the first batches run: the
behaviour is that of every batch, and reading the whole backlog would cost minutes.

The topic is produced once for the module (10-20 s: one producer, large batches, a fixed
16-byte value) and deleted at its end."""

from __future__ import annotations

import time
import uuid

import pyarrow as pa
import pytest
from pyspark.sql import functions as F
from pyspark.sql.streaming.datasource import ReadMaxRows

from connectors.core.kafka.client import KafkaMetadata
from integration_tests.support.broker_requests import RequestLog, wait_for_group_coordinator
from integration_tests.support.kafka_data import (create_topic, delete_topic, produce_backlog,
                                          unique_topic)
from integration_tests.support.process_memory import MemorySampler, import_baseline_kb
from integration_tests.support.streaming import wait_for
from sources import offsets as off
from sources.kafka_options import parse_source_options
from sources.kafka_source import KafkaStreamReader
from sources.range_reader import arrow_schema

PARTITIONS, PER_PARTITION = 4, 1_250_000
RECORDS = PARTITIONS * PER_PARTITION
VALUE = b"0123456789abcdef"
#: maxOffsetsPerTrigger: 62,500 a partition a batch, 5% of the backlog.
LIMIT = 250_000
BATCHES = 2


@pytest.fixture(scope="module")
def backlog(bootstrap):
    topic = unique_topic("deep")
    create_topic(bootstrap, topic, PARTITIONS)
    try:
        began = time.monotonic()
        produce_backlog(bootstrap, topic, PARTITIONS, PER_PARTITION, VALUE)
        meta = KafkaMetadata({"bootstrap.servers": bootstrap})
        try:
            latest = meta.latest([(topic, p) for p in range(PARTITIONS)])
        finally:
            meta.close()
        assert latest == {(topic, p): PER_PARTITION for p in range(PARTITIONS)}
        print(f"\n{RECORDS:,} records produced in {time.monotonic() - began:.1f} s")
        yield topic
    finally:
        delete_topic(bootstrap, topic)


def _arrow_bytes_per_row(topic: str) -> float:
    """What one record of the backlog takes as the source hands it to Spark (its Arrow
    schema, this topic's name and value), from a sample of 10,000 rows."""
    n = 10_000
    table = pa.table({
        "key": pa.nulls(n, pa.binary()),
        "value": pa.array([VALUE] * n, pa.binary()),
        "topic": pa.array([topic] * n, pa.string()),
        "partition": pa.array([0] * n, pa.int32()),
        "offset": pa.array(range(n), pa.int64()),
        "timestamp": pa.array([0] * n, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        "timestampType": pa.array([0] * n, pa.int32()),
    }, schema=arrow_schema(False))
    return table.nbytes / n


def _with_rows(query) -> list[dict]:
    return [p for p in query.recentProgress if p["numInputRows"]]


def _options(bootstrap: str, topic: str, **extra: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
            "startingOffsets": "earliest", "maxOffsetsPerTrigger": str(LIMIT), **extra}


def test_the_first_batch_is_planned_from_offsets_alone(broker, bootstrap, backlog):
    """What the driver does before the first batch (Spark's initialOffset, latestOffset and
    partitions), counted by the broker: offset look-ups (one ListOffsets each for the
    earliest and the latest offsets) and metadata, no Fetch: the plan never reads the
    backlog, whatever its depth. The batch ends LIMIT records in, shared across partitions."""
    if broker.node is None:
        pytest.skip(f"counts requests in the request log of a broker this run started (the "
                    f"suite's Apache Kafka node); the broker here is {broker.kind}")
    client_id = f"first-batch-{uuid.uuid4().hex[:8]}"
    reader = KafkaStreamReader(parse_source_options(
        _options(bootstrap, backlog, **{"kafka.client.id": client_id}), batch=False))
    wait_for_group_coordinator(bootstrap, reader.options.kafka_conf["group.id"])
    try:
        with RequestLog(broker.node) as requests:
            mark = requests.mark()
            began = time.perf_counter()
            start = reader.initialOffset()
            end = reader.latestOffset(start, reader.getDefaultReadLimit())
            tasks = reader.partitions(start, end)
            ms = (time.perf_counter() - began) * 1000
            counts = requests.counts(mark, client_id)
    finally:
        reader.stop()
    print(f"\nthe first batch of {RECORDS:,} records' backlog planned in {ms:.0f} ms: "
          f"{dict(counts)}")

    assert isinstance(reader.getDefaultReadLimit(), ReadMaxRows)
    assert off.from_json(start) == {(backlog, p): 0 for p in range(PARTITIONS)}
    share = LIMIT // PARTITIONS
    assert off.from_json(end) == {(backlog, p): share for p in range(PARTITIONS)}
    assert sorted(r for t in tasks for r in t.ranges) == [
        off.OffsetRange(backlog, p, 0, share) for p in range(PARTITIONS)]
    assert "FETCH" not in counts and counts["LIST_OFFSETS"] == 2, counts
    assert set(counts) <= {"API_VERSIONS", "METADATA", "FIND_COORDINATOR", "LIST_OFFSETS"}, \
        counts


def test_batches_of_max_offsets_per_trigger_in_bounded_memory(spark, bootstrap, backlog,
                                                             tmp_path):
    """Every batch reads exactly LIMIT records: each partition's next LIMIT/4 offsets, each
    once (counted in Spark, not by the source). Memory, sampled from /proc all along: a task
    worker grows (over a fresh Python with the worker's imports, or over what it held when
    the query started) by less than the backlog's Arrow size, which it would exceed if a task
    held the backlog (its records plus the consumer's buffers); the driver's Python (the
    stream reader) grows by less than an eighth of it: it holds offsets, never records."""
    jvm_pid = int(spark.sparkContext._jvm.ProcessHandle.current().pid())
    baseline_kb = import_baseline_kb()
    row_bytes = _arrow_bytes_per_row(backlog)
    backlog_kb = RECORDS * row_bytes / 1024
    seen: dict[int, list[tuple]] = {}

    def check(df, batch_id: int) -> None:
        if batch_id >= BATCHES:
            # Nothing run, nothing read: the query is stopped between such quick batches, not
            # in a Spark job inside this callback (Spark then matches the interrupted job's
            # long error text with a regex that overflows its stack: noise, not a failure).
            return
        rows = df.groupBy("partition").agg(
            F.count("*"), F.countDistinct("offset"), F.min("offset"), F.max("offset"),
            F.sum((F.col("value").cast("string") != VALUE.decode()).cast("int")),
        ).collect()
        seen[batch_id] = sorted(tuple(r) for r in rows)

    with MemorySampler(jvm_pid) as memory:
        query = (spark.readStream.format("kafka-eos").options(**_options(bootstrap, backlog))
                 .load().writeStream.foreachBatch(check)
                 .option("checkpointLocation", str(tmp_path / "ckpt"))
                 .trigger(processingTime="1 second").start())
        try:
            # Spark reports a batch's progress once it is committed, after foreachBatch.
            wait_for(lambda: len(_with_rows(query)) >= BATCHES, 600, f"{BATCHES} batches")
        finally:
            query.stop()
    progress = _with_rows(query)

    share = LIMIT // PARTITIONS
    assert sorted(seen)[:BATCHES] == list(range(BATCHES))
    for batch_id, groups in seen.items():
        assert groups == [(p, share, share, batch_id * share, (batch_id + 1) * share - 1, 0)
                          for p in range(PARTITIONS)], batch_id
    assert [p["numInputRows"] for p in progress][:BATCHES] == [LIMIT] * BATCHES

    def growth_kb(peak) -> int:
        return peak.peak_kb - max(peak.first_kb, baseline_kb)

    workers = memory.by_role("task worker")
    readers = memory.by_role("stream reader")
    jvm = memory.by_role("jvm")[0]
    mb = 1024
    print(f"\nbacklog {RECORDS:,} records, {backlog_kb / mb:.0f} MB as Arrow "
          f"({row_bytes:.0f} B a row); batches of {LIMIT:,} ({LIMIT * row_bytes / 2**20:.0f} MB): "
          f"triggerExecution {[p['durationMs']['triggerExecution'] for p in progress]} ms, "
          f"latestOffset {[p['durationMs'].get('latestOffset') for p in progress]} ms; "
          f"imports {baseline_kb / mb:.0f} MB; task workers peak "
          f"{sorted(w.peak_kb // mb for w in workers)} MB, growth "
          f"{sorted(growth_kb(w) // mb for w in workers)} MB; stream reader peak "
          f"{[r.peak_kb // mb for r in readers]} MB, growth "
          f"{[growth_kb(r) // mb for r in readers]} MB; driver JVM {jvm.first_kb // mb} -> "
          f"{jvm.peak_kb // mb} MB")
    assert workers and readers
    assert max(growth_kb(w) for w in workers) < backlog_kb
    assert max(growth_kb(r) for r in readers) < backlog_kb / 8
