"""Packing a batch's offset ranges into Spark tasks: tasks sized by data, not by partitions.

A Python data-source task costs tens of milliseconds of fixed work however little it reads
(docs/design.md#a-python-tasks-fixed-cost). So small ranges share a task: one task reads several partitions'
ranges with one consumer (sources/packed_reader.py), and the batch costs about as many tasks as
its data needs. As Spark packs small files into a partition (`spark.sql.files.maxPartitionBytes`
with `minPartitionNum`), in records:

* the batch gets `target_tasks` tasks (`targetTasksPerBatch`), or more where its records need
  them: no packed task holds more than `max_records_per_task` records (`maxRecordsPerPartition`
  when set, else PACKED_TASK_RECORDS), so a large batch keeps one task per large range;
* unset, `target_tasks` is sized by the batch's records (`default_target_tasks`): a task per
  RECORDS_PER_DEFAULT_TASK records, from 1 up to DEFAULT_TARGET_TASKS, so a batch of 32
  records over 8 partitions is one task reading them all with one consumer, not 8 tasks of 4
  records each paying a Python task's fixed cost (docs/performance.md, "The Python floor");
* `max_ranges_per_task` (`maxPartitionsPerTask`) bounds the ranges of one task; 1 gives one task
  per range (Spark's own Kafka source's plan);
* the ranges are shared out largest first, each to the task with the fewest offsets so far
  (balanced by offsets; ties go to the task planned first), and a range larger than a task's
  share is a task of its own.

Splitting (`minPartitions`, `maxRecordsPerPartition`) happens before, in
`sources.offsets.plan_ranges`, so a large range is still split as those options say, and the
batch keeps at least `minPartitions` tasks. The result depends only on the ranges and the
options, which come from the batch's offsets in Spark's offset log: a restarted query replays a
batch with the same tasks, each reading the same ranges, so the exactly-once sinks' decisions per
(batch, Spark partition) hold (docs/guarantees.md#a-deterministic-plan).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

from sources.offsets import OffsetRange

#: The most tasks `targetTasksPerBatch`'s default gives a batch when its records do not need
#: more (below 8 x RECORDS_PER_DEFAULT_TASK records, fewer: `default_target_tasks`).
#: PySpark's Python data source cannot see the cluster's cores (its planner runs in a Python
#: worker with no SparkContext) and the plan must not depend on the machine that plans it
#: (a replay elsewhere must plan the same tasks), so it is a fixed number: about two per core of
#: a 4-core cluster, and at or above the partition count of most topics, whose plans it leaves
#: as they were.
DEFAULT_TARGET_TASKS = 8
#: The records one task of the default plan reads before the batch gets another task. A Python
#: task's fixed cost (launch, hand-over, consumer, report: some 30-60 ms on 2 loaded cores) is
#: what a task reads in 2,500-5,000 records (12-20 us a record through Spark, docs/performance.md,
#: "The Python floor"): splitting fewer records across tasks costs more than it parallelises.
RECORDS_PER_DEFAULT_TASK = 5_000
#: `targetTasksPerBatch`'s default before the records-sized one: still the plan of a batch an
#: older version logged (its end offsets have no plan, sources/offsets.py's PLAN_KEY), so that
#: a replay after an upgrade plans the tasks the first run prepared.
LEGACY_TARGET_TASKS = 8
#: The most records a packed task takes when `maxRecordsPerPartition` is not set: at about
#: 1 M records/s a task, 100,000 records cost some 100 ms, past a Python task's fixed cost, so
#: larger batches get more tasks (parallelism) rather than fuller ones.
PACKED_TASK_RECORDS = 100_000

Task = tuple[OffsetRange, ...]


def default_target_tasks(records: int) -> int:
    """`targetTasksPerBatch` unset: the tasks a batch of `records` records is packed into, one
    per RECORDS_PER_DEFAULT_TASK (rounded up), at least 1 and at most DEFAULT_TARGET_TASKS. A
    function of the batch's offsets only (its records are the sizes of its logged ranges), so a
    replayed batch gets the same count wherever and whenever it is planned."""
    return max(1, min(DEFAULT_TARGET_TASKS, math.ceil(records / RECORDS_PER_DEFAULT_TASK)))


def pack_ranges(
    ranges: Sequence[OffsetRange],
    *,
    target_tasks: int | None = None,
    max_ranges_per_task: int | None = None,
    max_records_per_task: int | None = None,
    min_tasks: int | None = None,
) -> list[Task]:
    """The batch's tasks: each a tuple of ranges in (topic, partition, offset) order, the tasks
    ordered by their first range. Every range is in exactly one task. With no more ranges than
    tasks wanted, one task per range in the order of `ranges` (the plan before packing).
    `target_tasks` None: `default_target_tasks` of the ranges' records."""
    pieces = [r for r in ranges if r.size > 0]
    if not pieces:
        return []
    cap = max_records_per_task or PACKED_TASK_RECORDS
    total = sum(r.size for r in pieces)
    wanted = max(
        default_target_tasks(total) if target_tasks is None else target_tasks,
        min_tasks or 1,
        math.ceil(total / cap),
        math.ceil(len(pieces) / max_ranges_per_task) if max_ranges_per_task else 1,
    )
    if wanted >= len(pieces):
        return [(r,) for r in pieces]
    bins: list[list[OffsetRange]] = [[] for _ in range(wanted)]
    loads = [0] * wanted
    # (offsets so far, ranges so far, index): the least loaded task first, then the emptier,
    # then the one planned first. A task that is full (by ranges) leaves the heap for good.
    heap = [(0, 0, i) for i in range(wanted)]
    for r in sorted(pieces, key=lambda r: (-r.size, r.topic, r.partition, r.from_offset)):
        target = None
        while heap:
            load, count, i = heap[0]
            if max_ranges_per_task and count >= max_ranges_per_task:
                heapq.heappop(heap)
                continue
            if load and load + r.size > cap:
                break  # the least loaded task has no room: none has
            target = heapq.heappop(heap)[2]
            break
        if target is None:  # a task of its own (the records cap, or every task full)
            bins.append([])
            loads.append(0)
            target = len(bins) - 1
        bins[target].append(r)
        loads[target] += r.size
        heapq.heappush(heap, (loads[target], len(bins[target]), target))
    tasks = [tuple(sorted(b)) for b in bins if b]
    return sorted(tasks, key=lambda t: t[0])
