"""Driver-side offset resolution: which partitions a subscription covers, where reading starts,
what is latest, and whether offsets the query needs have been lost.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping

from connectors.options import OptionError
from sources.kafka_options import KafkaSourceOptions, StartSpec, Subscription
from connectors.kafka_client import KafkaMetadata
from sources.offsets import EARLIEST, LATEST, PartitionOffsets, TopicPartition
from sources.range_reader import DataLossError

log = logging.getLogger(__name__)


class OffsetResolver:
    def __init__(self, options: KafkaSourceOptions) -> None:
        self.options = options
        self.metadata = KafkaMetadata(options.kafka_conf, attempts=options.fetch_attempts)

    def close(self) -> None:
        self.metadata.close()

    # -- partitions ---------------------------------------------------------------------------

    def partitions(self, *, strict: bool) -> list[TopicPartition]:
        """The topic-partitions the subscription covers now.

        `strict` (query start) turns a named topic or partition that does not exist into an
        error naming the option; later a topic that vanished is left to data-loss handling.
        """
        sub = self.options.subscription
        topics = self.metadata.topics()
        if sub.kind == "subscribePattern":
            rx = re.compile(sub.pattern or "")
            return sorted(
                (t, p) for t, n in topics.items() if rx.fullmatch(t) for p in range(n)
            )
        if sub.kind == "subscribe":
            missing = [t for t in sub.topics if t not in topics]
            if missing and strict:
                raise OptionError(
                    "subscribe",
                    f"topic(s) {', '.join(missing)} do not exist on "
                    f"{self.options.bootstrap_servers}; create them first, or use "
                    "subscribePattern to pick topics up when they appear",
                )
            return sorted((t, p) for t in sub.topics if t in topics for p in range(topics[t]))
        # assign
        if strict:
            _check_assignment(sub, topics, self.options.bootstrap_servers)
        return [tp for tp in sub.assignment if tp[0] in topics and tp[1] < topics[tp[0]]]

    # -- offsets ------------------------------------------------------------------------------

    def earliest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        return {tp: low for tp, (low, _high) in self.metadata.watermarks(tps).items()}

    def latest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        return {tp: high for tp, (_low, high) in self.metadata.watermarks(tps).items()}

    def resolve(self, spec: StartSpec, tps: list[TopicPartition], option: str) -> PartitionOffsets:
        """Concrete offsets for a starting or ending specification."""
        if spec.kind == "earliest":
            return self.earliest(tps)
        if spec.kind == "latest":
            return self.latest(tps)
        if spec.kind == "offsets":
            _check_covers(option, spec.offsets, tps)
            wm = self.metadata.watermarks(tps)
            resolved = {}
            for tp in tps:
                off = spec.offsets[tp]
                low, high = wm[tp]
                resolved[tp] = low if off == EARLIEST else high if off == LATEST else off
                if off >= 0 and off > high:
                    raise OptionError(
                        option,
                        f"offset {off} for {tp[0]}-{tp[1]} is beyond the latest offset {high}",
                    )
            return resolved
        if spec.kind == "timestamp":
            wanted = {tp: spec.timestamp_ms for tp in tps}
            return self._by_timestamp(wanted, "startingTimestamp")  # type: ignore[arg-type]
        _check_covers("startingOffsetsByTimestamp", spec.timestamps, tps)
        return self._by_timestamp({tp: spec.timestamps[tp] for tp in tps}, "startingOffsetsByTimestamp")

    def _by_timestamp(self, wanted: Mapping[TopicPartition, int], option: str) -> PartitionOffsets:
        found = self.metadata.offsets_for_times(wanted)
        missing = [tp for tp, off in found.items() if off < 0]
        if missing:
            if self.options.timestamp_strategy == "error":
                raise OptionError(
                    option,
                    "no record at or after the given timestamp in "
                    f"{', '.join(f'{t}-{p}' for t, p in sorted(missing))}; set "
                    "startingOffsetsByTimestampStrategy=latest to start at the latest offset there",
                )
            found.update(self.latest(missing))
        return found

    # -- data loss ----------------------------------------------------------------------------

    def report_data_loss(self, message: str) -> None:
        report_data_loss(self.options, message)


def report_data_loss(options: KafkaSourceOptions, message: str) -> None:
    """Fail with `message`, or with failOnDataLoss=false log it and go on (no broker needed)."""
    if options.fail_on_data_loss:
        raise DataLossError(
            f"kafka-eos: {message}. Some data may have been lost; set failOnDataLoss=false "
            "to continue from the earliest available offset with a warning."
        )
    log.warning("kafka-eos: %s; continuing because failOnDataLoss=false", message)


def _check_covers(option: str, offsets: Mapping[TopicPartition, int], tps: list[TopicPartition]) -> None:
    missing = sorted(set(tps) - set(offsets))
    if missing:
        raise OptionError(
            option,
            "must give an offset for every partition the query reads; missing "
            + ", ".join(f"{t}-{p}" for t, p in missing),
        )


def _check_assignment(sub: Subscription, topics: Mapping[str, int], servers: str) -> None:
    for topic, partition in sub.assignment:
        if topic not in topics:
            raise OptionError("assign", f"topic {topic!r} does not exist on {servers}")
        if partition >= topics[topic]:
            raise OptionError(
                "assign",
                f"topic {topic!r} has {topics[topic]} partition(s); partition {partition} does not exist",
            )
