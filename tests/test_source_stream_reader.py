"""Unit tests for the kafka-eos stream reader's offset logic, with a scripted broker (no Kafka,
no Spark session): latest offsets that go back are re-fetched before they are believed, and a
batch's plan is a function of its logged offsets and the options only."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from confluent_kafka import KafkaError, KafkaException
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from connectors.core.options import OptionError
from sources.kafka_options import parse_source_options
from sources.kafka_source import KafkaBatchReader, KafkaStreamReader
from sources.offsets import OffsetRange, PartitionOffsets, TopicPartition
from sources.range_reader import DataLossError
from connectors.core.kafka.client import KafkaRetriesExhausted
from sources.offset_lookup import OffsetLookup

P0: TopicPartition = ("lat", 0)


def _options(**extra: str):
    raw = {"kafka.bootstrap.servers": "nowhere:9092", "subscribe": "lat", **extra}
    return parse_source_options(raw, batch=False)


class ScriptedLookup(OffsetLookup):
    """Answers latest-offset look-ups from a script; the last answer repeats."""

    def __init__(self, options, highs: list[PartitionOffsets], low: int = 0) -> None:
        self.options = options
        self.highs = list(highs)
        self.low = low
        self.latest_calls = 0
        self.ids: dict[str, str] = {}  # topic ids the broker gives (none: as a broker < 2.8)
        self.id_lookups = 0

    def close(self) -> None:
        pass

    def partitions(self, *, strict: bool) -> list[TopicPartition]:
        return sorted(self.highs[0])

    def latest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        answer = self.highs[min(self.latest_calls, len(self.highs) - 1)]
        self.latest_calls += 1
        return {tp: answer[tp] for tp in tps}

    def earliest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        return {tp: self.low for tp in tps}

    def topic_ids(self, topics: Iterable[str]) -> dict[str, str]:
        self.id_lookups += 1
        return {t: self.ids[t] for t in topics if t in self.ids}


class NoBroker:
    """Stands in for the lookup where the broker must not be consulted."""

    def __getattr__(self, name: str):
        raise AssertionError(f"the broker was consulted ({name}) while planning a logged batch")


def _reader(options, lookup) -> KafkaStreamReader:
    reader = KafkaStreamReader(options)
    reader._lookup = lookup
    return reader


# --------------------------------------------------------------------------- latest went back


def test_latest_that_went_back_once_is_fetched_again():
    """Seen on the embedded broker with a producer running: 338, then 328, then 340."""
    lookup = ScriptedLookup(_options(), [{P0: 328}, {P0: 340}])
    end = _reader(lookup.options, lookup).latestOffset({"lat": {"0": 338}}, ReadAllAvailable())
    assert end == {"lat": {"0": 340}, "@plan": 2}
    assert lookup.latest_calls == 2


def test_latest_that_went_back_is_fetched_again_under_a_read_limit():
    opts = _options(maxOffsetsPerTrigger="5")
    lookup = ScriptedLookup(opts, [{P0: 328}, {P0: 328}, {P0: 350}])
    end = _reader(opts, lookup).latestOffset({"lat": {"0": 338}}, ReadMaxRows(5))
    assert end == {"lat": {"0": 343}, "@plan": 2}
    assert lookup.latest_calls == 3


def test_latest_that_stays_back_after_all_retries_is_data_loss():
    lookup = ScriptedLookup(_options(**{"fetchOffset.retryIntervalMs": "0"}), [{P0: 328}])
    reader = _reader(lookup.options, lookup)
    with pytest.raises(DataLossError, match=r"went back from 338 to 328.*failOnDataLoss=false"):
        reader.latestOffset({"lat": {"0": 338}}, ReadAllAvailable())
    assert lookup.latest_calls == 4  # the first look-up and fetchOffset.numRetries=3 more


def test_num_retries_zero_believes_the_first_answer():
    opts = _options(**{"fetchOffset.numRetries": "0"})
    lookup = ScriptedLookup(opts, [{P0: 328}, {P0: 340}])
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        _reader(opts, lookup).latestOffset({"lat": {"0": 338}}, ReadAllAvailable())
    assert lookup.latest_calls == 1


def test_latest_that_stays_back_without_fail_on_data_loss_rereads_from_earliest(caplog):
    opts = _options(failOnDataLoss="false", **{"fetchOffset.retryIntervalMs": "0"})
    lookup = ScriptedLookup(opts, [{P0: 328}])
    end = _reader(opts, lookup).latestOffset({"lat": {"0": 338}}, ReadAllAvailable())
    assert end == {"lat": {"0": 328}, "@plan": 2}
    assert lookup.latest_calls == 4
    assert "went back from 338 to 328" in caplog.text


def test_latest_that_did_not_go_back_is_fetched_once():
    lookup = ScriptedLookup(_options(), [{P0: 338, ("lat", 1): 7}])
    end = _reader(lookup.options, lookup).latestOffset(
        {"lat": {"0": 300, "1": 7}}, ReadAllAvailable()
    )
    assert end == {"lat": {"0": 338, "1": 7}, "@plan": 2}
    assert lookup.latest_calls == 1


def test_trigger_available_now_target_that_went_back_is_fetched_again():
    lookup = ScriptedLookup(_options(), [{P0: 328}, {P0: 345}])
    reader = _reader(lookup.options, lookup)
    reader.prepareForTriggerAvailableNow()
    end = reader.latestOffset({"lat": {"0": 338}}, ReadAllAvailable())
    assert end == {"lat": {"0": 345}, "@plan": 2}
    assert reader.latestOffset(end, ReadAllAvailable()) == end  # target kept


def test_trigger_available_now_reads_to_its_target_whatever_min_offsets_per_trigger():
    """Trigger.AvailableNow ends at the first trigger without a new batch: a batch delayed for
    minOffsetsPerTrigger there ended the run with the records unread (seen beside Spark's own
    source, which read them: integration_tests/peers/test_peers_kafka.py)."""
    opts = _options(minOffsetsPerTrigger="1000", maxTriggerDelay="1h")
    lookup = ScriptedLookup(opts, [{P0: 30}])
    reader = _reader(opts, lookup)
    reader.prepareForTriggerAvailableNow()
    assert reader.latestOffset({"lat": {"0": 0}}, ReadMinRows(1000)) == {"lat": {"0": 30}, "@plan": 2}
    # without Trigger.AvailableNow the batch still waits for 1000 records (or the delay)
    other = _reader(opts, ScriptedLookup(opts, [{P0: 30}]))
    assert other.latestOffset({"lat": {"0": 0}}, ReadMinRows(1000)) == {"lat": {"0": 0}}


# --------------------------------------------------------------------------- replay planning


def _plan(reader: KafkaStreamReader, start: dict, end: dict) -> list[OffsetRange]:
    return [r for p in reader.partitions(start, end) for r in p.ranges]


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_replayed_plan_never_consults_the_broker(fail_on_data_loss):
    opts = _options(failOnDataLoss=fail_on_data_loss, maxRecordsPerPartition="40")
    reader = _reader(opts, NoBroker())
    start = {"lat": {"0": 100, "1": 5, "2": 9}}
    end = {"lat": {"0": 150, "1": 5, "3": 30}}  # 2 vanished, 3 is new
    assert _plan(reader, start, end) == [
        OffsetRange("lat", 0, 100, 125),
        OffsetRange("lat", 0, 125, 150),
        OffsetRange("lat", 3, 0, 30),  # a new partition is read from its beginning
    ]


def test_replayed_plan_is_the_same_whatever_the_broker_says_now():
    opts = _options(failOnDataLoss="false")
    start, end = {"lat": {"0": 100}}, {"lat": {"0": 150}}
    plans = [
        _plan(_reader(opts, ScriptedLookup(opts, [{P0: high}], low=low)), start, end)
        for low, high in ((0, 150), (120, 200), (500, 600))
    ]
    assert plans == [[OffsetRange("lat", 0, 100, 150)]] * 3


def test_replayed_batch_whose_offsets_went_back_rereads_from_the_beginning():
    """failOnDataLoss=false logged an end below its start (topic recreated): the plan reads the
    partition from offset 0; records gone since are data loss when they are read."""
    reader = _reader(_options(failOnDataLoss="false"), NoBroker())
    assert _plan(reader, {"lat": {"0": 338}}, {"lat": {"0": 5}}) == [OffsetRange("lat", 0, 0, 5)]


def test_replayed_batch_whose_offsets_went_back_fails_with_fail_on_data_loss():
    reader = _reader(_options(), NoBroker())
    with pytest.raises(DataLossError, match=r"338.*5.*failOnDataLoss=false"):
        reader.partitions({"lat": {"0": 338}}, {"lat": {"0": 5}})


# --------------------------------------------------------------------------- driver look-ups


class FakeMetadata:
    """Stands in for connectors.core.kafka.client.KafkaMetadata: scripted topics, watermarks and
    offsets by time; `failures` transient errors before each kind of look-up answers."""

    def __init__(self, highs: list[PartitionOffsets], *, by_time=None, failures: int = 0) -> None:
        self.highs = list(highs)
        self.by_time = by_time or {}
        self.failures = failures
        self.calls: list[str] = []

    def _maybe_fail(self, what: str) -> None:
        self.calls.append(what)
        if self.calls.count(what) <= self.failures:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "broker went away"))

    def close(self) -> None:
        pass

    def reset(self) -> None:
        self.calls.append("reset")

    def topics(self) -> dict[str, int]:
        self._maybe_fail("topics")
        return {t: max(p for tt, p in self.highs[0] if tt == t) + 1 for t, _ in self.highs[0]}

    def watermarks(self, tps):
        self._maybe_fail("watermarks")
        n = self.calls.count("watermarks") - self.failures
        answer = self.highs[min(n - 1, len(self.highs) - 1)]
        return {tp: (0, answer[tp]) for tp in tps}

    # The earliest and latest look-ups are one ListOffsets each; counted as watermarks.
    def earliest(self, tps):
        return {tp: low for tp, (low, _) in self.watermarks(tps).items()}

    def latest(self, tps):
        return {tp: high for tp, (_, high) in self.watermarks(tps).items()}

    def offsets_for_times(self, wanted):
        self._maybe_fail("offsets_for_times")
        return {tp: self.by_time.get((tp, ts), -1) for tp, ts in wanted.items()}


def _lookup(options, metadata: FakeMetadata, sleeps: list[float] | None = None) -> OffsetLookup:
    """A real OffsetLookup over scripted metadata (no broker)."""
    lookup = OffsetLookup.__new__(OffsetLookup)
    lookup.options = options
    lookup.metadata = metadata
    lookup._sleep = (sleeps if sleeps is not None else []).append
    return lookup


def _batch(**extra: str):
    raw = {"kafka.bootstrap.servers": "nowhere:9092", "subscribe": "lat", **extra}
    return parse_source_options(raw, batch=True)


def test_transient_lookup_errors_are_retried_retry_interval_apart():
    opts = _options(**{"fetchOffset.retryIntervalMs": "700", "fetchOffset.numRetries": "2"})
    sleeps: list[float] = []
    lookup = _lookup(opts, FakeMetadata([{P0: 40}], failures=2), sleeps)
    assert lookup.latest([P0]) == {P0: 40}
    assert sleeps == [0.7, 0.7]


def test_transient_lookup_errors_are_retried_until_the_retry_timeout_then_fail_naming_it():
    """fetchOffset.numRetries no longer bounds them: a broker restart outlasts four look-ups
    10 ms apart. kafkaRetryTimeout does, and each failed attempt drops the client."""
    opts = _options(**{"fetchOffset.numRetries": "1", "kafkaRetryTimeout": "1s"})
    sleeps: list[float] = []
    lookup = _lookup(opts, FakeMetadata([{P0: 40}], failures=1000), sleeps)
    with pytest.raises(KafkaRetriesExhausted,
                       match=r"listing topics at nowhere:9092 .*kafkaRetryTimeout=1 s"):
        lookup.partitions(strict=True)
    calls = lookup.metadata.calls
    assert calls.count("topics") > 2 and calls.count("reset") == calls.count("topics") - 1
    assert sleeps and max(sleeps) < 1  # no wait planned past the deadline


def test_non_transient_lookup_errors_are_not_retried():
    class Refusing(FakeMetadata):
        def watermarks(self, tps):
            self.calls.append("watermarks")
            raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))

    lookup = _lookup(_options(), Refusing([{P0: 1}]))
    with pytest.raises(KafkaException):
        lookup.latest([P0])
    assert lookup.metadata.calls == ["watermarks"]


@pytest.mark.parametrize("strategy", ["error", "latest"])
def test_ending_timestamp_without_a_record_after_it_ends_at_latest(strategy):
    """Spark: where no record is at or after an ending timestamp, the offset is the latest one,
    whatever startingOffsetsByTimestampStrategy says (that is for starting timestamps)."""
    opts = _batch(endingTimestamp="5000", startingOffsetsByTimestampStrategy=strategy)
    p1 = ("lat", 1)
    meta = FakeMetadata([{P0: 30, p1: 12}], by_time={(P0, 5000): 17})
    assert _lookup(opts, meta).offsets_for(opts.ending, [P0, p1], opts.ending_option) == {P0: 17, p1: 12}


def test_starting_timestamp_without_a_record_after_it_follows_the_strategy():
    p1 = ("lat", 1)
    meta = FakeMetadata([{P0: 30, p1: 12}], by_time={(P0, 5000): 17})
    opts = _batch(startingTimestamp="5000")
    with pytest.raises(OptionError, match=r"Option 'startingTimestamp'.*lat-1.*Strategy=latest"):
        _lookup(opts, meta).offsets_for(opts.starting, [P0, p1], opts.starting_option)
    opts = _batch(startingTimestamp="5000", startingOffsetsByTimestampStrategy="latest")
    assert _lookup(opts, meta).offsets_for(opts.starting, [P0, p1], opts.starting_option) == {P0: 17, p1: 12}


def test_ending_offsets_by_timestamp_must_cover_every_partition():
    opts = _batch(endingOffsetsByTimestamp='{"lat": {"0": 5000}}')
    meta = FakeMetadata([{P0: 30, ("lat", 1): 12}])
    with pytest.raises(OptionError, match=r"Option 'endingOffsetsByTimestamp'.*missing lat-1"):
        _lookup(opts, meta).offsets_for(opts.ending, [P0, ("lat", 1)], opts.ending_option)


def _batch_plan(opts, meta: FakeMetadata) -> list[OffsetRange]:
    reader = KafkaBatchReader(opts)
    reader._lookup = _lookup(opts, meta)
    return [r for p in reader.partitions() for r in p.ranges]


def test_batch_read_ends_at_the_ending_timestamps():
    p1 = ("lat", 1)
    opts = _batch(startingOffsetsByTimestamp='{"lat": {"0": 1000, "1": 1000}}',
                  endingOffsetsByTimestamp='{"lat": {"0": 5000, "1": 6000}}')
    meta = FakeMetadata([{P0: 30, p1: 12}], by_time={(P0, 1000): 3, (p1, 1000): 0, (P0, 5000): 17})
    assert _batch_plan(opts, meta) == [OffsetRange("lat", 0, 3, 17), OffsetRange("lat", 1, 0, 12)]


def test_batch_read_ending_before_its_start_names_the_ending_option():
    opts = _batch(startingTimestamp="5000", endingTimestamp="1000")
    meta = FakeMetadata([{P0: 30}], by_time={(P0, 5000): 20, (P0, 1000): 4})
    with pytest.raises(OptionError, match=r"Option 'endingTimestamp'.*ends at 4 for lat-0, before its start 20"):
        _batch_plan(opts, meta)


def test_batch_read_latest_end_that_went_back_is_fetched_again():
    """The start resolves against 340; the end's first look-up answers 328 (went back): looked
    up again, fetchOffset.retryIntervalMs later, instead of failing the read."""
    opts = _batch(startingOffsets='{"lat": {"0": 338}}')
    meta = FakeMetadata([{P0: 340}, {P0: 328}, {P0: 341}])
    assert _batch_plan(opts, meta) == [OffsetRange("lat", 0, 338, 341)]
    assert meta.calls.count("watermarks") == 3


def test_batch_read_with_nothing_to_read_yields_nothing():
    """PySpark runs one task with InputPartition(None) when a batch read's plan is empty (an
    empty topic, or an end equal to the start): it reads nothing instead of failing."""
    from pyspark.sql.datasource import InputPartition

    opts = _batch(endingTimestamp="1000")
    meta = FakeMetadata([{P0: 30}], by_time={(P0, 1000): 0})
    assert _batch_plan(opts, meta) == []
    assert list(KafkaBatchReader(opts).read(InputPartition(None))) == []


# --------------------------------------------------------------------------- driver's client


def test_one_metadata_client_serves_every_batch_and_a_failed_one_is_replaced(monkeypatch):
    """The stream reader opens its client once and keeps it across latestOffset() calls; a
    look-up that failed closes it, and the next call opens a new one. stop() closes it."""
    import sources.kafka_source as ks

    made: list = []

    class Counting(ScriptedLookup):
        def __init__(self, options):
            super().__init__(options, [{P0: 10}])
            self.closed = False
            self.fail_next = False
            made.append(self)

        def close(self):
            self.closed = True

        def latest(self, tps):
            if self.fail_next:
                raise KafkaException(KafkaError(KafkaError._TRANSPORT))
            return super().latest(tps)

    monkeypatch.setattr(ks, "OffsetLookup", Counting)
    reader = KafkaStreamReader(_options(**{"fetchOffset.numRetries": "0"}))
    for _ in range(3):
        reader.latestOffset({"lat": {"0": 0}}, ReadAllAvailable())
    assert len(made) == 1 and not made[0].closed
    made[0].fail_next = True
    with pytest.raises(KafkaException):
        reader.latestOffset({"lat": {"0": 0}}, ReadAllAvailable())
    assert made[0].closed and reader._lookup is None
    reader.latestOffset({"lat": {"0": 0}}, ReadAllAvailable())
    assert len(made) == 2
    reader.stop()
    assert made[1].closed


def test_initial_offset_is_resolved_once():
    """Spark asks for the initial offset again when it runs the first batch; a second look-up
    of `latest` under a live producer would start that batch after its end."""
    class Moving(ScriptedLookup):
        def offsets_for(self, spec, tps, option):
            return self.latest(tps)

    lookup = Moving(_options(), [{P0: 100}, {P0: 150}])
    reader = _reader(_options(), lookup)
    first = reader.initialOffset()
    end = reader.latestOffset(first, ReadAllAvailable())
    assert reader.initialOffset() == first == {"lat": {"0": 100}}
    assert reader.partitions(reader.initialOffset(), end)  # no "went back"


# --------------------------------------------------------------------------- packed tasks


def _tasks(reader: KafkaStreamReader, start: dict, end: dict) -> list[tuple[OffsetRange, ...]]:
    return [p.ranges for p in reader.partitions(start, end)]


def test_small_ranges_are_packed_and_a_replay_plans_the_same_tasks_in_the_same_order():
    """Spark partition i of a batch is the i-th task planned: the exactly-once sinks decide per
    (batch, Spark partition), so a replay (a new reader, after a restart, never asking the
    broker) must put the same ranges in the same task at the same index."""
    opts = _options(targetTasksPerBatch="4")
    start = {"lat": {str(p): 10 * p for p in range(40)}}
    end = {"lat": {str(p): 10 * p + 1 + p % 7 for p in range(40)}}
    first = _tasks(_reader(opts, NoBroker()), start, end)
    assert len(first) == 4
    ranges = sorted(r for t in first for r in t)
    assert ranges == [OffsetRange("lat", p, 10 * p, 10 * p + 1 + p % 7) for p in range(40)]
    sizes = [sum(r.size for r in t) for t in first]
    assert max(sizes) - min(sizes) <= 6  # balanced by offsets, not by partitions
    assert _tasks(_reader(opts, NoBroker()), start, end) == first


def test_max_partitions_per_task_one_plans_a_task_per_range():
    opts = _options(maxPartitionsPerTask="1")
    start = {"lat": {str(p): 0 for p in range(20)}}
    end = {"lat": {str(p): 3 for p in range(20)}}
    assert _tasks(_reader(opts, NoBroker()), start, end) == [
        (OffsetRange("lat", p, 0, 3),) for p in range(20)]


def test_by_default_a_small_batch_is_one_task_and_a_replay_plans_it_alike():
    """8 partitions of 4 records: one task by default (sized by the batch's records, not 8
    tasks of 4 records), the same for a new reader replaying the logged batch; an explicit
    targetTasksPerBatch=8 keeps the plan of the versions before (one task per range)."""
    start = {"lat": {str(p): 10 * p for p in range(8)}}
    end = {"lat": {str(p): 10 * p + 4 for p in range(8)}, "@plan": 2}
    first = _tasks(_reader(_options(), NoBroker()), start, end)
    assert first == [tuple(OffsetRange("lat", p, 10 * p, 10 * p + 4) for p in range(8))]
    assert _tasks(_reader(_options(), NoBroker()), start, end) == first
    assert len(_tasks(_reader(_options(targetTasksPerBatch="8"), NoBroker()), start, end)) == 8
    end = {"lat": {str(p): 10 * p + 2_500 for p in range(8)}, "@plan": 2}  # 20,000: 4 tasks
    assert len(_tasks(_reader(_options(), NoBroker()), start, end)) == 4


def test_the_end_offsets_this_version_logs_name_their_plan():
    """Every batch's end carries how its tasks are planned, so that a later version replays
    it as it was first run."""
    lookup = ScriptedLookup(_options(), [{("lat", 0): 40, ("lat", 1): 40}])
    end = _reader(lookup.options, lookup).latestOffset({"lat": {"0": 0, "1": 0}},
                                                       ReadAllAvailable())
    assert end["@plan"] == 2 and end["lat"] == {"0": 40, "1": 40}


def test_a_batch_an_older_version_logged_is_replayed_with_its_plan():
    """An upgrade across a crash: the older version logged this batch's offsets (no plan in
    them) and prepared one transaction per range's task (its default: 8 tasks). The replay
    must plan the same 8 tasks, or the sinks' per-(batch, Spark partition) decisions would meet
    other ranges under the same index: a range skipped as already written, or written twice."""
    start = {"lat": {str(p): 10 * p for p in range(8)}}
    logged_before = {"lat": {str(p): 10 * p + 4 for p in range(8)}}
    assert _tasks(_reader(_options(), NoBroker()), start, logged_before) == [
        (OffsetRange("lat", p, 10 * p, 10 * p + 4),) for p in range(8)]
    # an explicit targetTasksPerBatch is the plan, whoever logged the batch
    assert len(_tasks(_reader(_options(targetTasksPerBatch="2"), NoBroker()), start,
                      logged_before)) == 2


@pytest.mark.parametrize("name", ["targetTasksPerBatch", "maxPartitionsPerTask"])
@pytest.mark.parametrize("value", ["0", "-3", "many"])
def test_packing_options_must_be_positive_whole_numbers(name, value):
    with pytest.raises(OptionError, match=rf"Option '{name}'.*(at least 1|whole number)"):
        _options(**{name: value})
