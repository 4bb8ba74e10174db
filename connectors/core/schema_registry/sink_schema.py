"""Which schema the Kafka sink writes a struct column with, decided once on the driver.

As Confluent's serializers: by default the schema derived from the column's type is registered
under the subject (`autoRegisterSchemas`, an identical schema keeps its id); with
`autoRegisterSchemas=false` it must already be there; with `useLatestVersion=true` the rows are
written with the subject's latest version, which the column must fit (checked at query start,
each field by name and type; a field the column lacks must be optional in the schema). The
result is an `EncodingPlan` the tasks serialize with, without asking the registry again.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
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
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
    VarcharType,
)

from connectors.core.options import OptionError, Options
from connectors.core.schema_registry.encoding import (
    AVRO,
    JSON_SCHEMA,
    PROTOBUF,
    SCHEMA_TYPES,
    EncodingPlan,
)
from connectors.core.schema_registry.options import (
    OPTION_PREFIX,
    RETRY_TIMEOUT_OPTION,
    RegistryOptions,
    Side,
    side_option,
)
from connectors.core.schema_registry.spark_schemas import (
    AVRO_RECORD_NAME,
    PROTOBUF_MESSAGE_NAME,
    SchemaDerivationError,
    avro_schema,
    json_schema,
    protobuf_file,
)

AUTO_REGISTER_OPTION = "autoRegisterSchemas"
USE_LATEST_OPTION = "useLatestVersion"


def sink_option_names() -> tuple[str, ...]:
    """The registry options the sink reads (besides `schema.registry.*`)."""
    per_side = ("format", "subject", "subjectNameStrategy", "recordName")
    return (*(side_option(s, n) for s in ("value", "key") for n in per_side),
            RETRY_TIMEOUT_OPTION, AUTO_REGISTER_OPTION, USE_LATEST_OPTION)


SINK_OPTION_PREFIXES = (OPTION_PREFIX,)
_TEXT = (StringType, CharType, VarcharType)
_SMALL_INTS = (ByteType, ShortType, IntegerType)


@dataclass(frozen=True)
class SinkRegistry:
    """The sink's registry settings for one column (`value` or `key`)."""

    opts: RegistryOptions
    column_type: StructType
    auto_register: bool
    use_latest: bool

    @property
    def side(self) -> Side:
        return self.opts.side

    def names(self) -> tuple[str, str, str]:
        """(record full name, Avro namespace, short name) for the derived schema."""
        full = self.opts.record_name or (PROTOBUF_MESSAGE_NAME if self.opts.format == PROTOBUF
                                          else AVRO_RECORD_NAME)
        namespace, _, short = full.rpartition(".")
        return full, namespace, short

    def derived(self) -> tuple[str, str]:
        """(schema text as registered, record full name) of the schema derived from the column."""
        full, namespace, short = self.names()
        fmt = self.opts.format
        if fmt == AVRO:
            return json.dumps(avro_schema(self.column_type, short, namespace,
                                          path=self.side)), full
        if fmt == JSON_SCHEMA:
            return json.dumps(json_schema(self.column_type, full, path=self.side)), full
        fdp = protobuf_file(self.column_type, short, namespace, path=self.side)
        return base64.b64encode(fdp.SerializeToString()).decode("ascii"), full

    def subject(self, topic: str | None) -> str:
        record = None if self.use_latest else self.names()[0]
        return self.opts.subject_for(topic, record)


def parse_sink_registries(opts: Options, schema: StructType,
                          topic: str | None) -> dict[str, SinkRegistry]:
    """At query start, without the network: the registry settings of the `value` and `key`
    columns whose format is not binary. A column that is missing or not a struct, a type the
    format cannot hold, or a subject that cannot be named fails here, naming the option."""
    auto_register = opts.get_bool(AUTO_REGISTER_OPTION, True)
    use_latest = opts.get_bool(USE_LATEST_OPTION, False)
    fields = {f.name: f.dataType for f in schema.fields}
    out: dict[str, SinkRegistry] = {}
    for side in ("value", "key"):
        side_opts = RegistryOptions.parse(opts, side)
        if not side_opts.enabled:
            continue
        option = side_opts.format_option
        if side not in fields:
            raise OptionError(option, f"is {side_opts.format}, but the stream has no '{side}' "
                                      f"column (its columns: {sorted(fields)})")
        column_type = fields[side]
        if not isinstance(column_type, StructType):
            raise OptionError(option, f"{side_opts.format} serializes a struct column: column "
                                      f"'{side}' is {column_type.simpleString()}; build it with "
                                      f"struct(...) (or leave {option} unset to write strings "
                                      "or bytes)")
        registry = SinkRegistry(side_opts, column_type, auto_register, use_latest)
        if not use_latest:
            try:
                registry.derived()
            except SchemaDerivationError as e:
                raise OptionError(option, str(e)) from None
        registry.subject(topic)  # a subject that cannot be named fails now
        out[side] = registry
    return out


def resolve_plan(registry: SinkRegistry, topic: str | None) -> EncodingPlan:
    """Driver side, once per query start: the schema and id the tasks write with (registering
    or looking up the derived schema, or taking the subject's latest version)."""
    from confluent_kafka.schema_registry import Schema

    from connectors.core.schema_registry.client import RegistryError, registry_client

    client = registry_client(registry.opts)
    subject = registry.subject(topic)
    fmt = registry.opts.format
    option = registry.opts.format_option
    if registry.use_latest:
        # Protobuf: the descriptor itself (the registry may hold .proto text), as the
        # deserializers ask for it; one request, so the id and the schema are one version's
        latest = client.version_of(subject, fmt="serialized" if fmt == PROTOBUF else None)
        schema = latest.schema
        if schema.schema_type != SCHEMA_TYPES[fmt]:
            raise OptionError(option, f"is {fmt}, but the latest schema of subject {subject!r} "
                                      f"is {schema.schema_type}")
        if schema.references:
            raise OptionError(USE_LATEST_OPTION, f"the latest schema of subject {subject!r} has "
                                                 "references to other subjects, which the sink "
                                                 "does not resolve")
        plan = EncodingPlan(registry.side, fmt, subject, latest.schema_id, schema.schema_str,
                            derived=False, **_message_of(fmt, schema.schema_str, registry))
        check_fits(registry, plan)
        return plan
    text, full_name = registry.derived()
    schema = Schema(text, SCHEMA_TYPES[fmt])
    if registry.auto_register:
        try:
            schema_id = client.register(subject, schema)
        except RegistryError as e:
            raise OptionError(option, f"the schema derived from column '{registry.side}' was not "
                                      f"registered under subject {subject!r}: {e}. An "
                                      f"incompatible change needs a new subject, or "
                                      f"{USE_LATEST_OPTION}=true to write with the registered "
                                      "schema") from None
    else:
        try:
            found = client.call(f"looking up the derived schema under subject {subject!r}",
                                lambda: client.raw.lookup_schema(subject, schema))
        except RegistryError as e:
            raise OptionError(AUTO_REGISTER_OPTION, f"is false, and the schema derived from "
                                                    f"column '{registry.side}' is not registered "
                                                    f"under subject {subject!r} ({e}); register "
                                                    f"it, or set {USE_LATEST_OPTION}=true"
                              ) from None
        schema_id = found.schema_id
    extra = {"message_name": full_name} if fmt == PROTOBUF else {}
    return EncodingPlan(registry.side, fmt, subject, schema_id, text, derived=True, **extra)


def _message_of(fmt: str, schema_str: str, registry: SinkRegistry) -> dict[str, Any]:
    """Protobuf: the message rows are written as (`valueRecordName`, else the file's first)
    and its message indexes."""
    if fmt != PROTOBUF:
        return {}
    from google.protobuf import descriptor_pb2

    try:
        fdp = descriptor_pb2.FileDescriptorProto.FromString(
            base64.b64decode(schema_str, validate=True))
    except Exception:  # noqa: BLE001 (text, not a descriptor)
        raise OptionError(USE_LATEST_OPTION, f"the registry at {registry.opts.safe_url} gave the "
                          "latest Protobuf schema as .proto text although the serialized "
                          "descriptor was asked for (format=serialized; Apicurio Registry 3.0.x "
                          "answers so for schemas registered as text): register the version as "
                          "a base64 FileDescriptorProto, as confluent-kafka's ProtobufSerializer "
                          "does, or use a registry that serves format=serialized") from None
    prefix = f"{fdp.package}." if fdp.package else ""
    wanted = registry.opts.record_name
    for i, msg in enumerate(fdp.message_type):
        if wanted is None or wanted in (msg.name, prefix + msg.name):
            return {"message_name": prefix + msg.name, "message_indexes": (i,)}
    raise OptionError(side_option(registry.side, "recordName"),
                      f"no top-level message {wanted!r} in the latest schema (it declares "
                      f"{', '.join(prefix + m.name for m in fdp.message_type)})")


# -- does the column fit a registered schema? ---------------------------------------------------


def check_fits(registry: SinkRegistry, plan: EncodingPlan) -> None:
    """Raise OptionError naming the first field of the column that the schema cannot take."""
    col = registry.side
    if plan.format == AVRO:
        problem = _avro_fits(registry.column_type, json.loads(plan.schema_str), col, {}, "")
    elif plan.format == JSON_SCHEMA:
        problem = _json_fits(registry.column_type, json.loads(plan.schema_str), col)
    else:
        from connectors.core.schema_registry.encoding import ProtobufEncoder

        desc = ProtobufEncoder(plan).message_class.DESCRIPTOR
        problem = _proto_fits(registry.column_type, desc, col)
    if problem:
        raise OptionError(USE_LATEST_OPTION, f"column '{col}' does not fit {plan.describe()} "
                                             f"(its latest version): {problem}")


def _avro_named(schema: Any, names: dict[str, Any], namespace: str) -> Any:
    """Resolve a named reference, and record named types as they are met."""
    if isinstance(schema, str):
        return names.get(schema) or names.get(f"{namespace}.{schema}") or schema
    if isinstance(schema, dict) and schema.get("type") in ("record", "enum", "fixed"):
        name = schema["name"]
        ns = schema.get("namespace", namespace)
        full = name if "." in name or not ns else f"{ns}.{name}"
        names.setdefault(full, schema)
    return schema


def _avro_fits(t: DataType, schema: Any, path: str, names: dict[str, Any], ns: str) -> str | None:
    schema = _avro_named(schema, names, ns)
    branches = [b for b in schema if b != "null"] if isinstance(schema, list) else [schema]
    reasons = []
    for branch in branches:
        branch = _avro_named(branch, names, ns)
        reason = _avro_branch_fits(t, branch, path, names, ns)
        if reason is None:
            return None
        reasons.append(reason)
    return reasons[0] if len(reasons) == 1 else (
        f"field '{path}' ({t.simpleString()}) fits no branch of the union {json.dumps(schema)}")


def _avro_branch_fits(t: DataType, s: Any, path: str, names: dict[str, Any], ns: str) -> str | None:
    kind = s.get("type") if isinstance(s, dict) else s
    logical = s.get("logicalType") if isinstance(s, dict) else None
    ok: bool
    if isinstance(t, BooleanType):
        ok = kind == "boolean"
    elif isinstance(t, _SMALL_INTS):
        ok = kind in ("int", "long", "float", "double") and logical is None
    elif isinstance(t, LongType):
        ok = kind in ("long", "float", "double") and logical is None
    elif isinstance(t, FloatType):
        ok = kind in ("float", "double")
    elif isinstance(t, DoubleType):
        ok = kind == "double"
    elif isinstance(t, _TEXT):
        ok = kind in ("string", "enum")
    elif isinstance(t, BinaryType):
        ok = kind in ("bytes", "fixed") and logical is None
    elif isinstance(t, DateType):
        ok = kind == "int" and logical == "date"
    elif isinstance(t, (TimestampType, TimestampNTZType)):
        ok = kind == "long" and logical in ("timestamp-millis", "timestamp-micros",
                                            "local-timestamp-millis", "local-timestamp-micros")
    elif isinstance(t, DecimalType):
        ok = kind in ("bytes", "fixed") and logical == "decimal" and (
            int(s.get("scale", 0)) >= t.scale
            and int(s["precision"]) - int(s.get("scale", 0)) >= t.precision - t.scale)
    elif isinstance(t, ArrayType):
        if kind != "array":
            ok = False
        else:
            return _avro_fits(t.elementType, s["items"], f"{path}[]", names, ns)
    elif isinstance(t, MapType):
        if kind != "map" or not isinstance(t.keyType, _TEXT):
            ok = False
        else:
            return _avro_fits(t.valueType, s["values"], f"{path}{{}}", names, ns)
    elif isinstance(t, StructType):
        if kind != "record":
            ok = False
        else:
            inner_ns = s.get("namespace", ns)
            by_name = {f["name"]: f for f in s["fields"]}
            for f in t.fields:
                if f.name not in by_name:
                    return (f"field '{path}.{f.name}' is not in record {s['name']} (its fields: "
                            f"{', '.join(by_name)})")
                reason = _avro_fits(f.dataType, by_name[f.name]["type"], f"{path}.{f.name}",
                                    names, inner_ns)
                if reason:
                    return reason
            columns = {f.name for f in t.fields}
            for name, f in by_name.items():
                nullable = isinstance(f["type"], list) and "null" in f["type"]
                if name not in columns and "default" not in f and not nullable:
                    return (f"record {s['name']} needs field '{path}.{name}', which the column "
                            "lacks and the schema gives no default")
            return None
    else:
        ok = False
    if ok:
        return None
    return f"field '{path}' ({t.simpleString()}) cannot be written as Avro {json.dumps(s)}"


def _proto_fits(t: StructType, desc: Any, path: str) -> str | None:
    from google.protobuf.descriptor import FieldDescriptor as FD

    ints = (FD.TYPE_INT32, FD.TYPE_INT64, FD.TYPE_SINT32, FD.TYPE_SINT64, FD.TYPE_SFIXED32,
            FD.TYPE_SFIXED64, FD.TYPE_UINT32, FD.TYPE_UINT64, FD.TYPE_FIXED32, FD.TYPE_FIXED64)
    fields = desc.fields_by_name
    for f in t.fields:
        fpath = f"{path}.{f.name}"
        fd = fields.get(f.name)
        if fd is None:
            return f"field '{fpath}' is not in message {desc.full_name} (its fields: " \
                   f"{', '.join(fields)})"
        reason = _proto_field_fits(f.dataType, fd, fpath, ints)
        if reason:
            return reason
    return None


def _proto_field_fits(t: DataType, fd: Any, path: str, ints: tuple) -> str | None:
    from google.protobuf.descriptor import FieldDescriptor as FD

    is_map = fd.type == FD.TYPE_MESSAGE and fd.message_type.GetOptions().map_entry
    if isinstance(t, MapType):
        if not is_map:
            return f"field '{path}' is a map, the schema's {fd.name} is not"
        entry = fd.message_type.fields_by_name
        return (_proto_value_fits(t.keyType, entry["key"], f"{path}{{key}}", ints)
                or _proto_value_fits(t.valueType, entry["value"], f"{path}{{}}", ints))
    if isinstance(t, ArrayType):
        if not fd.is_repeated or is_map:
            return f"field '{path}' is an array, the schema's {fd.name} is not repeated"
        return _proto_value_fits(t.elementType, fd, f"{path}[]", ints)
    if fd.is_repeated:
        return f"field '{path}' ({t.simpleString()}) is not an array; the schema's " \
               f"{fd.name} is repeated"
    return _proto_value_fits(t, fd, path, ints)


def _proto_value_fits(t: DataType, fd: Any, path: str, ints: tuple) -> str | None:
    from google.protobuf.descriptor import FieldDescriptor as FD

    message = fd.message_type.full_name if fd.type == FD.TYPE_MESSAGE else None
    wrapped = (message.startswith("google.protobuf.") and message.endswith("Value")
               and message != "google.protobuf.Value") if message else False
    if wrapped:  # StringValue, Int64Value, ...: the wrapped scalar decides
        return _proto_value_fits(t, fd.message_type.fields_by_name["value"], path, ints)
    if isinstance(t, StructType):
        if message is None:
            return f"field '{path}' is a struct, the schema's {fd.name} is not a message"
        return _proto_fits(t, fd.message_type, path)
    ok: bool
    if isinstance(t, BooleanType):
        ok = fd.type == FD.TYPE_BOOL
    elif isinstance(t, (*_SMALL_INTS, LongType)):
        narrow = (FD.TYPE_INT32, FD.TYPE_SINT32, FD.TYPE_SFIXED32, FD.TYPE_UINT32, FD.TYPE_FIXED32)
        ok = (fd.type in ints or fd.type in (FD.TYPE_FLOAT, FD.TYPE_DOUBLE)) and not (
            isinstance(t, LongType) and fd.type in narrow)
    elif isinstance(t, FloatType):
        ok = fd.type in (FD.TYPE_FLOAT, FD.TYPE_DOUBLE)
    elif isinstance(t, DoubleType):
        ok = fd.type == FD.TYPE_DOUBLE
    elif isinstance(t, _TEXT):
        ok = fd.type in (FD.TYPE_STRING, FD.TYPE_ENUM)
    elif isinstance(t, BinaryType):
        ok = fd.type == FD.TYPE_BYTES
    elif isinstance(t, DateType):
        ok = message == "google.type.Date"
    elif isinstance(t, (TimestampType, TimestampNTZType)):
        ok = message == "google.protobuf.Timestamp"
    elif isinstance(t, DecimalType):
        ok = message == "confluent.type.Decimal"
    else:
        ok = False
    if ok:
        return None
    kind = message or next((n[5:].lower() for n in dir(FD)
                            if n.startswith("TYPE_") and getattr(FD, n) == fd.type), "?")
    return f"field '{path}' ({t.simpleString()}) cannot be written as the schema's " \
           f"{fd.name} ({kind})"


def _json_types(s: Any) -> tuple[set[str] | None, Any]:
    """(the JSON types a schema allows, ignoring null; None when it does not say) and the
    non-null branch to descend into."""
    if not isinstance(s, dict):
        return None, s
    for key in ("oneOf", "anyOf"):
        if key in s:
            branches = [b for b in s[key] if not (isinstance(b, dict) and b.get("type") == "null")]
            if len(branches) == 1:
                return _json_types(branches[0])
            return None, s
    kind = s.get("type")
    if kind is None:
        return None, s
    kinds = set(kind if isinstance(kind, list) else [kind]) - {"null"}
    return kinds, s


def _json_fits(t: DataType, s: Any, path: str) -> str | None:
    kinds, s = _json_types(s)
    if kinds is None:
        return None  # not said here (allOf, $ref, ...): each row is validated anyway
    if isinstance(t, StructType):
        if "object" not in kinds:
            return f"field '{path}' is a struct, the schema wants {sorted(kinds)}"
        props = s.get("properties", {})
        closed = s.get("additionalProperties") is False
        for f in t.fields:
            if f.name in props:
                reason = _json_fits(f.dataType, props[f.name], f"{path}.{f.name}")
                if reason:
                    return reason
            elif closed:
                return (f"field '{path}.{f.name}' is not a property of the schema (its "
                        f"properties: {', '.join(props)}), which allows no others")
        columns = {f.name for f in t.fields}
        missing = [r for r in s.get("required", []) if r not in columns]
        if missing:
            return f"the schema requires '{path}.{missing[0]}', which the column lacks"
        return None
    if isinstance(t, ArrayType):
        if "array" not in kinds:
            return f"field '{path}' is an array, the schema wants {sorted(kinds)}"
        return _json_fits(t.elementType, s.get("items", {}), f"{path}[]")
    if isinstance(t, MapType):
        if "object" not in kinds:
            return f"field '{path}' is a map, the schema wants {sorted(kinds)}"
        extra = s.get("additionalProperties", {})
        return _json_fits(t.valueType, extra, f"{path}{{}}") if isinstance(extra, dict) else None
    if isinstance(t, BooleanType):
        want = {"boolean"}
    elif isinstance(t, (*_SMALL_INTS, LongType)):
        want = {"integer", "number"}
    elif isinstance(t, (FloatType, DoubleType, DecimalType)):
        want = {"number"}
    else:  # text, binary (base64), dates and timestamps (ISO 8601)
        want = {"string"}
    if kinds & want:
        return None
    return f"field '{path}' ({t.simpleString()}) is written as {sorted(want)[0]}, the schema " \
           f"wants {sorted(kinds)}"
