"""Unit tests for sources/task_packing.py: a batch's ranges packed into Spark tasks by offsets,
each range in exactly one task, within the options' bounds, the same plan for the same
ranges (what a replayed batch relies on)."""

from __future__ import annotations

import random

import pytest

from sources.offsets import OffsetRange, plan_ranges
from sources.task_packing import DEFAULT_TARGET_TASKS, PACKED_TASK_RECORDS, pack_ranges

#: The records one task of the default plan holds before the batch gets another
#: (sources/task_packing.RECORDS_PER_DEFAULT_TASK; written out: the tests pin the rule).
PER_DEFAULT_TASK = 5_000

SEED = 31


def _ranges(sizes: list[int], topic: str = "t") -> list[OffsetRange]:
    return [OffsetRange(topic, p, 100, 100 + n) for p, n in enumerate(sizes)]


def _check(ranges, tasks, *, target=None, per_task=None, cap=None, min_tasks=None):
    if target is None:  # the default: sized by the batch's records
        records = sum(r.size for r in ranges)
        target = max(1, min(DEFAULT_TARGET_TASKS, -(-records // PER_DEFAULT_TASK)))
    flat = [r for t in tasks for r in t]
    wanted = sorted(r for r in ranges if r.size)
    assert sorted(flat) == wanted, "every non-empty range exactly once"
    assert all(t for t in tasks), "no empty task"
    for t in tasks:
        assert list(t) == sorted(t), "a task's ranges in (topic, partition, offset) order"
        if per_task:
            assert len(t) <= per_task
        if len(t) > 1:  # a packed task never holds more than the cap
            assert sum(r.size for r in t) <= (cap or PACKED_TASK_RECORDS)
    assert [t[0] for t in tasks] == sorted(t[0] for t in tasks)
    if len(wanted) >= max(target, min_tasks or 1):
        assert len(tasks) >= max(target, min_tasks or 1)


def test_no_more_ranges_than_tasks_wanted_is_one_task_per_range_as_before():
    ranges = _ranges([5, 0, 7, 3])
    assert pack_ranges(ranges, target_tasks=4) == [(r,) for r in ranges if r.size]
    assert pack_ranges([]) == []


def test_by_default_a_small_batch_is_one_task_not_one_per_partition():
    """The small-batch row: 8 partitions of 4 records a batch were 8 Python tasks on 2 cores
    (each some tens of ms of fixed cost for 4 records). By default the batch's records size
    its tasks: 32 records are one task reading the 8 ranges with one consumer."""
    ranges = _ranges([4] * 8)
    assert pack_ranges(ranges) == [tuple(ranges)]
    assert pack_ranges(_ranges([4] * 1000)) == [tuple(_ranges([4] * 1000))]
    # 8 partitions of 2,500 records: 20,000 records, 4 tasks of 2 ranges.
    tasks = pack_ranges(_ranges([2_500] * 8))
    assert [len(t) for t in tasks] == [2, 2, 2, 2]


@pytest.mark.parametrize("records, tasks", [
    (1, 1), (32, 1), (PER_DEFAULT_TASK, 1), (PER_DEFAULT_TASK + 1, 2),
    (3 * PER_DEFAULT_TASK, 3), (8 * PER_DEFAULT_TASK, 8), (10**6, 10),
])
def test_the_default_gives_a_task_per_few_thousand_records_up_to_the_target(records, tasks):
    """One task per PER_DEFAULT_TASK records (rounded up), at most DEFAULT_TARGET_TASKS,
    unless the records cap needs more (10**6 records: 10 tasks of 100,000)."""
    ranges = [OffsetRange("t", p, 0, records // 1000 + (1 if p < records % 1000 else 0))
              for p in range(1000)]
    planned = pack_ranges(ranges)
    _check(ranges, planned)
    assert len(planned) == tasks


def test_an_explicit_target_keeps_its_plan_whatever_the_records():
    """targetTasksPerBatch set (8, the former default): the plan of the previous versions, as
    a query restarted across the upgrade with a batch to replay needs (docs/source.md)."""
    ranges = _ranges([4] * 8)
    assert pack_ranges(ranges, target_tasks=8) == [(r,) for r in ranges]
    assert len(pack_ranges(_ranges([4] * 1000), target_tasks=8)) == 8


def test_the_default_plan_depends_on_the_ranges_only():
    """Deterministic on replay: the records counted are the ranges' offsets (the batch's logged
    offsets), never what a broker holds, so the same ranges in any order plan the same tasks."""
    rng = random.Random(SEED)
    for sizes in ([4] * 8, [1, 2, 3] * 300, [7_000, 3, 9, 2_500, 2_500, 0, 14]):
        ranges = sorted(_ranges(sizes))
        tasks = pack_ranges(ranges)
        for _ in range(5):
            shuffled = list(ranges)
            rng.shuffle(shuffled)
            assert pack_ranges(shuffled) == tasks


def test_a_thousand_small_ranges_become_the_target_count_balanced_by_offsets():
    """The case packing is for: 1,000 partitions of 4 records a batch, one task each before."""
    ranges = _ranges([4] * 1000)
    tasks = pack_ranges(ranges, target_tasks=DEFAULT_TARGET_TASKS)
    _check(ranges, tasks)
    assert len(tasks) == DEFAULT_TARGET_TASKS
    assert {sum(r.size for r in t) for t in tasks} == {500}
    assert {len(t) for t in tasks} == {125}


def test_a_large_range_is_a_task_of_its_own_and_the_small_ones_share_the_rest():
    ranges = _ranges([10_000] + [10] * 30)
    tasks = pack_ranges(ranges, target_tasks=4)
    _check(ranges, tasks, target=4)
    assert tasks[0] == (ranges[0],)
    assert sorted(len(t) for t in tasks[1:]) == [10, 10, 10]


def test_records_beyond_the_cap_get_more_tasks_not_fuller_ones():
    """A large batch keeps its parallelism: 1,000 ranges of 50,000 records stay 1,000 tasks
    (two would exceed the cap together), and ranges of 30,000 go three to a task."""
    big = _ranges([50_001] * 1000)
    assert len(pack_ranges(big)) == 1000
    mid = _ranges([30_000] * 99)
    tasks = pack_ranges(mid)
    _check(mid, tasks)
    assert len(tasks) == 33 and {len(t) for t in tasks} == {3}


def test_max_records_per_partition_is_the_cap_of_a_packed_task():
    ranges = plan_ranges({("t", p): 0 for p in range(20)}, {("t", p): 10 for p in range(20)},
                         max_records_per_partition=4)  # 4, 3, 3 per partition: 60 ranges
    tasks = pack_ranges(ranges, max_records_per_task=4)
    _check(ranges, tasks, cap=4)
    assert all(sum(r.size for r in t) <= 4 for t in tasks)


def test_max_partitions_per_task_bounds_a_task_and_one_restores_a_task_per_range():
    ranges = _ranges([4] * 1000)
    tasks = pack_ranges(ranges, max_ranges_per_task=50)
    _check(ranges, tasks, per_task=50)
    assert len(tasks) == 20
    assert pack_ranges(ranges, max_ranges_per_task=1) == [(r,) for r in ranges]


def test_min_partitions_stays_a_minimum():
    ranges = _ranges([4] * 100)
    tasks = pack_ranges(ranges, min_tasks=30)
    _check(ranges, tasks, min_tasks=30)
    assert len(tasks) == 30


def test_pieces_of_one_partition_may_share_a_task_in_offset_order():
    ranges = [OffsetRange("t", 0, 0, 3), OffsetRange("t", 0, 3, 6), OffsetRange("t", 1, 0, 1)]
    (task,) = pack_ranges(ranges, target_tasks=1)
    assert task == tuple(ranges)


@pytest.mark.parametrize("seed", range(5))
def test_cover_bounds_and_determinism_property(seed):
    rng = random.Random(SEED + seed)
    for _ in range(300):
        topics = rng.randint(1, 5)
        ranges = [
            OffsetRange(f"t{t}", p, lo, lo + rng.choice([0, 1, 3, 50, 2_000, 150_000]))
            for t in range(topics) for p in range(rng.randint(1, 60))
            for lo in [rng.randint(0, 10**6)]
        ]
        target = rng.choice([None, 1, 2, 8, 64])
        per_task = rng.choice([None, 1, 3, 100])
        cap = rng.choice([None, 10, 5_000])
        min_tasks = rng.choice([None, 1, 17])
        ranges.sort()  # as plan_ranges gives them
        tasks = pack_ranges(ranges, target_tasks=target, max_ranges_per_task=per_task,
                            max_records_per_task=cap, min_tasks=min_tasks)
        _check(ranges, tasks, target=target, per_task=per_task, cap=cap, min_tasks=min_tasks)
        shuffled = list(ranges)
        rng.shuffle(shuffled)
        again = pack_ranges(shuffled, target_tasks=target, max_ranges_per_task=per_task,
                            max_records_per_task=cap, min_tasks=min_tasks)
        if any(len(t) > 1 for t in tasks):
            assert again == tasks, "packed: the same tasks whatever the order of the ranges"
        assert pack_ranges(sorted(shuffled), target_tasks=target, max_ranges_per_task=per_task,
                           max_records_per_task=cap, min_tasks=min_tasks) == tasks

