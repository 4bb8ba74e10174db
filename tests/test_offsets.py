"""Unit tests for sources/offsets.py: pure offset arithmetic, no broker, no Spark."""

from __future__ import annotations

import json
import random
from fractions import Fraction

import pytest

from connectors.core.options import OptionError
from sources.offsets import (
    EARLIEST,
    LATEST,
    OffsetRange,
    allocate_limit,
    from_json,
    parse_offsets_option,
    plan_ranges,
    replay_start,
    settle_latest,
    split_range,
    to_json,
    total_rows,
    went_back,
)

SEED = 20240611


def _shuffled(d: dict, rng: random.Random) -> dict:
    items = list(d.items())
    rng.shuffle(items)
    return dict(items)


def _random_offsets(rng: random.Random, *, topics=("a", "b", "c"), max_parts=4, scale=10**6):
    out = {}
    for t in rng.sample(topics, rng.randint(1, len(topics))):
        for p in rng.sample(range(8), rng.randint(1, max_parts)):
            out[(t, p)] = rng.randint(0, scale)
    return out


# --------------------------------------------------------------------------- to_json / from_json


def test_sentinels_match_spark():
    assert EARLIEST == -2
    assert LATEST == -1


def test_to_json_hand_example():
    doc = to_json({("t", 1): 7, ("t", 0): 42, ("u", 10): 0})
    assert doc == {"t": {"0": 42, "1": 7}, "u": {"10": 0}}
    # partition keys are strings and offsets are ints, as in Spark's Kafka offset JSON
    assert all(isinstance(k, str) for parts in doc.values() for k in parts)
    assert all(type(v) is int for parts in doc.values() for v in parts.values())


def test_to_json_is_json_serialisable_and_canonical():
    a = to_json({("t", 2): 1, ("t", 10): 2, ("s", 0): 3})
    b = to_json({("s", 0): 3, ("t", 10): 2, ("t", 2): 1})
    assert json.dumps(a) == json.dumps(b)  # insertion order of the input does not matter
    assert list(a) == ["s", "t"]
    assert list(a["t"]) == ["2", "10"]  # partitions in numeric order, not string order
    assert json.loads(json.dumps(a)) == a


def test_to_json_coerces_offsets_to_int():
    assert to_json({("t", 0): True})["t"]["0"] == 1
    assert type(to_json({("t", 0): 5})["t"]["0"]) is int


def test_to_json_empty():
    assert to_json({}) == {}
    assert from_json({}) == {}


def test_from_json_hand_example():
    assert from_json({"t": {"0": 42, "1": 7}, "u": {"3": 0}}) == {
        ("t", 0): 42,
        ("t", 1): 7,
        ("u", 3): 0,
    }


def test_from_json_accepts_spark_offset_log_text():
    doc = json.loads('{"topic-a":{"0":100,"2":5},"b.c":{"11":0}}')
    parsed = from_json(doc)
    assert parsed == {("topic-a", 0): 100, ("topic-a", 2): 5, ("b.c", 11): 0}
    assert all(isinstance(p, int) for _, p in parsed)


def test_json_round_trip_property():
    rng = random.Random(SEED)
    for _ in range(500):
        offsets = _random_offsets(rng, scale=2**62)
        doc = to_json(offsets)
        assert from_json(doc) == offsets
        assert from_json(json.loads(json.dumps(doc))) == offsets
        assert to_json(from_json(doc)) == doc


# --------------------------------------------------------------------------- parse_offsets_option


def test_parse_offsets_option_valid():
    parsed = parse_offsets_option("startingOffsets", {"t": {"0": 23, "1": -2, "2": -1}, "u": {"5": 0}})
    assert parsed == {("t", 0): 23, ("t", 1): EARLIEST, ("t", 2): LATEST, ("u", 5): 0}


@pytest.mark.parametrize(
    "doc",
    [None, [], [{"t": {"0": 1}}], "earliest", 5, {}],
    ids=["none", "empty-list", "list", "string", "int", "empty-dict"],
)
def test_parse_offsets_option_rejects_non_objects(doc):
    with pytest.raises(OptionError) as ei:
        parse_offsets_option("startingOffsets", doc)
    assert ei.value.option == "startingOffsets"
    assert "startingOffsets" in str(ei.value)


@pytest.mark.parametrize("parts", [{}, [0, 1], 5, "0", None])
def test_parse_offsets_option_rejects_bad_topic_value(parts):
    with pytest.raises(OptionError) as ei:
        parse_offsets_option("endingOffsets", {"t": parts})
    assert ei.value.option == "endingOffsets"
    assert "'t'" in str(ei.value)


@pytest.mark.parametrize("partition", ["x", "", "1.5", "zero"])
def test_parse_offsets_option_rejects_bad_partition(partition):
    with pytest.raises(OptionError) as ei:
        parse_offsets_option("startingOffsets", {"t": {partition: 1}})
    assert ei.value.option == "startingOffsets"
    assert "partition" in str(ei.value)


@pytest.mark.parametrize("offset", [1.0, 1.5, "3", None, True, False, [1], {"o": 1}])
def test_parse_offsets_option_rejects_non_integer_offsets(offset):
    with pytest.raises(OptionError) as ei:
        parse_offsets_option("startingOffsets", {"t": {"0": offset}})
    assert ei.value.option == "startingOffsets"
    assert "t-0" in str(ei.value)


@pytest.mark.parametrize("offset", [-3, -4, -100, -(2**63)])
def test_parse_offsets_option_rejects_other_negative_offsets(offset):
    with pytest.raises(OptionError) as ei:
        parse_offsets_option("startingOffsets", {"t": {"0": offset}})
    assert str(offset) in str(ei.value)


def test_parse_offsets_option_sentinel_switches():
    doc_e = {"t": {"0": -2}}
    doc_l = {"t": {"0": -1}}
    assert parse_offsets_option("x", doc_e, allow_earliest=True) == {("t", 0): -2}
    assert parse_offsets_option("x", doc_l, allow_latest=True) == {("t", 0): -1}
    with pytest.raises(OptionError, match="endingOffsets"):
        parse_offsets_option("endingOffsets", doc_e, allow_earliest=False)
    with pytest.raises(OptionError, match="startingOffsets"):
        parse_offsets_option("startingOffsets", doc_l, allow_latest=False)
    # disallowing one sentinel keeps the other
    assert parse_offsets_option("x", doc_l, allow_earliest=False) == {("t", 0): -1}
    assert parse_offsets_option("x", doc_e, allow_latest=False) == {("t", 0): -2}
    # timestamps: neither sentinel
    for doc in (doc_e, doc_l):
        with pytest.raises(OptionError):
            parse_offsets_option("startingOffsetsByTimestamp", doc, allow_earliest=False, allow_latest=False)
    assert parse_offsets_option(
        "startingOffsetsByTimestamp", {"t": {"0": 0, "1": 1_700_000_000_000}},
        allow_earliest=False, allow_latest=False,
    ) == {("t", 0): 0, ("t", 1): 1_700_000_000_000}


def test_parse_offsets_option_error_is_value_error():
    with pytest.raises(ValueError):
        parse_offsets_option("startingOffsets", {"t": {"0": "a"}})


# --------------------------------------------------------------------------- total_rows


def test_total_rows_hand_example():
    start = {("t", 0): 10, ("t", 1): 5}
    end = {("t", 0): 15, ("t", 1): 5, ("t", 2): 100}
    # t-2 has no start: nothing to read; t-1 is empty
    assert total_rows(start, end) == 5


def test_total_rows_never_negative():
    assert total_rows({("t", 0): 10}, {("t", 0): 3}) == 0
    assert total_rows({("t", 0): 10, ("t", 1): 0}, {("t", 0): 3, ("t", 1): 4}) == 4


# --------------------------------------------------------------------------- allocate_limit


A0, A1, A2 = ("a", 0), ("a", 1), ("a", 2)


def test_allocate_limit_everything_fits():
    start = {A0: 0, A1: 5}
    latest = {A0: 10, A1: 15}
    assert allocate_limit(start, latest, 20) == latest
    assert allocate_limit(start, latest, 1000) == latest


def test_allocate_limit_proportional_hand_example():
    # lags 30 and 10, 8 rows: 6 and 2
    assert allocate_limit({A0: 100, A1: 0}, {A0: 130, A1: 10}, 8) == {A0: 106, A1: 2}


def test_allocate_limit_largest_remainder_hand_example():
    # lags 6, 3, 2, 7 rows: one row each first (no partition starves), then 4 rows shared by
    # the remaining lags 5, 2, 1: exact shares 2.5, 1.0, 0.5 -> floors 2, 1, 0 = 3, and the
    # last row to the largest remainder (.5, .5): tie broken by topic-partition -> A0
    got = allocate_limit({A0: 0, A1: 0, A2: 0}, {A0: 6, A1: 3, A2: 2}, 7)
    assert got == {A0: 1 + 3, A1: 1 + 1, A2: 1 + 0}


def test_allocate_limit_never_starves_a_quiet_partition():
    """A busy partition with a standing backlog must not keep a one-record partition waiting."""
    start = {A0: 0, A1: 0}
    latest = {A0: 1000, A1: 1}
    for _ in range(3):
        end = allocate_limit(start, latest, 100)
        assert end[A1] == 1, "the quiet partition's record must be read in the first batch"
        assert total_rows(start, end) == 100
        start, latest = end, {A0: latest[A0] + 100, A1: 1}


def test_allocate_limit_ties_broken_by_topic_partition():
    start = {("b", 0): 0, ("a", 1): 0, ("a", 0): 0}
    latest = {("b", 0): 1, ("a", 1): 1, ("a", 0): 1}
    # three equal shares of 2/3: the two smallest topic-partitions get the rows
    assert allocate_limit(start, latest, 2) == {("a", 0): 1, ("a", 1): 1, ("b", 0): 0}


def test_allocate_limit_zero_rows_reads_nothing():
    start = {A0: 3, A1: 7}
    assert allocate_limit(start, {A0: 10, A1: 20}, 0) == start


def test_allocate_limit_partition_without_lag_stays():
    start = {A0: 10, A1: 0}
    latest = {A0: 10, A1: 100}
    assert allocate_limit(start, latest, 7) == {A0: 10, A1: 7}


def _check_allocation(start, latest, max_rows):
    end = allocate_limit(start, latest, max_rows)
    assert set(end) == set(latest)
    available = total_rows(start, latest)
    assert total_rows(start, end) == min(max_rows, available)
    for tp in latest:
        begin = start.get(tp, latest[tp])
        assert begin <= end[tp] <= latest[tp], (tp, begin, end[tp], latest[tp])
    return end


def test_allocate_limit_invariants_property():
    rng = random.Random(SEED)
    for i in range(3000):
        scale = rng.choice([1, 3, 10, 1000, 10**6, 10**12])
        latest = _random_offsets(rng, scale=scale)
        start = {}
        for tp, hi in latest.items():
            roll = rng.random()
            if roll < 0.1:
                continue  # partition absent from start: nothing to read there
            start[tp] = hi if roll < 0.2 else rng.randint(0, hi)
        available = total_rows(start, latest)
        max_rows = rng.choice([0, 1, rng.randint(0, max(1, available)), available, available + 5])
        end = _check_allocation(start, latest, max_rows)

        # deterministic, whatever the order of the mappings
        assert allocate_limit(_shuffled(start, rng), _shuffled(latest, rng), max_rows) == end

        if available > max_rows:
            lags = {tp: latest[tp] - start.get(tp, latest[tp]) for tp in latest}
            lagging = [tp for tp, lag in lags.items() if lag > 0]
            grants = {tp: end[tp] - start.get(tp, latest[tp]) for tp in latest}
            if max_rows >= len(lagging):
                # one row for every partition with new records, then the rest in proportion
                # to the remaining lag: each extra grant is the floor or ceiling of its share
                rest_total = available - len(lagging)
                for tp in lagging:
                    assert grants[tp] >= 1, (tp, grants[tp])
                    share = Fraction((max_rows - len(lagging)) * (lags[tp] - 1), rest_total)
                    assert abs(grants[tp] - 1 - share) < 1, (tp, grants[tp], share)
            else:
                for tp in lagging:
                    share = Fraction(max_rows * lags[tp], available)
                    assert abs(grants[tp] - share) < 1, (tp, grants[tp], share)


def test_allocate_limit_exact_for_very_large_lags():
    """Offsets are int64; the total must stay exact beyond float precision (2**53)."""
    start = {A0: 0, A1: 0, A2: 0}
    latest = {A0: 2**60 + 1, A1: 2**60 - 1, A2: 3}
    max_rows = total_rows(start, latest) - 1
    _check_allocation(start, latest, max_rows)


# --------------------------------------------------------------------------- split_range


def test_split_range_hand_example():
    r = OffsetRange("t", 0, 10, 20)
    assert split_range(r, 3) == [
        OffsetRange("t", 0, 10, 14),
        OffsetRange("t", 0, 14, 17),
        OffsetRange("t", 0, 17, 20),
    ]


def test_split_range_degenerate_part_counts():
    r = OffsetRange("t", 1, 0, 3)
    assert split_range(r, 1) == [r]
    assert split_range(r, 0) == [r]
    assert split_range(r, -5) == [r]
    # never more pieces than records, never an empty piece
    assert split_range(r, 10) == [OffsetRange("t", 1, i, i + 1) for i in range(3)]


def test_offset_range_size():
    assert OffsetRange("t", 0, 5, 9).size == 4
    assert OffsetRange("t", 0, 9, 9).size == 0
    assert OffsetRange("t", 0, 9, 5).size == 0


def test_split_range_property():
    rng = random.Random(SEED)
    for _ in range(2000):
        lo = rng.randint(0, 10**9)
        size = rng.randint(1, rng.choice([5, 100, 10**6]))
        r = OffsetRange("t", rng.randint(0, 9), lo, lo + size)
        parts = rng.randint(1, 50)
        pieces = split_range(r, parts)
        assert len(pieces) == min(parts, size)
        assert pieces[0].from_offset == r.from_offset
        assert pieces[-1].until_offset == r.until_offset
        for a, b in zip(pieces, pieces[1:]):
            assert a.until_offset == b.from_offset
        sizes = [p.size for p in pieces]
        assert min(sizes) >= 1
        assert max(sizes) - min(sizes) <= 1
        assert sizes == sorted(sizes, reverse=True)  # the first ones are the longer ones
        assert all((p.topic, p.partition) == (r.topic, r.partition) for p in pieces)


# --------------------------------------------------------------------------- plan_ranges


def test_plan_ranges_one_range_per_partition():
    start = {("b", 0): 5, ("a", 1): 0, ("a", 0): 10}
    end = {("b", 0): 8, ("a", 1): 4, ("a", 0): 20}
    assert plan_ranges(start, end) == [
        OffsetRange("a", 0, 10, 20),
        OffsetRange("a", 1, 0, 4),
        OffsetRange("b", 0, 5, 8),
    ]


def test_plan_ranges_skips_empty_backwards_and_unknown_partitions():
    start = {A0: 10, A1: 10, A2: 10}
    end = {A0: 10, A1: 4, A2: 12, ("z", 0): 50}
    assert plan_ranges(start, end) == [OffsetRange("a", 2, 10, 12)]
    assert plan_ranges(start, {A0: 10}) == []
    assert plan_ranges({}, {A0: 10}) == []
    assert plan_ranges(start, end, min_partitions=10, max_records_per_partition=1) == [
        OffsetRange("a", 2, 10, 11),
        OffsetRange("a", 2, 11, 12),
    ]


def test_plan_ranges_max_records_per_partition_hand_example():
    plan = plan_ranges({A0: 0, A1: 0}, {A0: 10, A1: 3}, max_records_per_partition=3)
    assert plan == [
        OffsetRange("a", 0, 0, 3),
        OffsetRange("a", 0, 3, 6),
        OffsetRange("a", 0, 6, 8),
        OffsetRange("a", 0, 8, 10),
        OffsetRange("a", 1, 0, 3),
    ]


def test_plan_ranges_min_partitions_hand_example():
    # one partition of 100 records, at least 4 tasks: 4 x 25
    assert plan_ranges({A0: 0}, {A0: 100}, min_partitions=4) == [
        OffsetRange("a", 0, i, i + 25) for i in range(0, 100, 25)
    ]
    # 90 + 10 records, 10 tasks wanted: the big range takes the extra splits
    plan = plan_ranges({A0: 0, A1: 0}, {A0: 90, A1: 10}, min_partitions=10)
    assert [(r.partition, r.size) for r in plan] == [(0, 10)] * 9 + [(1, 10)]
    # enough partitions already: no splitting
    assert len(plan_ranges({A0: 0, A1: 0}, {A0: 90, A1: 10}, min_partitions=2)) == 2


def test_plan_ranges_min_partitions_is_a_lower_bound():
    """Docstring: 'the batch has at least `min_partitions` tasks when it has that many records'."""
    three_equal = plan_ranges({A0: 0, A1: 0, A2: 0}, {A0: 10, A1: 10, A2: 10}, min_partitions=4)
    assert len(three_equal) >= 4
    two_equal = plan_ranges({A0: 0, A1: 0}, {A0: 5, A1: 5}, min_partitions=5)
    assert len(two_equal) >= 5


def test_plan_ranges_min_partitions_lower_bound_property():
    rng = random.Random(SEED + 1)
    for _ in range(1000):
        end = _random_offsets(rng, scale=rng.choice([10, 1000]))
        start = {tp: rng.randint(0, hi) for tp, hi in end.items()}
        min_partitions = rng.randint(1, 40)
        plan = plan_ranges(start, end, min_partitions=min_partitions)
        assert len(plan) >= min(min_partitions, total_rows(start, end)), (start, end, min_partitions)


def _check_plan(start, end, plan, max_records):
    # exact cover of every non-empty [start, end) range, contiguous, no overlap, no empty task
    by_tp: dict = {}
    for r in plan:
        assert r.size >= 1
        if max_records:
            assert r.size <= max_records
        by_tp.setdefault((r.topic, r.partition), []).append(r)
    expected = {tp for tp, hi in end.items() if tp in start and hi > start[tp]}
    assert set(by_tp) == expected
    for tp, pieces in by_tp.items():
        pieces.sort()
        assert pieces[0].from_offset == start[tp]
        assert pieces[-1].until_offset == end[tp]
        for a, b in zip(pieces, pieces[1:]):
            assert a.until_offset == b.from_offset
        assert sum(p.size for p in pieces) == end[tp] - start[tp]
    assert sum(r.size for r in plan) == total_rows(start, end)
    assert plan == sorted(plan)  # stable, ordered plan


def test_plan_ranges_cover_property():
    rng = random.Random(SEED)
    for _ in range(2000):
        scale = rng.choice([5, 100, 10**5])
        end = _random_offsets(rng, scale=scale)
        start = {}
        for tp, hi in end.items():
            roll = rng.random()
            if roll < 0.1:
                continue  # absent from start: skipped
            if roll < 0.2:
                start[tp] = hi + rng.randint(0, 3)  # empty or backwards: skipped
            else:
                start[tp] = rng.randint(0, hi)
        if rng.random() < 0.2:
            start[("gone", 0)] = 5  # in start but not in end: ignored
        min_partitions = rng.choice([None, 0, 1, rng.randint(1, 64)])
        max_records = rng.choice([None, 0, 1, rng.randint(1, 500)])
        if max_records and scale // max_records > 1000:
            max_records = scale // 1000  # keep plans small enough to check quickly
        plan = plan_ranges(start, end, min_partitions=min_partitions, max_records_per_partition=max_records)
        _check_plan(start, end, plan, max_records)
        # depends only on its arguments: same plan whatever the mapping order
        again = plan_ranges(
            _shuffled(start, rng), _shuffled(end, rng),
            min_partitions=min_partitions, max_records_per_partition=max_records,
        )
        assert again == plan
        # a larger range is never split into fewer pieces than a smaller one
        counts: dict = {}
        for r in plan:
            counts[(r.topic, r.partition)] = counts.get((r.topic, r.partition), 0) + 1
        sizes = {tp: end[tp] - start[tp] for tp in counts}
        for x in counts:
            for y in counts:
                if sizes[x] > sizes[y]:
                    assert counts[x] >= counts[y], (x, y, sizes, counts)


# --------------------------------------------------------------------------- settle_latest


class _Script:
    """A latest-offset look-up answering from a script (the last answer repeats)."""

    def __init__(self, *answers: dict) -> None:
        self.answers = list(answers)
        self.calls = 0

    def __call__(self) -> dict:
        answer = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        return dict(answer)


def _settle(fetch, known, *, retries=3, interval_ms=10, first=None):
    sleeps: list[float] = []
    got = settle_latest(
        fetch, known, retries=retries, interval_ms=interval_ms, sleep=sleeps.append, first=first
    )
    return got, sleeps


def test_went_back_compares_known_partitions_only():
    known = {("t", 0): 10, ("t", 1): 5}
    assert went_back(known, {("t", 0): 9, ("t", 1): 5, ("t", 2): 0}) == [("t", 0)]
    assert went_back(known, {("t", 0): 10, ("t", 1): 6}) == []
    assert went_back({}, {("t", 0): 0}) == []


def test_settle_latest_refetches_a_latest_that_went_back():
    """The sequence seen on the embedded broker: 338 known, then 328, then 340."""
    fetch = _Script({("p", 0): 328}, {("p", 0): 340})
    got, sleeps = _settle(fetch, {("p", 0): 338})
    assert got == {("p", 0): 340}
    assert fetch.calls == 2
    assert sleeps == [0.01]


def test_settle_latest_believes_a_latest_that_stays_back_after_all_retries():
    fetch = _Script({("p", 0): 328})
    got, sleeps = _settle(fetch, {("p", 0): 338}, retries=3, interval_ms=250)
    assert got == {("p", 0): 328}
    assert fetch.calls == 4
    assert sleeps == [0.25, 0.25, 0.25]


def test_settle_latest_without_retries_believes_the_first_answer():
    fetch = _Script({("p", 0): 328}, {("p", 0): 340})
    got, sleeps = _settle(fetch, {("p", 0): 338}, retries=0)
    assert got == {("p", 0): 328}
    assert (fetch.calls, sleeps) == (1, [])


def test_settle_latest_fetches_once_when_nothing_went_back():
    fetch = _Script({("p", 0): 338, ("p", 1): 0, ("q", 0): 7})
    got, sleeps = _settle(fetch, {("p", 0): 338, ("p", 1): 0, ("gone", 0): 99})
    assert got == {("p", 0): 338, ("p", 1): 0, ("q", 0): 7}
    assert (fetch.calls, sleeps) == (1, [])


def test_settle_latest_refetches_while_any_partition_is_back():
    fetch = _Script(
        {("p", 0): 5, ("p", 1): 20},
        {("p", 0): 12, ("p", 1): 19},
        {("p", 0): 12, ("p", 1): 21},
    )
    got, _ = _settle(fetch, {("p", 0): 10, ("p", 1): 20})
    assert got == {("p", 0): 12, ("p", 1): 21}
    assert fetch.calls == 3


def test_settle_latest_checks_an_answer_already_in_hand():
    fetch = _Script({("p", 0): 345})
    got, _ = _settle(fetch, {("p", 0): 338}, first={("p", 0): 328})
    assert (got, fetch.calls) == ({("p", 0): 345}, 1)
    got, _ = _settle(fetch, {("p", 0): 338}, first={("p", 0): 339})
    assert (got, fetch.calls) == ({("p", 0): 339}, 1)


# --------------------------------------------------------------------------- replay_start


def test_replay_start_keeps_logged_starts():
    start = {("t", 0): 100, ("t", 1): 5, ("t", 2): 9}
    end = {("t", 0): 150, ("t", 1): 5}
    assert replay_start(start, end) == ({("t", 0): 100, ("t", 1): 5}, [])


def test_replay_start_reads_new_and_went_back_partitions_from_zero():
    start = {("t", 0): 338, ("t", 1): 7}
    end = {("t", 0): 5, ("t", 1): 9, ("t", 2): 30}
    assert replay_start(start, end) == ({("t", 0): 0, ("t", 1): 7, ("t", 2): 0}, [("t", 0)])


def test_replay_start_is_a_function_of_its_arguments_property():
    rng = random.Random(SEED)
    for _ in range(300):
        start, end = _random_offsets(rng), _random_offsets(rng)
        begin, back = replay_start(start, end)
        assert replay_start(_shuffled(start, rng), _shuffled(end, rng)) == (begin, back)
        assert set(begin) == set(end)
        for tp, o in begin.items():
            assert o == (0 if tp not in start or tp in back else start[tp])
            assert o <= end[tp]
        assert back == sorted(tp for tp in end if tp in start and end[tp] < start[tp])
