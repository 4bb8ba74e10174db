"""The source's per-batch metrics line: what a batch read and how far the query is behind.

One INFO line per completed batch on the `kafka_eos.source` logger (the sinks log theirs on
`kafka_eos.sink`): a summary whose size does not grow with the partition count (a line listing
every partition was tens of kilobytes a batch at 1,000 partitions). The per-partition detail,
bounded too (the slowest and the furthest behind, DETAIL_PARTITIONS each), is a DEBUG line, and
both are appended as one JSON line to the file named by KAFKA_EOS_SOURCE_METRICS_FILE when
set. The sinks' file (KAFKA_EOS_METRICS_FILE) is not shared: its readers (the demo, the
benchmarks) take every line there for a sink's. The lines are written where the application
opted in (connectors/core/logs.py): the package adds no handler of its own.

Offsets behind latest are Spark's Kafka source's metrics (`avgOffsetsBehindLatest`, ...): for
each partition, the latest offset known when the batch was planned minus the batch's end.
PySpark's Python stream reader cannot add metrics to StreamingQueryProgress (its JVM side does
not implement ReportsSourceMetrics in 4.3); the latest offsets reach the progress through
`reportLatestOffset`.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from connectors.core import logs
from sources.offsets import OffsetRange, PartitionOffsets, TopicPartition

log = logging.getLogger("kafka_eos.source")

#: If set (in the environment of the driver's Python workers), each batch's line is appended
#: to this local file as one JSON line, with the bounded per-partition detail.
SOURCE_METRICS_ENV = "KAFKA_EOS_SOURCE_METRICS_FILE"
#: Per-partition detail (DEBUG line, metrics file): at most this many partitions per list,
#: whatever the partition count.
DETAIL_PARTITIONS = 10


def name_of(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


def offsets_behind_latest(
    end: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int]
) -> dict[str, float | int] | None:
    """Spark's Kafka source metrics over every partition with a known latest offset: how many
    offsets each is behind after the batch (latest - end; a partition new to the query counts
    from 0, as in Spark). Never negative: a latest offset that went back is not a lead.
    None when nothing is known (a batch replayed after a restart was planned by another run)."""
    if not latest:
        return None
    behind = [max(0, high - end.get(tp, 0)) for tp, high in latest.items()]
    return {
        "avgOffsetsBehindLatest": round(sum(behind) / len(behind), 1),
        "maxOffsetsBehindLatest": max(behind),
        "minOffsetsBehindLatest": min(behind),
    }


@dataclass(frozen=True)
class TaskReport:
    """What one task read: one range, its rows, and the time spent reading it (ms)."""

    batch: int | None
    topic: str
    partition: int
    from_offset: int
    until_offset: int
    rows: int
    read_ms: float

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> TaskReport:
        return cls(**{k: doc[k] for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class PlannedBatch:
    """What the driver knows of a batch it planned: its offsets, its ranges, the latest offsets
    known when its end was chosen (None for a batch replayed after a restart), and its tasks
    (each a tuple of ranges; none given: one task per range)."""

    start: PartitionOffsets
    end: PartitionOffsets
    ranges: tuple[OffsetRange, ...]
    latest: PartitionOffsets | None
    tasks: tuple[tuple[OffsetRange, ...], ...] = ()

    def task_ranges(self) -> tuple[tuple[OffsetRange, ...], ...]:
        return self.tasks or tuple((r,) for r in self.ranges)


def _per_partition(
    planned: PlannedBatch, reports: Sequence[TaskReport]
) -> tuple[dict[str, dict[str, Any]], set[OffsetRange]]:
    """Per topic-partition read: offsets, rows and ms (None where a range has no report), and
    the ranges without a report. A partition's `ms` is the longest of its ranges' read times
    (ranges of one partition run in tasks of their own, side by side)."""
    by_range = {(r.topic, r.partition, r.from_offset): r for r in reports}
    parts: dict[str, dict[str, Any]] = {}
    unreported: set[OffsetRange] = set()
    for rng in planned.ranges:
        if rng.size == 0:
            continue
        entry = parts.setdefault(name_of((rng.topic, rng.partition)),
                                 {"offsets": 0, "rows": 0, "ms": 0.0})
        entry["offsets"] += rng.size
        report = by_range.get((rng.topic, rng.partition, rng.from_offset))
        if report is None:
            unreported.add(rng)
            entry["rows"] = None
            entry["ms"] = None
            continue
        if entry["rows"] is not None:
            entry["rows"] += report.rows
            entry["ms"] = max(entry["ms"], round(report.read_ms, 1))
    return parts, unreported


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def batch_line(
    source: str,
    planned: PlannedBatch,
    reports: Sequence[TaskReport],
    *,
    group: str | None = None,
) -> dict[str, Any]:
    """The summary of a completed batch (the INFO line): its size whatever the partition
    count. Rows and read times come from the tasks' reports; a range without one (its task ran
    where the report could not reach the driver) counts its offsets and has no time. The
    per-partition detail is `batch_detail`'s."""
    parts, unreported = _per_partition(planned, reports)
    tasks = [t for t in planned.task_ranges() if any(r.size for r in t)]
    missing = sum(1 for t in tasks if unreported.intersection(t))
    times = {name: e["ms"] for name, e in parts.items() if e["ms"] is not None}
    # ties: the first name, as batch_detail lists them
    slowest = min(times, key=lambda name: (-times[name], name), default=None)
    median = _median(list(times.values())) if times else None
    batches = {r.batch for r in reports if r.batch is not None}
    line: dict[str, Any] = {
        "source": source,
        "batch": batches.pop() if len(batches) == 1 else None,
        "tasks": len(tasks),
        "partitions_read": len(parts),
        "rows": None if missing else sum(e["rows"] for e in parts.values()),
        "offsets": sum(e["offsets"] for e in parts.values()),
        "read_ms_max": times[slowest] if slowest else None,
        "read_ms_median": round(median, 1) if median is not None else None,
        "slowest_partition": slowest,
        # how far the slowest partition held the batch back, against the typical one
        "skew": round(times[slowest] / median, 1) if slowest and median else None,
        "tasks_without_report": missing,
        **(offsets_behind_latest(planned.end, planned.latest or {}) or {}),
    }
    if group is not None:
        line["committed_to_group"] = group
    return line


def batch_detail(planned: PlannedBatch, reports: Sequence[TaskReport],
                 most: int = DETAIL_PARTITIONS) -> dict[str, Any]:
    """Per-partition detail, bounded whatever the partition count: the `most` slowest
    partitions read (offsets, rows, ms; every partition when there are no more), the `most`
    furthest behind latest, and how many partitions read are not listed."""
    parts, _ = _per_partition(planned, reports)
    order = sorted(parts, key=lambda n: (-(parts[n]["ms"] or -1.0), n))[:most]
    behind = {name_of(tp): max(0, high - planned.end.get(tp, 0))
              for tp, high in (planned.latest or {}).items()}
    furthest = sorted((n for n, b in behind.items() if b > 0), key=lambda n: (-behind[n], n))
    return {
        "slowest": {n: parts[n] for n in order},
        "most_behind": {n: behind[n] for n in furthest[:most]},
        "partitions_not_listed": len(parts) - len(order),
    }


def emit(line: Mapping[str, Any], detail: Mapping[str, Any] | None = None) -> None:
    """Log the summary at INFO and the detail at DEBUG, and append both (one JSON line) to the
    metrics file if one is configured; a file that cannot be written is a warning, never a
    failed query."""
    logs.from_environment()  # the application's choice of lines, in this worker too
    log.info("batch read %s", json.dumps(line))
    if detail is not None and log.isEnabledFor(logging.DEBUG):
        log.debug("batch read detail %s", json.dumps(
            {"source": line.get("source"), "batch": line.get("batch"), **detail}))
    path = os.environ.get(SOURCE_METRICS_ENV)
    if path:
        try:
            with open(path, "a") as f:
                f.write(json.dumps({**line, **(detail or {})}) + "\n")
        except OSError as e:
            log.warning("kafka-eos: cannot append the batch metrics to %s=%s: %s",
                        SOURCE_METRICS_ENV, path, e)
