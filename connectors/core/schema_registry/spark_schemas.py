"""Registry schemas derived from a Spark struct type, for the Kafka sink's `autoRegisterSchemas`.

The derivations follow what a migrating user already has, so that a schema registered here is
the one their Spark job would have produced:

* Avro: Spark's `to_avro` (SchemaConverters.toAvroType): a record named `topLevelRecord`,
  nested records named after their field in the parent's namespace, decimals as `fixed` with
  the decimal logical type, dates as `date`, timestamps as `timestamp-micros`, timestamp_ntz
  as `local-timestamp-micros`, maps with string keys only. One departure: a nullable type is
  the union `["null", type]` with a null default (Spark writes `[type, "null"]` without one),
  so that adding a nullable field to the column is a BACKWARD-compatible change the registry
  accepts; Spark's `from_avro` reads either;
* Protobuf: the reverse of spark-protobuf's reading (proto3; `optional` for nullable scalars,
  so a null is an unset field; nested messages for structs; `repeated` for arrays; `map` for
  maps; google.protobuf.Timestamp for timestamps). spark-protobuf has no mapping for dates and
  decimals: they become google.type.Date and confluent.type.Decimal, the types Confluent's own
  converters use;
* JSON Schema: draft-07, closed objects (`additionalProperties: false`, so that adding a field
  stays compatible under the registry's rules), nullable fields as `oneOf` with null and left
  out of `required`; the values as Spark's `to_json` writes them (dates and timestamps as ISO
  8601 text, decimals as numbers, binary as base64 text).

A type that a format cannot hold fails with SchemaDerivationError naming the field's path.
"""

from __future__ import annotations

import re
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    CharType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
    VarcharType,
)

#: Spark's to_avro: the top-level record's name when the user gives none.
AVRO_RECORD_NAME = "topLevelRecord"
#: The Protobuf message the derived file declares first (the wire's message index [0]).
PROTOBUF_MESSAGE_NAME = "TopLevelRecord"
JSON_SCHEMA_DRAFT = "http://json-schema.org/draft-07/schema#"

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TEXT = (StringType, CharType, VarcharType)
_SMALL_INTS = (ByteType, ShortType, IntegerType)


class SchemaDerivationError(ValueError):
    """A Spark type with no form in the target format; the message names the field."""

    def __init__(self, path: str, data_type: DataType, fmt: str, why: str) -> None:
        self.path = path
        super().__init__(
            f"field '{path}' of type {data_type.simpleString()} cannot be written as {fmt}: {why}")


def _check_name(name: str, path: str, data_type: DataType, fmt: str) -> None:
    if not _NAME.match(name):
        raise SchemaDerivationError(
            path, data_type, fmt, f"{fmt} field names must match [A-Za-z_][A-Za-z0-9_]*; rename "
            "the field (for example with .alias() or withField)")


# -- Avro -------------------------------------------------------------------------------------


def decimal_fixed_size(precision: int) -> int:
    """The fewest bytes whose two's complement holds every unscaled value of `precision`
    digits (Spark's minBytesForPrecision)."""
    size = 1
    while 2 ** (8 * size - 1) < 10**precision:
        size += 1
    return size


def avro_schema(struct: StructType, record_name: str = AVRO_RECORD_NAME,
                namespace: str = "", *, path: str = "value") -> dict[str, Any]:
    """The Avro record schema Spark's `to_avro` derives for `struct` (not nullable at the top:
    a null struct is written as a null Kafka value)."""
    return _avro_record(struct, record_name, namespace, path)


def _avro_record(struct: StructType, name: str, namespace: str, path: str) -> dict[str, Any]:
    child_ns = f"{namespace}.{name}" if namespace else name
    fields = []
    for f in struct.fields:
        fpath = f"{path}.{f.name}"
        _check_name(f.name, fpath, f.dataType, "Avro")
        field: dict[str, Any] = {
            "name": f.name, "type": _avro_type(f.dataType, f.nullable, f.name, child_ns, fpath)}
        if f.nullable and not isinstance(f.dataType, NullType):
            field["default"] = None  # adding a nullable field stays a compatible change
        fields.append(field)
    record: dict[str, Any] = {"type": "record", "name": name, "fields": fields}
    if namespace:
        record["namespace"] = namespace
    return record


def _avro_type(t: DataType, nullable: bool, name: str, namespace: str, path: str) -> Any:
    schema: Any
    if isinstance(t, BooleanType):
        schema = "boolean"
    elif isinstance(t, _SMALL_INTS):
        schema = "int"
    elif isinstance(t, LongType):
        schema = "long"
    elif isinstance(t, FloatType):
        schema = "float"
    elif isinstance(t, DoubleType):
        schema = "double"
    elif isinstance(t, _TEXT):
        schema = "string"
    elif isinstance(t, BinaryType):
        schema = "bytes"
    elif isinstance(t, DateType):
        schema = {"type": "int", "logicalType": "date"}
    elif isinstance(t, TimestampNTZType):
        schema = {"type": "long", "logicalType": "local-timestamp-micros"}
    elif isinstance(t, TimestampType):
        schema = {"type": "long", "logicalType": "timestamp-micros"}
    elif isinstance(t, DecimalType):
        fixed_name = f"{namespace}.{name}.fixed" if namespace else f"{name}.fixed"
        schema = {"type": "fixed", "name": fixed_name, "size": decimal_fixed_size(t.precision),
                  "logicalType": "decimal", "precision": t.precision, "scale": t.scale}
    elif isinstance(t, NullType):
        return "null"
    elif isinstance(t, ArrayType):
        schema = {"type": "array",
                  "items": _avro_type(t.elementType, t.containsNull, name, namespace, f"{path}[]")}
    elif isinstance(t, MapType):
        if not isinstance(t.keyType, _TEXT):
            raise SchemaDerivationError(path, t, "Avro", "Avro map keys are strings; cast the "
                                        "keys to string first")
        schema = {"type": "map", "values": _avro_type(
            t.valueType, t.valueContainsNull, name, namespace, f"{path}{{}}")}
    elif isinstance(t, StructType):
        schema = _avro_record(t, name, namespace, path)
    else:
        raise SchemaDerivationError(path, t, "Avro", "no Avro type for it (as in Spark's to_avro)")
    return ["null", schema] if nullable else schema


# -- JSON Schema ------------------------------------------------------------------------------


def json_schema(struct: StructType, title: str = AVRO_RECORD_NAME, *,
                path: str = "value") -> dict[str, Any]:
    """A draft-07 JSON Schema for rows of `struct` as the sink writes them."""
    schema = _json_object(struct, path)
    return {"$schema": JSON_SCHEMA_DRAFT, "title": title, **schema}


def _json_object(struct: StructType, path: str) -> dict[str, Any]:
    props = {f.name: _json_type(f.dataType, f.nullable, f"{path}.{f.name}")
             for f in struct.fields}
    obj: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    required = [f.name for f in struct.fields if not f.nullable]
    if required:
        obj["required"] = required
    return obj


def _json_type(t: DataType, nullable: bool, path: str) -> dict[str, Any]:
    schema: dict[str, Any]
    if isinstance(t, BooleanType):
        schema = {"type": "boolean"}
    elif isinstance(t, (*_SMALL_INTS, LongType)):
        schema = {"type": "integer"}
    elif isinstance(t, (FloatType, DoubleType, DecimalType)):
        schema = {"type": "number"}
    elif isinstance(t, _TEXT):
        schema = {"type": "string"}
    elif isinstance(t, BinaryType):
        schema = {"type": "string", "contentEncoding": "base64"}
    elif isinstance(t, DateType):
        schema = {"type": "string", "format": "date"}
    elif isinstance(t, TimestampNTZType):
        # No offset, so not RFC 3339's date-time: ISO 8601 local date and time
        schema = {"type": "string"}
    elif isinstance(t, TimestampType):
        schema = {"type": "string", "format": "date-time"}
    elif isinstance(t, NullType):
        return {"type": "null"}
    elif isinstance(t, ArrayType):
        schema = {"type": "array", "items": _json_type(t.elementType, t.containsNull, f"{path}[]")}
    elif isinstance(t, MapType):
        if not isinstance(t.keyType, (*_TEXT, *_SMALL_INTS, LongType)):
            raise SchemaDerivationError(path, t, "JSON Schema", "JSON object keys are text: "
                                        "map keys must be strings or integers")
        schema = {"type": "object", "additionalProperties": _json_type(
            t.valueType, t.valueContainsNull, f"{path}{{}}")}
    elif isinstance(t, StructType):
        schema = _json_object(t, path)
    else:
        raise SchemaDerivationError(path, t, "JSON Schema", "no JSON form for it")
    return {"oneOf": [{"type": "null"}, schema]} if nullable else schema


# -- Protobuf ---------------------------------------------------------------------------------

#: Files a derived .proto may import; registries know them without a reference (as
#: Confluent's serializers assume for well-known types).
TIMESTAMP_PROTO = "google/protobuf/timestamp.proto"
DATE_PROTO = "google/type/date.proto"
DECIMAL_PROTO = "confluent/type/decimal.proto"


def protobuf_file(struct: StructType, message_name: str = PROTOBUF_MESSAGE_NAME,
                  package: str = "", *, file_name: str | None = None,
                  path: str = "value") -> Any:
    """A proto3 FileDescriptorProto whose first message holds rows of `struct`."""
    from google.protobuf import descriptor_pb2

    fdp = descriptor_pb2.FileDescriptorProto()
    fdp.name = file_name or f"{(package + '.') if package else ''}{message_name}.proto"
    fdp.syntax = "proto3"
    if package:
        fdp.package = package
    deps: set[str] = set()
    msg = fdp.message_type.add()
    _proto_message(msg, struct, message_name, f".{package}" if package else "", path, deps)
    fdp.dependency.extend(sorted(deps))
    return fdp


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part) or "Field"


def _proto_message(msg: Any, struct: StructType, name: str, scope: str, path: str,
                   deps: set[str]) -> None:
    from google.protobuf import descriptor_pb2 as d

    F = d.FieldDescriptorProto
    msg.name = name
    full = f"{scope}.{name}"
    owner = _Owner(msg, full, set())
    for number, f in enumerate(struct.fields, start=1):
        fpath = f"{path}.{f.name}"
        _check_name(f.name, fpath, f.dataType, "Protobuf")
        field = msg.field.add()
        field.name = f.name
        field.number = number
        t = f.dataType
        if isinstance(t, MapType):
            if not isinstance(t.keyType, (*_TEXT, *_SMALL_INTS, LongType, BooleanType)):
                raise SchemaDerivationError(fpath, t, "Protobuf", "Protobuf map keys are "
                                            "strings, integers or booleans")
            entry = msg.nested_type.add()
            entry.name = _unique(_camel(f.name) + "Entry", owner.names)
            entry.options.map_entry = True
            key = entry.field.add()
            key.name, key.number, key.label = "key", 1, F.LABEL_OPTIONAL
            _proto_type(key, t.keyType, f"{fpath}{{key}}", owner, deps, f.name, True)
            value = entry.field.add()
            value.name, value.number, value.label = "value", 2, F.LABEL_OPTIONAL
            # a struct value's message is declared beside the entry (entries declare nothing)
            _proto_type(value, t.valueType, f"{fpath}{{}}", owner, deps, f"{f.name}_value", True)
            field.label = F.LABEL_REPEATED
            field.type = F.TYPE_MESSAGE
            field.type_name = f"{full}.{entry.name}"
        elif isinstance(t, ArrayType):
            field.label = F.LABEL_REPEATED
            _proto_type(field, t.elementType, f"{fpath}[]", owner, deps, f.name, True)
        else:
            field.label = F.LABEL_OPTIONAL
            is_message = _proto_type(field, t, fpath, owner, deps, f.name, False)
            if f.nullable and not is_message:
                # proto3 `optional`: explicit presence, so a null is an unset field, not 0/""
                field.proto3_optional = True
                oneof = msg.oneof_decl.add()
                oneof.name = _unique(f"_{f.name}", owner.names)
                field.oneof_index = len(msg.oneof_decl) - 1


class _Owner:
    """The message that declares nested types, its full name, and the names taken in it."""

    def __init__(self, msg: Any, full_name: str, names: set[str]) -> None:
        self.msg, self.full_name, self.names = msg, full_name, names


def _unique(name: str, taken: set[str]) -> str:
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name}{n}"
    taken.add(candidate)
    return candidate


def _proto_type(field: Any, t: DataType, path: str, owner: _Owner, deps: set[str],
                name_hint: str, in_container: bool) -> bool:
    """Set `field`'s type for Spark type `t`; True when it is a message type."""
    from google.protobuf import descriptor_pb2 as d

    F = d.FieldDescriptorProto
    scalar = {BooleanType: F.TYPE_BOOL, ByteType: F.TYPE_INT32, ShortType: F.TYPE_INT32,
              IntegerType: F.TYPE_INT32, LongType: F.TYPE_INT64, FloatType: F.TYPE_FLOAT,
              DoubleType: F.TYPE_DOUBLE, StringType: F.TYPE_STRING, CharType: F.TYPE_STRING,
              VarcharType: F.TYPE_STRING, BinaryType: F.TYPE_BYTES}
    for cls, code in scalar.items():
        if isinstance(t, cls):
            field.type = code
            return False
    if isinstance(t, (ArrayType, MapType)) and in_container:
        raise SchemaDerivationError(path, t, "Protobuf", "Protobuf has no list of lists, list "
                                    "of maps or map of lists or maps; wrap the inner one in a "
                                    "struct")
    field.type = F.TYPE_MESSAGE
    if isinstance(t, (TimestampType, TimestampNTZType)):
        field.type_name = ".google.protobuf.Timestamp"
        deps.add(TIMESTAMP_PROTO)
    elif isinstance(t, DateType):
        field.type_name = ".google.type.Date"
        deps.add(DATE_PROTO)
    elif isinstance(t, DecimalType):
        field.type_name = ".confluent.type.Decimal"
        deps.add(DECIMAL_PROTO)
    elif isinstance(t, StructType):
        nested = owner.msg.nested_type.add()
        nested_name = _unique(_camel(name_hint), owner.names)
        _proto_message(nested, t, nested_name, owner.full_name, path, deps)
        field.type_name = f"{owner.full_name}.{nested_name}"
    else:
        raise SchemaDerivationError(path, t, "Protobuf", "no Protobuf type for it")
    return True
