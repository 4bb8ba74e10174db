"""Helpers for streaming tests: an idempotent per-batch Parquet sink, and reading it back.

Each micro-batch is written (overwritten) to `out/batch=<id>`, so a replayed batch replaces
its own output: the sink is exactly-once exactly when the source replays the same records.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import pyarrow.parquet as pq

from integration_tests.support.kafka_data import Record


def parquet_batch_writer(out_dir: str) -> Callable:
    def write(batch_df, batch_id: int) -> None:
        (
            batch_df.select("topic", "partition", "offset", "key", "value")
            .write.mode("overwrite")
            .parquet(os.path.join(out_dir, f"batch={batch_id:06d}"))
        )

    return write


def read_batches(out_dir: str) -> dict[int, list[Record]]:
    """Records per batch id, only from batches whose write completed."""
    result: dict[int, list[Record]] = {}
    if not os.path.isdir(out_dir):
        return result
    for name in sorted(os.listdir(out_dir)):
        path = os.path.join(out_dir, name)
        if not name.startswith("batch=") or not os.path.exists(os.path.join(path, "_SUCCESS")):
            continue
        table = pq.read_table(path)
        rows = table.to_pylist()
        result[int(name.split("=")[1])] = [
            Record(r["topic"], r["partition"], r["offset"], r["key"], r["value"]) for r in rows
        ]
    return result


def all_records(out_dir: str) -> list[Record]:
    return sorted(r for recs in read_batches(out_dir).values() for r in recs)


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def run_to_end(query, timeout_s: float = 300) -> None:
    """Wait for an availableNow (or otherwise finite) query to end, and fail the test if it did
    not: `awaitTermination(timeout)` returns False on a timeout, and a test that goes on to
    read the output then sees the batches not yet committed as "missing" (a slow run looks like
    data loss). The query's own exception, if it failed, is raised as is."""
    if not query.awaitTermination(timeout_s):
        progress = query.lastProgress
        status = query.status
        query.stop()
        raise AssertionError(
            f"the query did not end within {timeout_s}s (a stall, not data loss); status "
            f"{status}; last progress {progress}"
        )
    if query.exception() is not None:
        raise AssertionError(f"the query failed: {query.exception()}")


def stream_options(bootstrap: str, **options: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": bootstrap, **options}


def earliest_stream(spark, bootstrap: str, topic: str, max_per_trigger: str = "30",
                    **options: str):
    """A `kafka-eos` stream of `topic` from the start, `max_per_trigger` records a batch;
    `options`: more source options (e.g. `targetTasksPerBatch`)."""
    return (
        spark.readStream.format("kafka-eos")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", max_per_trigger)
        .options(**options)
        .load()
    )
