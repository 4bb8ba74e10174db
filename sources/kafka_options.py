"""The `kafka-eos` source's options, named as Spark's built-in Kafka source names them, so a
user switches formats by changing only the format string. Parsed once, when the DataSource is
built, so a bad option fails the query before anything runs.
"""

from __future__ import annotations

import logging
import re
import uuid
from dataclasses import dataclass, field
from typing import Literal

from connectors.core.kafka.client import RETRY_TIMEOUT_OPTION, RetryPolicy, librdkafka_conf
from connectors.core.options import OptionError, Options
from connectors.core.schema_registry.options import OPTION_PREFIX as REGISTRY_PREFIX
from connectors.core.schema_registry.options import RegistryOptions, registry_option_names
from connectors.core.paths import normalise
from sources.offsets import PartitionOffsets, parse_offsets_option
from connectors.core.kafka.format import FORMAT_NAME

log = logging.getLogger(__name__)

SUBSCRIPTION_OPTIONS = ("subscribe", "subscribePattern", "assign")

#: Every option the source reads, named as Spark's Kafka source names them (plus ours), besides
#: `kafka.*` (handed to librdkafka). Anything else fails at `.load()` naming the closest one.
#: `path` (from `.load(path)`) is never refused: Spark's Kafka source ignores it too.
KNOWN_OPTIONS = (
    *SUBSCRIPTION_OPTIONS,
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "startingOffsets",
    "startingOffsetsByTimestampStrategy",
    "endingTimestamp",
    "endingOffsetsByTimestamp",
    "endingOffsets",
    "failOnDataLoss",
    "kafkaConsumer.pollTimeoutMs",
    "kafkaConsumer.cache.capacity",  # Spark: spark.kafka.consumer.cache.capacity
    "kafkaConsumer.cache.timeout",  # Spark: spark.kafka.consumer.cache.timeout
    "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs",
    RETRY_TIMEOUT_OPTION,
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "minPartitions",
    "maxRecordsPerPartition",
    "targetTasksPerBatch",  # ours: tasks small ranges are packed into (sources/task_packing.py)
    "maxPartitionsPerTask",  # ours: the most ranges one packed task reads
    "groupIdPrefix",
    "includeHeaders",
    "arrowBatchRows",  # ours: rows per Arrow batch handed to Spark
    "commitOffsetsToGroup",  # ours: commit each completed batch's end offsets to kafka.group.id
    "taskMetricsLocation",  # ours: where tasks leave read times for the batch metrics line
    "readMode",  # ours: tasks (default) or driver (sources/driver_reader.py)
    # ours: Schema Registry formats of the value and key (connectors/core/schema_registry)
    *registry_option_names(),
)
#: Option families the source accepts whatever follows the prefix: Kafka and Schema Registry
#: client settings.
OPTION_PREFIXES = ("kafka.", REGISTRY_PREFIX)

#: Kafka client settings Spark's Kafka source refuses, refused here for the same reasons (the
#: consumers are librdkafka's, but what the settings would do is just as wrong).
UNSUPPORTED_KAFKA_OPTIONS = {
    "kafka.auto.offset.reset": (
        "is not supported: set the source option 'startingOffsets' to 'earliest' or 'latest' "
        "instead. The query's offsets are Spark's state, not the consumer's; a partition whose "
        "records were removed is reported as data loss (see failOnDataLoss), never skipped"
    ),
    "kafka.enable.auto.commit": (
        "is not supported: the source never commits offsets to Kafka; they are the query's "
        "checkpointed state"
    ),
    "kafka.key.deserializer": (
        "is not supported: keys are read as bytes (the 'key' column is binary), or through a "
        "Schema Registry with keyFormat=avro|protobuf|json-schema; otherwise deserialize them "
        "with DataFrame operations, e.g. CAST(key AS STRING)"
    ),
    "kafka.value.deserializer": (
        "is not supported: values are read as bytes (the 'value' column is binary), or through "
        "a Schema Registry with valueFormat=avro|protobuf|json-schema; otherwise deserialize "
        "them with DataFrame operations, e.g. CAST(value AS STRING)"
    ),
    "kafka.interceptor.classes": (
        "is not supported: interceptors could change what is read, so the source would no "
        "longer read each record exactly as the broker holds it"
    ),
}

#: Spark's default consumer group prefixes (KafkaSourceProvider): streaming and batch.
DEFAULT_GROUP_ID_PREFIX_STREAM = "spark-kafka-source"
DEFAULT_GROUP_ID_PREFIX_BATCH = "spark-kafka-relation"

#: Options Spark's Kafka source ignores in batch queries, with a warning; so does this one.
STREAMING_ONLY_OPTIONS = ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay")
#: Our own options that only a stream has a use for: ignored in batch reads, with a warning.
OWN_STREAMING_ONLY_OPTIONS = ("commitOffsetsToGroup", "taskMetricsLocation", "readMode")

#: readMode: Spark tasks read a micro-batch's ranges (in parallel, on executors), or the driver
#: reads the whole micro-batch itself (sources/driver_reader.py: no Python task per batch, for
#: small batches at short triggers).
READ_MODES = ("tasks", "driver")
#: With readMode=driver a batch is held in the driver's Python process: maxOffsetsPerTrigger
#: defaults to this, so a backlog (a first start at earliest, a query down for hours) is read
#: in bounded batches instead of into the driver's memory at once.
DRIVER_MODE_MAX_OFFSETS_PER_TRIGGER = 100_000

#: taskMetricsLocation's value that turns the tasks' reports off.
TASK_METRICS_OFF = "none"


@dataclass(frozen=True)
class Subscription:
    kind: Literal["subscribe", "subscribePattern", "assign"]
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assignment: tuple[tuple[str, int], ...] = ()

    def describe(self, most: int = 3) -> str:
        """For logs and metrics lines: at most `most` topics named, whatever the
        subscription's size (a batch's line must not grow with hundreds of topics)."""
        if self.kind == "subscribePattern":
            return f"subscribePattern={self.pattern!r}"
        if self.kind == "assign":
            if len(self.assignment) <= most:
                return f"assign={sorted(self.assignment)}"
            topics = sorted({t for t, _ in self.assignment})
            return (f"assign=[{len(self.assignment)} partitions of {topics[:most]}"
                    + (f" and {len(topics) - most} more topic(s)]" if len(topics) > most else "]"))
        if len(self.topics) <= most:
            return f"subscribe={list(self.topics)}"
        return f"subscribe={list(self.topics[:most])} and {len(self.topics) - most} more topic(s)"


@dataclass(frozen=True)
class StartSpec:
    """Where a query or batch read starts (or, for the ending options, ends).

    `timestamp` is startingTimestamp / endingTimestamp (one time for every partition),
    `timestamps` startingOffsetsByTimestamp / endingOffsetsByTimestamp (one per partition).
    """

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
    #: Idle consumers a Python worker keeps for later tasks (0: none), and how long an idle one
    #: is kept (sources/consumer_pool.py).
    consumer_cache_capacity: int = 64
    consumer_cache_timeout_ms: int = 5 * 60_000
    #: The options that decided `starting` and `ending` (Spark's precedence), for messages.
    starting_option: str = "startingOffsets"
    ending_option: str = "endingOffsets"
    #: commitOffsetsToGroup: the group every completed batch's end offsets are committed to
    #: (kafka.group.id), for lag tools only; None when off. Never read back.
    commit_group: str | None = None
    #: taskMetricsLocation: None (the default: a directory in the driver's temp dir), "none"
    #: (no task reports), or a normalised path / URI shared by executors and the driver.
    task_metrics_location: str | None = None
    #: readMode (READ_MODES).
    read_mode: str = "tasks"
    #: kafkaRetryTimeout: every look-up and read retries transient errors under this deadline.
    retry_policy: RetryPolicy = field(default_factory=RetryPolicy)
    #: targetTasksPerBatch (None, unset: sized by the batch's records) and maxPartitionsPerTask
    #: (None: no bound): how a batch's ranges are packed into Spark tasks
    #: (sources/task_packing.py).
    target_tasks: int | None = None
    max_partitions_per_task: int | None = None
    #: valueFormat / keyFormat and the registry options of each side (binary: Spark's row).
    value_registry: RegistryOptions = field(
        default_factory=lambda: RegistryOptions(side="value"), repr=False)
    key_registry: RegistryOptions = field(
        default_factory=lambda: RegistryOptions(side="key"), repr=False)

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


def _chosen(opts: Options, names: tuple[str, str, str], *, warn: bool) -> str | None:
    """The option of `names` (in Spark's order of preference) that decides, if any is given.

    Spark: startingTimestamp over startingOffsetsByTimestamp over startingOffsets, and the same
    for the ending ones. The others are not read at all (as in Spark), with a warning.
    """
    given = [n for n in names if n in opts]
    if len(given) > 1 and warn:
        log.warning(
            "kafka-eos: %s takes precedence over %s (as in Spark's Kafka source); %s ignored",
            given[0], " and ".join(given[1:]), "they are" if len(given) > 2 else "it is",
        )
    return given[0] if given else None


STARTING_OPTIONS = ("startingTimestamp", "startingOffsetsByTimestamp", "startingOffsets")
ENDING_OPTIONS = ("endingTimestamp", "endingOffsetsByTimestamp", "endingOffsets")


def _parse_timestamps(opts: Options, chosen: str) -> StartSpec:
    if chosen in ("startingTimestamp", "endingTimestamp"):
        return StartSpec("timestamp", timestamp_ms=opts.get_int(chosen, minimum=0))
    return StartSpec(
        "timestamps",
        timestamps=parse_offsets_option(
            chosen, opts.get_json(chosen), allow_earliest=False, allow_latest=False
        ),
    )


def _parse_start(opts: Options, *, batch: bool | None) -> StartSpec:
    chosen = _chosen(opts, STARTING_OPTIONS, warn=batch is not None)
    if chosen is not None and chosen != "startingOffsets":
        return _parse_timestamps(opts, chosen)
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
    if batch is False:
        # Spark refuses endingOffsets and endingOffsetsByTimestamp in streaming queries (and
        # ignores endingTimestamp there); none of them can be honoured by a stream.
        for name in ENDING_OPTIONS:
            if name in opts:
                raise OptionError(name, "applies to batch reads only; remove it from readStream")
    chosen = _chosen(opts, ENDING_OPTIONS, warn=batch is not None)
    if chosen is not None and chosen != "endingOffsets":
        return _parse_timestamps(opts, chosen)
    value = opts.get("endingOffsets")
    if value is None:
        return StartSpec("latest")
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


def _check_names(opts: Options) -> None:
    """Refuse Spark's refused Kafka settings with the reason, then any unknown option."""
    for name, why in UNSUPPORTED_KAFKA_OPTIONS.items():
        if name in opts:
            raise OptionError(name, why)
    opts.reject_unknown(KNOWN_OPTIONS, prefixes=OPTION_PREFIXES, format_name=FORMAT_NAME,
                        docs="docs/source.md#options")


def _group_id(opts: Options, *, batch: bool | None) -> str:
    """The `group.id` of every consumer the source creates (metadata look-ups and tasks).

    As in Spark: `kafka.group.id` is used as-is (and `groupIdPrefix` ignored); otherwise
    `<groupIdPrefix>-<random UUID>`, one per reader, so every consumer of a query or batch read
    carries the same id. The consumers use assign() and never commit, so the id names them
    (for the broker's ACLs, quotas and logs) but never makes them members of a group.
    """
    given = opts.get("kafka.group.id")
    if given is not None:
        if not given.strip():
            raise OptionError(
                "kafka.group.id", "must not be empty; remove it to get a generated group id"
            )
        if batch is not None:
            log.warning(
                "kafka-eos: kafka.group.id is set, so every consumer of this source uses "
                "group.id=%r. Spark warns that queries sharing a group id can interfere with each "
                "other; this source never joins the group (assign()) and commits offsets to it "
                "only with commitOffsetsToGroup=true (for lag monitoring, never read back), but "
                "every query given this id is seen by the broker as the same group",
                given,
            )
            if "groupIdPrefix" in opts:
                log.warning("kafka-eos: groupIdPrefix is ignored because kafka.group.id is set")
        return given
    default = DEFAULT_GROUP_ID_PREFIX_BATCH if batch else DEFAULT_GROUP_ID_PREFIX_STREAM
    prefix = opts.get("groupIdPrefix", default)
    if not prefix.strip():
        raise OptionError("groupIdPrefix", f"must not be empty (default {default!r})")
    return f"{prefix.strip()}-{uuid.uuid4()}"


def _commit_group(opts: Options, *, batch: bool | None) -> str | None:
    """commitOffsetsToGroup: the group to commit to, which must be named by kafka.group.id (a
    generated `<groupIdPrefix>-<uuid>` changes at every start: no dashboard could follow it)."""
    if not opts.get_bool("commitOffsetsToGroup", False) or batch:
        return None
    group = opts.get("kafka.group.id")
    if group is None:
        raise OptionError(
            "commitOffsetsToGroup",
            "needs option 'kafka.group.id': the consumer group the end offsets of each batch "
            "are committed to, so that kafka-consumer-groups and lag monitors can follow the "
            "query (a generated groupIdPrefix id changes at every start). Set kafka.group.id, "
            "or remove commitOffsetsToGroup",
        )
    return group.strip()


def _task_metrics_location(opts: Options, *, batch: bool | None) -> str | None:
    name = "taskMetricsLocation"
    value = opts.get(name)
    if value is None or batch:
        return None
    if value.strip().lower() == TASK_METRICS_OFF:
        return TASK_METRICS_OFF
    return normalise(name, value)


def _cache_timeout_ms(opts: Options) -> int:
    name = "kafkaConsumer.cache.timeout"
    value = opts.get_duration_ms(name, 5 * 60_000)
    if value <= 0:
        raise OptionError(name, "must be a positive duration such as '5m' or '30s' (set "
                          "kafkaConsumer.cache.capacity=0 to keep no idle consumers)")
    return value


def parse_source_options(raw: dict[str, str], *, batch: bool | None) -> KafkaSourceOptions:
    """Validate everything that can be checked without a broker.

    `batch=None` runs the checks that hold in either mode (used before Spark says which).
    """
    opts = Options(raw)
    _check_names(opts)
    kafka_conf = librdkafka_conf(opts)
    kafka_conf["group.id"] = _group_id(opts, batch=batch)
    subscription = _parse_subscription(opts)
    read_mode = opts.get_choice("readMode", READ_MODES, "tasks")
    max_per_trigger = opts.get_int("maxOffsetsPerTrigger", minimum=1)
    if read_mode == "driver" and max_per_trigger is None and not batch:
        max_per_trigger = DRIVER_MODE_MAX_OFFSETS_PER_TRIGGER
    min_per_trigger = opts.get_int("minOffsetsPerTrigger", minimum=1)
    if max_per_trigger and min_per_trigger and min_per_trigger > max_per_trigger:
        raise OptionError(
            "minOffsetsPerTrigger",
            f"({min_per_trigger}) must not exceed maxOffsetsPerTrigger ({max_per_trigger})",
        )
    starting = _parse_start(opts, batch=batch)
    if batch:
        for name in STREAMING_ONLY_OPTIONS:
            if name in opts:
                log.warning("kafka-eos: %s applies to streaming queries only; ignored in this "
                            "batch read (as in Spark's Kafka source)", name)
        for name in OWN_STREAMING_ONLY_OPTIONS:
            if name in opts:
                log.warning("kafka-eos: %s applies to streaming queries only; ignored in this "
                            "batch read", name)
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
        consumer_cache_capacity=opts.get_int("kafkaConsumer.cache.capacity", 64, minimum=0),
        consumer_cache_timeout_ms=_cache_timeout_ms(opts),
        starting_option=_chosen(opts, STARTING_OPTIONS, warn=False) or "startingOffsets",
        ending_option=_chosen(opts, ENDING_OPTIONS, warn=False) or "endingOffsets",
        commit_group=_commit_group(opts, batch=batch),
        task_metrics_location=_task_metrics_location(opts, batch=batch),
        read_mode=read_mode,
        retry_policy=RetryPolicy.from_options(opts),
        target_tasks=opts.get_int("targetTasksPerBatch", minimum=1),
        max_partitions_per_task=opts.get_int("maxPartitionsPerTask", minimum=1),
        value_registry=RegistryOptions.parse(opts, side="value"),
        key_registry=RegistryOptions.parse(opts, side="key"),
    )
