"""The suite's Schema Registry (connectors/local/schema_registry.py), as confluent-kafka's own
client and serializers see it: the Confluent API, the wire format of each of the three schema
formats, BACKWARD compatibility, the secured variant, and `kafka-eos registry`."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
import uuid

import fastavro
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from connectors.local.schema_registry import CCOMPAT_PATH


def _topic() -> str:
    return f"registry-{uuid.uuid4().hex[:10]}"


def _avro(*fields: dict) -> str:
    return json.dumps({"type": "record", "name": "Reading", "namespace": "eos.test",
                       "fields": list(fields)})


SENSOR = {"name": "sensor", "type": "string"}
CELSIUS = {"name": "celsius", "type": "double"}


def test_it_answers_the_confluent_api_on_loopback_with_backward_compatibility(schema_registry):
    assert schema_registry.url.startswith("http://127.0.0.1:")
    assert schema_registry.url.endswith(CCOMPAT_PATH)
    assert schema_registry.request("/config") == (200, {"compatibilityLevel": "BACKWARD"})
    status, types = schema_registry.request("/schemas/types")
    assert status == 200 and {"AVRO", "PROTOBUF", "JSON"} <= set(types)
    client = SchemaRegistryClient({"url": schema_registry.url})
    subject = f"{_topic()}-value"
    registered = client.register_schema(subject, Schema(_avro(SENSOR), "AVRO"))
    assert subject in client.get_subjects()
    assert client.get_latest_version(subject).schema_id == registered


def test_avro_round_trips_through_confluents_serializers_with_the_wire_header(schema_registry):
    client = SchemaRegistryClient({"url": schema_registry.url})
    topic = _topic()
    ctx = SerializationContext(topic, MessageField.VALUE)
    record = {"sensor": "s-17", "celsius": 21.5}

    data = AvroSerializer(client, _avro(SENSOR, CELSIUS))(record, ctx)

    schema_id = client.get_latest_version(f"{topic}-value").schema_id
    assert data[0] == 0  # the magic byte
    assert int.from_bytes(data[1:5], "big") == schema_id
    writer = fastavro.parse_schema(json.loads(client.get_schema(schema_id).schema_str))
    assert fastavro.schemaless_reader(io.BytesIO(data[5:]), writer) == record
    assert AvroDeserializer(client)(data, ctx) == record


def test_an_incompatible_change_is_refused_with_409_a_compatible_one_is_not(schema_registry):
    client = SchemaRegistryClient({"url": schema_registry.url})
    subject = f"{_topic()}-value"
    first = client.register_schema(subject, Schema(_avro(SENSOR), "AVRO"))
    with_default = _avro(SENSOR, {**CELSIUS, "default": 0.0})
    second = client.register_schema(subject, Schema(with_default, "AVRO"))

    without_default = _avro(SENSOR, {**CELSIUS, "default": 0.0}, {"name": "site", "type": "string"})
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(subject, Schema(without_default, "AVRO"))

    assert refused.value.http_status_code == 409
    assert second != first
    assert client.get_versions(subject) == [1, 2]


def _protobuf_message_class(package: str):
    """A generated-code-free message class (no protoc here): name, count and a Timestamp."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

    proto = descriptor_pb2.FileDescriptorProto(
        name=f"{package}.proto", package=package, syntax="proto3",
        dependency=[timestamp_pb2.DESCRIPTOR.name])
    message = proto.message_type.add(name="Reading")
    field = descriptor_pb2.FieldDescriptorProto
    message.field.add(name="sensor", number=1, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    message.field.add(name="count", number=2, type=field.TYPE_INT64, label=field.LABEL_OPTIONAL)
    message.field.add(name="at", number=3, type=field.TYPE_MESSAGE, label=field.LABEL_OPTIONAL,
                      type_name=".google.protobuf.Timestamp")
    pool = descriptor_pool.Default()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.Reading"))


@pytest.mark.parametrize("schema_format", ["PROTOBUF", "JSON"])
def test_protobuf_and_json_schema_round_trip_too(schema_registry, schema_format):
    client = SchemaRegistryClient({"url": schema_registry.url})
    topic = _topic()
    ctx = SerializationContext(topic, MessageField.VALUE)
    if schema_format == "PROTOBUF":
        from confluent_kafka.schema_registry.protobuf import (
            ProtobufDeserializer,
            ProtobufSerializer,
        )

        reading_class = _protobuf_message_class(f"eos_{uuid.uuid4().hex[:8]}")
        record = reading_class(sensor="s-3", count=7)
        record.at.seconds = 1_700_000_000
        conf = {"use.deprecated.format": False}
        data = ProtobufSerializer(reading_class, client, conf)(record, ctx)
        back = ProtobufDeserializer(reading_class, conf)(data, ctx)
    else:
        from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer

        schema = ('{"$schema": "http://json-schema.org/draft-07/schema#", "title": "Reading", '
                  '"type": "object", "properties": {"sensor": {"type": "string"}, '
                  '"count": {"type": "integer"}}, "required": ["sensor"]}')
        record = {"sensor": "s-3", "count": 7}
        data = JSONSerializer(schema, client)(record, ctx)
        back = JSONDeserializer(schema, schema_registry_client=client)(data, ctx)

    assert back == record
    latest = client.get_latest_version(f"{topic}-value")
    assert latest.schema.schema_type == schema_format
    assert data[0] == 0 and int.from_bytes(data[1:5], "big") == latest.schema_id


def test_the_secured_registry_wants_its_ca_and_credentials(secured_schema_registry):
    registry = secured_schema_registry
    assert registry.url.startswith("https://127.0.0.1:")
    client = SchemaRegistryClient(registry.client_config())
    subject = f"{_topic()}-value"
    schema_id = client.register_schema(subject, Schema(_avro(SENSOR), "AVRO"))
    assert client.get_latest_version(subject).schema_id == schema_id

    no_retries = {**registry.client_config(), "max.retries": 0}
    anonymous = {k: v for k, v in no_retries.items() if k != "basic.auth.user.info"}
    with pytest.raises(SchemaRegistryError) as refused:
        SchemaRegistryClient(anonymous).get_subjects()
    assert refused.value.http_status_code == 401
    wrong = {**no_retries, "basic.auth.user.info": f"{registry.security.username}:x"}
    with pytest.raises(SchemaRegistryError) as refused:
        SchemaRegistryClient(wrong).get_subjects()
    assert refused.value.http_status_code == 401
    other_ca = {**no_retries, "ssl.ca.location": registry.security.other_ca_location}
    with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
        SchemaRegistryClient(other_ca).get_subjects()


def test_the_registry_command_serves_until_sigterm_and_takes_its_jvm_along():
    proc = subprocess.Popen([sys.executable, "-m", "connectors", "registry", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    deadline = time.monotonic() + 150
    try:
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip("\n"))
            if line.startswith("Running until Ctrl-C"):
                break
        urls = [ln.split(": ", 1)[1] for ln in lines if ln.startswith("schema registry url: ")]
        assert len(urls) == 1, lines
        url = urls[0]
        jvms = _children(proc.pid)
        assert len(jvms) == 1, lines
        assert SchemaRegistryClient({"url": url}).get_subjects() == []
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "kafka-eos registry: stopped" in out and "Traceback" not in err
    assert not os.path.exists(f"/proc/{jvms[0]}")


def _children(parent: int) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == parent:
                    found.append(int(pid))
        except (OSError, IndexError, ValueError):
            continue
    return found
