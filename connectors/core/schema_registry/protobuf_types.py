"""Protobuf messages to Arrow (hence Spark) types, as spark-protobuf's `from_protobuf` maps
them (org.apache.spark.sql.protobuf.utils.SchemaConverters, default options):

| Protobuf | Spark |
|---|---|
| int32, sint32, sfixed32, uint32, fixed32 | int (unsigned values above 2^31-1 wrap, as in Spark) |
| int64, sint64, sfixed64, uint64, fixed64 | bigint (likewise) |
| float, double, bool, string, bytes | float, double, boolean, string, binary |
| enum | string (the value's name; an unknown number as its digits) |
| message | struct; a message with no fields is left out, as Spark does |
| repeated | array; `map<K, V>` fields: map |
| oneof | its fields side by side in the struct, the one set non-null |
| google.protobuf.Timestamp | timestamp |
| google.protobuf.Duration | interval day to second |
| wrappers (Int32Value, StringValue, ...) | struct<value> (Spark's default, `unwrap.primitive.wrapper.types=false`) |

A message field not set, and a field with explicit presence (proto2 `optional`, proto3
`optional`, oneof members) not set, is null. Fields without presence (proto3 scalars) carry
their value, defaults included: Spark's `emit.default.values=true`. A recursive message is
refused (Spark's default `recursive.fields.max.depth=-1` refuses it too). Every field is
nullable.

`converter(descriptor)` gives the function turning a parsed message into the Python value
Arrow builds that struct from: per field, a getter chosen once, not per record.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor

SPARK_TIMESTAMP = pa.timestamp("us", tz="UTC")
SPARK_DURATION = pa.duration("us")  # Spark: DayTimeIntervalType

TIMESTAMP = "google.protobuf.Timestamp"
DURATION = "google.protobuf.Duration"
WRAPPERS = {f"google.protobuf.{n}Value" for n in
            ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String", "Bytes")}

_INT32 = (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SFIXED32)
_UINT32 = (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32)
_INT64 = (FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_SFIXED64)
_UINT64 = (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64)
_MESSAGE = (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP)


class UnsupportedProtobufSchema(ValueError):
    """A message Spark's from_protobuf refuses too (recursion)."""


def _is_map(fd: FieldDescriptor) -> bool:
    return (fd.type == FieldDescriptor.TYPE_MESSAGE and fd.is_repeated
            and fd.message_type.GetOptions().map_entry)


def _is_empty(desc: Descriptor) -> bool:
    return not desc.fields and desc.full_name not in WRAPPERS


def _kept_fields(desc: Descriptor) -> list[FieldDescriptor]:
    """The fields that get a column: those of an empty message type are left out."""
    return [fd for fd in desc.fields
            if not (fd.type in _MESSAGE and not _is_map(fd) and _is_empty(fd.message_type))]


def arrow_type(desc: Descriptor, seen: tuple[str, ...] = ()) -> pa.DataType:
    """The Spark-facing Arrow type of a message (see the module table)."""
    if desc.full_name in seen:
        raise UnsupportedProtobufSchema(
            f"the Protobuf message {desc.full_name} contains itself; recursive messages have no "
            "Spark type (Spark's from_protobuf refuses them by default too)")
    if desc.full_name == TIMESTAMP:
        return SPARK_TIMESTAMP
    if desc.full_name == DURATION:
        return SPARK_DURATION
    inner = (*seen, desc.full_name)
    return pa.struct([pa.field(fd.name, _field_type(fd, inner)) for fd in _kept_fields(desc)])


def _field_type(fd: FieldDescriptor, seen: tuple[str, ...]) -> pa.DataType:
    if _is_map(fd):
        key, value = fd.message_type.fields_by_name["key"], fd.message_type.fields_by_name["value"]
        return pa.map_(_scalar_type(key, seen), _scalar_type(value, seen))
    single = _scalar_type(fd, seen)
    return pa.list_(single) if fd.is_repeated else single


def _scalar_type(fd: FieldDescriptor, seen: tuple[str, ...]) -> pa.DataType:
    t = fd.type
    if t in _INT32 or t in _UINT32:
        return pa.int32()
    if t in _INT64 or t in _UINT64:
        return pa.int64()
    if t == FieldDescriptor.TYPE_FLOAT:
        return pa.float32()
    if t == FieldDescriptor.TYPE_DOUBLE:
        return pa.float64()
    if t == FieldDescriptor.TYPE_BOOL:
        return pa.bool_()
    if t in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_ENUM):
        return pa.string()
    if t == FieldDescriptor.TYPE_BYTES:
        return pa.binary()
    if t in _MESSAGE:
        return arrow_type(fd.message_type, seen)
    raise UnsupportedProtobufSchema(f"field {fd.full_name} has an unknown type {t}")


# -- values ----------------------------------------------------------------------------------------


def converter(desc: Descriptor) -> Callable[[Any], Any]:
    """message -> the Python value Arrow builds `arrow_type(desc)` from."""
    if desc.full_name == TIMESTAMP:
        return lambda m: m.seconds * 1_000_000 + m.nanos // 1000
    if desc.full_name == DURATION:
        return lambda m: m.seconds * 1_000_000 + int(m.nanos / 1000)
    fields = [(fd.name, _field_getter(fd)) for fd in _kept_fields(desc)]

    def message(m: Any) -> dict[str, Any]:
        return {name: get(m) for name, get in fields}
    return message


def _field_getter(fd: FieldDescriptor) -> Callable[[Any], Any]:
    name = fd.name
    if _is_map(fd):
        key = _value_fn(fd.message_type.fields_by_name["key"])
        value = _value_fn(fd.message_type.fields_by_name["value"])
        if key is None and value is None:
            return lambda m: list(getattr(m, name).items())
        k = key or _same
        v = value or _same
        return lambda m: [(k(a), v(b)) for a, b in getattr(m, name).items()]
    fn = _value_fn(fd)
    if fd.is_repeated:
        if fn is None:
            return lambda m: list(getattr(m, name))
        return lambda m: [fn(x) for x in getattr(m, name)]
    if fd.has_presence:
        if fn is None:
            return lambda m: getattr(m, name) if m.HasField(name) else None
        return lambda m: fn(getattr(m, name)) if m.HasField(name) else None
    if fn is None:
        return lambda m: getattr(m, name)
    return lambda m: fn(getattr(m, name))


def _same(v: Any) -> Any:
    return v


def _value_fn(fd: FieldDescriptor) -> Callable[[Any], Any] | None:
    """What a single value of `fd` goes through, or None when Arrow takes it as it is."""
    t = fd.type
    if t in _MESSAGE:
        return converter(fd.message_type)
    if t == FieldDescriptor.TYPE_ENUM:
        return _enum_name(fd.enum_type)
    if t in _UINT32:
        return lambda v: v - (1 << 32) if v >= (1 << 31) else v
    if t in _UINT64:
        return lambda v: v - (1 << 64) if v >= (1 << 63) else v
    return None


def _enum_name(enum: EnumDescriptor) -> Callable[[int], str]:
    names = {v.number: v.name for v in enum.values}
    return lambda n: names.get(n, str(n))
