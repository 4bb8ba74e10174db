"""Rows of a struct column serialized into the Confluent wire format, for the Kafka sink.

Every record is a magic byte 0, the schema id as 4 big-endian bytes, for Protobuf the message
indexes (one 0 byte for the file's first message), then the payload: Avro column by column
with Arrow for a derived schema (avro_columns.py), else by fastavro's compiled writer per row;
Protobuf by the message's own SerializeToString; JSON Schema as UTF-8 JSON.
The registry is never asked here: the driver resolves the schema and its id once
(`EncodingPlan`), and each worker process builds one encoder per plan from it. A null struct is
a null Kafka value (a tombstone), as with Confluent's serializers. A row that does not fit the
schema raises RowDoesNotFit naming the row and the field.
"""

from __future__ import annotations

import base64
import datetime as dt
import io
import json
import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pyarrow as pa

log = logging.getLogger("kafka_eos.schema_registry")

MAGIC_BYTE = b"\x00"
AVRO, PROTOBUF, JSON_SCHEMA = "avro", "protobuf", "json-schema"
#: The registry's schemaType for each format.
SCHEMA_TYPES = {AVRO: "AVRO", PROTOBUF: "PROTOBUF", JSON_SCHEMA: "JSON"}


class RowDoesNotFit(ValueError):
    """A row whose struct cannot be written with the schema: names the column, the row, the
    field and the subject, so the failed task says what to fix."""


@dataclass(frozen=True)
class EncodingPlan:
    """What a task needs to serialize one column, resolved once on the driver. Picklable."""

    column: str  # "value" or "key"
    format: str  # AVRO, PROTOBUF or JSON_SCHEMA
    subject: str
    schema_id: int
    #: The registered schema's text: Avro or JSON Schema JSON, or a base64 FileDescriptorProto
    schema_str: str
    #: True when the schema was derived from the column's type (fits by construction: the
    #: JSON rows are then not validated row by row)
    derived: bool
    #: Protobuf: the full name of the message rows are written as, and its message indexes
    message_name: str | None = None
    message_indexes: tuple[int, ...] = (0,)
    #: Protobuf: files the schema imports that the registry holds as references (base64)
    dependencies: tuple[tuple[str, str], ...] = field(default=())

    def describe(self) -> str:
        return f"the {self.format} schema id {self.schema_id} of subject '{self.subject}'"


def wire_prefix(schema_id: int, message_indexes: tuple[int, ...] | None = None) -> bytes:
    """Magic byte, schema id and, for Protobuf, the message indexes: the header Confluent's
    serializers write (a lone 0 for [0], else the zigzag-varint count then each index)."""
    header = MAGIC_BYTE + schema_id.to_bytes(4, "big")
    if message_indexes is None:
        return header
    if tuple(message_indexes) == (0,):
        return header + b"\x00"
    out = bytearray(_zigzag_varint(len(message_indexes)))
    for index in message_indexes:
        out += _zigzag_varint(index)
    return header + bytes(out)


def _zigzag_varint(value: int) -> bytes:
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


class Encoder(ABC):
    """Serializes the rows of one struct column with one schema."""

    def __init__(self, plan: EncodingPlan) -> None:
        self.plan = plan

    def encode(self, column: pa.Array, where: Callable[[int], str] | None = None) -> list[bytes | None]:
        """One Kafka value (or key) per row: None for a null struct. `where(row)` describes
        a row for errors (its source offset, say)."""
        rows = self.rows(column)
        out: list[bytes | None] = []
        append = out.append
        encode_one = self.encode_one
        row = 0
        try:
            for row, record in enumerate(rows):  # noqa: B007 (row names a failure)
                append(None if record is None else encode_one(record))
        except RowDoesNotFit:
            raise
        except Exception as e:  # noqa: BLE001 (any writer error is the row's)
            raise self.misfit(row, rows[row], e, where) from None
        return out

    def rows(self, column: pa.Array) -> list[Any]:
        """The column as Python values the writer takes (dicts; maps as dicts). Maps are
        turned into dicts here, not by `to_pylist(maps_as_pydicts=...)`, which made the whole
        conversion ten times slower (measured with pyarrow 26)."""
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        rows = column.to_pylist()
        return _maps_as_dicts(rows, column.type) if _has_maps(column.type) else rows

    @abstractmethod
    def encode_one(self, record: dict) -> bytes:
        """One record, prefix included."""

    def fault(self, record: dict, error: Exception) -> tuple[str | None, str]:
        """The path of the field that failed, when the format's tools can tell it, and why."""
        return None, f"{type(error).__name__}: {error}"

    def misfit(self, row: int, record: dict, error: Exception,
               where: Callable[[int], str] | None) -> RowDoesNotFit:
        path, why = self.fault(record, error)
        place = where(row) if where else f"row {row} of the batch"
        at = f"field '{self.plan.column}.{path}'" if path else f"column '{self.plan.column}'"
        return RowDoesNotFit(f"{at} of {place} does not fit {self.plan.describe()}: {why}")


def _has_maps(t: pa.DataType) -> bool:
    return pa.types.is_map(t) or any(_has_maps(t.field(i).type) for i in range(t.num_fields))


def _maps_as_dicts(values: list, t: pa.DataType) -> list:
    """`values` of Arrow type `t` with every map's [(key, value)] list as a dict."""
    if pa.types.is_map(t):
        item = t.item_type
        deep = _has_maps(item)
        return [None if v is None else
                dict(zip((k for k, _ in v), _maps_as_dicts([x for _, x in v], item)))
                if deep else dict(v) for v in values]
    if pa.types.is_struct(t):
        inner = [(f.name, f.type) for f in t if _has_maps(f.type)]
        for row in values:
            if row is not None:
                for name, ft in inner:
                    row[name] = _maps_as_dicts([row[name]], ft)[0]
        return values
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [None if v is None else _maps_as_dicts(v, t.value_type) for v in values]
    return values


# -- Avro -------------------------------------------------------------------------------------


class AvroEncoder(Encoder):
    def __init__(self, plan: EncodingPlan) -> None:
        import fastavro

        super().__init__(plan)
        self._fastavro = fastavro
        self._warned = False
        self.named: dict = {}
        self.schema = json.loads(plan.schema_str)
        self.parsed = fastavro.parse_schema(self.schema, self.named)
        self.prefix = wire_prefix(plan.schema_id)
        try:
            # fastavro's compiled writer without schemaless_writer's per-call parse_schema,
            # which is half of its cost per record (measured with fastavro 1.13)
            from fastavro._write import write_data

            self._write_data = write_data
            self._options = {"strict": False, "strict_allow_default": False,
                             "disable_tuple_notation": False}
            write_data(bytearray(), None, "null", {}, "", self._options)  # the signature holds
        except Exception:  # noqa: BLE001 (any other fastavro: its public writer)
            self._write_data = None

    def encode(self, column: pa.Array, where: Callable[[int], str] | None = None) -> list[bytes | None]:
        """A derived schema's rows are encoded column by column with Arrow (avro_columns: no
        Python object per value); anything it does not cover, row by row with fastavro."""
        if self.plan.derived:
            from connectors.core.schema_registry.avro_columns import NotColumnar, encode_column

            try:
                return encode_column(column, self.schema, self.prefix)
            except NotColumnar as e:
                # a derived schema fits its column by construction: only a null where the
                # column's type says there is none gets here, which fastavro then names
                if not self._warned:
                    self._warned = True
                    log.warning("%s: encoding row by row (%s)", self.plan.describe(), e)
        return super().encode(column, where)

    def encode_one(self, record: dict) -> bytes:
        if self._write_data is not None:
            buf = bytearray(self.prefix)
            self._write_data(buf, record, self.parsed, self.named, "", self._options)
            return bytes(buf)
        out = io.BytesIO()
        out.write(self.prefix)
        self._fastavro.schemaless_writer(out, self.parsed, record)
        return out.getvalue()

    def rows(self, column: pa.Array) -> list[Any]:
        if self.plan.derived:
            # timestamp-micros, local-timestamp-micros and date take the integers as they are:
            # no datetime object per value
            column = _cast_times(column)
        return super().rows(column)

    def fault(self, record: dict, error: Exception) -> tuple[str | None, str]:
        """fastavro's validator names the field (`<record full name>.<field>`) and what it
        expected, which its writer's errors ("'BLUE' is not in list") do not."""
        from fastavro.validation import ValidationError, validate

        why = f"{type(error).__name__}: {error}"
        try:
            validate(record, self.parsed, raise_errors=True)
        except ValidationError as e:
            for err in e.errors:
                name = getattr(err, "field", None)
                if name:
                    path = _strip_record_prefix(str(name), self.parsed)
                    datum = getattr(err, "datum", None)
                    return path, f"{datum!r} is not {_avro_kind(getattr(err, 'schema', None))}"
        except Exception:  # noqa: BLE001 (the writer's own message stands)
            return None, why
        marker = " on field "
        text = str(error)
        return (text.rsplit(marker, 1)[1] if marker in text else None), why


def _avro_kind(schema: Any) -> str:
    """A schema as a reader of the error wants it: an enum's symbols, a type's name."""
    if isinstance(schema, dict):
        if schema.get("type") == "enum":
            return f"a symbol of enum {schema.get('name')} ({', '.join(schema['symbols'])})"
        return f"a {schema.get('logicalType') or schema.get('type')}"
    if isinstance(schema, list):
        return " or ".join(_avro_kind(s) for s in schema)
    return f"a {schema}"


def _strip_record_prefix(name: str, schema: Any) -> str:
    top = schema.get("name", "") if isinstance(schema, dict) else ""
    return name[len(top) + 1:] if top and name.startswith(top + ".") else name


def _integral_times(t: pa.DataType) -> pa.DataType:
    """`t` with every timestamp as int64 (micros) and date as int32 (days), recursively, and
    every field nullable (a null struct's non-nullable children hold nulls in Arrow, which a
    cast to a non-nullable field refuses)."""
    if pa.types.is_timestamp(t):
        return pa.int64()
    if pa.types.is_date32(t):
        return pa.int32()
    if pa.types.is_struct(t):
        return pa.struct([_nullable(f) for f in t])
    if pa.types.is_large_list(t):
        return pa.large_list(_nullable(t.value_field))
    if pa.types.is_list(t):
        return pa.list_(_nullable(t.value_field))
    if pa.types.is_map(t):
        return pa.map_(t.key_field.with_type(_integral_times(t.key_type)), _nullable(t.item_field))
    return t


def _nullable(f: pa.Field) -> pa.Field:
    return f.with_type(_integral_times(f.type)).with_nullable(True)


def _has_times(t: pa.DataType) -> bool:
    if pa.types.is_timestamp(t) or pa.types.is_date32(t):
        return True
    return any(_has_times(t.field(i).type) for i in range(t.num_fields))


def _cast_times(column: pa.Array) -> pa.Array:
    """The column with integral times (see _integral_times), when it holds any."""
    return column.cast(_integral_times(column.type)) if _has_times(column.type) else column


# -- JSON Schema ------------------------------------------------------------------------------


def _json_default(value: Any) -> Any:
    """What json.dumps cannot write itself, as Spark's to_json writes it."""
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


class JsonSchemaEncoder(Encoder):
    def __init__(self, plan: EncodingPlan) -> None:
        super().__init__(plan)
        self.prefix = wire_prefix(plan.schema_id)
        self.schema = json.loads(plan.schema_str)
        self.validator = None
        if not plan.derived:
            # A registered schema may ask more than the column's type says (required fields,
            # enums, bounds): each row is checked as Confluent's JSONSerializer does
            from jsonschema.validators import validator_for

            cls = validator_for(self.schema)
            self.validator = cls(self.schema, format_checker=cls.FORMAT_CHECKER)
        self._dumps = json.JSONEncoder(separators=(",", ":"), default=_json_default,
                                       ensure_ascii=False, allow_nan=False).encode

    def encode_one(self, record: dict) -> bytes:
        text = self._dumps(record)
        if self.validator is not None:
            error = next(self.validator.iter_errors(json.loads(text)), None)
            if error is not None:
                raise _JsonMisfit(error)
        return self.prefix + text.encode("utf-8")

    def fault(self, record: dict, error: Exception) -> tuple[str | None, str]:
        if isinstance(error, _JsonMisfit):
            path = list(error.error.absolute_path)
            if error.error.validator == "required":
                # the missing property is named in the message, not the path
                missing = str(error.error.message).split("'")
                if len(missing) > 1:
                    path.append(missing[1])
            return ".".join(str(p) for p in path) or None, error.error.message
        return None, f"{type(error).__name__}: {error}"


class _JsonMisfit(ValueError):
    def __init__(self, error: Any) -> None:
        super().__init__(error.message)
        self.error = error


# -- Protobuf ---------------------------------------------------------------------------------


class ProtobufEncoder(Encoder):
    def __init__(self, plan: EncodingPlan) -> None:
        from google.protobuf import descriptor_pb2, descriptor_pool
        from google.protobuf.message_factory import GetMessageClass

        super().__init__(plan)
        pool = descriptor_pool.DescriptorPool()
        _add_well_known(pool)
        for _, dep in plan.dependencies:
            pool.Add(descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(dep)))
        fdp = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(plan.schema_str))
        pool.Add(fdp)
        desc = pool.FindMessageTypeByName(plan.message_name)
        self.message_class = GetMessageClass(desc)
        self.fill = _filler(desc)
        self.prefix = wire_prefix(plan.schema_id, plan.message_indexes)

    def rows(self, column: pa.Array) -> list[Any]:
        return super().rows(_cast_times(column))

    def encode_one(self, record: dict) -> bytes:
        msg = self.message_class()
        self.fill(msg, record, "")
        return self.prefix + msg.SerializeToString()

    def fault(self, record: dict, error: Exception) -> tuple[str | None, str]:
        if isinstance(error, _ProtoMisfit):
            return error.path, str(error)
        return None, f"{type(error).__name__}: {error}"


class _ProtoMisfit(ValueError):
    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path


def _add_well_known(pool: Any) -> None:
    """The files a schema may import without a registry reference: google/protobuf/*,
    google/type/* and confluent/* (as confluent-kafka's deserializers assume)."""
    from confluent_kafka.schema_registry.common.protobuf import _init_pool

    _init_pool(pool)


_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()
_TIMESTAMP = "google.protobuf.Timestamp"
_DATE = "google.type.Date"
_DECIMAL = "confluent.type.Decimal"
_WRAPPERS = {f"google.protobuf.{n}Value" for n in
             ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String", "Bytes")}


def _filler(desc: Any) -> Callable[[Any, dict, str], None]:
    """A function that copies a record dict into a message of `desc`, field by field,
    raising _ProtoMisfit with the field's path on a value the field cannot hold."""
    setters = [(fd.name, _field_setter(fd)) for fd in desc.fields]

    def fill(msg: Any, record: dict, path: str) -> None:
        for name, setter in setters:
            value = record.get(name)
            if value is not None:
                setter(msg, value, f"{path}{name}")

    return fill


def _field_setter(fd: Any) -> Callable[[Any, Any, str], None]:
    from google.protobuf.descriptor import FieldDescriptor as FD

    name = fd.name
    is_map = fd.type == FD.TYPE_MESSAGE and fd.message_type.GetOptions().map_entry
    if is_map:
        key_fd = fd.message_type.fields_by_name["key"]
        value_fd = fd.message_type.fields_by_name["value"]
        put_value = _value_writer(value_fd)
        convert_key = _scalar_converter(key_fd)

        def set_map(msg: Any, value: Any, path: str) -> None:
            target = getattr(msg, name)
            for k, v in value.items():
                if v is None:
                    raise _ProtoMisfit(f"{path}{{{k}}}", "a Protobuf map value cannot be null")
                put_value(target, convert_key(k, f"{path}{{key}}"), v, f"{path}{{{k}}}")

        return set_map
    if fd.is_repeated:
        if fd.type == FD.TYPE_MESSAGE:
            fill_item = _message_writer(fd.message_type)

            def set_repeated_messages(msg: Any, value: Any, path: str) -> None:
                target = getattr(msg, name)
                for i, item in enumerate(value):
                    if item is None:
                        raise _ProtoMisfit(f"{path}[{i}]", "a repeated Protobuf field cannot "
                                                           "hold a null")
                    fill_item(target.add(), item, f"{path}[{i}]")

            return set_repeated_messages
        convert = _scalar_converter(fd)

        def set_repeated(msg: Any, value: Any, path: str) -> None:
            items = []
            for i, item in enumerate(value):
                if item is None:
                    raise _ProtoMisfit(f"{path}[{i}]", "a repeated Protobuf field cannot hold "
                                                       "a null")
                items.append(convert(item, f"{path}[{i}]"))
            try:
                getattr(msg, name).extend(items)
            except (TypeError, ValueError) as e:
                raise _ProtoMisfit(path, str(e)) from None

        return set_repeated
    if fd.type == FD.TYPE_MESSAGE:
        fill_sub = _message_writer(fd.message_type)

        def set_message(msg: Any, value: Any, path: str) -> None:
            fill_sub(getattr(msg, name), value, path)

        return set_message
    convert = _scalar_converter(fd)

    def set_scalar(msg: Any, value: Any, path: str) -> None:
        try:
            setattr(msg, name, convert(value, path))
        except (TypeError, ValueError) as e:
            raise _ProtoMisfit(path, str(e)) from None

    return set_scalar


def _value_writer(fd: Any) -> Callable[[Any, Any, Any, str], None]:
    """Puts one map value: a scalar by assignment, a message by filling target[key]."""
    from google.protobuf.descriptor import FieldDescriptor as FD

    if fd.type == FD.TYPE_MESSAGE:
        fill = _message_writer(fd.message_type)
        return lambda target, key, v, path: fill(target[key], v, path)
    convert = _scalar_converter(fd)

    def put(target: Any, key: Any, v: Any, path: str) -> None:
        try:
            target[key] = convert(v, path)
        except (TypeError, ValueError) as e:
            raise _ProtoMisfit(path, str(e)) from None

    return put


def _message_writer(desc: Any) -> Callable[[Any, Any, str], None]:
    """Fills a (sub)message from a value: a record dict, or for the well-known types the
    Spark value they stand for (micros for a Timestamp, days for a Date, a Decimal)."""
    full = desc.full_name
    if full == _TIMESTAMP:
        def fill_timestamp(msg: Any, v: Any, path: str) -> None:
            if isinstance(v, dt.datetime):
                msg.FromDatetime(v)
                return
            seconds, micros = divmod(_int(v, path), 1_000_000)
            msg.seconds, msg.nanos = seconds, micros * 1000
        return fill_timestamp
    if full == _DATE:
        def fill_date(msg: Any, v: Any, path: str) -> None:
            day = v if isinstance(v, dt.date) else dt.date.fromordinal(
                _EPOCH_ORDINAL + _int(v, path))
            msg.year, msg.month, msg.day = day.year, day.month, day.day
        return fill_date
    if full == _DECIMAL:
        from confluent_kafka.schema_registry.common.protobuf import decimal_to_protobuf

        def fill_decimal(msg: Any, v: Any, path: str) -> None:
            if not isinstance(v, Decimal):
                raise _ProtoMisfit(path, f"a {_DECIMAL} needs a decimal, not {type(v).__name__}")
            # confluent-kafka's own conversion, copied field by field (its message class is
            # of another descriptor pool)
            d = decimal_to_protobuf(v, -int(v.as_tuple().exponent))
            msg.value, msg.precision, msg.scale = d.value, d.precision, d.scale
        return fill_decimal
    if full in _WRAPPERS:
        convert = _scalar_converter(desc.fields_by_name["value"])

        def fill_wrapper(msg: Any, v: Any, path: str) -> None:
            try:
                msg.value = convert(v, path)
            except (TypeError, ValueError) as e:
                raise _ProtoMisfit(path, str(e)) from None
        return fill_wrapper
    filler: list[Callable] = []

    def fill_record(msg: Any, v: Any, path: str) -> None:
        if not isinstance(v, dict):
            raise _ProtoMisfit(path, f"message {full} needs a struct, not {type(v).__name__}")
        if not filler:  # built on first use: a message type may contain itself
            filler.append(_filler(desc))
        filler[0](msg, v, f"{path}.")

    return fill_record


def _int(v: Any, path: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise _ProtoMisfit(path, f"expected a timestamp or date, not {type(v).__name__}")
    return v


def _scalar_converter(fd: Any) -> Callable[[Any, str], Any]:
    """Spark value -> what the scalar field takes: an enum's symbol -> its number; a
    timestamp as micros stays an integer; anything else as it is (protobuf checks types and
    ranges on assignment)."""
    from google.protobuf.descriptor import FieldDescriptor as FD

    if fd.type == FD.TYPE_ENUM:
        by_name = {v.name: v.number for v in fd.enum_type.values}

        def enum_number(v: Any, path: str) -> int:
            if isinstance(v, str):
                if v not in by_name:
                    raise _ProtoMisfit(path, f"{v!r} is not a symbol of enum "
                                             f"{fd.enum_type.full_name} ({', '.join(by_name)})")
                return by_name[v]
            return v
        return enum_number
    if fd.type == FD.TYPE_BYTES:
        return lambda v, path: bytes(v) if isinstance(v, (bytearray, memoryview)) else v
    return lambda v, path: v


# -- per process ------------------------------------------------------------------------------

_ENCODERS: dict[EncodingPlan, Encoder] = {}
_LOCK = threading.Lock()


def encoder_for(plan: EncodingPlan) -> Encoder:
    """This process's encoder for `plan` (parsed once, reused by every task and batch)."""
    encoder = _ENCODERS.get(plan)
    if encoder is None:
        with _LOCK:
            encoder = _ENCODERS.get(plan)
            if encoder is None:
                cls = {AVRO: AvroEncoder, PROTOBUF: ProtobufEncoder,
                       JSON_SCHEMA: JsonSchemaEncoder}[plan.format]
                encoder = _ENCODERS[plan] = cls(plan)
    return encoder
