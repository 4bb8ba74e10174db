"""Unit tests for the kafka-eos stream reader's offset logic, with a scripted broker (no Kafka,
no Spark session): latest offsets that go back are re-fetched before they are believed, and a
batch's plan is a function of its logged offsets and the options only."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from sources.kafka_options import parse_source_options
from sources.kafka_source import KafkaStreamReader
from sources.offsets import OffsetRange, PartitionOffsets, TopicPartition
from sources.range_reader import DataLossError
from sources.resolver import OffsetResolver

P0: TopicPartition = ("lat", 0)


def _options(**extra: str):
    raw = {"kafka.bootstrap.servers": "nowhere:9092", "subscribe": "lat", **extra}
    return parse_source_options(raw, batch=False)


class ScriptedResolver(OffsetResolver):
    """Answers latest-offset look-ups from a script; the last answer repeats."""

    def __init__(self, options, highs: list[PartitionOffsets], low: int = 0) -> None:
        self.options = options
        self.highs = list(highs)
        self.low = low
        self.latest_calls = 0

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


class NoBroker:
    """Stands in for the resolver where the broker must not be consulted."""

    def __getattr__(self, name: str):
        raise AssertionError(f"the broker was consulted ({name}) while planning a logged batch")


def _reader(options, resolver) -> KafkaStreamReader:
    reader = KafkaStreamReader(options)
    reader._resolver = resolver
    return reader


# --------------------------------------------------------------------------- latest went back


def test_latest_that_went_back_once_is_fetched_again():
    """Seen on the embedded broker with a producer running: 338, then 328, then 340."""
    resolver = ScriptedResolver(_options(), [{P0: 328}, {P0: 340}])
    end = _reader(resolver.options, resolver).latestOffset({"lat": {"0": 338}}, ReadAllAvailable())
    assert end == {"lat": {"0": 340}}
    assert resolver.latest_calls == 2


def test_latest_that_went_back_is_fetched_again_under_a_read_limit():
    opts = _options(maxOffsetsPerTrigger="5")
    resolver = ScriptedResolver(opts, [{P0: 328}, {P0: 328}, {P0: 350}])
    end = _reader(opts, resolver).latestOffset({"lat": {"0": 338}}, ReadMaxRows(5))
    assert end == {"lat": {"0": 343}}
    assert resolver.latest_calls == 3


def test_latest_that_stays_back_after_all_retries_is_data_loss():
    resolver = ScriptedResolver(_options(**{"fetchOffset.retryIntervalMs": "0"}), [{P0: 328}])
    reader = _reader(resolver.options, resolver)
    with pytest.raises(DataLossError, match=r"went back from 338 to 328.*failOnDataLoss=false"):
        reader.latestOffset({"lat": {"0": 338}}, ReadAllAvailable())
    assert resolver.latest_calls == 4  # the first look-up and fetchOffset.numRetries=3 more


def test_num_retries_zero_believes_the_first_answer():
    opts = _options(**{"fetchOffset.numRetries": "0"})
    resolver = ScriptedResolver(opts, [{P0: 328}, {P0: 340}])
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        _reader(opts, resolver).latestOffset({"lat": {"0": 338}}, ReadAllAvailable())
    assert resolver.latest_calls == 1


def test_latest_that_stays_back_without_fail_on_data_loss_rereads_from_earliest(caplog):
    opts = _options(failOnDataLoss="false", **{"fetchOffset.retryIntervalMs": "0"})
    resolver = ScriptedResolver(opts, [{P0: 328}])
    end = _reader(opts, resolver).latestOffset({"lat": {"0": 338}}, ReadAllAvailable())
    assert end == {"lat": {"0": 328}}
    assert resolver.latest_calls == 4
    assert "went back from 338 to 328" in caplog.text


def test_latest_that_did_not_go_back_is_fetched_once():
    resolver = ScriptedResolver(_options(), [{P0: 338, ("lat", 1): 7}])
    end = _reader(resolver.options, resolver).latestOffset(
        {"lat": {"0": 300, "1": 7}}, ReadAllAvailable()
    )
    assert end == {"lat": {"0": 338, "1": 7}}
    assert resolver.latest_calls == 1


def test_trigger_available_now_target_that_went_back_is_fetched_again():
    resolver = ScriptedResolver(_options(), [{P0: 328}, {P0: 345}])
    reader = _reader(resolver.options, resolver)
    reader.prepareForTriggerAvailableNow()
    end = reader.latestOffset({"lat": {"0": 338}}, ReadAllAvailable())
    assert end == {"lat": {"0": 345}}
    assert reader.latestOffset({"lat": {"0": 345}}, ReadAllAvailable()) == end  # target kept


# --------------------------------------------------------------------------- replay planning


def _plan(reader: KafkaStreamReader, start: dict, end: dict) -> list[OffsetRange]:
    return [p.range for p in reader.partitions(start, end)]


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
        _plan(_reader(opts, ScriptedResolver(opts, [{P0: high}], low=low)), start, end)
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
