"""The `kafka-eos` source reading Schema Registry formats against a real registry (Apicurio,
Confluent's API) and a real broker: what confluent-kafka's own serializers wrote, read field by
field for Avro, Protobuf and JSON Schema; bad records under FAILFAST and PERMISSIVE; a registry
that cannot be reached; a stream through schema evolution into `delta-eos`, exactly once; and
Spark's own `from_avro` agreeing on the Avro rows.

The session's registry, broker and Spark session (the secured registry, HTTPS with basic auth,
for one test); each dataset is produced once and read by the tests that need it.
"""

from __future__ import annotations

import collections

import datetime as dt
import decimal
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from integration_tests.support.protobuf_messages import message_classes
from integration_tests.support.kafka_data import create_topic, unique_topic
from integration_tests.support.streaming import run_to_end

UTC = dt.timezone.utc


# -- the registry -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def registry_url(schema_registry_url: str) -> str:
    return schema_registry_url


@pytest.fixture(scope="module")
def registry(registry_url: str) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": registry_url})


def produce_values(bootstrap: str, topic: str, values: list[bytes | None],
                   partitions: int = 1, keys: list[bytes] | None = None) -> list[tuple[int, int]]:
    """Produce `values` round-robin over the partitions; their (partition, offset)s in order."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    where: list[tuple[int, int] | None] = [None] * len(values)

    def report(i: int) -> Callable:
        def on_delivery(err, msg) -> None:
            assert err is None, err
            where[i] = (msg.partition(), msg.offset())
        return on_delivery

    for i, v in enumerate(values):
        producer.produce(topic, v, key=keys[i] if keys else None, partition=i % partitions,
                         on_delivery=report(i))
        producer.flush()  # one record per batch: each offset is a record (docs/design.md)
    assert all(w is not None for w in where)
    return where  # type: ignore[return-value]


def read(spark, bootstrap: str, topic: str, url: str, fmt: str, **options: str):
    reader = (spark.read.format("kafka-eos").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("valueFormat", fmt)
              .option("schema.registry.url", url))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def rows_by_offset(df) -> dict[tuple[int, int], dict[str, Any]]:
    """Arrow rows (timestamps stay UTC-aware) by (partition, offset); a record the source
    returned twice fails here, before the dict would fold the two rows into one."""
    rows = df.toArrow().to_pylist()
    keyed = {(r["partition"], r["offset"]): r for r in rows}
    twice = collections.Counter((r["partition"], r["offset"]) for r in rows)
    assert len(keyed) == len(rows), \
        f"records returned more than once: {[k for k, n in twice.items() if n > 1][:5]}"
    return keyed


# -- Avro -----------------------------------------------------------------------------------------

AVRO_V1 = {
    "type": "record", "name": "Order", "namespace": "com.acme",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "qty", "type": "int"},
        {"name": "price", "type": "double"},
        {"name": "ratio", "type": "float"},
        {"name": "paid", "type": "boolean"},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10,
                                    "scale": 2}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "at_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": "long"}},
        {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 4}},
        {"name": "blob", "type": "bytes"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "choice", "type": ["int", "string",
                                    {"type": "record", "name": "Point",
                                     "fields": [{"name": "x", "type": "int"}]}]},
        {"name": "item", "type": {"type": "record", "name": "Item",
                                  "fields": [{"name": "sku", "type": "string"}]}},
    ],
}
AVRO_ADDED_DEFAULT = "unset"
AVRO_V2 = {**AVRO_V1, "fields": [*AVRO_V1["fields"],
                                 {"name": "channel", "type": "string",
                                  "default": AVRO_ADDED_DEFAULT}]}


def avro_record(i: int) -> dict[str, Any]:
    return {
        "id": i, "qty": i * 3 - 7, "price": i / 4, "ratio": 0.5, "paid": i % 2 == 0,
        "amount": decimal.Decimal(f"{i}.{i % 100:02d}"),
        "day": dt.date(2024, 1, 1) + dt.timedelta(days=i),
        "at_ms": dt.datetime(2024, 3, 1, 12, 0, 0, (i % 1000) * 1000, tzinfo=UTC),
        "at_us": dt.datetime(2024, 3, 1, 12, 0, 0, i, tzinfo=UTC),
        "local": dt.datetime(2024, 3, 1, 8, 30, 0, i),
        "uid": uuid.UUID(int=i + 1), "color": "GREEN" if i % 2 else "RED",
        "tags": [f"t{j}" for j in range(i % 3)], "attrs": {f"k{j}": j * i for j in range(i % 2 + 1)},
        "digest": i.to_bytes(4, "big"), "blob": bytes([i % 256]) * (i % 5),
        "note": None if i % 3 == 0 else f"note {i}",
        "choice": [i, f"s{i}", {"x": -i}][i % 3],
        "item": {"sku": f"sku-{i}"},
    }


def expected_avro_row(value: dict[str, Any], schema: dict) -> dict[str, Any]:
    """What Spark's from_avro gives for a record as confluent-kafka's AvroDeserializer returns
    it: uuids as strings, maps as key-value pairs (Arrow's view), the three-way union as
    member0..2 with the written branch set."""
    row = dict(value)
    row["uid"] = str(value["uid"])
    row["attrs"] = list(value["attrs"].items())
    choice = value["choice"]
    branch = 2 if isinstance(choice, dict) else (0 if isinstance(choice, int) else 1)
    row["choice"] = {f"member{b}": (choice if b == branch else None) for b in range(3)}
    return {f["name"]: row.get(f["name"]) for f in schema["fields"]}


@dataclass
class Dataset:
    topic: str
    where: list[tuple[int, int]]
    written: list[bytes]
    keys: list[bytes] | None = None


@pytest.fixture(scope="module")
def avro_topic(bootstrap: str, registry: SchemaRegistryClient) -> Dataset:
    """Avro values, and keys written as an Avro `string` (subject `<topic>-key`)."""
    topic = unique_topic("sr-avro")
    create_topic(bootstrap, topic, 2)
    serialize = AvroSerializer(registry, json.dumps(AVRO_V1))
    ctx = SerializationContext(topic, MessageField.VALUE)
    written = [serialize(avro_record(i), ctx) for i in range(12)]
    key_ctx = SerializationContext(topic, MessageField.KEY)
    keys = [AvroSerializer(registry, '"string"')(f"order-{i}", key_ctx) for i in range(12)]
    return Dataset(topic, produce_values(bootstrap, topic, written, partitions=2, keys=keys),
                   written, keys)


def test_avro_reads_what_confluent_serializers_wrote(spark, bootstrap, registry_url, registry,
                                                     avro_topic):
    df = read(spark, bootstrap, avro_topic.topic, registry_url, "avro", keyFormat="avro")
    assert dict(df.dtypes)["key"] == "string"  # an Avro string, as from_avro gives it
    value_type = dict(df.dtypes)["value"]
    assert value_type.startswith("struct<id:bigint,qty:int,price:double,ratio:float,"
                                 "paid:boolean,amount:decimal(10,2),day:date,at_ms:timestamp,"
                                 "at_us:timestamp,local:timestamp_ntz,uid:string,color:string,"
                                 "tags:array<string>,attrs:map<string,bigint>,digest:binary,"
                                 "blob:binary,note:string,choice:struct<member0:int,"
                                 "member1:string,member2:struct<x:int>>,item:struct<sku:string>")
    got = rows_by_offset(df)
    deserialize = AvroDeserializer(registry)
    ctx = SerializationContext(avro_topic.topic, MessageField.VALUE)
    assert len(got) == len(avro_topic.written)
    key_ctx = SerializationContext(avro_topic.topic, MessageField.KEY)
    for where, key in zip(avro_topic.where, avro_topic.keys or []):
        assert got[where]["key"] == deserialize(key, key_ctx)
    for where, data in zip(avro_topic.where, avro_topic.written):
        theirs = expected_avro_row(deserialize(data, ctx), AVRO_V1)
        ours = got[where]["value"]
        for field in theirs:
            assert ours[field] == theirs[field], (where, field, ours[field], theirs[field])


def test_spark_from_avro_agrees_on_the_avro_rows(bootstrap, registry_url, avro_topic):
    """Spark's own from_avro on the bytes after the wire header gives the same structs, in a
    Spark session of its own that has the spark-avro jar."""
    from integration_tests.support.spark_avro import SparkAvroUnavailable, spark_avro_jar

    try:
        jar = spark_avro_jar()
    except SparkAvroUnavailable as e:
        pytest.skip(f"spark-avro cannot be loaded here, so from_avro cannot run: {e}")
    result = subprocess.run(
        [sys.executable, "-m", "integration_tests.support.from_avro_peer", str(jar), bootstrap,
         avro_topic.topic, registry_url, f"{avro_topic.topic}-value"],
        capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["rows"] == len(avro_topic.written)
    assert report["different"] == 0, report["first"]
    # Spark marks non-union fields non-nullable; the types are otherwise the same.
    assert report["ours_type"] == report["spark_type"]


# -- Protobuf -------------------------------------------------------------------------------------

PROTO = message_classes("orders.proto", "acme.shop", {
    "Order": [
        ("id", "int64", 1), ("name", "string", 2), ("tags", "string", 3, "repeated"),
        ("at", ".google.protobuf.Timestamp", 4), ("took", ".google.protobuf.Duration", 5),
        ("limit", ".google.protobuf.Int32Value", 6), ("attrs", "map<string,int64>", 7),
        ("email", "string", 8, "oneof:contact"), ("phone", "string", 9, "oneof:contact"),
        ("color", "Color", 10), ("item", "Item", 11), ("items", "Item", 12, "repeated"),
        ("big", "uint64", 13), ("ratio", "float", 14), ("ok", "bool", 15),
        ("blob", "bytes", 16), ("maybe", "string", 17, "optional"),
    ],
    "Item": [("sku", "string", 1), ("qty", "int32", 2)],
}, enums={"Color": ["RED", "GREEN", "BLUE"]})


def proto_record(i: int) -> Any:
    m = PROTO["Order"](id=i, name=f"n{i}", tags=[f"t{j}" for j in range(i % 3)], big=i * 1000,
                       ratio=0.25, ok=i % 2 == 1, blob=bytes([i]) * (i % 3), color=i % 3)
    m.at.FromDatetime(dt.datetime(2024, 5, 1, 10, 0, 0, i))
    m.took.FromMicroseconds(1_500_000 + i)
    if i % 2:
        m.limit.value = i
        m.email = f"u{i}@x"
        m.maybe = f"m{i}"
    else:
        m.phone = f"555-{i}"
    for j in range(i % 2 + 1):
        m.attrs[f"k{j}"] = j + i
    if i % 3:
        m.item.sku, m.item.qty = f"sku{i}", i
    for j in range(i % 3):
        m.items.add(sku=f"s{j}", qty=j)
    return m


def expected_proto_row(m: Any) -> dict[str, Any]:
    """spark-protobuf's view of a message as the deserializer returns it: message fields and
    fields with presence null when unset, enums by name, Timestamp and Duration as time."""
    def item(x: Any) -> dict[str, Any]:
        return {"sku": x.sku, "qty": x.qty}
    return {
        "id": m.id, "name": m.name, "tags": list(m.tags),
        "at": m.at.ToDatetime(tzinfo=UTC) if m.HasField("at") else None,
        "took": m.took.ToTimedelta() if m.HasField("took") else None,
        "limit": {"value": m.limit.value} if m.HasField("limit") else None,
        "attrs": dict(m.attrs.items()),  # a map: its entries' order is not the wire's
        "email": m.email if m.HasField("email") else None,
        "phone": m.phone if m.HasField("phone") else None,
        "color": m.DESCRIPTOR.fields_by_name["color"].enum_type.values_by_number[m.color].name,
        "item": item(m.item) if m.HasField("item") else None,
        "items": [item(x) for x in m.items], "big": m.big, "ratio": m.ratio, "ok": m.ok,
        "blob": m.blob, "maybe": m.maybe if m.HasField("maybe") else None,
    }


def test_protobuf_reads_what_confluent_serializers_wrote(spark, bootstrap, registry_url,
                                                         registry):
    topic = unique_topic("sr-proto")
    create_topic(bootstrap, topic, 1)
    serialize = ProtobufSerializer(PROTO["Order"], registry, {"use.deprecated.format": False})
    ctx = SerializationContext(topic, MessageField.VALUE)
    written = [serialize(proto_record(i), ctx) for i in range(8)]
    where = produce_values(bootstrap, topic, written)
    df = read(spark, bootstrap, topic, registry_url, "protobuf")
    assert dict(df.dtypes)["value"] == (
        "struct<id:bigint,name:string,tags:array<string>,at:timestamp,"
        "took:interval day to second,limit:struct<value:int>,attrs:map<string,bigint>,"
        "email:string,phone:string,color:string,item:struct<sku:string,qty:int>,"
        "items:array<struct<sku:string,qty:int>>,big:bigint,ratio:float,ok:boolean,"
        "blob:binary,maybe:string>")
    got = rows_by_offset(df)
    deserialize = ProtobufDeserializer(PROTO["Order"], {"use.deprecated.format": False})
    assert len(got) == len(written)
    for w, data in zip(where, written):
        theirs = expected_proto_row(deserialize(data, ctx))
        ours = dict(got[w]["value"], attrs=dict(got[w]["value"]["attrs"]))
        for field in theirs:
            assert ours[field] == theirs[field], (w, field, ours[field], theirs[field])


# -- JSON Schema ----------------------------------------------------------------------------------

JSON_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
    "properties": {
        "id": {"type": "integer"}, "price": {"type": "number"}, "ok": {"type": "boolean"},
        "name": {"type": ["null", "string"]},
        "day": {"type": "string", "format": "date"},
        "at": {"type": "string", "format": "date-time"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "attrs": {"type": "object", "additionalProperties": {"type": "integer"}},
        "item": {"$ref": "#/definitions/Item"},
        "extra": {},
    },
    "required": ["id"],
    "definitions": {"Item": {"type": "object", "properties": {
        "sku": {"type": "string"}, "qty": {"type": "integer"}}}},
}


def json_record(i: int) -> dict[str, Any]:
    record: dict[str, Any] = {"id": i, "price": i * 1.5, "ok": i % 2 == 0,
                              "name": None if i % 3 == 0 else f"n{i}",
                              "day": f"2024-02-{i + 1:02d}",
                              "at": f"2024-02-01T10:00:{i:02d}.25+02:00",
                              "tags": [f"t{j}" for j in range(i % 3)],
                              "attrs": {f"k{j}": j for j in range(i % 2 + 1)},
                              "extra": {"nested": [i, "x"]} if i % 2 else f"text{i}"}
    if i % 4:
        record["item"] = {"sku": f"sku{i}", "qty": i}
    return record


def expected_json_row(v: dict[str, Any]) -> dict[str, Any]:
    """The column for a record as JSONDeserializer returns it: dates and date-times parsed
    (RFC 3339, to UTC), maps as pairs, a schemaless property as its JSON text."""
    return {
        "id": v["id"], "price": v.get("price"), "ok": v.get("ok"), "name": v.get("name"),
        "day": dt.date.fromisoformat(v["day"]),
        "at": dt.datetime.fromisoformat(v["at"]).astimezone(UTC),
        "tags": v.get("tags"), "attrs": list(v["attrs"].items()),
        "item": v.get("item"),
        "extra": json.dumps(v["extra"], separators=(",", ":")),
    }


def test_json_schema_reads_what_confluent_serializers_wrote(spark, bootstrap, registry_url,
                                                            registry):
    topic = unique_topic("sr-json")
    create_topic(bootstrap, topic, 1)
    serialize = JSONSerializer(json.dumps(JSON_SCHEMA), registry)
    ctx = SerializationContext(topic, MessageField.VALUE)
    written = [serialize(json_record(i), ctx) for i in range(8)]
    where = produce_values(bootstrap, topic, written)
    df = read(spark, bootstrap, topic, registry_url, "json-schema")
    assert dict(df.dtypes)["value"] == (
        "struct<id:bigint,price:double,ok:boolean,name:string,day:date,at:timestamp,"
        "tags:array<string>,attrs:map<string,bigint>,item:struct<sku:string,qty:bigint>,"
        "extra:string>")
    got = rows_by_offset(df)
    deserialize = JSONDeserializer(json.dumps(JSON_SCHEMA), schema_registry_client=registry)
    assert len(got) == len(written)
    for w, data in zip(where, written):
        theirs = expected_json_row(deserialize(data, ctx))
        ours = got[w]["value"]
        for field in theirs:
            assert ours[field] == theirs[field], (w, field, ours[field], theirs[field])


# -- bad records ------------------------------------------------------------------------------------


@dataclass
class BadTopic:
    topic: str
    good: list[tuple[int, int]]
    bad: dict[str, tuple[tuple[int, int], bytes, int | None, str | None]]  # case -> where, bytes, id, field


@pytest.fixture(scope="module")
def bad_avro_topic(bootstrap: str, registry: SchemaRegistryClient) -> BadTopic:
    """Good Avro records and one record of each bad kind, one partition."""
    topic = unique_topic("sr-bad")
    create_topic(bootstrap, topic, 1)
    ctx = SerializationContext(topic, MessageField.VALUE)
    reader = {"type": "record", "name": "Reading", "fields": [
        {"name": "sensor", "type": "string"}, {"name": "level", "type": "long"}]}
    good = AvroSerializer(registry, json.dumps(reader))
    good_bytes = [good({"sensor": f"s{i}", "level": i}, ctx) for i in range(3)]
    reader_id = int.from_bytes(good_bytes[0][1:5], "big")
    # A writer the reader cannot resolve: `level` is a string there (no promotion to long).
    # Registered under a subject of its own (the topic's subject refuses it as incompatible).
    odd = {"type": "record", "name": "Reading", "fields": [
        {"name": "sensor", "type": "string"}, {"name": "level", "type": "string"}]}
    odd_id = registry.register_schema(f"{topic}-odd", Schema(json.dumps(odd), "AVRO"))
    odd_bytes = AvroSerializer(registry, json.dumps(odd),
                               conf={"auto.register.schemas": False, "use.latest.version": False,
                                     "subject.name.strategy":
                                         lambda ctx, name: f"{topic}-odd"})(
        {"sensor": "x", "level": "high"}, ctx)
    unknown_id = 987_654
    cases = {
        "no magic byte": (b"plain text, no header", None, None),
        "unknown schema id": (b"\x00" + unknown_id.to_bytes(4, "big") + b"\x02a\x02", unknown_id,
                              None),
        "undecodable payload": (good_bytes[0][:7], reader_id, None),  # cut short
        "unresolvable writer schema": (odd_bytes, odd_id, "level"),
    }
    values = [good_bytes[0], *(c[0] for c in cases.values()), *good_bytes[1:]]
    where = produce_values(bootstrap, topic, values)
    bad = {name: (where[1 + i], data, sid, field)
           for i, (name, (data, sid, field)) in enumerate(cases.items())}
    return BadTopic(topic, [where[0], *where[1 + len(cases):]], bad)


@pytest.mark.parametrize("case", ["no magic byte", "unknown schema id", "undecodable payload",
                                  "unresolvable writer schema"])
def test_failfast_names_the_bad_record(spark, bootstrap, registry_url, bad_avro_topic, case):
    (partition, offset), _data, schema_id, field = bad_avro_topic.bad[case]
    df = read(spark, bootstrap, bad_avro_topic.topic, registry_url, "avro",
              startingOffsets=json.dumps({bad_avro_topic.topic: {str(partition): offset}}),
              endingOffsets=json.dumps({bad_avro_topic.topic: {str(partition): offset + 1}}))
    with pytest.raises(Exception) as failure:
        df.collect()
    message = str(failure.value)
    where = (f"topic {bad_avro_topic.topic}, partition {partition}, offset {offset}")
    assert where in message
    assert (f"schema id {schema_id}" if schema_id is not None else "no schema id") in message
    if field is not None:
        assert f"field {field!r}" in message
    assert "mode=PERMISSIVE" in message  # says how to keep going


def test_permissive_gives_null_structs_and_keeps_the_bytes(spark, bootstrap, registry_url,
                                                           bad_avro_topic):
    df = read(spark, bootstrap, bad_avro_topic.topic, registry_url, "avro", mode="PERMISSIVE",
              includeRawValue="true")
    got = rows_by_offset(df)
    assert len(got) == len(bad_avro_topic.good) + len(bad_avro_topic.bad)
    for w, data, _sid, _field in bad_avro_topic.bad.values():
        assert got[w]["value"] is None, w
        assert got[w]["rawValue"] == data
    levels = sorted(got[w]["value"]["level"] for w in bad_avro_topic.good)
    assert levels == [0, 1, 2]


@pytest.mark.parametrize("fmt", ["protobuf", "json-schema"])
def test_undecodable_payloads_in_protobuf_and_json(spark, bootstrap, registry_url, registry, fmt):
    topic = unique_topic(f"sr-bad-{fmt}")
    create_topic(bootstrap, topic, 1)
    ctx = SerializationContext(topic, MessageField.VALUE)
    if fmt == "protobuf":
        good = ProtobufSerializer(PROTO["Item"], registry, {"use.deprecated.format": False})(
            PROTO["Item"](sku="a", qty=1), ctx)
        broken = good[:6] + b"\x0a\xff\xff"  # a string field whose length runs past the end
    else:
        good = JSONSerializer(json.dumps({"type": "object", "properties": {
            "sku": {"type": "string"}, "qty": {"type": "integer"}}}), registry)(
            {"sku": "a", "qty": 1}, ctx)
        broken = good[:5] + b'{"sku": "a", "qty": '
    schema_id = int.from_bytes(good[1:5], "big")
    where = produce_values(bootstrap, topic, [good, broken])
    # The Protobuf file holds Order first: the rows are read as Item, by name.
    named = {"valueRecordName": "acme.shop.Item"} if fmt == "protobuf" else {}
    got = rows_by_offset(read(spark, bootstrap, topic, registry_url, fmt, mode="PERMISSIVE",
                              includeRawValue="true", **named))
    assert got[where[0]]["value"] == {"sku": "a", "qty": 1}
    assert got[where[1]]["value"] is None and got[where[1]]["rawValue"] == broken
    with pytest.raises(Exception) as failure:
        read(spark, bootstrap, topic, registry_url, fmt, **named).collect()
    assert f"partition {where[1][0]}, offset {where[1][1]}" in str(failure.value)
    assert f"schema id {schema_id}" in str(failure.value)


def test_unreachable_registry_is_retried_then_named_without_credentials(spark, bootstrap,
                                                                        avro_topic):
    from connectors.local.broker_handle import free_port

    secret = "pw-" + uuid.uuid4().hex[:8]
    url = f"http://reader:{secret}@127.0.0.1:{free_port()}"
    with pytest.raises(Exception) as failure:
        read(spark, bootstrap, avro_topic.topic, url, "avro",
             schemaRegistryRetryTimeout="3s").collect()
    message = str(failure.value)
    assert "http://127.0.0.1:" in message and "did not answer" in message
    assert "attempts" in message
    assert secret not in message


# -- schema evolution, exactly once into delta-eos -------------------------------------------------


def test_avro_evolution_through_a_restart_lands_once_in_delta(spark, bootstrap, registry_url,
                                                              registry, tmp_path):
    """v1 records, then (mid-stream) v2 with an added field that has a default, and v1 records
    from a producer not yet upgraded; the query restarts between. Every record lands in the
    table once; records written with v1 and read after the restart carry the default; v2's
    value is kept; rows committed before the restart have no value for the new column."""
    from deltalake import DeltaTable

    topic = unique_topic("sr-evolve")
    create_topic(bootstrap, topic, 2)
    ctx = SerializationContext(topic, MessageField.VALUE)
    v1 = AvroSerializer(registry, json.dumps(AVRO_V1))
    old_producer = AvroSerializer(registry, json.dumps(AVRO_V1),
                                  conf={"auto.register.schemas": False,
                                        "use.latest.version": False})
    produce_values(bootstrap, topic, [v1(avro_record(i), ctx) for i in range(0, 10)], 2)
    table, checkpoint = str(tmp_path / "table"), str(tmp_path / "checkpoint")

    def run() -> None:
        stream = (spark.readStream.format("kafka-eos").option("kafka.bootstrap.servers", bootstrap)
                  .option("subscribe", topic).option("startingOffsets", "earliest")
                  .option("maxOffsetsPerTrigger", "7").option("valueFormat", "avro")
                  .option("schema.registry.url", registry_url).load())
        query = (stream.select("partition", "offset", "value.*").writeStream.format("delta-eos")
                 .option("path", table).option("checkpointLocation", checkpoint)
                 .option("mergeSchema", "true").trigger(availableNow=True).start())
        run_to_end(query)

    run()
    v2 = AvroSerializer(registry, json.dumps(AVRO_V2))  # registers v2 (BACKWARD-compatible)
    later = [v2({**avro_record(i), "channel": f"web{i}"}, ctx) for i in range(10, 16)]
    later += [old_producer(avro_record(i), ctx) for i in range(16, 20)]
    produce_values(bootstrap, topic, later, 2)
    run()

    rows = DeltaTable(table).to_pyarrow_table().to_pylist()
    ids = sorted(r["id"] for r in rows)
    assert ids == list(range(20)), "every record exactly once"
    by_id = {r["id"]: r for r in rows}
    for i in range(10):  # committed by the first run, whose rows had no such column
        assert by_id[i]["channel"] is None
    for i in range(10, 16):
        assert by_id[i]["channel"] == f"web{i}"
    for i in range(16, 20):  # written with v1, read through v2
        assert by_id[i]["channel"] == AVRO_ADDED_DEFAULT
    # The other fields went through unchanged, by Avro's resolution included.
    for i in (3, 12, 18):
        want = expected_avro_row(avro_record(i), AVRO_V1)
        assert by_id[i]["amount"] == want["amount"] and by_id[i]["tags"] == want["tags"]
        assert by_id[i]["at_us"] == want["at_us"]


# -- a secured registry ---------------------------------------------------------------------------


def test_secured_registry_settings_pass_through_and_stay_secret(spark, bootstrap,
                                                                secured_schema_registry):
    """HTTPS with the registry's CA and basic auth, given as schema.registry.* options, reach
    confluent-kafka's client; a wrong password fails naming the URL, never the password."""
    conf = secured_schema_registry.client_config()
    client = SchemaRegistryClient(conf)
    topic = unique_topic("sr-secured")
    create_topic(bootstrap, topic, 1)
    schema = {"type": "record", "name": "Ping", "fields": [{"name": "n", "type": "long"}]}
    serialize = AvroSerializer(client, json.dumps(schema))
    ctx = SerializationContext(topic, MessageField.VALUE)
    where = produce_values(bootstrap, topic, [serialize({"n": n}, ctx) for n in range(3)])
    secured = {f"schema.registry.{k}": v for k, v in conf.items() if k != "url"}
    got = rows_by_offset(read(spark, bootstrap, topic, conf["url"], "avro", **secured))
    assert [got[w]["value"]["n"] for w in where] == [0, 1, 2]

    user, password = conf["basic.auth.user.info"].split(":", 1)
    wrong = f"not-{password}"
    with pytest.raises(Exception) as failure:
        read(spark, bootstrap, topic, conf["url"], "avro",
             **{**secured, "schema.registry.basic.auth.user.info": f"{user}:{wrong}"}).collect()
    message = str(failure.value)
    assert conf["url"] in message and "401" in message
    assert wrong not in message and password not in message
