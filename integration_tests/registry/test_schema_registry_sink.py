"""`kafka-eos` as a sink of Schema Registry formats, against a real registry and broker: what it
writes is read back field by field by confluent-kafka's own deserializers (a plain consumer,
read_committed), for Avro, Protobuf and JSON Schema; a row that does not fit fails the batch
with nothing of it visible; `useLatestVersion` writes with a newer registered schema."""

from __future__ import annotations

import base64
import datetime as dt
import json
import uuid
from decimal import Decimal

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.serialization import MessageField, SerializationContext

from connectors.local.kafka_oracle import committed, read_partition
from integration_tests.support.kafka_data import create_topic, produce, unique_topic

FORMATS = ("avro", "protobuf", "json-schema")
UTC = dt.timezone.utc

#: The rows written: each field computed by Spark from the source record's coordinates, and
#: by `expected_row` independently in Python.
VALUE_SQL = """struct(
    offset + 1000 * partition AS id,
    IF(offset % 3 = 0, NULL, CAST(key AS STRING)) AS name,
    CAST(offset / 4 AS DECIMAL(10,2)) AS amount,
    date_add(DATE'2024-01-01', CAST(offset AS INT)) AS day,
    timestamp_micros(1704067200000000 + offset * 1001) AS ts,
    array(concat('p', CAST(partition AS STRING)), 'x') AS tags,
    map('p', partition) AS attrs,
    IF(offset % 4 = 1, NULL, named_struct('city', 'Oslo', 'zip', CAST(offset AS INT))) AS addr
) AS value"""


def expected_row(partition: int, offset: int, key: bytes) -> dict:
    return {
        "id": offset + 1000 * partition,
        "name": None if offset % 3 == 0 else key.decode(),
        "amount": Decimal(offset) / 4,
        "day": dt.date(2024, 1, 1) + dt.timedelta(days=offset),
        "ts": dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(microseconds=offset * 1001),
        "tags": [f"p{partition}", "x"],
        "attrs": {"p": partition},
        "addr": None if offset % 4 == 1 else {"city": "Oslo", "zip": offset},
    }


@pytest.fixture(scope="module")
def registry_client(schema_registry_url):
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return SchemaRegistryClient({"url": schema_registry_url})


@pytest.fixture(scope="module")
def source_topic(bootstrap):
    """Two partitions of keyed records, shared by the module's streaming queries."""
    topic = unique_topic("srsrc")
    create_topic(bootstrap, topic, 2)
    return topic, produce(bootstrap, topic, 2, 12)


def _stream(spark, bootstrap, topic):
    return (spark.readStream.format("kafka-eos")
            .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
            .option("startingOffsets", "earliest").load())


def _run(df, bootstrap, registry_url, tmp_path, **options):
    writer = (df.writeStream.format("kafka-eos")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("schema.registry.url", registry_url)
              .option("checkpointLocation", str(tmp_path / "ckpt")))
    for k, v in options.items():
        writer = writer.option(k, v)
    query = writer.trigger(availableNow=True).start()
    try:
        query.awaitTermination(300)
    except Exception:  # noqa: BLE001 (the test reads query.exception())
        pass
    return query


def read_back(bootstrap: str, topic: str, deserialize_value, deserialize_key=None) -> list:
    """Every record of `topic` a read_committed consumer sees, deserialized:
    [(partition, offset, key, value)] (raw bytes kept for the wire header under `.raw`)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        out, at_end = [], set()
        while len(at_end) < len(parts):
            msg = consumer.poll(10)
            assert msg is not None, f"no end of {topic} reached (at end: {sorted(at_end)})"
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                at_end.add(msg.partition())
                continue
            value_ctx = SerializationContext(topic, MessageField.VALUE)
            key = msg.key()
            if deserialize_key is not None:
                key = deserialize_key(key, SerializationContext(topic, MessageField.KEY))
            out.append((msg.partition(), msg.offset(), key,
                        deserialize_value(msg.value(), value_ctx), msg.value()))
        return out
    finally:
        consumer.close()


def deserializer(fmt: str, client, subject: str):
    """confluent-kafka's own deserializer; for Protobuf its message class is built from the
    schema the registry holds (not from the sink's code)."""
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer

    if fmt == "avro":
        return AvroDeserializer(client)
    if fmt == "json-schema":
        return JSONDeserializer(None, schema_registry_client=client)
    return ProtobufDeserializer(message_class(client, subject), {}, schema_registry_client=client)


def message_class(client, subject: str, name: str | None = None):
    from confluent_kafka.schema_registry.common.protobuf import _init_pool
    from google.protobuf import descriptor_pb2, descriptor_pool
    from google.protobuf.message_factory import GetMessageClass

    registered = client.get_latest_version(subject, fmt="serialized")
    fdp = descriptor_pb2.FileDescriptorProto.FromString(
        base64.b64decode(registered.schema.schema_str))
    pool = descriptor_pool.DescriptorPool()
    _init_pool(pool)
    pool.Add(fdp)
    package = f"{fdp.package}." if fdp.package else ""
    return GetMessageClass(pool.FindMessageTypeByName(name or package + fdp.message_type[0].name))


def as_plain(fmt: str, value) -> dict:
    """A deserialized value as the Python values `expected_row` gives, field by field."""
    if fmt == "avro":
        return value
    if fmt == "json-schema":
        out = dict(value)
        out["amount"] = Decimal(str(out["amount"])) if out["amount"] is not None else None
        out["day"] = dt.date.fromisoformat(out["day"]) if out["day"] else None
        out["ts"] = dt.datetime.fromisoformat(out["ts"]) if out["ts"] else None
        return out
    from confluent_kafka.schema_registry.common.protobuf import protobuf_to_decimal

    return {
        "id": value.id,
        "name": value.name if value.HasField("name") else None,
        "amount": protobuf_to_decimal(value.amount) if value.HasField("amount") else None,
        "day": dt.date(value.day.year, value.day.month, value.day.day)
        if value.HasField("day") else None,
        "ts": value.ts.ToDatetime(tzinfo=UTC) if value.HasField("ts") else None,
        "tags": list(value.tags),
        "attrs": dict(value.attrs),
        "addr": {"city": value.addr.city, "zip": value.addr.zip}
        if value.HasField("addr") else None,
    }


def schema_id_of(raw: bytes) -> int:
    assert raw[:1] == b"\x00", "no magic byte"
    return int.from_bytes(raw[1:5], "big")


@pytest.mark.parametrize("fmt", FORMATS)
def test_confluent_deserializers_read_what_the_sink_wrote(
        fmt, spark, bootstrap, schema_registry_url, registry_client, source_topic, tmp_path):
    topic, records = source_topic
    out = unique_topic(f"sr-{fmt}")
    create_topic(bootstrap, out, 2)
    columns = [VALUE_SQL]
    options = {"topic": out, "valueFormat": fmt}
    if fmt == "avro":  # the key too: a struct key through keyFormat
        columns.append("struct(partition AS p, offset AS o) AS key")
        options["keyFormat"] = "avro"
    else:
        columns.append("key")
    q = _run(_stream(spark, bootstrap, topic).selectExpr(*columns), bootstrap,
             schema_registry_url, tmp_path, **options)
    assert q.exception() is None, q.exception()

    registered = registry_client.get_latest_version(f"{out}-value")
    key_deserializer = deserializer("avro", registry_client, f"{out}-key") if fmt == "avro" \
        else None
    got = read_back(bootstrap, out, deserializer(fmt, registry_client, f"{out}-value"),
                    key_deserializer)
    assert len(got) == len(records)
    by_source = {}
    for _, _, key, value, raw in got:
        assert schema_id_of(raw) == registered.schema_id
        if fmt == "avro":
            source = (key["p"], key["o"])
        else:
            source = next((r.partition, r.offset) for r in records if r.key == key)
        by_source[source] = as_plain(fmt, value)
    assert sorted(by_source) == sorted((r.partition, r.offset) for r in records)
    for r in records:
        assert by_source[(r.partition, r.offset)] == expected_row(r.partition, r.offset, r.key), \
            f"source record {r.partition}/{r.offset}"


#: The registered schemas a row's `color` must fit: an enum of RED and GREEN in each format.
def _color_schema(fmt: str, *, with_note: bool = False, as_text: bool = False) -> tuple[str, str]:
    if fmt == "avro":
        fields = [{"name": "id", "type": "long"},
                  {"name": "color", "type": {"type": "enum", "name": "Color",
                                             "symbols": ["RED", "GREEN"]}}]
        if with_note:
            fields.append({"name": "note", "type": "string", "default": "n/a"})
        return json.dumps({"type": "record", "name": "Paint", "namespace": "shop",
                           "fields": fields}), "AVRO"
    if fmt == "json-schema":
        props = {"id": {"type": "integer"}, "color": {"enum": ["RED", "GREEN"]}}
        if with_note:
            props["note"] = {"type": "string"}
        return json.dumps({"$schema": "http://json-schema.org/draft-07/schema#", "title": "Paint",
                           "type": "object", "properties": props, "required": ["id", "color"],
                           "additionalProperties": False}), "JSON"
    if as_text:  # as a Java producer or a user registers it
        note = "\n  string note = 3;" if with_note else ""
        return ('syntax = "proto3";\npackage shop;\nenum Color {\n  RED = 0;\n  GREEN = 1;\n}\n'
                f'message Paint {{\n  int64 id = 1;\n  Color color = 2;{note}\n}}\n'), "PROTOBUF"
    # as confluent-kafka's ProtobufSerializer registers it: a base64 FileDescriptorProto
    from google.protobuf import descriptor_pb2 as d

    fdp = d.FileDescriptorProto(name="shop/paint.proto", package="shop", syntax="proto3")
    enum = fdp.enum_type.add(name="Color")
    enum.value.add(name="RED", number=0)
    enum.value.add(name="GREEN", number=1)
    msg = fdp.message_type.add(name="Paint")
    F = d.FieldDescriptorProto
    msg.field.add(name="id", number=1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    msg.field.add(name="color", number=2, type=F.TYPE_ENUM, type_name=".shop.Color",
                  label=F.LABEL_OPTIONAL)
    if with_note:
        msg.field.add(name="note", number=3, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    return base64.b64encode(fdp.SerializeToString()).decode(), "PROTOBUF"


def _register(client, subject: str, fmt: str, *, with_note: bool = False,
              as_text: bool = False) -> int:
    from confluent_kafka.schema_registry import Schema

    text, schema_type = _color_schema(fmt, with_note=with_note, as_text=as_text)
    return client.register_schema(subject, Schema(text, schema_type))


@pytest.mark.parametrize("fmt", FORMATS)
def test_use_latest_version_writes_with_a_newer_registered_schema(
        fmt, spark, bootstrap, schema_registry_url, registry_client, tmp_path):
    """A batch write (df.write) with useLatestVersion: version 2 adds `note`, which the column
    lacks; every record carries version 2's id and reads back with the field's default."""
    out = unique_topic(f"srl-{fmt}")
    create_topic(bootstrap, out, 1)
    subject = f"{out}-value"
    # Protobuf's first version as .proto text: Apicurio 3.0.x cannot add a version after one
    # registered as a base64 descriptor (docs/schema-registry.md)
    first = _register(registry_client, subject, fmt, as_text=True)
    second = _register(registry_client, subject, fmt, with_note=True)
    assert second != first
    df = spark.range(6).selectExpr(
        "struct(id, IF(id % 2 = 0, 'RED', 'GREEN') AS color) AS value")
    (df.write.format("kafka-eos").mode("append")
     .option("kafka.bootstrap.servers", bootstrap).option("topic", out)
     .option("schema.registry.url", schema_registry_url)
     .option("valueFormat", fmt).option("useLatestVersion", "true").save())

    got = read_back(bootstrap, out, deserializer(fmt, registry_client, subject))
    assert [schema_id_of(raw) for *_, raw in got] == [second] * 6
    rows = []
    for *_, value, _ in got:
        if fmt == "protobuf":
            color = value.DESCRIPTOR.fields_by_name["color"].enum_type.values_by_number[
                value.color].name
            rows.append((value.id, color, value.note))
        else:
            rows.append((value["id"], value["color"], value.get("note")))
    note = {"avro": "n/a", "protobuf": "", "json-schema": None}[fmt]
    assert sorted(rows) == [(i, "RED" if i % 2 == 0 else "GREEN", note) for i in range(6)]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_row_that_does_not_fit_fails_the_batch_and_nothing_is_visible(
        fmt, spark, bootstrap, schema_registry_url, registry_client, source_topic, tmp_path):
    """One source row's color is not a symbol of the registered enum: the query fails naming
    the field and the row, and no record of the batch is committed (the other partition's
    transaction is aborted by the exactly-once machinery)."""
    topic, records = source_topic
    out = unique_topic(f"srbad-{fmt}")
    create_topic(bootstrap, out, 2)
    _register(registry_client, f"{out}-value", fmt)
    bad = max(r.offset for r in records if r.partition == 1)
    df = _stream(spark, bootstrap, topic).selectExpr(
        "topic", "partition", "offset",
        f"struct(offset AS id, IF(partition = 1 AND offset = {bad}, 'BLUE', 'RED') AS color) "
        "AS value")
    q = _run(df, bootstrap, schema_registry_url, tmp_path, topic=out, valueFormat=fmt,
             useLatestVersion="true")
    error = str(q.exception())
    assert "field 'value.color'" in error, error
    assert f"partition 1 offset {bad}" in error, error
    assert committed(bootstrap, out) == []
    # Beyond an empty committed read: no transaction of the failed batch is left open (a task
    # that Spark cancelled when the other failed must not leave its transaction to the
    # timeout), and what went out was aborted. Whether the healthy task wrote before Spark
    # cancelled it is a race (avro: it did in the runs here; protobuf and JSON Schema: not),
    # so the aborted count is printed, not asserted.
    parts = [read_partition(bootstrap, out, p) for p in range(2)]
    assert [p.open for p in parts] == [[], []], "a transaction of the failed batch is open"
    print(f"\n{fmt}: aborted records per output partition {[len(p.aborted) for p in parts]}")


@pytest.mark.parametrize("fmt", ["avro", "json-schema"])
def test_a_nullable_field_added_to_the_column_registers_a_new_version(
        fmt, schema_registry_url, registry_client):
    """What a restarted query with one more nullable field does at its start (the driver's
    step, without Spark): the derived schema is a new, BACKWARD-compatible version of the
    subject; a required field added is refused by the registry, naming the subject."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from connectors.core.options import OptionError, Options
    from connectors.core.schema_registry.client import clear_caches
    from connectors.core.schema_registry.sink_schema import parse_sink_registries, resolve_plan

    assert registry_client.get_compatibility() == "BACKWARD"
    topic = unique_topic(f"srevo-{fmt}")
    v1 = StructType([StructField("id", LongType(), False), StructField("name", StringType())])

    def plan(fields: list) -> int:
        opts = Options({"schema.registry.url": schema_registry_url, "valueFormat": fmt})
        column = StructType([StructField("value", StructType(fields))])
        clear_caches()
        return resolve_plan(parse_sink_registries(opts, column, topic)["value"], topic).schema_id

    first = plan(v1.fields)
    assert plan(v1.fields) == first  # the same schema keeps its id
    second = plan([*v1.fields, StructField("note", StringType())])
    assert second != first
    assert registry_client.get_versions(f"{topic}-value") == [1, 2]
    with pytest.raises(OptionError, match=rf"Option 'valueFormat'.*subject '{topic}-value'"):
        plan([*v1.fields, StructField("note", StringType()),
              StructField("size", LongType(), False)])
