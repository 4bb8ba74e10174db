"""JSON Schema to Arrow (hence Spark) types. Spark has no JSON Schema reader to follow, so the
mapping is the one `from_json` users write by hand, taken from the schema:

| JSON Schema | Spark |
|---|---|
| `object` with `properties` | struct of the properties, in their order |
| `object` with only `additionalProperties: {schema}` | map<string, _> |
| `array` with `items: {schema}` | array |
| `string`; `format: date`; `format: date-time` | string; date; timestamp (RFC 3339, with offset) |
| `integer`, `number`, `boolean` | bigint, double, boolean |
| `["null", T]`, `oneOf`/`anyOf` of null and one type | T, nullable |
| `oneOf`/`anyOf` whose branches map to one type | that type |
| `allOf` of objects | struct of all their properties |
| `enum` or `const` of strings | string |
| local `$ref` (`#/definitions/...`, `#/$defs/...`) | the referenced type |
| anything else (no type, mixed types, tuples, free objects) | string holding the value's JSON text |

A property the record does not have is its schema's `default` if it has one, else null.
Properties the reader schema does not name are ignored. Every field is nullable; a recursive
`$ref` is refused. Records are not validated against the writer schema (confluent-kafka's
deserializer does; a value that does not fit its column is a bad record here).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

SPARK_TIMESTAMP = pa.timestamp("us", tz="UTC")


class UnsupportedJsonSchema(ValueError):
    """A schema with no Spark type (a recursive $ref, a reference outside the document)."""


@dataclass(frozen=True)
class JsonPlan:
    spark_type: pa.DataType
    build_type: pa.DataType  # dates and date-times stay strings, cast by Arrow after
    fixup: Callable[[Any], Any] | None  # JSON-text nodes and defaults; None when none


@dataclass(frozen=True)
class _Node:
    spark: pa.DataType
    build: pa.DataType
    fix: Callable[[Any], Any] | None


def json_plan(schema: Any) -> JsonPlan:
    """The plan of a reader schema. An object is a struct; a top-level string, number or array
    schema gives a column of that type (as from_avro does for an Avro primitive)."""
    node = _node(schema, schema, ())
    return JsonPlan(node.spark, node.build, node.fix)


def spark_type_of(schema: Any) -> pa.DataType:
    return json_plan(schema).spark_type


def _json_text(v: Any) -> Any:
    return None if v is None else json.dumps(v, separators=(",", ":"), ensure_ascii=False)


_TEXT = _Node(pa.string(), pa.string(), _json_text)


def _resolve_ref(root: Any, ref: str) -> Any:
    if not ref.startswith("#"):
        raise UnsupportedJsonSchema(f"$ref {ref!r} points outside the schema; only local "
                                    "references (#/definitions/..., #/$defs/...) are read")
    target = root
    for part in [p for p in ref[1:].split("/") if p]:
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(target, dict) or part not in target:
            raise UnsupportedJsonSchema(f"$ref {ref!r} names nothing in the schema")
        target = target[part]
    return target


def _types(schema: dict) -> list[str]:
    t = schema.get("type")
    if isinstance(t, str):
        return [t]
    if isinstance(t, list):
        return [x for x in t if isinstance(x, str)]
    if "properties" in schema or "additionalProperties" in schema:
        return ["object"]
    if "items" in schema:
        return ["array"]
    values = schema.get("enum", [schema["const"]] if "const" in schema else None)
    if isinstance(values, list) and values and all(isinstance(v, str) for v in values):
        return ["string"]
    return []


def _node(schema: Any, root: Any, refs: tuple[str, ...]) -> _Node:
    if schema is True or schema == {}:
        return _TEXT
    if not isinstance(schema, dict):
        return _TEXT
    if "$ref" in schema:
        ref = schema["$ref"]
        if ref in refs:
            raise UnsupportedJsonSchema(f"$ref {ref!r} refers to itself; recursive schemas have "
                                        "no Spark type")
        return _node(_resolve_ref(root, ref), root, (*refs, ref))
    for key in ("oneOf", "anyOf"):
        if key in schema and "type" not in schema and "properties" not in schema:
            branches = [b for b in schema[key] if not (isinstance(b, dict) and
                                                         _types(b) == ["null"])]
            nodes = [_node(b, root, refs) for b in branches]
            if nodes and all(n.spark == nodes[0].spark for n in nodes) and \
                    all(n.fix is None for n in nodes):
                return nodes[0]
            return _TEXT
    if "allOf" in schema and "type" not in schema and "properties" not in schema:
        parts = [_deref(p, root) for p in schema["allOf"]]
        if parts and all(isinstance(p, dict) and _types(p) == ["object"] for p in parts):
            merged: dict[str, Any] = {"type": "object", "properties": {}}
            for p in parts:
                merged["properties"].update(p.get("properties", {}))
            return _node(merged, root, refs)
        return _TEXT
    kinds = [t for t in _types(schema) if t != "null"]
    if len(kinds) == 0 and _types(schema) == ["null"]:
        return _Node(pa.null(), pa.null(), None)
    if len(kinds) != 1:
        if set(kinds) == {"integer", "number"}:
            return _Node(pa.float64(), pa.float64(), None)
        return _TEXT
    kind = kinds[0]
    if kind == "object":
        return _object(schema, root, refs)
    if kind == "array":
        items = schema.get("items")
        if not isinstance(items, dict):
            return _TEXT
        item = _node(items, root, refs)
        fix = item.fix
        return _Node(pa.list_(item.spark), pa.list_(item.build),
                     (lambda v: None if v is None else [fix(x) for x in v]) if fix else None)
    if kind == "string":
        fmt = schema.get("format")
        if fmt == "date":
            return _Node(pa.date32(), pa.string(), None)
        if fmt == "date-time":
            return _Node(SPARK_TIMESTAMP, pa.string(), None)
        return _Node(pa.string(), pa.string(), None)
    simple = {"integer": pa.int64(), "number": pa.float64(), "boolean": pa.bool_()}
    if kind in simple:
        return _Node(simple[kind], simple[kind], None)
    return _TEXT


def _deref(schema: Any, root: Any) -> Any:
    while isinstance(schema, dict) and "$ref" in schema:
        schema = _resolve_ref(root, schema["$ref"])
    return schema


def _object(schema: dict, root: Any, refs: tuple[str, ...]) -> _Node:
    props = schema.get("properties")
    if not props:
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict) and extra:
            value = _node(extra, root, refs)
            fix = value.fix
            return _Node(pa.map_(pa.string(), value.spark), pa.map_(pa.string(), value.build),
                         (lambda v: None if v is None else {k: fix(x) for k, x in v.items()})
                         if fix else None)
        return _TEXT
    names = list(props)
    nodes = {n: _node(props[n], root, refs) for n in names}
    defaults = {n: _deref(props[n], root)["default"] for n in names
                if isinstance(_deref(props[n], root), dict) and "default" in _deref(props[n], root)}
    fixes = [(n, nodes[n].fix) for n in names if nodes[n].fix is not None]
    spark = pa.struct([pa.field(n, nodes[n].spark) for n in names])
    build = pa.struct([pa.field(n, nodes[n].build) for n in names])
    if not fixes and not defaults:
        return _Node(spark, build, None)

    def fix(v: Any) -> Any:
        if not isinstance(v, dict):
            return v  # not an object: Arrow refuses it, and the record is a bad one
        for n, d in defaults.items():
            if n not in v:
                v[n] = d
        for n, f in fixes:
            if n in v:
                v[n] = f(v[n])
        return v
    return _Node(spark, build, fix)
