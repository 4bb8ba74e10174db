"""Unit tests for data loss found while a range is read (sources/range_reader.py): the batch plan
no longer checks retention, so records removed since the batch was logged are handled here."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from sources.offsets import OffsetRange
from sources.range_reader import DataLossError, _handle_error


class FakeConsumer:
    def __init__(self, low: int, high: int) -> None:
        self.watermarks = (low, high)
        self.assigned: list[tuple[str, int, int]] = []

    def get_watermark_offsets(self, tp, timeout=None, cached=False) -> tuple[int, int]:
        return self.watermarks

    def assign(self, tps) -> None:
        self.assigned.extend((tp.topic, tp.partition, tp.offset) for tp in tps)


RANGE = OffsetRange("t", 0, 100, 150)
RESET = KafkaError(KafkaError._AUTO_OFFSET_RESET)


def test_removed_records_fail_the_read_naming_fail_on_data_loss():
    consumer = FakeConsumer(low=120, high=200)
    with pytest.raises(DataLossError, match=r"offsets 100\.\.119 of t-0.*failOnDataLoss=false"):
        _handle_error(consumer, RANGE, RESET, 100, True)
    assert consumer.assigned == []


def test_removed_records_are_skipped_without_fail_on_data_loss(caplog):
    consumer = FakeConsumer(low=120, high=200)
    assert _handle_error(consumer, RANGE, RESET, 100, False) == 120
    assert consumer.assigned == [("t", 0, 120)]
    assert "failOnDataLoss=false" in caplog.text


def test_range_removed_entirely_ends_the_read_without_fail_on_data_loss():
    consumer = FakeConsumer(low=500, high=600)
    assert _handle_error(consumer, RANGE, RESET, 100, False) == 500  # >= until: read ends
    assert consumer.assigned == []
