"""What a task reports to the driver (`PreparedPartition`, its WriterCommitMessage), and the
template's one log line per committed batch (or batch job) built from the reports, on the
`kafka_eos.sink` logger: rows, bytes and write time per partition, the commit's time, the
partitions a replay skipped. With KAFKA_EOS_METRICS_FILE set, the same line is appended as JSON
to that file (the benchmarks' and dashboards' feed)."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass

from pyspark.sql.datasource import WriterCommitMessage

from sinks.settings import SinkSettings
from sinks.txn_log import Handle

log = logging.getLogger("kafka_eos.sink")


@dataclass
class PreparedPartition(WriterCommitMessage):
    """A task's WriterCommitMessage: its handle and what it wrote, for the batch log line."""

    batch_id: int
    partition: int
    attempt: int
    handle: Handle | None  # None: nothing to commit (empty partition, or already committed)
    skipped: bool = False  # already committed by an earlier run of this batch
    rows: int = 0
    bytes: int = 0
    write_ms: float = 0.0


#: If set (in the environment Spark's Python workers inherit), the driver appends each batch's
#: log line as JSON to this local file.
METRICS_ENV = "KAFKA_EOS_METRICS_FILE"


def log_batch(describe: str, settings: SinkSettings, batch_id: int,
              prepared: list[PreparedPartition], commit_ms: float) -> None:
    """The line of a committed batch, from its tasks' commit messages."""
    written = [m for m in prepared if not m.skipped]
    slowest = max(written, key=lambda m: m.write_ms, default=None)
    line = {
        "sink": describe,
        **({"job": settings.job_id} if settings.batch_job else {}),
        "batch": batch_id,
        "guarantee": settings.guarantee,
        "rows": sum(m.rows for m in written),
        "bytes": sum(m.bytes for m in written),
        "commit_ms": round(commit_ms, 1),
        "skipped_partitions": sorted(m.partition for m in prepared if m.skipped),
        "slowest_partition": slowest.partition if slowest else None,
        "partitions": {
            str(m.partition): {"rows": m.rows, "bytes": m.bytes, "ms": round(m.write_ms, 1)}
            for m in written
        },
    }
    log.info("%s committed %s", "batch job" if settings.batch_job else "batch",
             json.dumps(line))
    metrics_file = os.environ.get(METRICS_ENV)
    if metrics_file:  # one JSON line per batch, for benchmarks and dashboards
        with open(metrics_file, "a") as f:
            f.write(json.dumps(line) + "\n")
