"""Driver-side offset look-ups: which partitions a subscription covers, where reading starts,
what is latest, and whether offsets the query needs have been lost.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient

from connectors.core.options import OptionError
from sources.kafka_options import KafkaSourceOptions, StartSpec, Subscription
from connectors.core.kafka.client import (
    KafkaMetadata,
    KafkaRetriesExhausted,
    admin_conf,
    is_transient,
)
from sources.offsets import EARLIEST, LATEST, PartitionOffsets, TopicIds, TopicPartition
from sources.range_reader import DataLossError

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Topic-level errors of DescribeTopics that mean "no such topic now", not a failure.
_NO_TOPIC = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_ID}


class OffsetLookup:
    _admin: AdminClient | None = None  # for topic ids, opened on first use
    _ids_unavailable = False  # the brokers refused to describe topics: ids not asked again

    def __init__(self, options: KafkaSourceOptions, *,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.options = options
        self._sleep = sleep
        self.metadata = KafkaMetadata(options.kafka_conf)

    def close(self) -> None:
        self._admin = None  # librdkafka destroys the handle with the object
        self.metadata.close()

    def _retrying(self, what: str, fn: Callable[[], T]) -> T:
        """`fn`, tried again on transient broker errors until kafkaRetryTimeout, at least
        fetchOffset.retryIntervalMs apart (as Spark's Kafka source waits between offset
        look-ups) and backing off exponentially from 100 ms up to 5 s. A failed attempt drops
        the clients: the admin client left waiting for a controller that went down ("Failed
        while waiting for controller") stalled a query restarted during a rolling restart."""
        return self.options.retry_policy.call(
            f"{what} at {self.options.bootstrap_servers}", fn,
            min_wait_s=self.options.fetch_retry_interval_ms / 1000,
            on_retry=self._reset_clients, sleep=self._sleep)

    def _reset_clients(self, _error: BaseException) -> None:
        self._admin = None
        self.metadata.reset()

    def _watermarks(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        tps = list(tps)
        return self._retrying("reading offsets", lambda: self.metadata.watermarks(tps))

    def earliest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        """Earliest offsets: one ListOffsets round trip per broker (KafkaMetadata)."""
        tps = list(tps)
        return self._retrying("reading the earliest offsets", lambda: self.metadata.earliest(tps))

    def latest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        """Latest offsets (last stable offsets under read_committed): one ListOffsets round trip
        per broker."""
        tps = list(tps)
        return self._retrying("reading the latest offsets", lambda: self.metadata.latest(tps))

    # -- partitions ---------------------------------------------------------------------------

    def partitions(self, *, strict: bool) -> list[TopicPartition]:
        """The topic-partitions the subscription covers now.

        `strict` (query start) turns a named topic or partition that does not exist into an
        error naming the option; later a topic that vanished is left to data-loss handling.
        """
        sub = self.options.subscription
        topics = self._retrying("listing topics", self.metadata.topics)
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

    # -- topic ids ----------------------------------------------------------------------------

    def topic_ids(self, topics: Iterable[str]) -> TopicIds:
        """Topic name -> topic id (KIP-516, Kafka 2.8+) of those of `topics` that exist, in one
        Metadata round trip for all of them (DescribeTopics; a millisecond or two on a local
        broker). A topic that does not exist now is left out (its partitions are data-loss
        handling's business), and so is one whose id the broker does not give (all zeros): then
        only offsets that went back tell a recreated topic. A refusal other than a transient
        error (a broker without topic ids, missing DESCRIBE) is logged once, and ids are not
        asked for again by this lookup."""
        names = sorted(set(topics))
        if not names or self._ids_unavailable:
            return {}
        try:
            return self._retrying("describing topics", lambda: self._describe(names))
        except Exception as e:
            if is_transient(e) or isinstance(e, KafkaRetriesExhausted):
                raise
            self._ids_unavailable = True
            log.warning("kafka-eos: the topic ids of %s could not be read (%s); a topic deleted "
                        "and created again is then told only by offsets that went back",
                        ", ".join(names), e)
            return {}

    def _new_admin(self, conf: dict[str, str]) -> AdminClient:
        return self.metadata.admin()  # the offset look-ups' client: one connection for both

    def _describe(self, names: list[str]) -> TopicIds:
        if self._admin is None:
            self._admin = self._new_admin(admin_conf(self.options.kafka_conf))
        futures = self._admin.describe_topics(TopicCollection(names), request_timeout=10)
        ids: TopicIds = {}
        for name, future in futures.items():
            try:
                described = future.result(timeout=15)
            except KafkaException as e:
                err = e.args[0] if e.args else None
                if isinstance(err, KafkaError) and err.code() in _NO_TOPIC:
                    continue
                raise
            uid = described.topic_id
            if uid is not None and (uid.get_most_significant_bits()
                                    or uid.get_least_significant_bits()):
                ids[name] = str(uid)
        return ids

    # -- offsets ------------------------------------------------------------------------------

    def offsets_for(self, spec: StartSpec, tps: list[TopicPartition], option: str) -> PartitionOffsets:
        """Concrete offsets for a starting or ending specification; `option` is the option that
        gave it (startingOffsets, endingTimestamp, ...): errors name it, and where no record is
        at or after a timestamp, a starting one follows startingOffsetsByTimestampStrategy while
        an ending one ends at the latest offset (as Spark's Kafka source does)."""
        if spec.kind == "earliest":
            return self.earliest(tps)
        if spec.kind == "latest":
            return self.latest(tps)
        if spec.kind == "offsets":
            _check_covers(option, spec.offsets, tps)
            wm = self._watermarks(tps)
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
            return self._by_timestamp(wanted, option)  # type: ignore[arg-type]
        _check_covers(option, spec.timestamps, tps)
        return self._by_timestamp({tp: spec.timestamps[tp] for tp in tps}, option)

    def _by_timestamp(self, wanted: Mapping[TopicPartition, int], option: str) -> PartitionOffsets:
        found = self._retrying(
            "looking up offsets by timestamp", lambda: self.metadata.offsets_for_times(wanted))
        missing = [tp for tp, off in found.items() if off < 0]
        if missing:
            where = ", ".join(f"{t}-{p}" for t, p in sorted(missing))
            if option.startswith("ending"):
                log.info("kafka-eos: no record at or after the %s in %s; reading there up to "
                         "the latest offset", option, where)
            elif self.options.timestamp_strategy == "error":
                raise OptionError(
                    option,
                    f"no record at or after the given timestamp in {where}; set "
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
