"""The Kafka sink's Schema Registry formats without a registry: schemas derived from Spark
types (Spark's to_avro and spark-protobuf conventions), the Confluent wire format, rows that do
not fit, and the options checked at query start."""

from __future__ import annotations

import base64
import datetime as dt
import io
import json
from decimal import Decimal

import fastavro
import pyarrow as pa
import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from connectors.core.options import OptionError
from connectors.core.schema_registry.encoding import (
    EncodingPlan,
    RowDoesNotFit,
    encoder_for,
    wire_prefix,
)
from connectors.core.schema_registry.sink_schema import (
    SinkRegistry,
    check_fits,
    parse_sink_registries,
)
from connectors.core.schema_registry.options import RegistryOptions
from connectors.core.schema_registry.spark_schemas import (
    SchemaDerivationError,
    avro_schema,
    decimal_fixed_size,
    json_schema,
    protobuf_file,
)
from connectors.core.options import Options



ADDRESS = StructType([StructField("city", StringType()), StructField("zip", IntegerType(), False)])
ROW = StructType([
    StructField("id", LongType(), False),
    StructField("name", StringType()),
    StructField("amount", DecimalType(10, 2)),
    StructField("day", DateType()),
    StructField("ts", TimestampType()),
    StructField("local", TimestampNTZType()),
    StructField("tags", ArrayType(StringType(), False)),
    StructField("attrs", MapType(StringType(), IntegerType(), False)),
    StructField("addr", ADDRESS),
])
ARROW_ROW = pa.struct([
    ("id", pa.int64()), ("name", pa.string()), ("amount", pa.decimal128(10, 2)),
    ("day", pa.date32()), ("ts", pa.timestamp("us", tz="UTC")), ("local", pa.timestamp("us")),
    ("tags", pa.list_(pa.string())), ("attrs", pa.map_(pa.string(), pa.int32())),
    ("addr", pa.struct([pa.field("city", pa.string()), pa.field("zip", pa.int32(), False)])),
])
UTC = dt.timezone.utc
ROWS = [
    {"id": 1, "name": "a", "amount": Decimal("12.34"), "day": dt.date(2024, 2, 29),
     "ts": dt.datetime(2024, 1, 1, 12, 0, 0, 123456, tzinfo=UTC),
     "local": dt.datetime(2024, 1, 1, 8, 30), "tags": ["x", "y"], "attrs": [("k", 1)],
     "addr": {"city": "Oslo", "zip": 150}},
    {"id": 2, "name": None, "amount": None, "day": None, "ts": None, "local": None, "tags": [],
     "attrs": [], "addr": None},
    None,
]


# -- derived schemas --------------------------------------------------------------------------


def test_avro_follows_spark_to_avro():
    schema = avro_schema(ROW)
    assert schema["name"] == "topLevelRecord" and "namespace" not in schema
    fields = {f["name"]: f["type"] for f in schema["fields"]}
    defaults = {f["name"]: f["default"] for f in schema["fields"] if "default" in f}
    assert fields["id"] == "long"
    # null first with a null default, so that adding a nullable field stays compatible
    assert fields["name"] == ["null", "string"]
    assert defaults == {name: None for name in fields if name != "id"}
    assert fields["amount"] == ["null", {"type": "fixed", "name": "topLevelRecord.amount.fixed",
                                         "size": 5, "logicalType": "decimal", "precision": 10,
                                         "scale": 2}]
    assert fields["day"] == ["null", {"type": "int", "logicalType": "date"}]
    assert fields["ts"] == ["null", {"type": "long", "logicalType": "timestamp-micros"}]
    assert fields["local"] == ["null", {"type": "long", "logicalType": "local-timestamp-micros"}]
    assert fields["tags"] == ["null", {"type": "array", "items": "string"}]
    assert fields["attrs"] == ["null", {"type": "map", "values": "int"}]
    assert fields["addr"] == ["null", {"type": "record", "name": "addr",
                                       "namespace": "topLevelRecord",
                                       "fields": [{"name": "city", "type": ["null", "string"],
                                                   "default": None},
                                                  {"name": "zip", "type": "int"}]}]
    fastavro.parse_schema(schema)  # a valid schema


@pytest.mark.parametrize("precision,size", [(1, 1), (2, 1), (3, 2), (9, 4), (10, 5), (18, 8),
                                            (19, 9), (38, 16)])
def test_decimal_fixed_sizes_are_sparks(precision, size):
    # Spark's Decimal.minBytesForPrecision for these precisions
    assert decimal_fixed_size(precision) == size


def test_avro_refuses_what_it_cannot_hold_naming_the_field():
    bad_key = StructType([StructField("m", MapType(IntegerType(), StringType()))])
    with pytest.raises(SchemaDerivationError, match=r"field 'value\.m' of type map<int,string>.*"
                                                    r"keys are strings"):
        avro_schema(bad_key)
    with pytest.raises(SchemaDerivationError, match=r"field 'value\.a-b'.*must match"):
        avro_schema(StructType([StructField("a-b", StringType())]))


def test_json_schema_requires_only_non_nullable_fields_and_is_closed():
    schema = json_schema(ROW)
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert schema["required"] == ["id"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["name"] == {"oneOf": [{"type": "null"}, {"type": "string"}]}
    assert schema["properties"]["ts"]["oneOf"][1] == {"type": "string", "format": "date-time"}
    addr = schema["properties"]["addr"]["oneOf"][1]
    assert addr["required"] == ["zip"] and addr["additionalProperties"] is False


def test_protobuf_is_proto3_with_presence_for_nullable_scalars():
    fdp = protobuf_file(ROW)
    assert fdp.syntax == "proto3"
    assert sorted(fdp.dependency) == ["confluent/type/decimal.proto",
                                      "google/protobuf/timestamp.proto", "google/type/date.proto"]
    msg = fdp.message_type[0]
    assert msg.name == "TopLevelRecord"
    fields = {f.name: f for f in msg.field}
    assert [f.number for f in msg.field] == list(range(1, len(ROW.fields) + 1))
    assert not fields["id"].proto3_optional and fields["name"].proto3_optional
    assert fields["ts"].type_name == ".google.protobuf.Timestamp"
    assert fields["local"].type_name == ".google.protobuf.Timestamp"
    assert fields["day"].type_name == ".google.type.Date"
    assert fields["amount"].type_name == ".confluent.type.Decimal"
    assert fields["addr"].type_name == ".TopLevelRecord.Addr"
    entry = next(n for n in msg.nested_type if n.name == "AttrsEntry")
    assert entry.options.map_entry
    # it loads into a pool beside the well-known types
    from confluent_kafka.schema_registry.common.protobuf import _init_pool
    from google.protobuf import descriptor_pool

    pool = descriptor_pool.DescriptorPool()
    _init_pool(pool)
    pool.Add(fdp)
    assert pool.FindMessageTypeByName("TopLevelRecord").fields_by_name["attrs"].message_type \
        .GetOptions().map_entry


def test_protobuf_refuses_lists_of_lists_naming_the_field():
    nested = StructType([StructField("grid", ArrayType(ArrayType(IntegerType())))])
    with pytest.raises(SchemaDerivationError, match=r"field 'value\.grid\[\]'.*list of lists"):
        protobuf_file(nested)


# -- the wire format --------------------------------------------------------------------------


def test_wire_prefix_is_confluents():
    assert wire_prefix(258) == b"\x00\x00\x00\x01\x02"
    assert wire_prefix(258, (0,)) == b"\x00\x00\x00\x01\x02\x00"
    # confluent-kafka's own encoding of the message indexes, for any other path
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    for indexes in [(1,), (0, 2), (3, 1, 70)]:
        buf = io.BytesIO()
        ProtobufSerializer._encode_varints(buf, list(indexes))
        assert wire_prefix(7, indexes) == b"\x00\x00\x00\x00\x07" + buf.getvalue()


def _plan(fmt: str, schema_str: str, *, derived: bool = True, **extra) -> EncodingPlan:
    return EncodingPlan("value", fmt, "t-value", 42, schema_str, derived, **extra)


def test_avro_rows_read_back_by_fastavro():
    plan = _plan("avro", json.dumps(avro_schema(ROW)))
    out = encoder_for(plan).encode(pa.array(ROWS, type=ARROW_ROW))
    assert out[2] is None  # a null struct is a null value (a tombstone)
    parsed = fastavro.parse_schema(avro_schema(ROW))
    for raw, row in zip(out[:2], ROWS[:2]):
        assert raw[:5] == b"\x00\x00\x00\x00\x2a"
        back = fastavro.schemaless_reader(io.BytesIO(raw[5:]), parsed)
        assert back == {**row, "attrs": dict(row["attrs"])}


def test_json_rows_as_spark_to_json_writes_them():
    plan = _plan("json-schema", json.dumps(json_schema(ROW)))
    out = encoder_for(plan).encode(pa.array(ROWS, type=ARROW_ROW))
    first = json.loads(out[0][5:])
    assert first == {"id": 1, "name": "a", "amount": 12.34, "day": "2024-02-29",
                     "ts": "2024-01-01T12:00:00.123456+00:00", "local": "2024-01-01T08:30:00",
                     "tags": ["x", "y"], "attrs": {"k": 1}, "addr": {"city": "Oslo", "zip": 150}}
    import jsonschema

    for raw in out[:2]:
        jsonschema.validate(json.loads(raw[5:]), json_schema(ROW))


def test_protobuf_rows_parse_as_the_message():
    fdp = protobuf_file(ROW)
    plan = _plan("protobuf", base64.b64encode(fdp.SerializeToString()).decode(),
                 message_name="TopLevelRecord")
    encoder = encoder_for(plan)
    out = encoder.encode(pa.array(ROWS, type=ARROW_ROW))
    assert out[0][:6] == b"\x00\x00\x00\x00\x2a\x00"
    msg = encoder.message_class.FromString(out[0][6:])
    assert (msg.id, msg.name, msg.tags[:], dict(msg.attrs)) == (1, "a", ["x", "y"], {"k": 1})
    assert msg.ts.ToDatetime(tzinfo=UTC) == ROWS[0]["ts"]
    assert (msg.day.year, msg.day.month, msg.day.day) == (2024, 2, 29)
    assert (msg.addr.city, msg.addr.zip) == ("Oslo", 150)
    from confluent_kafka.schema_registry.common.protobuf import protobuf_to_decimal

    assert protobuf_to_decimal(msg.amount) == Decimal("12.34")
    empty = encoder.message_class.FromString(out[1][6:])
    assert not empty.HasField("name") and not empty.HasField("addr") and empty.id == 2


PAINT = StructType([StructField("id", LongType()), StructField("color", StringType())])
PAINT_ARROW = pa.struct([("id", pa.int64()), ("color", pa.string())])
PAINT_AVRO = {"type": "record", "name": "Paint", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"},
    {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}}]}


def test_a_row_that_does_not_fit_names_the_field_and_the_row():
    rows = pa.array([{"id": 1, "color": "RED"}, {"id": 2, "color": "BLUE"}], type=PAINT_ARROW)
    avro = encoder_for(_plan("avro", json.dumps(PAINT_AVRO), derived=False))
    with pytest.raises(RowDoesNotFit, match=r"field 'value\.color' of source row 7 does not fit "
                                            r"the avro schema id 42 of subject 't-value': "
                                            r"'BLUE' is not a symbol of enum shop\.Color"):
        avro.encode(rows, where=lambda row: f"source row {row + 6}")
    missing = pa.array([{"id": None, "color": "RED"}], type=PAINT_ARROW)
    with pytest.raises(RowDoesNotFit, match=r"field 'value\.id' of row 0"):
        avro.encode(missing)
    json_paint = {"type": "object", "properties": {"id": {"type": "integer"},
                                                   "color": {"enum": ["RED", "GREEN"]}},
                  "required": ["id", "color"]}
    js = encoder_for(_plan("json-schema", json.dumps(json_paint), derived=False))
    with pytest.raises(RowDoesNotFit, match=r"field 'value\.color' of row 1"):
        js.encode(rows)
    with pytest.raises(RowDoesNotFit, match=r"field 'value\.id' of row 0"):
        js.encode(missing)


# -- options at query start --------------------------------------------------------------------


def _parse(schema: StructType, topic: str | None = "out", **options: str):
    opts = Options({"schema.registry.url": "http://registry:8081", **options})
    return parse_sink_registries(opts, schema, topic)


def test_a_registry_format_needs_a_struct_column():
    plain = StructType([StructField("key", BinaryType()), StructField("value", StringType())])
    with pytest.raises(OptionError, match=r"Option 'valueFormat'.*column 'value' is string"):
        _parse(plain, valueFormat="avro")
    with pytest.raises(OptionError, match=r"Option 'keyFormat'.*no 'key' column"):
        _parse(StructType([StructField("value", ROW)]), valueFormat="avro", keyFormat="avro")
    assert _parse(plain) == {}  # binary: nothing to do


def test_derivation_and_subject_fail_at_query_start():
    bad = StructType([StructField("value", StructType([
        StructField("m", MapType(LongType(), DoubleType()))]))])
    with pytest.raises(OptionError, match=r"Option 'valueFormat'.*'value\.m'"):
        _parse(bad, valueFormat="avro")
    good = StructType([StructField("value", ROW)])
    with pytest.raises(OptionError, match=r"Option 'valueSubject'.*is required"):
        _parse(good, topic=None, valueFormat="avro")  # rows carry their topics
    registries = _parse(good, topic=None, valueFormat="protobuf", valueSubject="orders")
    assert registries["value"].subject(None) == "orders"
    named = _parse(good, valueFormat="avro", valueSubjectNameStrategy="record",
                   valueRecordName="com.acme.Order")
    assert named["value"].subject("out") == "com.acme.Order"
    text, _ = named["value"].derived()
    assert json.loads(text)["name"] == "Order" and json.loads(text)["namespace"] == "com.acme"


def test_the_sink_takes_registry_options_and_refuses_source_ones(tmp_path):
    from sinks.kafka.data_source import KafkaSinkDataSource

    def kafka_stream_writer(raw, schema, overwrite):
        return KafkaSinkDataSource(raw).streamWriter(schema, overwrite)

    schema = StructType([StructField("value", StringType())])
    base = {"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "out",
            "checkpointLocation": str(tmp_path), "schema.registry.url": "http://r:8081"}
    with pytest.raises(OptionError, match=r"Option 'valueFormat'.*column 'value' is string"):
        kafka_stream_writer({**base, "valueFormat": "json-schema"}, schema, False)
    with pytest.raises(OptionError, match=r"Option 'mode'"):
        kafka_stream_writer({**base, "mode": "PERMISSIVE"}, schema, False)


def _fits(fmt: str, column: StructType, schema_str: str, **extra) -> None:
    registry = SinkRegistry(RegistryOptions(side="value", format=fmt, url="http://r"), column,
                            auto_register=False, use_latest=True)
    check_fits(registry, _plan(fmt, schema_str, derived=False, **extra))


def test_use_latest_version_checks_the_column_against_the_schema():
    _fits("avro", PAINT, json.dumps(PAINT_AVRO))  # fits
    with_required = {**PAINT_AVRO, "fields": PAINT_AVRO["fields"] + [
        {"name": "size", "type": "int"}]}
    with pytest.raises(OptionError, match=r"Option 'useLatestVersion'.*needs field "
                                          r"'value\.size'.*no default"):
        _fits("avro", PAINT, json.dumps(with_required))
    narrow = {**PAINT_AVRO, "fields": [{"name": "id", "type": "int"}, PAINT_AVRO["fields"][1]]}
    with pytest.raises(OptionError, match=r"field 'value\.id' \(bigint\) cannot be written"):
        _fits("avro", PAINT, json.dumps(narrow))
    extra = StructType([*PAINT.fields, StructField("shade", StringType())])
    with pytest.raises(OptionError, match=r"field 'value\.shade' is not in record Paint"):
        _fits("avro", extra, json.dumps(PAINT_AVRO))
    closed = {"type": "object", "additionalProperties": False,
              "properties": {"id": {"type": "integer"}, "color": {"type": "string"}}}
    _fits("json-schema", PAINT, json.dumps(closed))
    with pytest.raises(OptionError, match=r"field 'value\.shade' is not a property"):
        _fits("json-schema", extra, json.dumps(closed))
    fdp = protobuf_file(PAINT, "Paint", "shop")
    proto = base64.b64encode(fdp.SerializeToString()).decode()
    _fits("protobuf", PAINT, proto, message_name="shop.Paint")
    with pytest.raises(OptionError, match=r"field 'value\.shade' is not in message shop\.Paint"):
        _fits("protobuf", extra, proto, message_name="shop.Paint")


def test_nested_maps_become_dicts_as_pyarrows_own_conversion_makes_them():
    from connectors.core.schema_registry.encoding import Encoder

    t = pa.struct([("m", pa.map_(pa.string(), pa.map_(pa.string(), pa.int32()))),
                   ("l", pa.list_(pa.struct([("mm", pa.map_(pa.int32(), pa.string()))])))])
    values = pa.array([{"m": [("a", [("b", 1)]), ("c", None)], "l": [{"mm": [(1, "x")]}, None]},
                       None, {"m": None, "l": None}], type=t)
    rows = Encoder.rows(encoder_for(_plan("avro", json.dumps(PAINT_AVRO), derived=False)),
                        values)
    assert rows == values.to_pylist(maps_as_pydicts="strict")


def _random_rows(n: int, seed: int) -> list:
    import random

    rnd = random.Random(seed)

    def maybe(value):
        return None if rnd.random() < 0.2 else value

    def text():
        return "".join(rnd.choice("aé€😀z ") for _ in range(rnd.randint(0, 40)))

    rows = []
    for i in range(n):
        rows.append(maybe({
            "id": rnd.choice([0, -1, 1, 2**63 - 1, -2**63, rnd.randint(-2**40, 2**40)]),
            "name": maybe(text()),
            "amount": maybe(Decimal(rnd.randint(-10**10 + 1, 10**10 - 1)).scaleb(-2)),
            "day": maybe(dt.date(1970, 1, 1) + dt.timedelta(days=rnd.randint(-30000, 30000))),
            "ts": maybe(dt.datetime(1970, 1, 1, tzinfo=UTC)
                        + dt.timedelta(microseconds=rnd.randint(-2**50, 2**50))),
            "local": maybe(dt.datetime(2000, 1, 1) + dt.timedelta(seconds=rnd.randint(0, 10**8))),
            "tags": [text() for _ in range(rnd.randint(0, 3))],
            "attrs": [(text(), rnd.randint(-2**31, 2**31 - 1)) for _ in range(rnd.randint(0, 3))],
            "addr": maybe({"city": maybe(text()), "zip": rnd.randint(-2**31, 2**31 - 1)}),
        }))
    return rows


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_columnar_avro_is_byte_for_byte_fastavros(seed):
    """The derived schema's rows, encoded column by column with Arrow, are the bytes fastavro
    writes row by row (nulls at every level, extremes, multi-byte text, empty lists and maps,
    negative decimals, a sliced batch)."""
    from connectors.core.schema_registry.avro_columns import encode_column

    schema = avro_schema(ROW)
    parsed = fastavro.parse_schema(schema)
    column = pa.array(_random_rows(300, seed), type=ARROW_ROW).slice(7, 250)
    got = encode_column(column, schema, b"\x00\x00\x00\x00\x2a")
    for row, raw in zip(column.to_pylist(maps_as_pydicts="strict"), got):
        if row is None:
            assert raw is None
            continue
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, row)
        assert raw == b"\x00\x00\x00\x00\x2a" + out.getvalue()
    # and the encoder takes that path for a derived plan
    encoder = encoder_for(_plan("avro", json.dumps(schema)))
    assert encoder.encode(column) == got


def test_columnar_avro_leaves_a_null_in_a_required_field_to_fastavro_which_names_it():
    schema = avro_schema(PAINT)
    strict = {**schema, "fields": [{"name": "id", "type": "long"},
                                   {"name": "color", "type": ["null", "string"],
                                    "default": None}]}
    rows = pa.array([{"id": 1, "color": "RED"}, {"id": None, "color": None}], type=PAINT_ARROW)
    with pytest.raises(RowDoesNotFit, match=r"field 'value\.id' of row 1"):
        encoder_for(_plan("avro", json.dumps(strict))).encode(rows)


def test_columnar_avro_covers_the_other_scalar_types_byte_for_byte():
    import random

    from connectors.core.schema_registry.avro_columns import encode_column
    from pyspark.sql.types import BooleanType, ByteType, FloatType, NullType, ShortType

    spark_type = StructType([
        StructField("b", BooleanType()), StructField("i8", ByteType()),
        StructField("i16", ShortType(), False), StructField("f", FloatType()),
        StructField("d", DoubleType(), False), StructField("raw", BinaryType()),
        StructField("nothing", NullType()),
        StructField("grid", ArrayType(MapType(StringType(), ArrayType(LongType())))),
        StructField("dec", DecimalType(38, 0)),
    ])
    arrow_type = pa.struct([("b", pa.bool_()), ("i8", pa.int8()), ("i16", pa.int16()),
                            ("f", pa.float32()), ("d", pa.float64()), ("raw", pa.binary()),
                            ("nothing", pa.null()),
                            ("grid", pa.list_(pa.map_(pa.string(), pa.list_(pa.int64())))),
                            ("dec", pa.decimal128(38, 0))])
    rnd = random.Random(5)
    rows = [{"b": rnd.choice([True, False, None]), "i8": rnd.choice([-128, 127, None]),
             "i16": rnd.randint(-2**15, 2**15 - 1), "f": rnd.choice([1.5, -0.0, None]),
             "d": rnd.choice([float("inf"), -1e308, 3.25]),
             "raw": rnd.choice([b"", b"\x00\xff" * rnd.randint(0, 70), None]), "nothing": None,
             "grid": rnd.choice([None, [], [[("k", [1, -2**63])], []], [[("", None)]]]),
             "dec": rnd.choice([Decimal(10**38 - 1), Decimal(-(10**38) + 1), Decimal(0), None])}
            for _ in range(200)]
    column = pa.array(rows, type=arrow_type)
    schema = avro_schema(spark_type)
    parsed = fastavro.parse_schema(schema)
    got = encode_column(column, schema, b"")
    for row, raw in zip(column.to_pylist(maps_as_pydicts="strict"), got):
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, row)
        assert raw == out.getvalue(), row
