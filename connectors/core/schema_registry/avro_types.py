"""Avro schemas to Arrow (hence Spark) types, as Spark's `from_avro` maps them
(org.apache.spark.sql.avro.SchemaConverters), so a user moving from `from_avro` gets the same
column types:

| Avro | Spark |
|---|---|
| null | void |
| boolean, int, long, float, double | boolean, int, bigint, float, double |
| string, enum; `uuid` | string |
| bytes, fixed | binary |
| `decimal(p, s)` on bytes or fixed | decimal(p, s) |
| `date` | date |
| `timestamp-millis`, `timestamp-micros` | timestamp |
| `local-timestamp-millis`, `local-timestamp-micros` | timestamp_ntz |
| `time-millis`, `time-micros` | int, bigint (the underlying type) |
| record | struct |
| array, map | array, map<string, _> |
| union of null and one type | that type, nullable |
| union of int and long (and null) / float and double (and null) | bigint / double |
| any other union | struct<member0, member1, ...> (null left out), one member set |

A record schema gives a struct column; a primitive one (a key written as Avro `string`) a column
of that type, as `from_avro` gives. Every field is nullable: the whole struct is null for a bad record under `mode=PERMISSIVE`, as
`from_avro` makes its output nullable there. A recursive record is refused, as Spark refuses it.

Besides the Spark-facing type, `AvroArrowPlan` carries the type fastavro's output is first
built into, with the logical types left to Arrow: fastavro decodes with logical types stripped
(timestamps stay integers, uuids strings), the batch is built with `timestamp("ms")` or
`date32` over those integers, then cast once, column-wise, to the Spark type. No per-value
Python conversion runs on the hot path, except for `member` unions, which need a walk.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

UTC = "UTC"
SPARK_TIMESTAMP = pa.timestamp("us", tz=UTC)
SPARK_TIMESTAMP_NTZ = pa.timestamp("us")
MAX_DECIMAL_PRECISION = 38  # Spark's DecimalType


class UnsupportedAvroSchema(ValueError):
    """A schema Spark's from_avro refuses too (recursion, decimal beyond 38 digits, ...)."""


@dataclass(frozen=True)
class AvroArrowPlan:
    """How records of one reader schema become one Arrow column."""

    spark_type: pa.DataType  # what Spark gets (a struct for a record)
    build_type: pa.DataType  # what fastavro's dicts are built into, cast to spark_type after
    fastavro_schema: Any  # the reader schema with logical types Arrow handles stripped
    fixup: Callable[[Any], Any] | None  # rewrites member unions; None when there are none


def avro_plan(schema: Any) -> AvroArrowPlan:
    """The plan for a reader schema (the parsed JSON of an Avro schema)."""
    names: dict[str, Any] = {}
    collect_names(schema, None, names)
    spark = _convert(schema, None, names, (), build=False)
    build = _convert(schema, None, names, (), build=True)
    fixup = _fixup(schema, None, names, ()) if _has_member_union(schema, None, names, ()) else None
    return AvroArrowPlan(spark, build, strip_logical_types(schema), fixup)


def spark_type_of(schema: Any) -> pa.DataType:
    """The Arrow type Spark sees for an Avro schema (see the module table)."""
    return avro_plan(schema).spark_type


# -- names ---------------------------------------------------------------------------------------

_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
_COMPLEX = {"record", "error", "enum", "fixed", "array", "map"}


def full_name(name: str, namespace: str | None) -> str:
    if "." in name or not namespace:
        return name
    return f"{namespace}.{name}"


def collect_names(schema: Any, namespace: str | None, names: dict[str, Any]) -> None:
    """Every named type (record, enum, fixed) by its full name, for references by name."""
    if isinstance(schema, list):
        for s in schema:
            collect_names(s, namespace, names)
        return
    if not isinstance(schema, dict):
        return
    t = schema.get("type")
    if t in ("record", "error", "enum", "fixed"):
        full = full_name(schema["name"], schema.get("namespace", namespace))
        names[full] = schema
        ns = full.rsplit(".", 1)[0] if "." in full else None
        for f in schema.get("fields", ()) if t in ("record", "error") else ():
            collect_names(f["type"], ns, names)
    elif t == "array":
        collect_names(schema["items"], namespace, names)
    elif t == "map":
        collect_names(schema["values"], namespace, names)
    elif isinstance(t, (dict, list)):
        collect_names(t, namespace, names)


def resolve_named(schema: Any, namespace: str | None, names: dict[str, Any]) -> tuple[Any, str | None]:
    """A type by name (`"com.acme.Point"`) becomes its definition; the namespace it sits in."""
    if isinstance(schema, str) and schema not in _PRIMITIVES:
        full = full_name(schema, namespace)
        found = names.get(full) or names.get(schema)
        if found is None:
            raise UnsupportedAvroSchema(f"unknown Avro type name {schema!r}")
        ns = full.rsplit(".", 1)[0] if "." in full else None
        return found, ns
    if isinstance(schema, dict) and "logicalType" not in schema:
        t = schema.get("type")
        if isinstance(t, (dict, list)) or (isinstance(t, str) and t not in _PRIMITIVES
                                           and t not in _COMPLEX):
            return resolve_named(t, namespace, names)
    return schema, namespace


def type_name(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, list):
        return "union"
    t = schema.get("type")
    return t if isinstance(t, str) else type_name(t)


# -- conversion ----------------------------------------------------------------------------------


def union_branches(branches: list, namespace: str | None,
                    names: dict[str, Any]) -> tuple[list[tuple[Any, str | None]], bool]:
    """The non-null branches (resolved) and whether null is one of them."""
    non_null = []
    has_null = False
    for b in branches:
        rb, ns = resolve_named(b, namespace, names)
        if type_name(rb) == "null":
            has_null = True
        else:
            non_null.append((rb, ns))
    return non_null, has_null


def _union_kind(non_null: list[tuple[Any, str | None]]) -> str:
    """'single', 'long' (int+long), 'double' (float+double), 'members', or 'null'."""
    kinds = {type_name(b) for b, _ in non_null}
    if not non_null:
        return "null"
    if len(non_null) == 1:
        return "single"
    if kinds == {"int", "long"}:
        return "long"
    if kinds == {"float", "double"}:
        return "double"
    return "members"


def _convert(schema: Any, namespace: str | None, names: dict[str, Any],
             seen: tuple[str, ...], *, build: bool) -> pa.DataType:
    schema, namespace = resolve_named(schema, namespace, names)
    if isinstance(schema, list):
        non_null, _ = union_branches(schema, namespace, names)
        kind = _union_kind(non_null)
        if kind == "null":
            return pa.null()
        if kind == "single":
            return _convert(non_null[0][0], non_null[0][1], names, seen, build=build)
        if kind == "long":
            return pa.int64()
        if kind == "double":
            return pa.float64()
        return pa.struct([pa.field(f"member{i}", _convert(b, ns, names, seen, build=build))
                          for i, (b, ns) in enumerate(non_null)])
    if isinstance(schema, str):
        return _primitive(schema)
    t = schema["type"]
    logical = schema.get("logicalType")
    if logical is not None:
        converted = _logical(schema, t, logical, build=build)
        if converted is not None:
            return converted
    if t in ("record", "error"):
        full = full_name(schema["name"], schema.get("namespace", namespace))
        if full in seen:
            raise UnsupportedAvroSchema(
                f"the Avro record {full} refers to itself; recursive records have no Spark "
                "type (Spark's from_avro refuses them too)")
        ns = full.rsplit(".", 1)[0] if "." in full else None
        return pa.struct([
            pa.field(f["name"], _convert(f["type"], ns, names, (*seen, full), build=build))
            for f in schema.get("fields", ())
        ])
    if t == "enum":
        return pa.string()
    if t == "fixed":
        return pa.binary()
    if t == "array":
        return pa.list_(_convert(schema["items"], namespace, names, seen, build=build))
    if t == "map":
        return pa.map_(pa.string(), _convert(schema["values"], namespace, names, seen,
                                             build=build))
    if isinstance(t, str):
        return _primitive(t)
    return _convert(t, namespace, names, seen, build=build)


def _primitive(name: str) -> pa.DataType:
    types = {
        "null": pa.null(), "boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(),
        "float": pa.float32(), "double": pa.float64(), "bytes": pa.binary(), "string": pa.string(),
    }
    if name not in types:
        raise UnsupportedAvroSchema(f"unknown Avro type {name!r}")
    return types[name]


def _logical(schema: dict, base: Any, logical: str, *, build: bool) -> pa.DataType | None:
    """The type of a logical type on its base, or None to use the base type (unknown logical
    types, as Avro says, and `time-*`, which Spark reads as their base)."""
    if logical == "decimal" and base in ("bytes", "fixed"):
        precision, scale = int(schema.get("precision", 0)), int(schema.get("scale", 0))
        if not 0 < precision <= MAX_DECIMAL_PRECISION:
            raise UnsupportedAvroSchema(
                f"decimal precision {precision} is outside Spark's 1..{MAX_DECIMAL_PRECISION}")
        return pa.decimal128(precision, scale)
    if logical == "date" and base == "int":
        return pa.date32()
    if logical == "uuid" and base == "string":
        return pa.string()
    if base == "long" and logical in ("timestamp-millis", "timestamp-micros"):
        if not build:
            return SPARK_TIMESTAMP
        return pa.timestamp("ms" if logical.endswith("millis") else "us", tz=UTC)
    if base == "long" and logical in ("local-timestamp-millis", "local-timestamp-micros"):
        if not build:
            return SPARK_TIMESTAMP_NTZ
        return pa.timestamp("ms" if logical.endswith("millis") else "us")
    return None


# -- what fastavro decodes with -------------------------------------------------------------------

#: Logical types whose integer or string Arrow converts itself; fastavro would turn them into
#: Python datetimes, dates and UUIDs first, one object per value. Decimals stay: fastavro gives
#: `Decimal`s, which Arrow takes.
_STRIPPED_LOGICAL = {"date", "uuid", "timestamp-millis", "timestamp-micros",
                     "local-timestamp-millis", "local-timestamp-micros", "time-millis",
                     "time-micros"}


def strip_logical_types(schema: Any) -> Any:
    """A copy of `schema` without the logical types Arrow converts (see _STRIPPED_LOGICAL)."""
    schema = copy.deepcopy(schema)

    def walk(s: Any) -> None:
        if isinstance(s, list):
            for b in s:
                walk(b)
        elif isinstance(s, dict):
            if s.get("logicalType") in _STRIPPED_LOGICAL:
                del s["logicalType"]
            for key in ("type", "items", "values"):
                if isinstance(s.get(key), (dict, list)):
                    walk(s[key])
            for f in s.get("fields", ()) if isinstance(s.get("fields"), list) else ():
                walk(f)

    walk(schema)
    return schema


# -- member unions --------------------------------------------------------------------------------


def _has_member_union(schema: Any, namespace: str | None, names: dict[str, Any],
                      seen: tuple[str, ...]) -> bool:
    schema, namespace = resolve_named(schema, namespace, names)
    if isinstance(schema, list):
        non_null, _ = union_branches(schema, namespace, names)
        if _union_kind(non_null) == "members":
            return True
        return any(_has_member_union(b, ns, names, seen) for b, ns in non_null)
    if isinstance(schema, str):
        return False
    t = schema.get("type")
    if t in ("record", "error"):
        full = full_name(schema["name"], schema.get("namespace", namespace))
        if full in seen:
            return False
        ns = full.rsplit(".", 1)[0] if "." in full else None
        return any(_has_member_union(f["type"], ns, names, (*seen, full))
                   for f in schema.get("fields", ()))
    if t == "array":
        return _has_member_union(schema["items"], namespace, names, seen)
    if t == "map":
        return _has_member_union(schema["values"], namespace, names, seen)
    if isinstance(t, (dict, list)):
        return _has_member_union(t, namespace, names, seen)
    return False


def _identity(v: Any) -> Any:
    return v


def _fixup(schema: Any, namespace: str | None, names: dict[str, Any],
           seen: tuple[str, ...]) -> Callable[[Any], Any]:
    """A function turning fastavro's value of `schema` into what Arrow builds the Spark shape
    from: a member union's value becomes {memberN: value} for the branch it was written as.
    fastavro is asked for records' names in unions with several records (a `(name, value)`
    pair), and the other branches are told apart by their Python type."""
    schema, namespace = resolve_named(schema, namespace, names)
    if not _has_member_union(schema, namespace, names, seen):
        return _identity
    if isinstance(schema, list):
        non_null, _ = union_branches(schema, namespace, names)
        if _union_kind(non_null) != "members":
            b, ns = non_null[0]
            return _fixup(b, ns, names, seen)
        return _member_union(non_null, names, seen)
    t = schema.get("type")
    if t in ("record", "error"):
        full = full_name(schema["name"], schema.get("namespace", namespace))
        ns = full.rsplit(".", 1)[0] if "." in full else None
        fields = [(f["name"], _fixup(f["type"], ns, names, (*seen, full)))
                  for f in schema.get("fields", ())]
        active = [(n, fn) for n, fn in fields if fn is not _identity]

        def record(v: Any) -> Any:
            if v is None:
                return None
            for n, fn in active:
                v[n] = fn(v.get(n))
            return v
        return record
    if t == "array":
        item = _fixup(schema["items"], namespace, names, seen)
        return lambda v: None if v is None else [item(x) for x in v]
    if t == "map":
        value = _fixup(schema["values"], namespace, names, seen)
        return lambda v: None if v is None else {k: value(x) for k, x in v.items()}
    return _fixup(t, namespace, names, seen)


def _member_union(branches: list[tuple[Any, str | None]], names: dict[str, Any],
                  seen: tuple[str, ...]) -> Callable[[Any], Any]:
    records = {}
    by_kind: dict[str, int] = {}
    fixes = []
    for i, (b, ns) in enumerate(branches):
        kind = type_name(b)
        fixes.append(_fixup(b, ns, names, seen))
        if kind in ("record", "error"):
            records[full_name(b["name"], b.get("namespace", ns))] = i
        by_kind.setdefault(_python_kind(b), i)
    single_record = next(iter(records.values())) if len(records) == 1 else None

    def member(v: Any) -> Any:
        if v is None:
            return None
        if isinstance(v, tuple) and len(v) == 2 and v[0] in records:
            i = records[v[0]]
            return {f"member{i}": fixes[i](v[1])}
        kind = _value_kind(v)
        i = single_record if kind == "dict" and single_record is not None else by_kind.get(kind)
        if i is None:
            raise ValueError(f"a union value of Python type {type(v).__name__} matches no branch")
        return {f"member{i}": fixes[i](v)}
    return member


def _python_kind(schema: Any) -> str:
    """How a branch's value looks once fastavro has decoded it (logical types stripped)."""
    t = type_name(schema)
    if isinstance(schema, dict) and schema.get("logicalType") == "decimal":
        return "decimal"
    return {"boolean": "bool", "int": "int", "long": "int", "float": "float", "double": "float",
            "string": "str", "enum": "str", "bytes": "bytes", "fixed": "bytes",
            "record": "dict", "error": "dict", "map": "dict", "array": "list"}.get(t, t)


def _value_kind(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "str"
    if isinstance(v, (bytes, bytearray)):
        return "bytes"
    if isinstance(v, dict):
        return "dict"
    if isinstance(v, list):
        return "list"
    return type(v).__name__.lower()


# -- resolution ---------------------------------------------------------------------------------

#: Avro's promotions: a writer's type (key) read as any of the reader's types (value).
_PROMOTIONS = {"int": {"long", "float", "double"}, "long": {"float", "double"},
               "float": {"double"}, "string": {"bytes"}, "bytes": {"string"}}


def unresolvable_field(writer: Any, reader: Any) -> str | None:
    """The dotted path of the first field whose writer type the reader's cannot resolve by
    Avro's rules (or a reader field the writer lacks, with no default); None if none is found.
    Used to name the field in a message: fastavro's own error does not."""
    w_names: dict[str, Any] = {}
    r_names: dict[str, Any] = {}
    collect_names(writer, None, w_names)
    collect_names(reader, None, r_names)
    return _first_problem(writer, None, w_names, reader, None, r_names, "", ())


def _first_problem(w: Any, w_ns: str | None, w_names: dict, r: Any, r_ns: str | None,
                   r_names: dict, path: str, seen: tuple[str, ...]) -> str | None:
    w, w_ns = resolve_named(w, w_ns, w_names)
    r, r_ns = resolve_named(r, r_ns, r_names)
    if isinstance(r, list):
        if isinstance(w, list):
            bad = [_first_problem(b, w_ns, w_names, r, r_ns, r_names, path, seen) for b in w]
            return next((b for b in bad if b is not None), None)
        ok = any(_first_problem(w, w_ns, w_names, b, r_ns, r_names, path, seen) is None
                 for b in r)
        return None if ok else (path or None)
    if isinstance(w, list):
        bad = [_first_problem(b, w_ns, w_names, r, r_ns, r_names, path, seen) for b in w]
        return next((b for b in bad if b is not None), None)
    wt, rt = type_name(w), type_name(r)
    if wt != rt and rt not in _PROMOTIONS.get(wt, ()):
        return path or None
    if wt in ("record", "error"):
        full = full_name(r["name"], r.get("namespace", r_ns))
        if full in seen:
            return None
        w_fields = {f["name"]: f for f in w.get("fields", ())}
        wns = full_name(w["name"], w.get("namespace", w_ns)).rpartition(".")[0] or None
        rns = full.rpartition(".")[0] or None
        for f in r.get("fields", ()):
            sub = f"{path}.{f['name']}" if path else f["name"]
            wf = w_fields.get(f["name"])
            if wf is None:
                if "default" not in f:
                    return sub
                continue
            bad = _first_problem(wf["type"], wns, w_names, f["type"], rns, r_names, sub,
                                 (*seen, full))
            if bad is not None:
                return bad
        return None
    if wt == "array":
        return _first_problem(w["items"], w_ns, w_names, r["items"], r_ns, r_names, path, seen)
    if wt == "map":
        return _first_problem(w["values"], w_ns, w_names, r["values"], r_ns, r_names, path,
                              seen)
    if wt == "enum":
        missing = set(w.get("symbols", ())) - set(r.get("symbols", ()))
        return path or None if missing and "default" not in r else None
    if wt == "fixed" and w.get("size") != r.get("size"):
        return path or None
    return None
