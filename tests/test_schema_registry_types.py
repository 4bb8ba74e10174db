"""Type mappings of the Schema Registry formats (Avro as Spark's from_avro, Protobuf as
spark-protobuf, JSON Schema) and the column decoders on records written with the reader schema's
own id, which need no registry: values, unions, bad records under both modes."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import socket
import struct
import uuid

import fastavro
import pyarrow as pa
import pytest

from connectors.core.schema_registry.avro_types import (
    UnsupportedAvroSchema,
    spark_type_of,
    unresolvable_field,
)
from connectors.core.schema_registry.client import RegistryClient, RegistryUnavailable
from connectors.core.schema_registry.decoding import MalformedRecordError, ReaderSchema
from connectors.core.schema_registry.decoders import new_decoder
from connectors.core.schema_registry.json_schema_types import UnsupportedJsonSchema, json_plan
from connectors.core.schema_registry.options import RegistryOptions
from connectors.core.schema_registry.protobuf_types import UnsupportedProtobufSchema, arrow_type
from integration_tests.support.protobuf_messages import message_classes

UTC = dt.timezone.utc
URL = "http://127.0.0.1:9"  # never asked: every record here carries the reader schema's id
READER_ID = 42


def field(avro_type) -> pa.DataType:
    return spark_type_of({"type": "record", "name": "R",
                          "fields": [{"name": "f", "type": avro_type}]}).field("f").type


@pytest.mark.parametrize(("avro", "arrow"), [
    ("boolean", pa.bool_()), ("int", pa.int32()), ("long", pa.int64()),
    ("float", pa.float32()), ("double", pa.float64()), ("string", pa.string()),
    ("bytes", pa.binary()), ("null", pa.null()),
    ({"type": "fixed", "name": "F", "size": 3}, pa.binary()),
    ({"type": "enum", "name": "E", "symbols": ["A"]}, pa.string()),
    ({"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 3},
     pa.decimal128(12, 3)),
    ({"type": "fixed", "name": "D", "size": 8, "logicalType": "decimal", "precision": 9,
      "scale": 0}, pa.decimal128(9, 0)),
    ({"type": "int", "logicalType": "date"}, pa.date32()),
    ({"type": "long", "logicalType": "timestamp-millis"}, pa.timestamp("us", tz="UTC")),
    ({"type": "long", "logicalType": "timestamp-micros"}, pa.timestamp("us", tz="UTC")),
    ({"type": "long", "logicalType": "local-timestamp-millis"}, pa.timestamp("us")),
    ({"type": "long", "logicalType": "local-timestamp-micros"}, pa.timestamp("us")),
    ({"type": "int", "logicalType": "time-millis"}, pa.int32()),
    ({"type": "string", "logicalType": "uuid"}, pa.string()),
    ({"type": "array", "items": "int"}, pa.list_(pa.int32())),
    ({"type": "map", "values": "string"}, pa.map_(pa.string(), pa.string())),
    (["null", "string"], pa.string()),
    (["null", "int", "long"], pa.int64()),
    (["float", "double"], pa.float64()),
    (["null", "int", "string"], pa.struct([("member0", pa.int32()), ("member1", pa.string())])),
])
def test_avro_types_as_spark_from_avro(avro, arrow) -> None:
    assert field(avro) == arrow


def test_avro_named_types_are_found_by_name() -> None:
    schema = {"type": "record", "name": "R", "namespace": "a.b", "fields": [
        {"name": "p", "type": {"type": "record", "name": "Point",
                               "fields": [{"name": "x", "type": "int"}]}},
        {"name": "q", "type": "Point"}, {"name": "r", "type": "a.b.Point"},
        {"name": "s", "type": {"type": "Point"}}]}
    point = pa.struct([("x", pa.int32())])
    assert spark_type_of(schema) == pa.struct([(n, point) for n in "pqrs"])


@pytest.mark.parametrize("schema", [
    {"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]},
    {"type": "record", "name": "R", "fields": [{"name": "d", "type": {
        "type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 0}}]},
])
def test_avro_schemas_without_a_spark_type_are_refused(schema) -> None:
    with pytest.raises(UnsupportedAvroSchema):
        spark_type_of(schema)


# -- Avro decoding ----------------------------------------------------------------------------------

AVRO = {"type": "record", "name": "Order", "namespace": "x", "fields": [
    {"name": "id", "type": "long"},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 6,
                                "scale": 2}},
    {"name": "color", "type": {"type": "enum", "name": "C", "symbols": ["RED", "BLUE"]}},
    {"name": "either", "type": ["null", "int", "string",
                                {"type": "record", "name": "A", "fields": [{"name": "a",
                                                                            "type": "int"}]},
                                {"type": "record", "name": "B", "fields": [{"name": "b",
                                                                            "type": "string"}]}]},
    {"name": "many", "type": {"type": "array", "items": ["long", "string"]}},
    {"name": "counts", "type": {"type": "map", "values": ["null", "long"]}},
]}


def avro_options(mode: str = "FAILFAST") -> RegistryOptions:
    return RegistryOptions.parse({"valueformat": "avro", "schema.registry.url": URL,
                                  "mode": mode})


def avro_decoder(mode: str = "FAILFAST"):
    reader = ReaderSchema("avro", "t-value", READER_ID, 1, json.dumps(AVRO))
    return new_decoder(avro_options(mode), reader)


def wire(schema_id: int, payload: bytes) -> bytes:
    return b"\x00" + struct.pack(">I", schema_id) + payload


def avro_bytes(record: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(AVRO, named_schemas={}), record)
    return wire(READER_ID, out.getvalue())


def where(i: int) -> tuple[str, int, int]:
    return ("t", 3, 100 + i)


RECORD = {"id": 7, "at": dt.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=UTC),
          "local": dt.datetime(2024, 1, 2, 3, 4, 5, 6), "day": dt.date(2024, 2, 29),
          "uid": uuid.UUID(int=9), "amount": decimal.Decimal("12.34"), "color": "BLUE",
          "either": ("x.B", {"b": "bee"}), "many": [1, "two"], "counts": {"k": None, "n": 3}}


def test_avro_values_become_spark_values() -> None:
    decoder = avro_decoder()
    others = [dict(RECORD, id=8, either=5), dict(RECORD, id=9, either=None),
              dict(RECORD, id=10, either="s"), dict(RECORD, id=11, either=("x.A", {"a": 1}))]
    column = decoder.decode(pa.array([avro_bytes(RECORD), *map(avro_bytes, others), None]), where)
    assert column.type == decoder.spark_type
    rows = column.to_pylist()
    first = rows[0]
    assert first["at"] == RECORD["at"] and first["local"] == RECORD["local"]
    assert first["day"] == RECORD["day"] and first["uid"] == str(RECORD["uid"])
    assert first["amount"] == RECORD["amount"] and first["color"] == "BLUE"
    assert first["either"] == {"member0": None, "member1": None, "member2": None,
                               "member3": {"b": "bee"}}
    assert first["many"] == [{"member0": 1, "member1": None}, {"member0": None, "member1": "two"}]
    assert dict(first["counts"]) == {"k": None, "n": 3}
    assert [r["either"] for r in rows[1:5]] == [
        {"member0": 5, "member1": None, "member2": None, "member3": None},
        None,
        {"member0": None, "member1": "s", "member2": None, "member3": None},
        {"member0": None, "member1": None, "member2": {"a": 1}, "member3": None},
    ]
    assert rows[5] is None  # a tombstone is a null value, not a bad record


@pytest.mark.parametrize(("data", "reason"), [
    (b"\x01\x00\x00\x00\x2a\x00", "not in the Schema Registry wire format"),
    (b"\x00\x00", "not in the Schema Registry wire format"),
    (wire(READER_ID, b"\x0e"), "does not decode"),  # the id, then nothing
])
def test_avro_bad_records_fail_naming_where(data: bytes, reason: str) -> None:
    decoder = avro_decoder()
    with pytest.raises(MalformedRecordError) as failure:
        decoder.decode(pa.array([avro_bytes(RECORD), data]), where)
    message = str(failure.value)
    assert "topic t, partition 3, offset 101" in message and reason in message
    assert "mode=PERMISSIVE" in message


def test_avro_bad_records_are_null_when_permissive() -> None:
    decoder = avro_decoder("PERMISSIVE")
    rows = decoder.decode(pa.array([b"junk", avro_bytes(RECORD)]), where).to_pylist()
    assert rows[0] is None and rows[1]["id"] == 7


@pytest.mark.parametrize(("writer_fields", "reader_fields", "field_name"), [
    ([("a", "string")], [("a", "long")], "a"),
    ([("a", "int")], [("a", "long"), ("b", "int")], "b"),  # new field without a default
    ([("a", "int")], [("a", "double")], None),  # int promotes to double
    ([("a", {"type": "record", "name": "In", "fields": [{"name": "x", "type": "string"}]})],
     [("a", {"type": "record", "name": "In", "fields": [{"name": "x", "type": "int"}]})], "a.x"),
])
def test_unresolvable_field_is_named(writer_fields, reader_fields, field_name) -> None:
    def record(fields):
        return {"type": "record", "name": "R",
                "fields": [{"name": n, "type": t} for n, t in fields]}
    assert unresolvable_field(record(writer_fields), record(reader_fields)) == field_name


# -- Protobuf ---------------------------------------------------------------------------------------

PB = message_classes("m.proto", "p", {
    "M": [("i", "int32", 1), ("u", "uint32", 2), ("big", "uint64", 3), ("s", "sint64", 4),
          ("e", "E", 5), ("at", ".google.protobuf.Timestamp", 6),
          ("d", ".google.protobuf.Duration", 7), ("w", ".google.protobuf.StringValue", 8),
          ("r", "N", 9, "repeated"), ("m", "map<string,N>", 10), ("a", "string", 11, "oneof:o"),
          ("b", "int64", 12, "oneof:o"), ("opt", "int32", 13, "optional"), ("n", "N", 14),
          ("empty", "Empty", 15)],
    "N": [("x", "int32", 1)],
    "Empty": [],
}, enums={"E": ["ZERO", "ONE"]})


def test_protobuf_types_as_spark_protobuf() -> None:
    n = pa.struct([("x", pa.int32())])
    assert arrow_type(PB["M"].DESCRIPTOR) == pa.struct([
        ("i", pa.int32()), ("u", pa.int32()), ("big", pa.int64()), ("s", pa.int64()),
        ("e", pa.string()), ("at", pa.timestamp("us", tz="UTC")), ("d", pa.duration("us")),
        ("w", pa.struct([("value", pa.string())])), ("r", pa.list_(n)),
        ("m", pa.map_(pa.string(), n)), ("a", pa.string()), ("b", pa.int64()),
        ("opt", pa.int32()), ("n", n),  # the empty message's field is left out
    ])


def test_protobuf_recursive_messages_are_refused() -> None:
    looped = message_classes("loop.proto", "q", {"L": [("next", "L", 1)]})
    with pytest.raises(UnsupportedProtobufSchema):
        arrow_type(looped["L"].DESCRIPTOR)


def protobuf_decoder(schema_id: int = READER_ID):
    from confluent_kafka.schema_registry.common.protobuf import _schema_to_str

    reader = ReaderSchema("protobuf", "t-value", schema_id, 1,
                          _schema_to_str(PB["M"].DESCRIPTOR.file))
    opts = RegistryOptions.parse({"valueformat": "protobuf", "schema.registry.url": URL})
    return new_decoder(opts, reader)


def test_protobuf_values_become_spark_values() -> None:
    m = PB["M"](i=-3, u=4_000_000_000, big=2**64 - 1, s=-5, e=1, b=9, opt=0)
    m.at.FromDatetime(dt.datetime(2024, 1, 1, 0, 0, 1, 500))
    m.d.FromMicroseconds(-1_250_000)
    m.w.value = "w"
    m.r.add(x=1)
    m.m["k"].x = 2
    m.n.x = 0
    unknown_enum = PB["M"](e=7)
    data = [wire(READER_ID, b"\x00" + m.SerializeToString()),
            wire(READER_ID, b"\x00" + unknown_enum.SerializeToString())]
    rows = protobuf_decoder().decode(pa.array(data), where).to_pylist()
    row = rows[0]
    assert (row["i"], row["u"], row["big"], row["s"]) == (-3, 4_000_000_000 - 2**32, -1, -5)
    assert row["e"] == "ONE" and row["at"] == dt.datetime(2024, 1, 1, 0, 0, 1, 500, tzinfo=UTC)
    assert row["d"] == dt.timedelta(microseconds=-1_250_000) and row["w"] == {"value": "w"}
    assert row["r"] == [{"x": 1}] and row["m"] == [("k", {"x": 2})]
    assert (row["a"], row["b"]) == (None, 9)  # oneof: only the member set
    assert row["opt"] == 0 and row["n"] == {"x": 0}  # set, though to defaults
    empty = rows[1]
    assert empty["e"] == "7" and empty["opt"] is None and empty["n"] is None
    assert empty["i"] == 0 and empty["r"] == []  # no presence: the default


def test_protobuf_payload_that_does_not_parse_names_the_message() -> None:
    bad = wire(READER_ID, b"\x00" + b"\x0a\xff")
    with pytest.raises(MalformedRecordError, match=r"does not parse as p\.M"):
        protobuf_decoder().decode(pa.array([bad]), where)


# -- JSON Schema -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("schema", "arrow"), [
    ({"type": "integer"}, pa.int64()), ({"type": "number"}, pa.float64()),
    ({"type": "boolean"}, pa.bool_()), ({"type": ["null", "string"]}, pa.string()),
    ({"type": "string", "format": "date"}, pa.date32()),
    ({"type": "string", "format": "date-time"}, pa.timestamp("us", tz="UTC")),
    ({"type": "array", "items": {"type": "integer"}}, pa.list_(pa.int64())),
    ({"type": "object", "additionalProperties": {"type": "number"}},
     pa.map_(pa.string(), pa.float64())),
    ({"oneOf": [{"type": "null"}, {"type": "integer"}]}, pa.int64()),
    ({"anyOf": [{"type": "integer"}, {"type": "string"}]}, pa.string()),  # JSON text
    ({}, pa.string()), ({"type": ["integer", "number"]}, pa.float64()),
    ({"enum": ["a", "b"]}, pa.string()),
    ({"$ref": "#/definitions/P"}, pa.struct([("x", pa.int64())])),
    ({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}},
                {"type": "object", "properties": {"b": {"type": "string"}}}]},
     pa.struct([("a", pa.int64()), ("b", pa.string())])),
])
def test_json_schema_types(schema, arrow) -> None:
    root = {"type": "object", "properties": {"f": schema},
            "definitions": {"P": {"type": "object", "properties": {"x": {"type": "integer"}}}}}
    assert json_plan(root).spark_type.field("f").type == arrow


def test_json_schema_recursion_is_refused() -> None:
    with pytest.raises(UnsupportedJsonSchema):
        json_plan({"type": "object", "properties": {"next": {"$ref": "#"}}})


JSON_SCHEMA = {"type": "object", "properties": {
    "id": {"type": "integer"}, "day": {"type": "string", "format": "date"},
    "at": {"type": "string", "format": "date-time"}, "free": {},
    "status": {"type": "string", "default": "new"}}}


def json_decoder(mode: str = "FAILFAST"):
    reader = ReaderSchema("json-schema", "t-value", READER_ID, 1, json.dumps(JSON_SCHEMA))
    opts = RegistryOptions.parse({"valueformat": "json-schema", "schema.registry.url": URL,
                                  "mode": mode})
    return new_decoder(opts, reader)


def test_json_values_defaults_and_free_values() -> None:
    data = [wire(READER_ID, json.dumps(v).encode()) for v in (
        {"id": 1, "day": "2024-03-01", "at": "2024-03-01T10:00:00.5-01:00",
         "free": {"a": [1, None]}, "status": "old", "ignored": True},
        {"id": 2, "free": "text"})]
    rows = json_decoder().decode(pa.array(data), where).to_pylist()
    assert rows[0] == {"id": 1, "day": dt.date(2024, 3, 1),
                       "at": dt.datetime(2024, 3, 1, 11, 0, 0, 500000, tzinfo=UTC),
                       "free": '{"a":[1,null]}', "status": "old"}
    assert rows[1] == {"id": 2, "day": None, "at": None, "free": '"text"', "status": "new"}


def test_json_bad_record_beside_dates_is_null_when_permissive() -> None:
    """A null row beside date and date-time columns: Arrow fills a null struct's children with
    '' and the cast to dates must not see them."""
    good = wire(READER_ID, b'{"id": 1, "day": "2024-01-05", "at": "2024-01-05T00:00:00Z"}')
    rows = json_decoder("PERMISSIVE").decode(
        pa.array([good, wire(READER_ID, b"{not json"), b"no header"]), where).to_pylist()
    assert rows[0]["day"] == dt.date(2024, 1, 5) and rows[1:] == [None, None]


def test_json_value_of_the_wrong_type_names_the_field() -> None:
    bad = wire(READER_ID, b'{"id": "one"}')
    with pytest.raises(MalformedRecordError, match=r"offset 101 .*field 'id'"):
        json_decoder().decode(pa.array([wire(READER_ID, b'{"id": 1}'), bad]), where)


# -- the client --------------------------------------------------------------------------------------


def test_unreachable_registry_is_retried_then_named_without_credentials() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    opts = RegistryOptions.parse({"valueformat": "avro", "schemaregistryretrytimeout": "1s",
                                  "schema.registry.url": f"http://me:hunter2@127.0.0.1:{port}"})
    waits: list[float] = []
    client = RegistryClient(opts, sleep=waits.append)
    with pytest.raises(RegistryUnavailable) as failure:
        client.schema_by_id(1)
    message = str(failure.value)
    assert f"http://127.0.0.1:{port}" in message and "hunter2" not in message
    assert "schemaRegistryRetryTimeout" in message
    assert len(waits) >= 2 and waits[1] > waits[0]  # backoff
