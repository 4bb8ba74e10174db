"""`demo --format avro`: the demo's events and its enriched output in the Confluent wire format,
with their schemas in a Schema Registry, written and read back by confluent-kafka's own
`AvroSerializer` and `AvroDeserializer` (not by the connectors' code, which the demo checks).

The registry is a local one (`connectors.local.schema_registry`, started by the demo) or the
user's (`--schema-registry-url`). Its URL may carry `user:password@`: it is shown only through
`safe_url`, and handed to the pipeline process in the environment (`ENV`), never in argv.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import datetime
from typing import Any

from connectors.core.redaction import redact_text
from connectors.demo.events import ACTIONS

#: The demo's formats: `json` (the value as JSON text, read as Spark's binary row) or `avro`.
FORMATS = ("json", "avro")
#: The environment variable handing the registry URL to the pipeline process.
ENV = "KAFKA_EOS_DEMO_SCHEMA_REGISTRY_URL"
#: The record name the pipeline's kafka-eos sink derives its output schema under.
OUTPUT_RECORD = "kafka_eos.demo.EnrichedEvent"

#: The input events' schema (connectors.demo.events.Event): `action` an enum and `event_time`
#: a timestamp-millis, so the rows show Spark's mapping (string, timestamp) as a user's would.
EVENT_SCHEMA = json.dumps({
    "type": "record",
    "name": "Event",
    "namespace": "kafka_eos.demo",
    "doc": "A user's action in the kafka-eos demo's shop.",
    "fields": [
        {"name": "event_id", "type": "long"},
        {"name": "user_id", "type": "long"},
        {"name": "action", "type": {"type": "enum", "name": "Action",
                                    "symbols": list(ACTIONS)}},
        {"name": "amount", "type": "double"},
        {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
})


def safe_url(url: str) -> str:
    """The URL as the demo prints it: without `user:password@`."""
    from connectors.core.schema_registry.options import url_without_credentials

    return redact_text(url_without_credentials(url))


def to_env(url: str | None) -> dict[str, str]:
    return {ENV: url} if url else {}


def from_env(environ: dict[str, str] | None = None) -> str | None:
    """The URL handed over by `to_env`, removed from the environment (Spark's processes do not
    inherit it; the pipeline passes it as the `schema.registry.url` option)."""
    environ = os.environ if environ is None else environ
    return environ.pop(ENV, None) or None


def client(url: str):
    """confluent-kafka's own registry client, failing fast: the demo says what went wrong."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return SchemaRegistryClient({"url": url, "timeout": 10, "max.retries": 0})


def value_subject(topic: str) -> str:
    """Confluent's TopicNameStrategy, what the serializers and the connectors default to."""
    return f"{topic}-value"


def register_input_schema(url: str, topic: str) -> int:
    """Register the events' schema before anything runs: the pipeline's source reads the
    subject's latest version at query start, which may come before the producer's first
    record. The producer's serializer then finds it registered (same id)."""
    from confluent_kafka.schema_registry import Schema

    try:
        return client(url).register_schema(value_subject(topic), Schema(EVENT_SCHEMA, "AVRO"))
    except Exception as exc:
        raise RegistryUnreachable(
            f"cannot register {value_subject(topic)} at {safe_url(url)}: "
            f"{redact_text(f'{type(exc).__name__}: {exc}')}") from None


def check_reachable(url: str) -> None:
    """List the registry's subjects; raises with a message naming the URL without its
    credentials (and no secret from the client's error)."""
    try:
        client(url).get_subjects()
    except Exception as exc:
        raise RegistryUnreachable(
            f"cannot reach the Schema Registry at {safe_url(url)}: "
            f"{redact_text(f'{type(exc).__name__}: {exc}')}") from None


class RegistryUnreachable(RuntimeError):
    """The registry did not answer its Confluent API (message: URL without credentials)."""


def event_serializer(url: str, topic: str) -> Callable[[Any], bytes]:
    """An Event -> its Confluent-wire-format Avro value, by confluent-kafka's AvroSerializer."""
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    serializer = AvroSerializer(client(url), EVENT_SCHEMA)
    context = SerializationContext(topic, MessageField.VALUE)

    def serialize(event: Any) -> bytes:
        record = dict(event.__dict__, event_time=datetime.fromisoformat(event.event_time))
        return serializer(record, context)

    return serialize


def output_deserializer(url: str, topic: str) -> Callable[[bytes], dict]:
    """The pipeline's Kafka output value -> a dict, by confluent-kafka's AvroDeserializer (the
    writer schema looked up by the id in each record)."""
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    deserializer = AvroDeserializer(client(url))
    context = SerializationContext(topic, MessageField.VALUE)
    return lambda value: deserializer(value, context)


def latest_schema_ids(url: str, topics: list[str]) -> dict[str, int]:
    """Each topic's value subject -> the id of its latest version (for the run's record)."""
    registry = client(url)
    try:
        return {value_subject(t): registry.get_latest_version(value_subject(t)).schema_id
                for t in topics}
    except Exception as exc:
        raise RegistryUnreachable(
            f"cannot read the subjects' latest versions at {safe_url(url)}: "
            f"{redact_text(f'{type(exc).__name__}: {exc}')}") from None
