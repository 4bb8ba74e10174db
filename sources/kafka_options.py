"""The `kafka-eos` source's options, named as Spark's built-in Kafka source names them, so a
user switches formats by changing only the format string. Parsed once, when the DataSource is
built, so a bad option fails the query before anything runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from connectors.kafka_client import librdkafka_conf
from connectors.options import OptionError, Options
from sources.offsets import PartitionOffsets, parse_offsets_option

SUBSCRIPTION_OPTIONS = ("subscribe", "subscribePattern", "assign")


@dataclass(frozen=True)
class Subscription:
    kind: Literal["subscribe", "subscribePattern", "assign"]
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assignment: tuple[tuple[str, int], ...] = ()

    def describe(self) -> str:
        if self.kind == "subscribePattern":
            return f"subscribePattern={self.pattern!r}"
        if self.kind == "assign":
            return f"assign={sorted(self.assignment)}"
        return f"subscribe={list(self.topics)}"


@dataclass(frozen=True)
class StartSpec:
    """Where a query or batch read starts (or, for endingOffsets, ends)."""

    kind: Literal["earliest", "latest", "offsets", "timestamp", "timestamps"]
    offsets: PartitionOffsets = field(default_factory=dict)
    timestamp_ms: int | None = None
    timestamps: PartitionOffsets = field(default_factory=dict)


@dataclass(frozen=True)
class KafkaSourceOptions:
    kafka_conf: dict[str, str] = field(repr=False)  # may hold secrets: never in a repr
    subscription: Subscription
    starting: StartSpec
    ending: StartSpec
    timestamp_strategy: Literal["error", "latest"]
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay_ms: int
    min_partitions: int | None
    max_records_per_partition: int | None
    fail_on_data_loss: bool
    include_headers: bool
    poll_timeout_ms: int
    fetch_attempts: int
    arrow_batch_rows: int
    fetch_retry_interval_ms: int = 10

    @property
    def bootstrap_servers(self) -> str:
        return self.kafka_conf["bootstrap.servers"]

    @property
    def fetch_retries(self) -> int:
        """fetchOffset.numRetries: look-ups after the first one."""
        return self.fetch_attempts - 1


def _parse_subscription(opts: Options) -> Subscription:
    given = [name for name in SUBSCRIPTION_OPTIONS if name in opts]
    if len(given) != 1:
        what = "none was given" if not given else f"got {', '.join(given)}"
        raise OptionError(
            "subscribe",
            f"set exactly one of subscribe, subscribePattern or assign ({what})",
        )
    kind = given[0]
    if kind == "subscribe":
        topics = tuple(t.strip() for t in opts.require("subscribe").split(",") if t.strip())
        if not topics:
            raise OptionError("subscribe", "expected a comma-separated list of topic names")
        return Subscription("subscribe", topics=topics)
    if kind == "subscribePattern":
        pattern = opts.require("subscribePattern")
        try:
            re.compile(pattern)
        except re.error as e:
            raise OptionError("subscribePattern", f"is not a valid regular expression: {e}") from None
        return Subscription("subscribePattern", pattern=pattern)
    doc = opts.get_json("assign")
    example = 'e.g. {"topicA":[0,1],"topicB":[2,4]}'
    if not isinstance(doc, dict) or not doc:
        raise OptionError("assign", f"expected a JSON object of topic -> partition list, {example}")
    pairs = []
    for topic, parts in doc.items():
        if not isinstance(parts, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts
        ):
            raise OptionError(
                "assign", f"topic {topic!r} must map to a list of partition numbers, {example}"
            )
        pairs.extend((topic, p) for p in parts)
    return Subscription("assign", assignment=tuple(sorted(set(pairs))))


def _parse_start(opts: Options, *, batch: bool | None) -> StartSpec:
    by_ts = opts.get_json("startingOffsetsByTimestamp")
    if by_ts is not None:
        return StartSpec(
            "timestamps",
            timestamps=parse_offsets_option(
                "startingOffsetsByTimestamp", by_ts, allow_earliest=False, allow_latest=False
            ),
        )
    ts = opts.get_int("startingTimestamp", minimum=0)
    if ts is not None:
        return StartSpec("timestamp", timestamp_ms=ts)
    value = opts.get("startingOffsets")
    if value is None or value.strip().lower() == ("earliest" if batch else "latest"):
        return StartSpec("earliest" if batch else "latest")
    v = value.strip().lower()
    if v == "earliest":
        return StartSpec("earliest")
    if v == "latest":
        if batch:
            raise OptionError("startingOffsets", "'latest' is not allowed for batch queries")
        return StartSpec("latest")
    if not value.strip().startswith("{"):
        raise OptionError(
            "startingOffsets",
            f'expected earliest, latest or a JSON object such as {{"t":{{"0":23,"1":-2}}}}; '
            f"got {value!r}",
        )
    offsets = parse_offsets_option(
        "startingOffsets", opts.get_json("startingOffsets"), allow_latest=not batch
    )  # batch=None (mode not known yet) accepts what either mode accepts
    return StartSpec("offsets", offsets=offsets)


def _parse_end(opts: Options, *, batch: bool | None) -> StartSpec:
    value = opts.get("endingOffsets")
    if value is None:
        return StartSpec("latest")
    if batch is False:
        raise OptionError("endingOffsets", "applies to batch reads only; remove it from readStream")
    v = value.strip().lower()
    if v == "latest":
        return StartSpec("latest")
    if v == "earliest":
        raise OptionError("endingOffsets", "'earliest' is not allowed; use latest or a JSON object")
    if not value.strip().startswith("{"):
        raise OptionError(
            "endingOffsets", f'expected latest or a JSON object such as {{"t":{{"0":50}}}}; got {value!r}'
        )
    offsets = parse_offsets_option(
        "endingOffsets", opts.get_json("endingOffsets"), allow_earliest=False
    )
    return StartSpec("offsets", offsets=offsets)


def parse_source_options(raw: dict[str, str], *, batch: bool | None) -> KafkaSourceOptions:
    """Validate everything that can be checked without a broker.

    `batch=None` runs the checks that hold in either mode (used before Spark says which).
    """
    opts = Options(raw)
    kafka_conf = librdkafka_conf(opts)
    subscription = _parse_subscription(opts)
    max_per_trigger = opts.get_int("maxOffsetsPerTrigger", minimum=1)
    min_per_trigger = opts.get_int("minOffsetsPerTrigger", minimum=1)
    if max_per_trigger and min_per_trigger and min_per_trigger > max_per_trigger:
        raise OptionError(
            "minOffsetsPerTrigger",
            f"({min_per_trigger}) must not exceed maxOffsetsPerTrigger ({max_per_trigger})",
        )
    starting = _parse_start(opts, batch=batch)
    return KafkaSourceOptions(
        kafka_conf=kafka_conf,
        subscription=subscription,
        starting=starting,
        ending=_parse_end(opts, batch=batch),
        timestamp_strategy=opts.get_choice(  # type: ignore[arg-type]
            "startingOffsetsByTimestampStrategy", ("error", "latest"), "error"
        ),
        max_offsets_per_trigger=max_per_trigger,
        min_offsets_per_trigger=min_per_trigger,
        max_trigger_delay_ms=opts.get_duration_ms("maxTriggerDelay", 15 * 60_000),
        min_partitions=opts.get_int("minPartitions", minimum=1),
        max_records_per_partition=opts.get_int("maxRecordsPerPartition", minimum=1),
        fail_on_data_loss=opts.get_bool("failOnDataLoss", True),
        include_headers=opts.get_bool("includeHeaders", False),
        poll_timeout_ms=opts.get_int("kafkaConsumer.pollTimeoutMs", 120_000, minimum=1),
        fetch_attempts=opts.get_int("fetchOffset.numRetries", 3, minimum=0) + 1,
        arrow_batch_rows=opts.get_int("arrowBatchRows", 20_000, minimum=1),
        fetch_retry_interval_ms=opts.get_int("fetchOffset.retryIntervalMs", 10, minimum=0),
    )
