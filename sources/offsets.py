"""Offset arithmetic for the replayable Kafka source: pure functions, no broker.

Offsets travel through Spark's offset log as JSON with the shape Spark's own Kafka source uses,
`{"topic": {"0": 42}}`; inside the source they are a mapping from (topic, partition) to the
next offset to read. Next to them the JSON records each topic's id (KIP-516) under the key
`@topicIds` (no topic can be named so: `@` is not allowed in topic names), so that a topic
deleted and created again under the same name is told apart from the one read before:
`{"topic": {"0": 42}, "@topicIds": {"topic": "eV8o8el9Q922lRakACxvhA"}}`. Offsets JSON
written before ids were recorded has no such key and is read as before.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from connectors.core.options import OptionError

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
PartitionOffsets = dict[TopicPartition, int]
#: topic name -> topic id (KIP-516), as the broker prints it (base64, 22 characters)
TopicIds = dict[str, str]

#: The offsets JSON key of the topic ids. `@` cannot occur in a Kafka topic name.
TOPIC_IDS_KEY = "@topicIds"
#: The offsets JSON key of how a batch's tasks are planned (sources/task_packing.py), in the end
#: offsets of each batch this version logs. A batch logged without it (by a version before the
#: records-sized default) is replayed with the plan it was first run with: the exactly-once
#: sinks decide per (batch, Spark partition), so a replay must put the same ranges in the same
#: tasks as the run that prepared them.
PLAN_KEY = "@plan"
#: `targetTasksPerBatch` unset: tasks sized by the batch's records (default_target_tasks).
RECORDS_SIZED_PLAN = 2
#: The plan of an end offset without PLAN_KEY: targetTasksPerBatch unset meant 8 tasks.
LEGACY_PLAN = 1
#: The offsets JSON keys that are kafka-eos's own records, not topics.
METADATA_KEYS = (TOPIC_IDS_KEY, PLAN_KEY)

#: Sentinels inside a startingOffsets / endingOffsets JSON, as in Spark's Kafka source.
EARLIEST = -2
LATEST = -1


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Records [from_offset, until_offset) of one topic-partition: a Spark task reads one or
    more (sources/task_packing.py)."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        return max(0, self.until_offset - self.from_offset)


def to_json(offsets: Mapping[TopicPartition, int],
            ids: Mapping[str, str] | None = None, plan: int | None = None) -> dict[str, Any]:
    """Spark's Kafka offsets JSON; with `ids`, the ids of the topics in `offsets` under
    TOPIC_IDS_KEY (left out when none is known); with `plan`, a batch's end: how its tasks are
    planned, under PLAN_KEY (last)."""
    out: dict[str, Any] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    known = {t: str(ids[t]) for t in sorted(out) if ids and ids.get(t)}
    if known:
        out[TOPIC_IDS_KEY] = known
    if plan is not None:
        out[PLAN_KEY] = plan
    return out


def from_json(doc: Mapping[str, Any]) -> PartitionOffsets:
    """Inverse of `to_json` (the offsets; `ids_from_json` gives the ids); used on offsets
    Spark hands back from its offset log."""
    return {
        (topic, int(p)): int(off)
        for topic, parts in doc.items()
        if topic not in METADATA_KEYS
        for p, off in parts.items()
    }


def plan_from_json(doc: Mapping[str, Any]) -> int:
    """How the batch ending at `doc` plans its tasks: LEGACY_PLAN for an end offset logged
    without PLAN_KEY (an older version's)."""
    plan = doc.get(PLAN_KEY)
    return plan if isinstance(plan, int) else LEGACY_PLAN


def ids_from_json(doc: Mapping[str, Any]) -> TopicIds:
    """The topic ids recorded in an offsets JSON; empty for one written before they were."""
    ids = doc.get(TOPIC_IDS_KEY)
    if not isinstance(ids, Mapping):
        return {}
    return {str(t): str(i) for t, i in ids.items() if i}


def recreated_topics(
    recorded: Mapping[str, str], current: Mapping[str, str], topics: Iterable[str] | None = None
) -> list[tuple[str, str, str]]:
    """(topic, recorded id, current id) of each topic (of `topics`, else of either mapping)
    whose id is known on both sides and differs: deleted and created again under its name.
    A topic whose id is unknown on either side (offsets JSON from before ids were recorded, a
    broker that gives none) is never taken for a recreated one."""
    names = sorted(set(recorded) & set(current) if topics is None else set(topics))
    return [
        (t, recorded[t], current[t])
        for t in names
        if recorded.get(t) and current.get(t) and recorded[t] != current[t]
    ]


def carried_ids(
    previous: Mapping[str, str], current: Mapping[str, str], topics: Iterable[str]
) -> TopicIds:
    """The ids to record for `topics`: the current one where the broker gave it, else the one
    recorded before (no evidence of a change), so that a failed look-up neither loses the id
    nor changes the offsets JSON."""
    out: TopicIds = {}
    for t in sorted(set(topics)):
        known = current.get(t) or previous.get(t)
        if known:
            out[t] = known
    return out


def parse_offsets_option(
    name: str, doc: Any, *, allow_earliest: bool = True, allow_latest: bool = True
) -> PartitionOffsets:
    """Validate a user's per-partition offsets JSON such as `{"t":{"0":23,"1":-2}}`."""
    if not isinstance(doc, dict) or not doc:
        raise OptionError(
            name, 'expected a JSON object of topics to {partition: offset}, e.g. {"t":{"0":23}}'
        )
    allowed = {v for v, ok in ((EARLIEST, allow_earliest), (LATEST, allow_latest)) if ok}
    result: PartitionOffsets = {}
    for topic, parts in doc.items():
        if not isinstance(parts, dict) or not parts:
            raise OptionError(
                name, f'topic {topic!r} must map to an object of partition -> offset, e.g. {{"0":23}}'
            )
        for p, off in parts.items():
            try:
                partition = int(p)
                if partition < 0:
                    raise ValueError
            except (TypeError, ValueError):
                raise OptionError(
                    name, f"partition {p!r} of topic {topic!r} is not a partition number (0 or more)"
                ) from None
            if isinstance(off, bool) or not isinstance(off, int):
                raise OptionError(
                    name, f"offset for {topic}-{partition} must be a whole number, got {off!r}"
                )
            if off < 0 and off not in allowed:
                accepted = " or ".join(str(a) for a in sorted(allowed)) or "no negative value"
                raise OptionError(
                    name,
                    f"offset {off} for {topic}-{partition} is not valid here "
                    f"(accepted sentinels: {accepted}; -2 = earliest, -1 = latest)",
                )
            result[(topic, partition)] = off
    return result


def allocate_limit(
    start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], max_rows: int
) -> PartitionOffsets:
    """End offsets reading at most `max_rows` in total, shared in proportion to each lag.

    Every partition with new records gets at least one row (when `max_rows` allows one each),
    so a quiet partition is never starved by a busy one; the rest is shared in proportion to
    the remaining lag with largest-remainder rounding, in integers, so the total is exactly
    min(max_rows, available) and ties go to the smaller topic-partition: deterministic.
    """
    lags = {tp: max(0, latest[tp] - start.get(tp, latest[tp])) for tp in latest}
    total = sum(lags.values())
    if total <= max_rows:
        return dict(latest)
    lagging = sorted(tp for tp, lag in lags.items() if lag > 0)
    grant = dict.fromkeys(lags, 0)
    if max_rows >= len(lagging):
        for tp in lagging:
            grant[tp] = 1
        rest = {tp: lags[tp] - 1 for tp in lagging}
        _share_largest_remainder(rest, max_rows - len(lagging), grant)
    else:
        _share_largest_remainder({tp: lags[tp] for tp in lagging}, max_rows, grant)
    return {tp: start.get(tp, latest[tp]) + grant[tp] for tp in latest}


def _share_largest_remainder(
    weights: Mapping[TopicPartition, int], rows: int, grant: dict[TopicPartition, int]
) -> None:
    """Add `rows` to `grant` in proportion to `weights` (exact integer arithmetic)."""
    total = sum(weights.values())
    if rows <= 0 or total <= 0:
        return
    remainders = {}
    left = rows
    for tp, w in weights.items():
        q, remainders[tp] = divmod(rows * w, total)
        grant[tp] += q
        left -= q
    for tp in sorted(remainders, key=lambda tp: (-remainders[tp], tp))[:left]:
        grant[tp] += 1


def total_rows(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]) -> int:
    return sum(max(0, off - start.get(tp, off)) for tp, off in end.items())


def split_range(r: OffsetRange, parts: int) -> list[OffsetRange]:
    """Split into `parts` contiguous, nearly equal pieces (the first ones one longer)."""
    parts = max(1, min(parts, r.size))
    base, extra = divmod(r.size, parts)
    pieces, lo = [], r.from_offset
    for i in range(parts):
        hi = lo + base + (1 if i < extra else 0)
        pieces.append(OffsetRange(r.topic, r.partition, lo, hi))
        lo = hi
    return pieces


def plan_ranges(
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    *,
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[OffsetRange]:
    """The ranges of one batch: one per topic-partition, split where it is large (then packed
    into Spark tasks where small: sources/task_packing.py).

    A hot partition is split so that no task reads more than `max_records_per_partition`,
    and the batch has at least `min_partitions` tasks when it has that many records, with the
    extra splits going to the largest ranges (like Spark's KafkaOffsetRangeCalculator, whose
    count is approximate: for minPartitions=7 it made 6 tasks where this makes 7,
    integration_tests/peers/test_peers_kafka.py).
    The plan depends only on its arguments, so a replayed batch gets the same tasks.
    """
    ranges = [
        OffsetRange(tp[0], tp[1], start[tp], until)
        for tp, until in sorted(end.items())
        if tp in start and until > start[tp]
    ]
    parts = [
        math.ceil(r.size / max_records_per_partition) if max_records_per_partition else 1
        for r in ranges
    ]
    total = sum(r.size for r in ranges)
    if min_partitions and sum(parts) < min_partitions and total > 0:
        # Share the wanted task count by size (rounding half up), then give any shortfall to
        # the range with the most records per task, so the minimum really is a minimum.
        parts = [
            max(p, (2 * r.size * min_partitions + total) // (2 * total))
            for p, r in zip(parts, ranges)
        ]
        while sum(parts) < min(min_partitions, total):
            i = max(
                (i for i in range(len(ranges)) if parts[i] < ranges[i].size),
                key=lambda i: (ranges[i].size / parts[i], -i),
            )
            parts[i] += 1
    planned: list[OffsetRange] = []
    for r, p in zip(ranges, parts):
        planned.extend(split_range(r, p))
    return planned


def went_back(
    known: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int]
) -> list[TopicPartition]:
    """The partitions whose latest offset is below the one already known."""
    return sorted(tp for tp, o in latest.items() if tp in known and o < known[tp])


def settle_latest(
    fetch: Callable[[], PartitionOffsets],
    known: Mapping[TopicPartition, int],
    *,
    retries: int,
    interval_ms: int,
    sleep: Callable[[float], None] = time.sleep,
    first: PartitionOffsets | None = None,
) -> PartitionOffsets:
    """Latest offsets from `fetch`, fetched again while any is below `known`.

    A broker can answer a latest offset that went back (KAFKA-7703), so, as Spark's Kafka source
    does, up to `retries` more look-ups `interval_ms` apart are made before such an answer is
    believed. `first` is an answer already in hand (fetched before).
    """
    latest = fetch() if first is None else first
    for attempt in range(1, retries + 1):
        back = went_back(known, latest)
        if not back:
            break
        log.warning(
            "kafka-eos: the latest offsets of %s went back; fetching them again (%d of %d)",
            ", ".join(f"{t}-{p}" for t, p in back), attempt, retries,
        )
        sleep(interval_ms / 1000)
        latest = fetch()
    return latest


def replay_start(
    start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int],
    recreated: Iterable[str] = (),
) -> tuple[PartitionOffsets, list[TopicPartition]]:
    """Where each partition of a logged batch [start, end) is read from, and which went back.

    Pure, so a replayed batch gets the same plan whatever the broker says now: a partition new
    in `end`, one whose end is below its start (topic recreated), or one of a topic in
    `recreated` (its id differs between start and end) is read from offset 0. Records no longer
    there are data loss when the range is read.
    """
    back = went_back(start, end)
    renewed = set(recreated)
    begin = {tp: start[tp] for tp in end if tp in start}
    begin.update({tp: 0 for tp in end
                  if tp not in start or tp in back or tp[0] in renewed})
    return begin, back
