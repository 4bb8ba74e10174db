"""The `kafka-eos` sink's options, parsed once on the driver: the cluster (`kafka.*`), the topic,
the transactional id prefix, the flush and retry deadlines, and the Schema Registry formats of
the columns serialized into the Confluent wire format. Anything else is refused at start.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from connectors.core.kafka.client import RETRY_TIMEOUT_OPTION, RetryPolicy, librdkafka_conf
from connectors.core.kafka.format import FORMAT_NAME
from connectors.core.options import OptionError, Options
from connectors.core.schema_registry.sink_schema import (
    SINK_OPTION_PREFIXES,
    SinkRegistry,
    parse_sink_registries,
    sink_option_names,
)
from sinks.kafka.ids import batch_prefix, default_prefix

if TYPE_CHECKING:
    from sinks.two_phase_commit import SinkSettings

#: The sink's own options (besides the template's and `kafka.*`); anything else is refused.
OPTIONS = ("topic", "transactionalIdPrefix", "flushTimeout", RETRY_TIMEOUT_OPTION,
           *sink_option_names())
OPTION_PREFIXES = ("kafka.", *SINK_OPTION_PREFIXES)
_TEXT_OR_BYTES = (StringType, BinaryType)



@dataclass(frozen=True)
class KafkaSinkOptions:
    kafka_conf: dict[str, str] = field(repr=False)  # may hold secrets
    topic: str | None
    prefix: str
    flush_timeout_s: float
    #: kafkaRetryTimeout: every Kafka call of the tasks and the driver retries transient errors
    #: (a broker restarting, a coordinator moving) under this deadline.
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    #: "value" / "key" -> its Schema Registry format settings (valueFormat, keyFormat), for the
    #: struct columns serialized into the Confluent wire format
    registries: dict[str, SinkRegistry] = field(default_factory=dict)

    @property
    def bootstrap_servers(self) -> str:
        return self.kafka_conf["bootstrap.servers"]

    @classmethod
    def parse(cls, opts: Options, settings: SinkSettings, schema: StructType) -> "KafkaSinkOptions":
        conf = librdkafka_conf(opts)
        _check_transaction_timeout(conf.get("transaction.timeout.ms"))
        topic = opts.get("topic")
        registries = parse_sink_registries(opts, schema, topic)
        _check_schema(schema, topic, serialized=tuple(registries))
        if settings.batch_job:
            prefix = batch_prefix(opts.get("transactionalIdPrefix"), settings.job_id)
        else:
            prefix = opts.get("transactionalIdPrefix") or default_prefix(
                settings.checkpoint_location, conf["bootstrap.servers"], topic)
        retry = RetryPolicy.from_options(opts)
        # A flush waits out a broker restart as any other call does (librdkafka resends what
        # a restarted leader did not acknowledge), unless the user bounds it.
        flush_ms = opts.get_duration_ms("flushTimeout", int(retry.timeout_s * 1000))
        return cls(conf, topic, prefix, flush_ms / 1000, retry, registries)


def commit_budget(settings: SinkSettings, opts: Options, retry: RetryPolicy) -> SinkSettings:
    """The driver's commit retries follow kafkaRetryTimeout unless commitTimeout or
    commitRetries say otherwise: EndTxn waits out a coordinator that moved or a quorum being
    restored as the other Kafka calls do, rather than giving up after nine attempts."""
    changes: dict[str, int] = {}
    if "commitTimeout" not in opts:
        changes["commit_timeout_ms"] = max(settings.commit_timeout_ms, int(retry.timeout_s * 1000))
    if "commitRetries" not in opts:
        changes["commit_attempts"] = max(settings.commit_attempts, UNBOUNDED_COMMIT_ATTEMPTS)
    return dataclasses.replace(settings, **changes) if changes else settings


#: commitRetries unset: the deadline bounds the commit's retries, not their number.
UNBOUNDED_COMMIT_ATTEMPTS = 1_000_000


def _check_transaction_timeout(value: str | None) -> None:
    if value is not None and not (value.strip().isdigit() and int(value) > 0):
        raise OptionError("kafka.transaction.timeout.ms",
                          f"must be a positive number of milliseconds, not {value!r}")


def _check_schema(schema: StructType, topic_option: str | None,
                  serialized: tuple[str, ...] = ()) -> None:
    """The columns Spark's Kafka sink takes; `serialized` names the columns (value, key) that a
    Schema Registry format writes, whose struct type parse_sink_registries checked."""
    fields = {f.name: f.dataType for f in schema.fields}
    if "value" not in fields:
        raise OptionError("value", f"the stream needs a 'value' column (string or binary); it has {sorted(fields)}")
    for name in ("key", "value"):
        if name in fields and name not in serialized and not isinstance(fields[name], _TEXT_OR_BYTES):
            raise OptionError(name, f"column '{name}' must be string or binary, not {fields[name].simpleString()}")
    # As in Spark's Kafka sink, the `topic` option, when set, overrides any `topic` column,
    # which is then ignored whatever its type.
    if "topic" in fields and not topic_option and not isinstance(fields["topic"], StringType):
        raise OptionError("topic", f"column 'topic' must be string, not {fields['topic'].simpleString()}")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise OptionError("partition", f"column 'partition' must be int, not {fields['partition'].simpleString()}")
    if "headers" in fields:
        t = fields["headers"]
        ok = (
            isinstance(t, ArrayType) and isinstance(t.elementType, StructType)
            and [f.name for f in t.elementType.fields] == ["key", "value"]
            and isinstance(t.elementType.fields[0].dataType, StringType)
            and isinstance(t.elementType.fields[1].dataType, _TEXT_OR_BYTES)
        )
        if not ok:
            raise OptionError("headers", "column 'headers' must be array<struct<key:string,value:binary>>")
    if "topic" not in fields and not topic_option:
        raise OptionError("topic", "no topic: set .option(\"topic\", ...) or give the stream a 'topic' column")



__all__ = ["FORMAT_NAME", "OPTIONS", "OPTION_PREFIXES", "UNBOUNDED_COMMIT_ATTEMPTS",
           "KafkaSinkOptions", "commit_budget"]
